"""A Markdown bug report of a corpus case, ready for burn's issue tracker (`difftest show CASE
--issue`).

The report is a pure function of the case, a fresh verdict of its program (the caller runs it:
`difftest.oracle.check.check`) and the versions `difftest-burn` reports now. It has a title, the
versions, the case's reason, the minimal burn `#[test]` (the very text `difftest show` emits),
what PyTorch and burn give for every finding mismatch, and why it is a bug: the verdict, the
float64 and finite-difference evidence, the declared known-bug record, the upstream link.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from difftest.divergences.known_bugs import KNOWN_BUGS
from difftest.findings.backends import rust_on_backend
from difftest.findings.corpus import Case
from difftest.findings.reproducers import expected, rust_test, test_name, torch_script
from difftest.findings.suspects import PlaceNote
from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.ir import Program
from difftest.program.jsonio import program_to_dict
from difftest.program.literals import fmt_data
from difftest.program.observation import Observation, TensorObs
from difftest.program.text import statement_text
from difftest.versions import difftest_version, torch_version

TITLE_LIMIT = 100


# what a localised finding of each kind says is wrong, for a title
WRONG = {"grad": "gradient", "value": "forward value", "grad-presence": "gradient presence",
         "flags": "autodiff flags", "outcome": "outcome (panic or error)", "shape": "shape"}


# a signature (findings/signature.py): verdict:framework:where:kind[ message] #digest, where may
# hold colons (apply:linear, region:no_grad); a region's or cut's flags: verdict:framework:where:flags
_SIGNED = re.compile(r"^(?P<verdict>[^:]+):(?P<fw>[^:]+):(?P<where>.+?):(?P<kind>"
                     + "|".join(re.escape(k) for k in (*WRONG, "stale-rule", "crash", "timeout", "invalid"))
                     + r")(?::(?P<error>[a-z]+))?(?: (?P<message>.*))? #[0-9a-f]{12}$")
_STATE = re.compile(r"^flags:(?P<fw>[^:]+):(?P<where>.+):(?P<message>[a-z_,]+) #[0-9a-f]{12}$")


def signature_title(signature: object) -> str | None:
    """A title from a signature alone (a finding no one-op program localised: wrong flags, an
    outcome): `cat: wrong autodiff flags (is_tracked=False)`. None for text that is no signature."""
    if not isinstance(signature, str):
        return None
    m = _SIGNED.match(signature) or _STATE.match(signature)
    if m is None:
        return None
    kind = m.groupdict().get("kind") or "flags"
    what = {"timeout": "hangs", "crash": "crashes the worker"}.get(kind, f"wrong {WRONG.get(kind, kind)}")
    text = f"{'PyTorch: ' if m['fw'] == 'torch' else ''}{m['where']}: {what}"
    error = m.groupdict().get("error")
    text += f" ({m['message']})" if m["message"] else f" ({error} error)" if error not in (None, "wrong") else ""
    return text if len(text) <= TITLE_LIMIT else text[:TITLE_LIMIT].rsplit(" ", 1)[0] + " …"


def triage_title(case: Case) -> str | None:
    """A title from the campaign's localisation of an untriaged case (status `new`, whose reason
    is its signature): where it is, what is wrong there, the dtype and the error's class:
    `max_pool2d: wrong gradient of input 0 (float32, small error)`; without one, from the
    signature (`signature_title`). None without either."""
    triage = case.record.get("triage")
    loc = triage.get("localisation") if isinstance(triage, dict) else None
    if not isinstance(loc, dict) or not isinstance(loc.get("where"), str):
        return signature_title(triage.get("signature")) if isinstance(triage, dict) else None
    what = WRONG.get(str(loc.get("kind")), str(loc.get("kind") or "result"))
    inputs = loc.get("input")
    inputs = [inputs] if isinstance(inputs, int) else inputs if isinstance(inputs, list) else []
    broadcast = loc.get("mechanism") == "broadcast"  # the op is right without the broadcast (localise.py)
    if loc.get("kind") == "grad" and inputs:
        what += f" of input{'s' if len(inputs) > 1 else ''} " + ", ".join(map(str, inputs))
    params = loc.get("params")
    if isinstance(params, list) and params:
        what += (" and " if inputs else " of ") + ", ".join(map(str, params))
    where = "the graph (no single op)" if loc["where"] == "graph" else loc["where"]
    if loc.get("mechanism") == "accumulate":
        shown = f"; seen at {loc['shown_at']}" if isinstance(loc.get("shown_at"), str) else ""
        where = f"gradient accumulation (a value read more than once{shown})"
    if loc.get("mechanism") == "recompute":
        where = f"{where} as gradient checkpointing recomputes it (right without checkpointing)"
    expanded = loc.get("expanded")
    if broadcast and isinstance(expanded, list) and expanded:
        where = (f"broadcasting (seen in {where}, input{'s' if len(expanded) > 1 else ''} "
                 f"{', '.join(map(str, expanded))} broadcast)")
    elif loc.get("mechanism") == "own-broadcast" and isinstance(expanded, list) and expanded:
        where = (f"{where} when broadcasting (input{'s' if len(expanded) > 1 else ''} "
                 f"{', '.join(map(str, expanded))} broadcast; right expanded, and other ops broadcasting it are right)")
    inside = loc.get("inside")
    if isinstance(inside, list) and inside:
        # a part of ops burn builds others from (composed.py): the composites it was seen in
        built = "other ops" if loc.get("mechanism") in ("accumulate", "broadcast") else "it"
        where += f" (seen inside {' inside '.join(str(x) for x in reversed(inside))}, which burn builds from {built})"
    error = loc.get("error") if loc.get("kind") != "flags" else None  # flags: which ones, from the signature
    flags = _SIGNED.match(str(triage.get("signature"))) if loc.get("kind") == "flags" and triage else None
    detail = ", ".join(str(x) for x in (loc.get("dtype"), f"{error} error" if error else None,
                                        flags["message"] if flags is not None else None) if x)
    blame = "PyTorch: " if loc.get("verdict") == "torch-wrong" else ""
    return f"{blame}{where}: wrong {what}" + (f" ({detail})" if detail else "")


def title(case: Case) -> str:
    """The case's `title`, else (an untriaged case) its localisation's `triage_title`, else the
    reason's first clause (without a leading `burn:`), else the case name."""
    given = case.record.get("title")
    if isinstance(given, str) and given.strip():
        return given.strip()
    if case.status == "new":
        from_triage = triage_title(case)
        if from_triage is not None:
            return from_triage
    text = re.sub(r"^\s*burn\s*(\([^)]*\)\s*)?:\s*", "", case.reason or "").strip()
    text = re.split(r"; |\. |: ", text, maxsplit=1)[0].strip().rstrip(".")  # the first clause
    if len(text) > TITLE_LIMIT:  # drop a parenthesis that is not part of a formula, if that is enough
        cuts = [m.start() for m in re.finditer(r" \(", text[:TITLE_LIMIT + 1])
                if not re.search(r"[-+*/=<>^]$", text[:m.start()])]
        if cuts:
            text = text[:cuts[-1]]
    if not text:
        return f"autodiff: {case.name or 'difftest finding'}"
    if len(text) > TITLE_LIMIT:
        text = text[:TITLE_LIMIT].rsplit(" ", 1)[0] + " …"
    return text


def _version_rows(case: Case, burn_now: dict[str, Any] | None) -> list[str]:
    found = case.record.get("versions") or {}
    now = burn_now or {}

    def cell(v: object) -> str:
        return f"`{v}`" if v not in (None, "") else "?"

    return [
        "| | when found | now |",
        "|---|---|---|",
        f"| burn | {cell(found.get('burn'))} | {cell(now.get('burn'))} |",
        f"| difftest-burn (`difftest-burn --version`) | {cell(found.get('difftest_burn'))} "
        f"| {cell(now.get('difftest_burn'))} |",
        f"| PyTorch | {cell(found.get('torch'))} | {cell(torch_version())} |",
        f"| difftest | {cell(found.get('difftest'))} | {cell(difftest_version())} |",
    ]


def _plain(v: Any) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(v)
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, default=str)
    return str(v)


def mismatch_tensor(obs: Observation, m: Mismatch) -> TensorObs | None:
    if m.kind == "grad":
        for b in obs.backwards:
            if b.id == m.backward:
                return b.grads.get(m.statement or "")
        return None
    for v in obs.values:
        if v.id == m.statement:
            return v.value
    return None


def _statement(verdict: Verdict, m: Mismatch) -> str:
    for st in verdict.program.statements:
        if st.id == m.statement:
            return statement_text(st)
    return m.statement or "(the program)"


def _mismatch_section(verdict: Verdict, m: Mismatch, n: int) -> list[str]:
    where = f"statement {m.index}" if m.index is not None else "the program"
    fw = f", {m.framework}" if m.framework else ""
    out = [f"### {n}. {m.kind}{fw} at {where}", "", "```text", _statement(verdict, m), "```", ""]
    if m.kind == "grad":
        out.append(f"Gradient of `{m.statement}` after backward `{m.backward}`:")
        out.append("")
    out.append(f"- expected (PyTorch): `{_plain(m.expected)}`")
    out.append(f"- observed (burn): `{_plain(m.observed)}`")
    if m.kind in ("grad", "value", "shape"):
        tt, bt = mismatch_tensor(verdict.torch, m), mismatch_tensor(verdict.burn, m)
        for who, t in (("PyTorch", tt), ("burn", bt)):
            shown = "None" if t is None else f"{fmt_data(t.data)} shape={list(t.shape)}"
            out.append(f"- {who} gives: `{shown}`")
    if m.kind in ("outcome", "crash", "timeout", "invalid"):
        err = verdict.burn.error if m.framework != "torch" else verdict.torch.error
        message = err.message if err is not None else m.detail
        label = "burn's panic message" if err is None or err.kind == "panic" else f"burn's error ({err.kind})"
        if m.framework == "torch":
            label = "PyTorch's error"
        out += ["", f"{label}:", "", "```text", (message or "").rstrip(), "```"]
        if err is not None and err.location is not None:
            out += ["", f"Raised at `{err.location}`."]
    elif m.detail and not m.detail.startswith("rules fired here"):
        out += ["", f"Detail: {m.detail}"]
    out.append("")
    return out


WHY = {
    "outcome": "PyTorch runs this statement, burn does not",
    "crash": "the burn process crashed where PyTorch runs the program",
    "timeout": "burn hung where PyTorch runs the program",
    "flags": "burn's autodiff flags differ from those PyTorch's graph implies",
    "grad-presence": "burn has no gradient where PyTorch has one (or the reverse)",
    "shape": "burn's shape differs from PyTorch's",
}


def evidence_lines(m: Mismatch) -> list[str]:
    ev = m.evidence or {}
    out: list[str] = []
    head = f"- {m.kind} at `{m.statement}`" + (f": {WHY[m.kind]}" if m.kind in WHY else "")
    head += f"; arbitration verdict **{m.verdict}**" if m.verdict else ""
    out.append(head + (f" ({ev['reason']})" if ev.get("reason") else ""))
    if "float64" in ev:
        out.append(
            f"  - float64 PyTorch reference {_plain(ev['float64'])}; float32 PyTorch {_plain(ev.get('torch'))} "
            f"(error {_plain(ev.get('torch_error'))}), burn {_plain(ev.get('burn'))} "
            f"(error {_plain(ev.get('burn_error'))})"
            + (f"; measured noise {_plain(ev['noise'])}, budget {_plain(ev['budget'])}" if "budget" in ev else "")
        )
    if isinstance(ev.get("location"), str):  # a panic: where burn raised it
        out.append(f"  - raised at `{ev['location']}`")
    fd = ev.get("finite_difference")
    if isinstance(fd, dict):
        wrt = f"element {fd['element']}" if "element" in fd else "a random direction"
        torch_g, burn_g = fd.get("torch", fd.get("torch_dot_v")), fd.get("burn", fd.get("burn_dot_v"))
        out.append(
            f"  - float64 central finite difference with respect to {wrt} (steps {_plain(fd.get('steps'))}): "
            f"estimates {_plain(fd.get('estimates'))}; PyTorch's gradient {_plain(torch_g)}, burn's {_plain(burn_g)}"
            + (f" — {fd['conclusion']}" if fd.get("conclusion") else "")
        )
    return out


def known_bug_reason(case: Case) -> tuple[str, str, list[str]] | None:

    if case.path is None:
        return None
    path = "/" + case.path.resolve().as_posix().lstrip("/")

    def cases(bug: Any) -> list[str]:
        return [e for e in bug.knowledge.evidence if e.endswith(".json") and "://" not in e]

    # a bug's own case is the first it names; another bug may cite it as related evidence
    for own in (True, False):
        for bug in KNOWN_BUGS:
            named = cases(bug)[:1] if own else cases(bug)
            if any(path.endswith("/" + c) for c in named):
                links = [e for e in bug.knowledge.evidence if e.startswith("http")]
                return bug.name, bug.knowledge.reason, links
    return None


def issue_markdown(case: Case, verdict: Verdict, burn_versions: dict[str, Any] | None = None,
                   group: list[tuple[Case, Verdict]] | None = None,
                   alone: tuple[Program, Verdict] | None = None, place: PlaceNote | None = None) -> str:
    """The report; `verdict` is the case's program checked now, `burn_versions` what
    `difftest-burn` reports (`BurnWorker().version()`). `group`: the other bug cases that share
    the case's root cause (`Case.root`), each with its verdict now: one report with every
    program, the root's reason first. `alone`: the one-op program the campaign localised the
    finding to (its triage record's) with its verdict now; when it still fails it comes first,
    as the smallest test of the bug. `place`: where in burn `difftest suspects` puts the case
    (suspects.py), with the other cases of that place."""
    members = sorted([(case, verdict), *(group or [])], key=lambda cv: cv[0].name != case.root)
    root = members[0][0]
    lines = [f"# {title(root)}", ""]
    lines += ["## Versions", ""] + _version_rows(root, burn_versions) + [""]
    lines += ["## Description", ""]
    lines.append(root.reason or "(the case records no reason)")
    if len(members) > 1:
        lines += ["", f"The same root cause shows in {len(members)} programs, one test each below:"]
        lines += [f"- `{c.name}`: {c.reason or '(no reason recorded)'}" for c, _ in members[1:]]
    where = ", ".join(f"`{c.name}`" + (f" (`{c.path.as_posix()}`)" if c.path is not None else "") for c, _ in members)
    lines += ["", "Found by difftest, a differential tester of burn's autodiff against PyTorch (case"
              f"{'s' if len(members) > 1 else ''} {where})."]
    if place is not None:
        lines += _place_lines(place)
    shrunk_alone = alone is not None and len(members) == 1 and same_up_to_names(alone[0], case.program)
    if alone is not None and not alone[1].ok and not shrunk_alone:
        program, v = alone
        lines += ["", "## The op alone (burn)", "",
                  "difftest localised the finding to one op: that op alone, on the inputs it had in the program, "
                  "fails the same way. The program it was found in follows.",
                  "", "```rust", rust_on_backend(rust_test(program, test_name(f"{case.name or 'difftest_case'}_alone"),
                                                           expected(v)), case.backend).rstrip(), "```"]
    for c, v in members:
        head = " (burn)" if len(members) == 1 else f" (burn): `{c.name}`"
        lines += ["", f"## Minimal reproducer{head}", ""]
        if shrunk_alone:
            lines += ["difftest localised the finding to one op, and the shrunk program is that op alone.", ""]
        lines += ["```rust",
                  rust_on_backend(rust_test(c.program, test_name(c.name or "difftest_case"), expected(v)),
                                  c.backend).rstrip(), "```", ""]
        lines += ["<details><summary>The same program in PyTorch</summary>", "", "```python",
                  torch_script(c.program).rstrip(), "```", "", "</details>"]
    lines += ["", "## What PyTorch gives and what burn gives", ""]
    for c, v in members:
        if len(members) > 1:
            lines += [f"### `{c.name}`", ""]
        if not v.findings:
            lines += ["With the versions above the case no longer reproduces: burn agrees with PyTorch "
                      "(the bug may be fixed).", ""]
        for n, m in enumerate(v.findings, 1):
            lines += _mismatch_section(v, m, n)
    lines += ["## Why this is a bug", ""]
    for c, v in members:
        named = "" if len(members) == 1 else f" (`{c.name}`)"
        lines.append(f"- verdict{named}: **{v.kind}** ({len(v.findings)} finding mismatch"
                     f"{'es' if len(v.findings) != 1 else ''})")
        for m in v.findings:
            lines += evidence_lines(m)
    lines += _record_lines(root, case)
    return "\n".join(lines).rstrip() + "\n"


def same_up_to_names(a: Program, b: Program) -> bool:
    """Whether two programs are the same statement for statement once their ids are named by
    position (the localised op-alone program and a shrunk one often are, under other names)."""
    def canonical(p: Program) -> Any:
        names = {s.id: f"#{k}" for k, s in enumerate(p.statements)}

        def rename(x: Any) -> Any:
            if isinstance(x, str):
                return names.get(x, x)
            if isinstance(x, list):
                return [rename(y) for y in x]
            if isinstance(x, dict):
                return {k: rename(v) for k, v in x.items()}
            return x
        return rename(program_to_dict(p))
    return len(a.statements) == len(b.statements) and canonical(a) == canonical(b)


def _place_lines(place: PlaceNote) -> list[str]:
    evidence = ("no passing program executes it" if place.strict else
                "some passing programs execute it too, where it left their results within tolerance")
    out = ["", "## Where in burn", "",
           f"Spectrum-based localisation (`difftest suspects`: {place.failing_runs} failing and {place.passing_runs} "
           f"passing programs on a coverage build) puts this fault at these lines"
           + (f", in the backward of burn-autodiff's `{place.node}`" if place.node else "") + f"; {evidence}:", "",
           "| line | function | failing / passing runs | source |", "|---|---|---|---|"]
    for s in place.lines[:5]:
        fn = str(s.get("function", "")).split("<")[0]
        text = str(s.get("text", "")).replace("|", "\\|")
        out.append(f"| `{s['crate']}/{s['path']}:{s['line']}` | `{fn}` | {s['failing']} / {s['passing']} | "
                   + (f"`{text}` |" if text else " |"))
    if place.others:
        out += ["", f"The same place shows in {len(place.others)} other case(s) difftest saved: "
                + ", ".join(f"`{o}`" for o in place.others[:20]) + (" …" if len(place.others) > 20 else "")]
    return out


def _record_lines(root: Case, case: Case) -> list[str]:
    """What the root's record says about the bug: the declared known bug, upstream, the
    versions tested, fixed-in, the candidate fix difftest proved."""
    lines = []
    known = known_bug_reason(root) or known_bug_reason(case)
    if known is not None:
        lines.append(f"- declared known bug `{known[0]}`: {known[1]}")
        lines += [f"  - related: {link}" for link in known[2]]
    if case.root != case.name and root is case:
        lines.append(f"- the same root cause as the case `{case.root}`: report them together, as one issue "
                     "with both programs")
    upstream = root.upstream
    note = root.record.get("upstream_note")
    if upstream:
        lines.append(f"- upstream: {upstream}" + (f" ({note})" if note else ""))
    else:
        lines.append("- upstream: not reported upstream yet" + (f" ({note})" if note else ""))
    tested = root.record.get("versions_tested") or {}
    if tested:
        lines.append("- burn versions tested: " + ", ".join(f"{v}: {e.get('outcome')}" for v, e in tested.items()))
    if root.fixed_in:
        lines.append(f"- fixed in burn {root.fixed_in}")
    fix = root.fix
    if fix is not None:
        lines.append(f"- candidate fix: `{fix['patch']}`, applied to burn {fix['burn']} by difftest: "
                     f"{fix['outcome']}; {fix['others']} ({fix['date']})")
    return lines
