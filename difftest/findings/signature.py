"""Finding signatures: what makes two findings "the same bug" for campaign dedup (corpus/README.md).

A signature is built from a verdict's first finding (the mismatch that names the verdict):

    <verdict>:<framework>:<where>:<mismatch kind>[ <message>] #<12 hex digits>

* `verdict`: the numeric verdict after arbitration (`burn-wrong`, `torch-wrong`) or else the
  mismatch kind (`outcome`, `flags`, `crash`, ...);
* `framework`: `burn`, `torch`, or `-` for a comparison between the frameworks;
* `where`: what the failing statement is: the op of an `OpCall`, `cut:<kind>`, `backward`,
  `leaf`, `apply:<module kind>`, `param:<name>`, `module:<kind>`, `transform:<kind>`; for a hang,
  the burn function the worker was stopped in (`burn_flex::ops::cumulative::cumulative_op`,
  exec/stacks.py), so that ops sharing a hung kernel are one finding; `program` when the
  mismatch names no statement (a crash, a hang outside burn). A gradient mismatch
  names the leaf whose gradient is wrong, and gradients are observed at leaves only, so there
  `where` is what reads that leaf on the way to the backward's root (`powf`, `cut:detach`;
  several joined with `+`): "leaf" would make every gradient bug one signature;
* `message`: for outcomes, the error (burn's panic message, the exception); for crashes the
  worker's exit status (only: its stderr is read racily); for flags the flags that differ and
  their observed values; for gradient presence which way it differs. Numbers, statement ids,
  hex addresses and hashes are stripped and whitespace collapsed, so the same panic on other
  data is the same signature. Numeric value and gradient mismatches carry no message: the
  numbers are the data, not the bug.

The hash covers the whole normalised key (the readable part truncates the message).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from difftest.findings.corpus import CorpusError, iter_case_files, load_case
from difftest.oracle.compare import DISMISSED, Mismatch, Verdict
from difftest.program.files import JsonFileError, read_json
from difftest.program.ir import (
    Apply,
    Backward,
    ByKind,
    Program,
    Statement,
    ancestors,
    root_module,
    value_inputs,
)

MESSAGE_CHARS = 60  # of the normalised message, in the readable part

_HEX = re.compile(r"\b0x[0-9a-f]+\b")
_HASH = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b")  # digests, in-flight file names
_ID = re.compile(r"\b([a-z_]+)\d+\b")  # statement ids (x0, v12), NodeId(3) is handled by _NUM
_QUOTED = re.compile(r"\"[A-Za-z_][A-Za-z0-9_]*\"")  # a quoted statement id ("bw", "bw1")
_NUM = re.compile(r"(?:(?<![\w)\]])[-+])?(?:\d+(?:\.\d+)?|\.\d+)(?:e[-+]?\d+)?")
_NUMS = re.compile(r"N(?:\s*,\s*N)+")
_SPACE = re.compile(r"\s+")
_EXIT = re.compile(r"exited with status (-?\d+)")


def normalize(text: str) -> str:
    """`text` with hex addresses, hashes, ids and numbers replaced and whitespace collapsed."""
    text = _QUOTED.sub('"ID"', text)
    text = _HEX.sub("ADDR", text.lower())
    text = _HASH.sub("HASH", text)
    text = _ID.sub(r"\1N", text)
    text = _NUM.sub("N", text)
    # a list of numbers is data as much as each number (a shape's rank, a list of dims)
    text = _NUMS.sub("N", text)
    return _SPACE.sub(" ", text).strip()


def _where(statement: str | None, program: Program | None) -> str:
    if statement is None:
        return "program"
    if program is None:
        return "?"
    table = program.by_id()
    st = table.get(statement)
    if st is None:
        return "?"
    return _WHERE.of(st)(st, program, table)


def _apply_where(st: Apply, program: Program, table: dict[str, Statement]) -> str:
    try:
        return f"apply:{root_module(program, st.module, table).module}"
    except (KeyError, AssertionError):
        return "apply"


# where in a program a statement is, as a finding's signature names it (its op, the kind of cut,
# module or transform, the parameter read)
_WHERE: ByKind[Callable[[Any, Program, dict[str, Statement]], str]] = ByKind(
    "signature",
    leaf=lambda st, program, table: "leaf",
    op=lambda st, program, table: st.op,
    cut=lambda st, program, table: f"cut:{st.cut}",
    backward=lambda st, program, table: "backward",
    module=lambda st, program, table: f"module:{st.module}",
    transform=lambda st, program, table: f"transform:{st.transform}",
    apply=_apply_where,
    param=lambda st, program, table: f"param:{st.param}",
    grad=lambda st, program, table: st.kind,
    zero_grad=lambda st, program, table: st.kind,
    optimizer=lambda st, program, table: st.kind,
    step=lambda st, program, table: st.kind,
)


def _grad_where(m: Mapping[str, Any], program: Program) -> str | None:
    """Where a wrong gradient comes from, as far as the program says: the statements that read
    the value whose gradient differs (a leaf, most often) on the way to the backward's root.
    Gradients are observed at leaves only, so the op whose backward is wrong cannot be named;
    the leaf's reader is the next best thing (and what a shrunk program keeps)."""
    ident, bw = m.get("statement"), m.get("backward")
    table = program.by_id()
    root = table.get(str(bw)) if bw is not None else None
    if ident is None or not isinstance(root, Backward):
        return None
    needed = ancestors(table, root.input)  # the values the root is computed from (the root included)
    readers = {_where(st.id, program) for st in program.statements
               if st.id in needed and ident in value_inputs(st)}
    return "+".join(sorted(readers)) or None


def _crash_message(message: str) -> str:
    """A crash or hang: the exit status (or the timeout message). Not the worker's stderr tail,
    which also holds earlier caught panics and is read racily as the process dies: a signature
    that changed from one run to the next would also defeat the shrinker, which keeps a smaller
    program only if its signature is the same."""
    head = message.partition("\n")[0]
    m = _EXIT.search(head)
    return f"exit {m.group(1)}" if m else normalize(head)


def _message(m: Mapping[str, Any]) -> str:
    kind = m.get("kind")
    expected, observed, detail = m.get("expected"), m.get("observed"), str(m.get("detail") or "")
    if kind in ("crash", "timeout"):
        return _crash_message(detail)
    if kind in ("outcome", "invalid"):
        return normalize(f"{observed}: {detail}" if detail else str(observed))
    if kind in ("flags", "stale-rule") and isinstance(expected, Mapping) and isinstance(observed, Mapping):
        differ = sorted(k for k in set(expected) | set(observed) if expected.get(k) != observed.get(k))
        return ",".join(f"{k}={observed.get(k)}" for k in differ)
    if kind == "stale-rule":
        return normalize(f"{observed}: {detail}")
    if kind == "grad-presence":
        return f"{expected} -> {observed}"
    if kind == "shape":
        return ""  # the shapes are the data (a wrong shape rule shows at every rank)
    return ""  # value, grad: the numbers are the data


def signature_of_mismatch(m: Mismatch | Mapping[str, Any], program: Program | None) -> str:
    """The signature of one (finding) mismatch, given as a `Mismatch` or as its recorded dict
    (`Mismatch.to_dict`, the `verdict.mismatches` of a case file)."""
    d: Mapping[str, Any] = m.to_dict() if isinstance(m, Mismatch) else m
    verdict = d.get("verdict") or d.get("kind") or "?"
    framework = d.get("framework") or "-"
    where = None
    if d.get("kind") == "grad" and program is not None:
        where = _grad_where(d, program)
    evidence = d.get("evidence")
    site = evidence.get("site") if isinstance(evidence, Mapping) else None
    if d.get("kind") in ("crash", "timeout") and isinstance(site, str):
        where = site  # the burn function a hung worker was stopped in
    where = where or _where(d.get("statement"), program)
    kind = d.get("kind") or "?"
    message = _message(d)
    key = "\x1f".join((str(verdict), str(framework), where, str(kind), message))
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    short = message if len(message) <= MESSAGE_CHARS else message[: MESSAGE_CHARS - 1] + "…"
    return f"{verdict}:{framework}:{where}:{kind}" + (f" {short}" if short else "") + f" #{digest}"


def signature(verdict: Verdict) -> str:
    """The signature of a failing verdict (its first finding); `pass` for a passing one."""
    findings = verdict.findings
    if not findings:
        return "pass"
    return signature_of_mismatch(findings[0], verdict.program)


def signature_of_record(record: Mapping[str, Any], program: Program | None) -> str | None:
    """The signature of a case file's recorded verdict (`record["verdict"]["mismatches"]`), or
    None when it recorded no finding."""
    verdict = record.get("verdict")
    if not isinstance(verdict, Mapping):
        return None
    for m in verdict.get("mismatches") or ():
        if isinstance(m, Mapping) and m.get("verdict") not in DISMISSED:
            return signature_of_mismatch(m, program)
    return None


def _read_signature(path: Path) -> tuple[str | None, str | None, str | None]:
    """(signature, status, why it cannot be read) of a case file, each None when there is none:
    its `"signature"` field, else its triage's, else recomputed from its recorded verdict (None for a case without a
    recorded finding); the status of a program case (None for a memory case or a file that is
    not a case); `why` is load_case's error, naming the file."""
    try:
        doc = read_json(path)
    except JsonFileError:
        doc = None  # load_case below names what is wrong
    program = isinstance(doc, dict) and doc.get("kind", "program") == "program"
    status = doc.get("status") if isinstance(doc, dict) and program else None
    status = status if isinstance(status, str) else None
    if program and isinstance(doc.get("signature"), str):  # type: ignore[union-attr]
        return doc["signature"], status, None  # type: ignore[index]
    triaged = doc.get("triage") if program else None  # type: ignore[union-attr]
    if isinstance(triaged, dict) and isinstance(triaged.get("signature"), str):
        return triaged["signature"], status, None  # the campaign's triage: a localised hang's op
    try:
        case = load_case(path)
    except CorpusError as e:
        return None, status, str(e)
    if not program:
        return None, None, None
    return signature_of_record(case.record, case.program), status, None


def case_signature(path: Path) -> tuple[str | None, str | None]:
    """(signature, status) of a case file: its `"signature"` field, else its triage's, else
    recomputed from its recorded verdict; (None, status) for a case without a recorded finding, (None, None) for a
    file that is not a readable program case."""
    sig, status, _ = _read_signature(path)
    return sig, status


@dataclass
class CorpusScan:
    """One reading of a corpus directory: (signature, case file) of every case that records a
    finding, with its status; and why each file that cannot be read was left out (load_case's
    error, naming the file), so that a campaign or a merge says so rather than dropping it."""

    cases: list[tuple[str, str | None, Path]] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    def signatures(self, statuses: Collection[str] | None = ("bug", "new")) -> list[tuple[str, Path]]:
        """(signature, case file) of the cases whose status is in `statuses` (None: any)."""
        return [(sig, path) for sig, status, path in self.cases if statuses is None or status in statuses]


def scan_corpus(corpus_dir: Path) -> CorpusScan:
    scan = CorpusScan()
    if not corpus_dir.is_dir():
        return scan
    for path in iter_case_files([corpus_dir]):
        sig, status, why = _read_signature(path)
        if why is not None:
            scan.unreadable.append(why)
        elif sig is not None:
            scan.cases.append((sig, status, path))
    return scan


def corpus_cases(corpus_dir: Path, *, statuses: Collection[str] | None = ("bug", "new")) -> list[tuple[str, Path]]:
    """(signature, case file) for every case under `corpus_dir` (recursively) that has a
    signature and whose status is in `statuses` (None: any status)."""
    return scan_corpus(corpus_dir).signatures(statuses)


def corpus_signatures(corpus_dir: Path, *, statuses: Collection[str] | None = ("bug", "new")) -> dict[str, Path]:
    """Signature -> case file (the first in path order), for the cases under `corpus_dir` whose
    status is in `statuses`. By default only `bug` cases count as known: a `pass` case recorded a
    false alarm that was fixed, and a `divergence:` case one that a rule explains, so the same
    signature found again is news (a regression, or a new bug of the same shape)."""
    return first_by_signature(corpus_cases(corpus_dir, statuses=statuses))


def first_by_signature(cases: list[tuple[str, Path]]) -> dict[str, Path]:
    """Signature -> the first case file with it, in path order."""
    out: dict[str, Path] = {}
    for sig, path in cases:
        out.setdefault(sig, path)
    return out
