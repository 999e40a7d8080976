"""The corpus: one self-contained JSON file per minimal finding (corpus/README.md).

Files are named by a hash of the program, so the same finding found twice is one file
(findings/saving.py writes them).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from difftest.divergences.host import HostCondition
from difftest.divergences.knowledge import parse_version
from difftest.divergences.memory_rules import MEMORY_RULES_BY_NAME
from difftest.divergences.rules import RULES_BY_NAME
from difftest.exec.backends import DEFAULT_BACKEND
from difftest.findings.error_classes import mismatch_class
from difftest.findings.records import NOT_REPORTED as NOT_REPORTED
from difftest.findings.records import CorpusError as CorpusError
from difftest.findings.records import check_records
from difftest.findings.table import report as table_report
from difftest.memory.experiment import MemoryExperiment
from difftest.memory.model import Row
from difftest.memory.table import format_table
from difftest.ops.validate import check_program
from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.files import JsonFileError, read_json
from difftest.program.ir import Program, ProgramError
from difftest.program.jsonio import program_from_dict, program_to_dict
from difftest.versions import versions

CASE_FORMAT = "difftest-case"
CASE_VERSION = 1
STATUSES = ("pass", "bug", "new")  # plus "divergence:<rule>"; "new": saved, not yet triaged
FAILING = ("bug", "new")  # statuses whose case must fail the way it recorded
KINDS = ("program", "memory")  # "kind" of a case; absent means "program"


@dataclass
class Case:
    program: Program
    status: str = "bug"
    reason: str = ""
    link: str | None = None
    name: str = ""
    path: Path | None = None
    record: dict[str, Any] = field(default_factory=dict)  # verdict, observations, versions, dates
    # A memory case (`"kind": "memory"`) measures this experiment; `program` is then its stand-in.
    memory: MemoryExperiment | None = None

    @property
    def upstream(self) -> str | None:
        """Where the bug is known upstream (the case's link, else its record's `upstream`), or
        None where the case says it is not reported."""
        where = self.link or self.record.get("upstream")
        return where if isinstance(where, str) and where and where != "not reported" else None

    @property
    def backend(self) -> str:
        """The burn backend the case runs on (its record's `backend`; Flex without one)."""
        b = self.record.get("backend")
        return b if isinstance(b, str) else DEFAULT_BACKEND

    @property
    def root(self) -> str:
        """The bug case whose root cause this case shares (its record's `root`): one report
        upstream for all of them; a case without one is its own root."""
        root = self.record.get("root")
        return root if isinstance(root, str) and root else self.name

    @property
    def fixed_in(self) -> str | None:
        """The first burn version its record says it no longer reproduces on (`versions_tested`:
        an outcome that says "fixed"), or None."""
        tested = self.record.get("versions_tested") or {}
        fixed = [v for v, e in tested.items() if isinstance(e, dict) and "fixed" in str(e.get("outcome", ""))]
        return min(fixed, key=parse_version) if fixed else None

    @property
    def fix(self) -> dict[str, str] | None:
        """The candidate fix difftest proved on this bug (its record's `fix`, written by
        `difftest versions --burn patch:FILE --record`): patch, burn, outcome, others, date."""
        fix = self.record.get("fix")
        return {k: str(v) for k, v in fix.items()} if isinstance(fix, dict) else None

    def expected_rule(self) -> str | None:
        return self.status.split(":", 1)[1] if self.status.startswith("divergence:") else None

    @property
    def blames_torch(self) -> bool:
        """Whether every mismatch the case expects is judged torch-wrong: a bug of PyTorch's, which
        burn gets right (its burn reproducer passes)."""
        expect = self.record.get("expect") or []
        return bool(expect) and all(isinstance(e, dict) and e.get("verdict") == "torch-wrong" for e in expect)

    @property
    def host(self) -> HostCondition | None:
        """The machines the case reproduces on (its record's `host`), None for every machine."""
        doc = self.record.get("host")
        return HostCondition.from_dict(doc) if doc is not None else None

    def not_here(self) -> str | None:
        """Why the case cannot be replayed on this machine (it needs CPU flags this one lacks),
        or None."""
        host = self.host
        if host is None or host.holds():
            return None
        return f"needs {host.describe()} (this machine lacks {', '.join(host.missing())})"


def program_hash(program: Program) -> str:
    canonical = json.dumps(program_to_dict(program), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def check_status(status: str, kind: str = "program") -> None:
    """`divergence:<rule>` names a flag rule (divergences/rules.py) in a program case, a memory
    rule (divergences/memory_rules.py) in a memory case."""
    if not isinstance(status, str):
        raise CorpusError(f"status {status!r} is not a string (pass, bug, new or divergence:<rule>)")
    if status in STATUSES:
        return
    if status.startswith("divergence:"):
        rule = status.split(":", 1)[1]
        known = MEMORY_RULES_BY_NAME if kind == "memory" else RULES_BY_NAME
        if rule not in known:
            other = "a memory" if rule in MEMORY_RULES_BY_NAME else "a flag" if rule in RULES_BY_NAME else None
            hint = f"; {rule} is {other} rule" if other else ""
            raise CorpusError(
                f"status {status!r} names no declared rule for a {kind} case (known: {', '.join(known)}){hint}"
            )
        return
    raise CorpusError(f"status {status!r} is not pass, bug, new or divergence:<rule>")


def message_pattern(text: str) -> str:
    """A regular expression for an error message that ignores its numbers (ids, addresses,
    values change between runs and between versions of the data)."""
    first = text.strip().splitlines()[0][:160] if text.strip() else ""
    return re.sub(r"(?:\\-)?\d+(?:\\\.\d+)?(?:e(?:\\-|\\\+)?\d+)?", r"[-+.0-9e]+", re.escape(first))


def expectation(m: Mismatch) -> dict[str, Any]:
    """What a bug case must reproduce of one finding mismatch."""
    out: dict[str, Any] = {"kind": m.kind, "statement": m.statement, "framework": m.framework}
    if m.verdict:
        out["verdict"] = m.verdict
    if m.kind in ("outcome", "crash", "timeout", "invalid"):
        out["message"] = message_pattern(m.detail or str(m.observed))
    return out


def numeric_expectation(verdict: Verdict, m: Mismatch) -> dict[str, Any]:
    """`expectation`, and for a value or gradient finding its failing elements and error class."""

    out = expectation(m)
    if m.kind in ("value", "grad"):
        out["elements"] = sorted(m.elements)
        out["error"] = mismatch_class(verdict, m)
    return out


def _matches(expect: dict[str, Any], m: Mismatch, verdict: Verdict) -> bool:
    if (m.kind, m.statement, m.framework) != (expect.get("kind"), expect.get("statement"), expect.get("framework")):
        return False
    if expect.get("verdict") and m.verdict != expect["verdict"]:
        return False
    if "elements" in expect and sorted(m.elements) != list(expect["elements"]):
        return False
    if "error" in expect:

        if mismatch_class(verdict, m) != expect["error"]:
            return False
    pattern = expect.get("message")
    return not pattern or re.search(pattern, m.detail or str(m.observed)) is not None


def check_expectations(expected: list[dict[str, Any]], verdict: Verdict) -> str | None:
    """None when the verdict's findings are exactly the recorded ones (each expectation matched
    by a finding — statement, kind, verdict, message, and where recorded the failing elements
    and the error class — and no other finding); else what differs."""
    findings = verdict.findings
    missing = [e for e in expected if not any(_matches(e, m, verdict) for m in findings)]
    extra = [m for m in findings if not any(_matches(e, m, verdict) for e in expected)]
    if not missing and not extra:
        return None
    lines = []
    for e in missing:
        lines.append("  recorded, not reproduced: " + json.dumps(e))
    for m in extra:
        lines.append("  observed, not recorded: " + m.line().replace("\n", "\n    "))
    return "\n".join(lines)


def case_from_verdict(verdict: Verdict, *, source: str, burn_version: dict[str, Any] | None = None) -> Case:
    first = verdict.findings[0] if verdict.findings else None
    reason = first.line() if first else "passes"
    record: dict[str, Any] = {
        "expect": [numeric_expectation(verdict, m) for m in verdict.findings],
        "verdict": {
            "kind": verdict.kind,
            "mismatches": [m.to_dict() for m in verdict.mismatches],
        },
        "rules_fired": verdict.prediction.rules_fired,
        "observations": {
            "torch": verdict.torch.to_dict(),
            "burn": verdict.burn.to_dict(),
            **({"float64": verdict.reference.to_dict()} if verdict.reference else {}),
        },
        "versions": versions(burn_version),
        "found": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "source": source,
    }
    backend = (burn_version or {}).get("backend")
    if isinstance(backend, str) and backend != DEFAULT_BACKEND:  # found on another backend: replayed there
        record["backend"] = backend
    return Case(verdict.program, "new", reason, None, program_hash(verdict.program), None, record)


def case_to_dict(case: Case) -> dict[str, Any]:
    if case.memory is not None:
        return {
            "format": CASE_FORMAT,
            "version": CASE_VERSION,
            "name": case.name,
            "kind": "memory",
            "status": case.status,
            "reason": case.reason,
            "link": case.link,
            "memory": case.memory.to_dict(),
            **case.record,
        }
    return {
        "format": CASE_FORMAT,
        "version": CASE_VERSION,
        "name": case.name or program_hash(case.program),
        "status": case.status,
        "reason": case.reason,
        "link": case.link,
        "program": program_to_dict(case.program),
        **case.record,
    }


def load_case(path: Path | str) -> Case:
    path = Path(path)
    try:
        doc = read_json(path)
    except JsonFileError as e:  # its message names the file
        raise CorpusError(str(e)) from e
    if not isinstance(doc, dict) or doc.get("format") != CASE_FORMAT:
        raise CorpusError(f"{path}: not a difftest case (\"format\" must be {CASE_FORMAT!r})")
    if doc.get("version") != CASE_VERSION:
        raise CorpusError(f"{path}: case version {doc.get('version')!r}, this difftest reads {CASE_VERSION}")
    for key, types, what in (("name", (str,), "a string"), ("reason", (str,), "a string"),
                             ("link", (str, type(None)), "a string or null")):
        if key in doc and not isinstance(doc[key], types):
            raise CorpusError(f"{path}: \"{key}\" must be {what}, got {doc[key]!r}"[:300])
    kind = doc.get("kind", "program")
    if kind not in KINDS:
        raise CorpusError(f"{path}: \"kind\" must be one of {list(KINDS)}, got {kind!r}")
    if kind == "memory":
        return _load_memory_case(path, doc)
    for key in ("status", "program"):
        if key not in doc:
            raise CorpusError(f"{path}: missing field {key!r}")
    if doc["status"] in FAILING:
        _check_expect(path, doc.get("expect"))
    check_records(path, doc)
    try:
        check_status(doc["status"])
        program = program_from_dict(doc["program"])
        check_program(program)  # ops, attributes and shapes
    except ProgramError as e:
        raise CorpusError(f"{path}: invalid program: {e}") from e
    except CorpusError as e:
        raise CorpusError(f"{path}: {e}") from e
    header = ("format", "version", "name", "status", "reason", "link", "program")
    record = {k: v for k, v in doc.items() if k not in header}
    return Case(
        program, doc["status"], doc.get("reason", ""), doc.get("link"), doc.get("name", path.stem), path, record
    )


def _check_expect(path: Path, expect: Any) -> None:
    """A bug case records the mismatches it must reproduce (`expect`, written when it is saved)."""
    if not isinstance(expect, list) or not expect:
        raise CorpusError(f"{path}: a bug case needs \"expect\": the list of mismatches it must reproduce "
                          "(kind, statement, framework, verdict, message pattern; see corpus/README.md)")
    for i, e in enumerate(expect):
        if not isinstance(e, dict) or not isinstance(e.get("kind"), str):
            raise CorpusError(f"{path}: expect[{i}] is not an object with a \"kind\"")
        unknown = set(e) - {"kind", "statement", "framework", "verdict", "message", "elements", "error"}
        if unknown:
            raise CorpusError(f"{path}: expect[{i}] has unknown field(s) {sorted(unknown)}")
        if "message" in e:
            try:
                re.compile(e["message"])
            except (re.error, TypeError) as err:
                raise CorpusError(f"{path}: expect[{i}].message is not a regular expression: {err}") from err


def _load_memory_case(path: Path, doc: dict[str, Any]) -> Case:
    for key in ("status", "memory"):
        if key not in doc:
            raise CorpusError(f"{path}: missing field {key!r} (a memory case has \"memory\", not \"program\")")
    if "program" in doc:
        raise CorpusError(f"{path}: a memory case has no \"program\"")
    try:
        check_status(doc["status"], "memory")
        experiment = MemoryExperiment.from_dict(doc["memory"])
    except CorpusError as e:
        raise CorpusError(f"{path}: {e}") from e
    except ValueError as e:
        raise CorpusError(f"{path}: invalid memory experiment: {e}") from e
    header = ("format", "version", "name", "kind", "status", "reason", "link", "memory")
    record = {k: v for k, v in doc.items() if k not in header}
    return Case(
        experiment.stand_in(),
        doc["status"],
        doc.get("reason", ""),
        doc.get("link"),
        doc.get("name", path.stem),
        path,
        record,
        experiment,
    )


def same_root(case: Case) -> tuple[list[Case], list[str]]:
    """The other bug cases beside `case` (its directory) that share its root cause
    (`Case.root`), and the files there that could not be read (path: error), which the
    caller reports rather than drops."""
    if case.path is None or case.status != "bug":
        return [], []
    members: list[Case] = []
    problems: list[str] = []
    for f in sorted(case.path.parent.glob("*.json")):
        if f.resolve() == case.path.resolve():
            continue
        try:
            other = load_case(f)
        except CorpusError as e:
            problems.append(str(e))
            continue
        if other.status == "bug" and other.root == case.root:
            members.append(other)
    return members, problems


def iter_case_files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*.json") if not q.name.startswith(".")))
        elif p.suffix == ".json":
            out.append(p)
    return out


def read_cases(paths: list[Path]) -> list[Case]:
    """Every case under `paths`, all read before the caller's long work (a build) starts; a
    CorpusError names the paths that do not exist, or that hold no case, or every file that
    cannot be read."""
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise CorpusError(f"no such file or directory: {', '.join(missing)}")
    files = iter_case_files(paths)
    if not files:
        raise CorpusError(f"no cases in {', '.join(map(str, paths))}")
    cases, corrupt = [], []
    for f in files:
        try:
            cases.append(load_case(f))
        except CorpusError as e:
            corrupt.append(str(e))
    if corrupt:
        raise CorpusError("cases that cannot be read:\n  " + "\n  ".join(corrupt))
    return cases


@dataclass(frozen=True)
class ReplayOutcome:
    ok: bool
    message: str
    verdict_kind: str


def judge(case: Case, verdict: Verdict) -> ReplayOutcome:
    """Does the case do what its status says it does now? (A memory case is judged on its
    table, measured here at the quick size; `verdict`, of its stand-in program, is not used.)"""
    if case.memory is not None:
        return replay_memory_case(case, full=False)
    elsewhere = case.not_here()
    if elsewhere is not None:
        return ReplayOutcome(True, f"skipped: {elsewhere}", "skipped")
    rule = case.expected_rule()
    fired = verdict.prediction.rules_fired
    if case.status == "pass":
        if verdict.ok:
            return ReplayOutcome(True, "passes", verdict.kind)
        return ReplayOutcome(False, "regression: expected to pass\n" + table_report(verdict), verdict.kind)
    if rule is not None:
        if not verdict.ok:
            return ReplayOutcome(False, f"expected declared divergence {rule}, got a finding\n" + table_report(verdict),
                                 verdict.kind)
        if rule not in fired:
            return ReplayOutcome(False, f"rule {rule} did not fire (fired: {', '.join(fired) or 'none'}); "
                                 "the case no longer exercises it", verdict.kind)
        return ReplayOutcome(True, f"divergence explained by {rule}", verdict.kind)
    # bug or new (untriaged): expected to fail (strict xfail), the way it was recorded
    if verdict.ok:
        return ReplayOutcome(False, "bug case now passes: re-classify it (status \"pass\") if the fix is real "
                             f"(reason was: {case.reason})", verdict.kind)
    diff = check_expectations(case.record.get("expect", []), verdict)
    if diff is not None:
        return ReplayOutcome(False, "bug case fails differently from what it recorded:\n" + diff + "\n"
                             + table_report(verdict), verdict.kind)
    return ReplayOutcome(True, f"still fails as recorded ({verdict.kind})", verdict.kind)


def judge_memory(case: Case, rows: list[Row], *, full: bool) -> ReplayOutcome:
    """A memory case's status against its measured table: pass = no row contradicts the
    model; divergence:<rule> = none does and the rule was applied to some row; bug = some row
    contradicts it."""
    assert case.memory is not None
    t = case.memory.size(full)
    table = format_table(rows, t.n, t.iters)
    bad = [r for r in rows if not r.ok]
    applied = sorted({name for r in rows for name in r.expectation.rules})
    kind = "contradicted" if bad else "ok"
    rule = case.expected_rule()
    if case.status == "bug":
        if not bad:
            return ReplayOutcome(False, "bug case now matches the model: re-classify it if the fix is real\n" + table,
                                 kind)
        return ReplayOutcome(True, f"still contradicts the model ({len(bad)} rows)", kind)
    if bad:
        return ReplayOutcome(False, f"{len(bad)} row(s) contradict the model\n" + table, kind)
    if rule is not None and rule not in applied:
        return ReplayOutcome(False, f"rule {rule} was not applied (applied: {', '.join(applied) or 'none'}); "
                             "the case no longer exercises it\n" + table, kind)
    return ReplayOutcome(True, f"{len(rows)} rows as the model expects" + (f", explained by {rule}" if rule else ""),
                         kind)


def replay_memory_case(case: Case, *, full: bool) -> ReplayOutcome:
    """Measures a memory case's table (fresh processes) and judges it."""
    assert case.memory is not None
    return judge_memory(case, case.memory.run(full=full), full=full)
