"""`difftest rules --markdown`: every declared record as Markdown tables, one per kind.

The output is docs/knowledge.md, generated: tests/unit/test_docs_current.py checks that the
file equals `markdown()`; regenerate it with

    difftest rules --markdown > docs/knowledge.md

Evidence paths are written as links relative to docs/ (where the file lives), URLs with a short
label. Nothing here imports PyTorch itself (the registry's records may).
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlparse

from difftest.divergences.knowledge import KINDS, Kind, Knowledge, is_url
from difftest.divergences.known_bugs import KNOWN_BUGS, KnownBug
from difftest.divergences.registry import KNOWLEDGE

DOC = "docs/knowledge.md"
REGENERATE = f"difftest rules --markdown > {DOC}"


@dataclass(frozen=True)
class Section:
    title: str
    kind: Kind
    intro: str


SECTIONS: tuple[Section, ...] = (
    Section("Divergences", "divergence",
            "Where burn documentedly differs from PyTorch's autograd semantics. The semantic model "
            "(difftest/oracle/model.py) predicts PyTorch's behaviour as the base and applies these on top: "
            "tensor and module rules in difftest/divergences/rules.py, sessions (several backwards, gradient "
            "handles, optimizer steps) in difftest/divergences/session_rules.py. A rule whose prediction the "
            "observation contradicts while the base prediction matches is reported as `stale-rule`."),
    Section("No-op calls", "no-op",
            "Calls burn answers with its input tensor itself, not a new node (difftest/divergences/noops.py); "
            "the divergence `noop-returns-input` applies them."),
    Section("Memory", "memory",
            "What each framework keeps resident (difftest/divergences/memory_rules.py), applied by the memory "
            "model (difftest/memory/model.py) and measured by `difftest memory`."),
    Section("Conventions", "convention",
            "Subgradients at kinks and ties, measured in both frameworks and re-checked by "
            "tests/differential/test_conventions.py (difftest/divergences/conventions.py): generation keeps "
            "inputs away from these points, and a program that lands on one anyway is classified "
            "`ill-conditioned` by the float64 finite-difference check, not reported. Also burn's conventions "
            "for BatchNorm's running statistics (difftest/divergences/running_stats.py)."),
    Section("Known bugs", "known-bug",
            "Bugs difftest found in burn (difftest/divergences/known_bugs.py) and, framework `torch`, in PyTorch "
            "(difftest/divergences/torch_bugs.py), each with a `bug` case in "
            "corpus/bugs/ that the suite replays as a strict xfail (but one: PyTorch's uninitialised memory, "
            "which no replay can insist on). Each record states its site and effect; "
            "a finding is that bug only when they explain it (a neighbour — the same op in another dtype, "
            "another input, another error — is news), and a record of PyTorch's explains only findings judged "
            "`torch-wrong`, one of burn's never those. *dtypes*: the dtypes it shows in; *backends*: the burn "
            "backends it shows on (a finding on another backend is news; docs/backends.md); *host*: the CPUs it "
            "shows on (corpus/README.md#host); *generator*: whether "
            "the generator avoids its trigger (property runs keep looking for new bugs; the corpus case keeps "
            "the bug covered); GenConfig.p_known_site keeps a share of the triggers, so that the site stays "
            "under test for new bugs there (half of them by default, `fuzz --known-sites`: docs/checks.md)."),
)

_INLINE_SPACE = re.compile(r"\s+")


def cell(text: str) -> str:
    """`text` as one Markdown table cell: one line, `|` escaped; outside `code spans`, `*`
    escaped and `<` an entity (inside them both would show as written)."""
    parts = _INLINE_SPACE.sub(" ", text).strip().split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: no code spans
        parts = ["\\`".join(parts)]
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("*", "\\*").replace("<", "&lt;")
    return "`".join(parts).replace("|", "\\|")


def url_label(url: str) -> str:
    """A short label for an evidence URL: `burn-nn 0.22.1 src/modules/norm/rms.rs`, `burn PR #5692`."""
    parts = urlparse(url)
    path = [p for p in parts.path.split("/") if p]
    if parts.netloc == "docs.rs" and len(path) >= 4 and path[0] == "crate" and path[3] == "source":
        return f"{path[1]} {path[2]} {'/'.join(path[4:])}"
    if parts.netloc == "github.com" and len(path) >= 4 and path[2] in ("pull", "issues"):
        what = "PR" if path[2] == "pull" else "issue"
        return f"{path[1]} {what} #{path[3]}"
    if parts.netloc == "github.com" and len(path) >= 5 and path[2] == "blob":
        return f"{path[1]} {path[3]} {'/'.join(path[4:])}"
    if parts.netloc.endswith("pytorch.org") and path:
        return f"PyTorch: {path[-1].removesuffix('.html')}"
    return f"{parts.netloc}/{'/'.join(path)}"


def evidence_link(ref: str, doc_dir: str = "docs") -> str:
    """One evidence reference as a Markdown link: a repository path relative to `doc_dir`
    (the anchor kept), a URL with its label."""
    if is_url(ref):
        return f"[{url_label(ref)}]({ref})"
    path, _, anchor = ref.partition("#")
    target = posixpath.relpath(path, doc_dir) + (f"#{anchor}" if anchor else "")
    return f"[{ref}]({target})"


def _evidence(k: Knowledge) -> str:
    return "<br>".join(evidence_link(ref) for ref in k.evidence)


def _row(values: Sequence[str]) -> str:
    return "| " + " | ".join(values) + " |"


def backends_text(bug: KnownBug | None) -> str:
    """The burn backends a known bug shows on, as listed: `flex`, `ndarray, wgpu`, or `every`."""
    return ", ".join(bug.backends) if bug is not None and bug.backends is not None else "every"


def _generator(bug: KnownBug) -> str:
    if bug.triggers is None:
        return "not avoided"
    if bug.backward_through is not None:
        return "avoided where a backward passes through it"
    return "avoided"


def table(kind: Kind, records: Sequence[Knowledge] = KNOWLEDGE,
          bugs: Sequence[KnownBug] = KNOWN_BUGS) -> str:
    """The table of the records of one kind, in declaration order."""
    rows = [k for k in records if k.kind == kind]
    if kind == "known-bug":
        by_name = {b.name: b for b in bugs}
        lines = [_row(("name", "framework", "dtypes", "backends", "host", "generator", "burn versions", "reason",
                       "evidence")),
                 _row(("---",) * 9)]
        for k in rows:
            bug = by_name.get(k.name)
            dtypes = ", ".join(bug.dtypes) if bug is not None and bug.dtypes is not None else "every"
            generator = _generator(bug) if bug is not None else "—"
            host = bug.host.describe() if bug is not None and bug.host is not None else "every"
            lines.append(_row((f"`{k.name}`", k.framework, dtypes, backends_text(bug), host, generator,
                               cell(k.burn_versions), cell(k.reason), _evidence(k))))
    else:
        lines = [_row(("name", "framework", "burn versions", "reason", "evidence")), _row(("---",) * 5)]
        for k in rows:
            lines.append(_row((f"`{k.name}`", k.framework, cell(k.burn_versions), cell(k.reason), _evidence(k))))
    return "\n".join(lines) + "\n"


def counts(records: Sequence[Knowledge] = KNOWLEDGE) -> str:
    """`55 records: 19 divergence, ...`, kinds in the order they first appear."""
    by_kind = Counter(k.kind for k in records)
    return f"{len(records)} records: " + ", ".join(f"{n} {kind}" for kind, n in by_kind.items())


def markdown(records: Sequence[Knowledge] = KNOWLEDGE, bugs: Sequence[KnownBug] = KNOWN_BUGS) -> str:
    """docs/knowledge.md: a header, then one section per kind (every kind of `KINDS` has one)."""
    covered = {s.kind for s in SECTIONS}
    missing = [k for k in KINDS if k not in covered]
    if missing:
        raise ValueError(f"no section for the record kinds {missing}")
    out = [
        "# Declared knowledge: divergences, conventions, known bugs",
        "",
        f"<!-- generated by `{REGENERATE}`; do not edit by hand -->",
        "",
        "Everything difftest declares about burn and PyTorch is a `Knowledge` record "
        "(difftest/divergences/knowledge.py: name, kind, framework, reason, evidence, burn versions); "
        "the evidence is a section of [semantics.md](semantics.md), a corpus case, a test, or the burn "
        "source. *burn versions* is the range a record is declared to hold for (`difftest versions` "
        "applies a record only on versions inside it). This file is the output of `difftest rules "
        "--markdown`, generated from the records (tests/unit/test_docs_current.py keeps it current); "
        "`difftest rules` prints the same records as a table, `--json` as JSON.",
        "",
        counts(records) + ".",
    ]
    for s in SECTIONS:
        n = sum(1 for k in records if k.kind == s.kind)
        out += ["", f"## {s.title} ({n})", "", s.intro, "", table(s.kind, records, bugs).rstrip("\n")]
    return "\n".join(out) + "\n"
