"""Campaign results: distinct findings by signature, the summary a campaign (or a merge of shard
campaigns) reports, its JSON form (`difftest fuzz --json`), and the printed tables."""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from difftest.findings import summary_fields as sf
from difftest.findings.signature import scan_corpus
from difftest.program.files import read_json, write_atomic

SUMMARY_FORMAT = "difftest-campaign-summary"
SUMMARY_VERSION = 1  # later additions are optional keys: older files stay readable


@dataclass
class Timeline:
    """Programs checked against wall-clock seconds since the campaign started, one point every
    `every` seconds at most (the report's throughput plot). Past `MAX_POINTS` points every other
    one is dropped and the interval doubles, so a long campaign keeps a bounded series."""

    label: str
    points: list[tuple[float, int]] = field(default_factory=list)
    every: float = 1.0

    MAX_POINTS = 400

    def note(self, seconds: float, programs: int) -> None:
        if self.points and seconds - self.points[-1][0] < self.every:
            return
        self.points.append((round(seconds, 3), programs))
        if len(self.points) > self.MAX_POINTS:
            self.points = self.points[::2]
            self.every *= 2

    def close(self, seconds: float, programs: int) -> None:
        """The final point (the campaign's end), whatever the interval."""
        if not self.points or self.points[-1] != (round(seconds, 3), programs):
            self.points.append((round(seconds, 3), programs))

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "points": [[t, n] for t, n in self.points]}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Timeline:
        label = sf.optional_str(d, "label", "throughput[].")
        try:
            points = [(float(t), int(n)) for t, n in d.get("points", [])]
        except (TypeError, ValueError) as e:
            raise ValueError(f"throughput timeline {label!r}: points must be [seconds, programs] pairs") from e
        return Timeline(label or "?", points)


@dataclass
class Finding:
    """One distinct finding (signature) of a campaign."""

    signature: str
    kind: str
    count: int = 0  # failing programs with this signature
    first: int | None = None  # smallest program index with it
    path: str | None = None  # the case saved for it, or the corpus case it matched (known)
    known: bool = False  # path is a case that was there before (not saved by this run)
    shrunk: tuple[int, int] | None = None  # statements before / after shrinking
    bug: str | None = None  # the known bug (divergences/known_bugs.py) that explains every program of it
    # a campaign on several backends: the backends that show it and the layer that points to
    # (findings/backends.py `where`); its signature ends in the layer class
    backends: list[str] | None = None
    layer: str | None = None
    # its first program gave another result in a fresh worker: where both observations are
    # (.difftest/flaky/); the finding is then that nondeterminism, and nothing is saved for it
    flaky: str | None = None

    def where(self) -> str:
        if self.bug is not None:
            return f"known bug {self.bug}: {self.path}"
        if self.flaky is not None:
            return f"flaky (did not reproduce in a fresh worker): {self.flaky}"
        if self.path is None:
            return "not saved"
        return f"no known bug explains it; same signature as {self.path}" if self.known else self.path

    def to_dict(self) -> dict[str, Any]:
        located = {"backends": self.backends, "layer": self.layer} if self.backends is not None else {}
        flaky = {"flaky": self.flaky} if self.flaky is not None else {}
        return {"signature": self.signature, "count": self.count, "first": self.first, "path": self.path,
                "kind": self.kind, "known": self.known, "bug": self.bug, **located, **flaky}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Finding:
        at = "findings[]."
        signature = sf.optional_str(d, "signature", at)
        if signature is None:
            raise ValueError(f'"{at}signature" is missing')
        backends = sf.strings(d, "backends", at) if d.get("backends") is not None else None
        return Finding(signature, sf.optional_str(d, "kind", at) or "?", sf.integer(d, "count", 0, at),
                       sf.optional_int(d, "first", at), sf.optional_str(d, "path", at), bool(d.get("known", False)),
                       bug=sf.optional_str(d, "bug", at), backends=backends, layer=sf.optional_str(d, "layer", at),
                       flaky=sf.optional_str(d, "flaky", at))


@dataclass
class BackendCounts:
    """A campaign on several backends: one backend's programs by verdict kind, and of those that
    show a finding there, how many a known bug declared for it explains and how many it does not."""

    verdicts: Counter[str] = field(default_factory=Counter)
    known: int = 0
    new: int = 0

    def note(self, kind: str, known: bool | None) -> None:
        """One program: its verdict kind here, and (None: it passed here) whether it is known."""
        self.verdicts[kind] += 1
        if known is not None:
            self.known += known
            self.new += not known

    def absorb(self, other: BackendCounts) -> None:
        self.verdicts.update(other.verdicts)
        self.known += other.known
        self.new += other.new

    def line(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in self.verdicts.most_common()) or "none"
        return f"{kinds}; known {self.known}, new {self.new}"

    def to_dict(self) -> dict[str, Any]:
        return {"verdicts": dict(self.verdicts.most_common()), "known": self.known, "new": self.new}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> BackendCounts:
        at = "backends[]."
        return BackendCounts(sf.counts(d, "verdicts", at), sf.integer(d, "known", 0, at), sf.integer(d, "new", 0, at))


MODULE_KEY = "module:"  # an `ops` key of a module kind drawn (the generator's note)


@dataclass
class Summary:
    """What a campaign (or a merge of shard campaigns) ran and found; `--json` writes `to_dict`."""

    programs: int = 0
    seconds: float = 0.0  # wall clock, job start-up included (merge: summed over the summaries)
    verdicts: Counter[str] = field(default_factory=Counter)
    rules: Counter[str] = field(default_factory=Counter)
    # catalog ops drawn, by name, and module kinds drawn, as "module:<kind>" (split by
    # `catalog_ops` and `module_kinds`)
    ops: Counter[str] = field(default_factory=Counter)
    dismissals: Counter[str] = field(default_factory=Counter)
    restarts: int = 0
    probes: int = 0  # root probes run on burn (difftest/oracle/probe_run.py)
    probes_checked: int = 0  # of them, checked in full (outcome or gradients failed the screen)
    probes_batch_only: int = 0  # probes that failed in burn's batch only (state leaking between runs; ProbeRun)
    findings: dict[str, Finding] = field(default_factory=dict)
    saved: list[str] = field(default_factory=list)  # new case files written by this run
    errors: list[str] = field(default_factory=list)
    interrupted: bool = False
    seed: int | None = None
    jobs: int = 1
    shard: str = "0/1"
    shards_merged: int = 0  # merge only: how many summaries
    versions: dict[str, Any] = field(default_factory=dict)
    startup: float = 0.0  # seconds until a job first reported (process start, imports, worker start)
    # programs over time, one timeline per campaign (a merge keeps each shard's); absent in
    # summaries written before it was recorded
    timelines: list[Timeline] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # values and gradients not compared, by reason
    # a guided campaign (fuzz --guided): its frontier directory, entries and edges at the end,
    # the programs it generated fresh and by each mutation, the entries it added
    guided: dict[str, Any] = field(default_factory=dict)
    # a campaign on several backends (fuzz --backend a,b): each backend's counts, in its order;
    # `verdicts` then counts each program once (its first failing backend's kind, else pass)
    backends: dict[str, BackendCounts] = field(default_factory=dict)

    @property
    def catalog_ops(self) -> Counter[str]:
        return Counter({k: v for k, v in self.ops.items() if not k.startswith(MODULE_KEY)})

    @property
    def module_kinds(self) -> Counter[str]:
        return Counter({k[len(MODULE_KEY):]: v for k, v in self.ops.items() if k.startswith(MODULE_KEY)})

    @property
    def rate(self) -> float:
        return self.programs / self.seconds if self.seconds > 0 else 0.0

    @property
    def steady_rate(self) -> float:
        """Programs per second once the jobs run (start-up excluded)."""
        busy = self.seconds - self.startup
        return self.programs / busy if busy > 0 else self.rate

    def unexplained(self) -> list[Finding]:
        """The distinct findings no known bug explains (saved now or before): news to triage."""
        return [f for f in self.findings.values() if f.bug is None]

    def failing(self) -> list[Finding]:
        """The unexplained findings that fail a campaign (exit 1): all but PyTorch's own
        nondeterminism, a torch-wrong finding that did not reproduce in a fresh worker (listed,
        and its observations kept, as the pytest plugin lists such results without failing)."""
        return [f for f in self.unexplained() if not (f.flaky is not None and f.kind == "torch-wrong")]

    def note_backends(self, per_backend: dict[str, tuple[str, bool | None]]) -> None:
        """One program on several backends: backend -> (verdict kind, known or None)."""
        for b, (kind, known) in per_backend.items():
            self.backends.setdefault(b, BackendCounts()).note(kind, known)

    def finding(self, sig: str, kind: str) -> Finding:
        f = self.findings.get(sig)
        if f is None:
            f = self.findings[sig] = Finding(sig, kind)
        return f

    def add_guided(self, job_stats: dict[str, Any]) -> None:
        """Adds a job's guided counts (fresh, mutations by kind, added, unread)."""
        g = self.guided
        for key in ("fresh", "added", "unread"):
            g[key] = g.get(key, 0) + int(job_stats.get(key, 0))
        mutations = Counter(g.get("mutations", {}))
        mutations.update(job_stats.get("mutations", {}))
        g["mutations"] = dict(mutations)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": SUMMARY_FORMAT,
            "version": SUMMARY_VERSION,
            "programs": self.programs,
            "seconds": round(self.seconds, 3),
            "rate": round(self.rate, 2),
            "startup_seconds": round(self.startup, 3),
            "verdicts": dict(self.verdicts.most_common()),
            "rules": dict(self.rules.most_common()),
            "ops": dict(sorted(self.ops.items())),
            "dismissals": dict(self.dismissals.most_common()),
            "skipped": dict(self.skipped.most_common()),
            "restarts": self.restarts,
            "probes": {"run": self.probes, "checked": self.probes_checked, "batch_only": self.probes_batch_only},
            "findings": [f.to_dict() for f in self.ordered_findings()],
            "saved": self.saved,
            "errors": self.errors,
            "interrupted": self.interrupted,
            "seed": self.seed,
            "jobs": self.jobs,
            "shard": self.shard,
            **({"shards_merged": self.shards_merged} if self.shards_merged else {}),
            "versions": self.versions,
            "throughput": [t.to_dict() for t in self.timelines],
            **({"guided": self.guided} if self.guided else {}),
            **({"backends": {b: c.to_dict() for b, c in self.backends.items()}} if self.backends else {}),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Summary:
        if not isinstance(d, dict) or d.get("format") != SUMMARY_FORMAT:
            raise ValueError(f"not a campaign summary (\"format\" must be {SUMMARY_FORMAT!r})")
        for key in ("programs", "seconds"):
            if key not in d:
                raise ValueError(f'"{key}" is missing')
        s = Summary(sf.integer(d, "programs"), sf.seconds(d, "seconds"), sf.counts(d, "verdicts"),
                    sf.counts(d, "rules"), sf.counts(d, "ops"), sf.counts(d, "dismissals"), sf.integer(d, "restarts"))
        probes = d.get("probes") or {}
        s.probes = sf.integer(probes, "run", 0, "probes.")
        s.probes_checked = sf.integer(probes, "checked", 0, "probes.")
        s.probes_batch_only = sf.integer(probes, "batch_only", 0, "probes.")
        s.skipped = sf.counts(d, "skipped")
        for fd in sf.objects(d, "findings"):
            f = Finding.from_dict(fd)
            s.findings[f.signature] = f
        s.saved = sf.strings(d, "saved")
        s.errors = sf.strings(d, "errors")
        s.interrupted = bool(d.get("interrupted", False))
        s.seed = sf.optional_int(d, "seed")
        s.jobs = sf.integer(d, "jobs", 1)
        s.shard = sf.optional_str(d, "shard") or "0/1"
        s.shards_merged = sf.integer(d, "shards_merged", 0)
        versions = d.get("versions") or {}
        if not isinstance(versions, dict):
            raise ValueError(f'"versions" must be an object, got {versions!r}'[:200])
        s.versions = dict(versions)
        s.startup = sf.seconds(d, "startup_seconds")
        s.timelines = [Timeline.from_dict(t) for t in sf.objects(d, "throughput")]
        s.guided = sf.guided(d.get("guided") or {})
        backends = d.get("backends") or {}
        if not isinstance(backends, dict):
            raise ValueError(f'"backends" must be an object, got {backends!r}'[:200])
        s.backends = {str(b): BackendCounts.from_dict(c) for b, c in backends.items()}
        return s

    def ordered_findings(self) -> list[Finding]:
        return sorted(self.findings.values(), key=lambda f: (f.first if f.first is not None else sys.maxsize,
                                                             f.signature))

    def absorb(self, other: Summary) -> None:
        """Adds another shard's summary (programs, counts, seconds summed; findings by signature)."""
        self.programs += other.programs
        self.seconds += other.seconds
        self.startup += other.startup
        for mine, theirs in ((self.verdicts, other.verdicts), (self.rules, other.rules), (self.ops, other.ops),
                             (self.dismissals, other.dismissals), (self.skipped, other.skipped)):
            mine.update(theirs)
        self.restarts += other.restarts
        self.probes += other.probes
        self.probes_checked += other.probes_checked
        self.probes_batch_only += other.probes_batch_only
        self.jobs += other.jobs
        for f in other.findings.values():
            g = self.finding(f.signature, f.kind)
            g.count += f.count
            if f.first is not None and (g.first is None or f.first < g.first):
                g.first = f.first
            if g.path is None or (g.known and not f.known and f.path is not None):
                g.path, g.known = f.path, f.known
            g.flaky = g.flaky or f.flaky
            g.bug = g.bug or f.bug
            if f.backends is not None:
                g.backends, g.layer = f.backends, f.layer
        self.saved.extend(other.saved)
        self.errors.extend(other.errors)
        self.interrupted = self.interrupted or other.interrupted
        if self.seed is None:
            self.seed = other.seed
        self.versions = self.versions or other.versions
        self.timelines.extend(other.timelines)
        if other.guided:
            self.add_guided(other.guided)
            self.guided.setdefault("frontiers", []).append(other.guided.get("frontier"))
        for b, c in other.backends.items():
            self.backends.setdefault(b, BackendCounts()).absorb(c)
        self.shards_merged += 1




def finding_case_path(path_text: str, summary_path: Path) -> Path:
    """A finding's case path as the campaign recorded it (relative to where it ran), else
    relative to the summary file."""
    p = Path(path_text)
    if p.is_absolute() or p.exists():
        return p
    beside = summary_path.parent / p
    return beside if beside.exists() else p


def read_summary(path: Path) -> Summary:
    """A campaign summary file (`difftest fuzz --json`); ValueError naming the file and what is
    wrong with it otherwise (unreadable, not JSON, not a summary, a field of the wrong type)."""
    doc = read_json(path, strict=False)  # a JsonFileError (a ValueError) names the file
    try:
        return Summary.from_dict(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{path}: {e if isinstance(e, ValueError) else f'malformed campaign summary: {e!r}'}") from e


def merge(paths: list[Path]) -> Summary:
    """Shard summaries (`--json` files) and corpus directories, merged by signature. A case file
    whose signature no summary has becomes a row of its own, counting the case files with it."""

    total = Summary(seed=None, jobs=0, shard="merged")
    for path in paths:
        if not path.is_dir():
            total.absorb(read_summary(path))
    only_in_cases: set[str] = set()
    for path in paths:
        if not path.is_dir():
            continue
        scan = scan_corpus(path)
        total.errors += [f"a case file that cannot be read, left out: {why}" for why in scan.unreadable]
        for sig, case in scan.signatures():
            f = total.findings.get(sig)
            if f is None:
                f = total.finding(sig, sig.split(":", 1)[0])
                only_in_cases.add(sig)
            if f.path is None:
                f.path, f.known = str(case), False
            if sig in only_in_cases:
                f.count += 1
    return total


REPORTS_LISTED = 5  # new cases whose report command the summary spells out


def report_command(s: Summary, case: str) -> str:
    """`difftest show CASE --issue` with what the campaign ran against (its fault, its burn build),
    so that the report reproduces the finding where the campaign found it."""
    import shlex

    words = ["difftest", "show", case, "--issue"]
    for option, key in (("--fault", "fault"), ("--burn", "build")):
        if s.versions.get(key):
            words += [option, str(s.versions[key])]
    return shlex.join(words)


def print_summary(s: Summary, console: Console) -> None:
    def out(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    head = f"{s.programs} programs in {s.seconds:.1f}s ({s.rate:.0f}/s"
    head += f"; {s.steady_rate:.0f}/s after {s.startup:.1f}s start-up)" if s.startup > 0 else ")"
    if s.shards_merged:
        head += f", {s.shards_merged} summaries merged (seconds summed)"
    else:
        head += f", {s.jobs} job(s)" + (f", shard {s.shard}" if s.shard != "0/1" else "")
    if s.interrupted:
        head += ", INTERRUPTED"
    out("\n" + head)
    out("verdicts: " + (", ".join(f"{k} {v}" for k, v in s.verdicts.most_common()) or "none"))
    for b, c in s.backends.items():  # several backends: each one's verdicts, known and new
        out(f"  on {b}: {c.line()}")
    out("rules fired: " + (", ".join(f"{k} {v}" for k, v in s.rules.most_common()) or "none"))
    ops = s.catalog_ops
    least = sorted(ops.items(), key=lambda kv: (kv[1], kv[0]))[:5]
    out(f"ops generated: {len(ops)} distinct; least: " + ", ".join(f"{k} {v}" for k, v in least))
    if s.module_kinds:
        out("modules generated: " + ", ".join(f"{k} {v}" for k, v in s.module_kinds.most_common()))
    out("dismissals: " + (", ".join(f"{k} {v}" for k, v in s.dismissals.most_common()) or "none"))
    out("not compared: " + (", ".join(f"{k} {v}" for k, v in s.skipped.most_common()) or "none"))
    if s.probes:
        out(f"root probes: {s.probes} run on burn, {s.probes_checked} checked in full, "
            f"{s.probes_batch_only} failed in the batch only")
    if s.restarts:
        out(f"worker restarts: {s.restarts}")
    if s.guided:
        out(guided_line(s.guided))
    if s.findings:
        table = Table(title="distinct findings", title_justify="left", show_lines=False)
        table.add_column("signature", overflow="fold")
        table.add_column("count", justify="right")
        table.add_column("first", justify="right")
        located = any(f.backends is not None for f in s.findings.values())
        if located:
            table.add_column("backends")
        table.add_column("case", overflow="fold")
        for f in s.ordered_findings():
            shown = [",".join(f.backends or ["-"])] if located else []
            table.add_row(f.signature, str(f.count), "-" if f.first is None else str(f.first), *shown, f.where())
        console.print(table)
        for f in s.ordered_findings():
            if f.bug is None and f.layer is not None:  # news: where each one lives
                out(f"new on {','.join(f.backends or [])}: {f.signature}\n  {f.layer}")
    for e in s.errors:
        out(f"error: {e.splitlines()[-1] if e.strip() else e}")
    new = len(s.saved)
    unexplained = s.unexplained()
    # a signature whose first program did not reproduce in a fresh worker: one nondeterministic
    # finding, both observations under .difftest/flaky/
    flaky = [f for f in unexplained if f.flaky is not None]
    earlier = [f for f in unexplained if f.path is not None and f.flaky is None and f.path not in s.saved]
    if new:
        out(f"{new} new finding(s) saved (status \"new\"; triage: corpus/README.md)")
        out("a bug report of each for burn's tracker (Markdown):")
        for path in s.saved[:REPORTS_LISTED]:
            out(f"  {report_command(s, path)}")
        if new > REPORTS_LISTED:
            out(f"  ... and {new - REPORTS_LISTED} more (listed above)")
    if flaky:
        torch_only = sum(f.kind == "torch-wrong" for f in flaky)
        out(f"{len(flaky)} finding(s) did not reproduce in a fresh worker (flaky: both observations of each "
            "under .difftest/flaky/)" + (f"; {torch_only} of them PyTorch's own (torch-wrong), which fail no "
                                         "campaign" if torch_only else ""))
    if earlier:
        out(f"{len(earlier)} finding(s) no known bug explains were already in the corpus, untriaged")
    if s.findings and not unexplained:
        out(f"{len(s.findings)} distinct finding(s), each explained by a known bug")
    elif not s.findings:
        out("no findings")


def guided_line(g: dict[str, Any]) -> str:
    """A guided campaign's counts in a line: where its programs came from, what the frontier
    gained, and the programs whose edges could not be read (their worker's process was replaced
    while they ran, so they could not join the frontier)."""
    mutations = g.get("mutations", {})
    made = ", ".join(f"{k} {v}" for k, v in sorted(mutations.items()))
    line = f"guided: {g.get('fresh', 0)} fresh programs, {sum(mutations.values())} mutations ({made or 'none'}); " \
           f"{g.get('added', 0)} added to the frontier"
    if "entries" in g:
        line += f" (now {g['entries']} entries, {g.get('edges', 0)} edges)"
    if g.get("unread"):
        line += f"; {g['unread']} programs' edges unread (their worker's process was replaced)"
    return line


def write_json(s: Summary, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(s.to_dict(), indent=2) + "\n")
