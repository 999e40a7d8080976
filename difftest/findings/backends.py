"""Where a finding lives: the same program on every burn backend a difftest-burn binary has.

Each backend is compared with PyTorch as usual (one worker per backend, `--backend NAME`).
The pattern of outcomes says which layer the bug is in:

- it shows on every backend tested: burn-autodiff, or a default implementation the backends
  share (burn-backend's default ops, the dispatch layer), not one backend's kernel;
- on one backend only: that backend's own code path: its kernel (its crate: `KERNEL_CRATES`), or
  a default implementation of burn-backend that it inherits and the others override (the
  finding's op then shows which: NdArray's f32 `sigmoid` is burn-backend's default, for one);
- on some, not all: code those backends share and the others override.

`backends_tested` in a bug case records it (written by `difftest versions --backend …
--record`): backend -> {"outcome": text, "burn": version, "date": ISO day}.

A campaign on several backends (`difftest fuzz --backend flex,ndarray`) triages each backend's
finding on that backend (`triangulate`) and keys it by its triage key (the known bug, else the
signature) and the layer class of the backends that show the same key (`layer_class`): the same
fault on one backend and on all is two keys.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from difftest.exec.backends import BACKENDS, KERNEL_CRATES
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import Case, check_expectations, judge
from difftest.findings.triage import Triage, triage
from difftest.ops.backend_support import refusal
from difftest.oracle.check import check_on
from difftest.oracle.compare import Verdict
from difftest.program.files import read_json, write_atomic
from difftest.program.ir import Program
from difftest.program.jsonio import dumps

FAILS = ("fails as recorded", "fails differently", "fails")  # outcomes in which the program shows a finding


@dataclass(frozen=True)
class BackendCell:
    """One program (or case) on one backend."""

    backend: str
    outcome: str  # "pass" | "fails" (a program) | "fails as recorded" | "fails differently" | "passes" | ...
    ok: bool  # a case: what the backend does matches the case's record, or is declared there; a program: it passes
    detail: str  # the first finding's line, or why
    # what declares the outcome on this backend where the case's own record does not: a known bug
    # declared for it ("known bug NAME") or a refusal of ops/backend_support.py ("refused: ...")
    explained: str | None = None

    @property
    def fails(self) -> bool:
        return self.outcome in FAILS

    @property
    def shown(self) -> str:
        """The outcome as a matrix shows it: with what explains it, if anything does."""
        return f"{self.outcome} ({self.explained})" if self.explained else self.outcome

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "outcome": self.outcome, "ok": self.ok, "detail": self.detail,
                "explained": self.explained}


def program_cell(backend: str, verdict: Verdict) -> BackendCell:
    if verdict.ok:
        return BackendCell(backend, "pass", True, "passes")
    return BackendCell(backend, "fails", False, verdict.findings[0].line().splitlines()[0])


def case_cell(case: Case, backend: str, verdict: Verdict) -> BackendCell:
    """A bug case: `fails as recorded`, `fails differently` or `passes` (a bug may live on one
    backend: passing elsewhere is information, not an error); any other case: ok or not as
    `difftest replay` judges it."""
    elsewhere = case.not_here()
    if elsewhere is not None:
        return BackendCell(backend, "skipped", True, elsewhere)
    if case.status != "bug":
        outcome = judge(case, verdict)
        text = "pass" if outcome.ok and case.status == "pass" else ("ok" if outcome.ok else "FAIL")
        return BackendCell(backend, text, outcome.ok, outcome.message.splitlines()[0])
    if verdict.ok:
        return BackendCell(backend, "passes", True, "the bug does not show on this backend")
    diff = check_expectations(case.record.get("expect", []), verdict)
    if diff is not None:
        return BackendCell(backend, "fails differently", False, diff.strip().splitlines()[0].strip())
    return BackendCell(backend, "fails as recorded", True, f"fails as recorded ({verdict.kind})")


def judged_cell(case: Case, backend: str, verdict: Verdict, worker: BurnWorker) -> BackendCell:
    """`case_cell`, where an outcome the case's record does not expect is explained by what is
    declared for `backend`: an op or dtype it refuses (ops/backend_support.py, the panic it
    records) or a known bug declared for it (triage on `worker`, which ran the verdict). What
    stays unexplained is not ok."""
    cell = case_cell(case, backend, verdict)
    if cell.ok or verdict.ok:
        return cell
    refused = refusal(case.program, backend)
    error = verdict.burn.error
    if refused is not None and error is not None and refused in error.message:
        return replace(cell, ok=True, explained=f"refused: {refused}")
    known = triage(verdict, worker).known
    if known is not None:
        return replace(cell, ok=True, explained=f"known bug {known.name}")
    return cell


def run_on(program: Program, workers: Mapping[str, BurnWorker]) -> dict[str, Verdict]:
    """The program's verdict on each backend (workers by backend name): check.check_on, which
    runs the model and PyTorch once for all of them."""
    return check_on(program, workers)


SHARED = "shared"  # the layer class of a finding every backend tested shows


def layer_class(fails: Mapping[str, bool]) -> str | None:
    """The layer class of a finding from which backends show it (backend -> shows it): `shared`
    (every backend tested), `only:<b>` (one of several), `some:<b>,<c>` (some, not all); None
    when no backend shows it or only one was tested (nothing to locate)."""
    shown = [b for b, f in fails.items() if f]
    if not shown or len(fails) == 1:
        return None
    if len(shown) == len(fails):
        return SHARED
    return f"only:{shown[0]}" if len(shown) == 1 else f"some:{','.join(shown)}"


def where(fails: Mapping[str, bool], torch_wrong: bool = False) -> str:
    """The layer a finding lives in, from which backends show it (backend -> fails); a finding
    whose every mismatch the arbiter judged torch-wrong (`torch_wrong`) lives in PyTorch, whichever
    backends show it."""
    shown = [b for b, f in fails.items() if f]
    clean = [b for b, f in fails.items() if not f]
    cls = layer_class(fails)
    if not shown:
        return f"shows on no backend tested ({', '.join(clean)})"
    if torch_wrong:
        return (f"PyTorch's: float64 sides with burn ({', '.join(shown)}), so no burn layer; the case "
                "is a known difference of PyTorch's, not a burn report")
    if cls is None:
        return (f"shows on {shown[0]}, the only backend tested: run it on several (--backend flex,ndarray) "
                "to locate it")
    if cls == SHARED:
        return (f"shows on every backend tested ({', '.join(shown)}): burn-autodiff or a default implementation "
                "the backends share (burn-backend), not one backend's kernel")
    if cls.startswith("only:"):
        return (f"shows on {shown[0]} only (not on {', '.join(clean)}): {shown[0]}'s own code path: its kernel "
                f"in {KERNEL_CRATES[shown[0]]}, or a burn-backend default op it inherits and the others override")
    return (f"shows on {', '.join(shown)}, not on {', '.join(clean)}: code those backends share and the others "
            "override")


CLASS_SEPARATOR = " @"  # between a finding's triage key and its layer class in a campaign's key


def class_key(key: str, cls: str | None) -> str:
    """A triage key with its layer class (unchanged without one: a campaign on one backend)."""
    return key if cls is None else f"{key}{CLASS_SEPARATOR}{cls}"


def split_class(key: str) -> tuple[str, str | None]:
    """(triage key, layer class or None) of a campaign's key (class_key's inverse)."""
    base, sep, cls = key.rpartition(CLASS_SEPARATOR)
    if sep and " " not in cls and (cls == SHARED or cls.startswith(("only:", "some:"))):
        return base, cls
    return key, None


@dataclass(frozen=True)
class Shown:
    """One backend's finding on a program run on several (`triangulate`)."""

    backend: str
    verdict: Verdict
    triage: Triage  # on this backend's worker: a known bug only if declared for this backend
    key: str  # the triage key with the layer class of `backends` (class_key)
    backends: tuple[str, ...]  # the backends whose finding has the same triage key, this one among them
    layer: str  # `where`'s wording for them

    @property
    def known(self) -> bool:
        return self.triage.known is not None


def triangulate(verdicts: Mapping[str, Verdict], workers: Mapping[str, BurnWorker]) -> dict[str, Shown]:
    """Each failing backend's finding (verdicts and workers by backend, in the campaign's order):
    triaged on that backend's worker, keyed with the layer class of the backends whose finding
    has the same triage key (on one backend alone: the triage key as it is)."""
    triaged = {b: triage(v, workers[b]) for b, v in verdicts.items() if not v.ok}
    out: dict[str, Shown] = {}
    for b, t in triaged.items():
        fails = {c: c in triaged and triaged[c].key == t.key for c in verdicts}
        shown = tuple(c for c, f in fails.items() if f)
        out[b] = Shown(b, verdicts[b], t, class_key(t.key, layer_class(fails)), shown,
                       where(fails, verdict_blames_torch(verdicts[b])))
    return out


def recorded_where(case: Case) -> str | None:
    """The layer the case's `backends_tested` record points at, or None without a record."""
    tested = case.record.get("backends_tested") or {}
    if not tested:
        return None
    fails = {b: str(e.get("outcome", "")) in FAILS for b, e in tested.items() if isinstance(e, dict)}
    return where(fails, case.blames_torch)


def verdict_blames_torch(verdict: Verdict) -> bool:
    """Whether the verdict fails and every finding of it is judged torch-wrong."""
    return bool(verdict.findings) and all(m.verdict == "torch-wrong" for m in verdict.findings)


def record_backends_tested(path: Path, cells: Sequence[BackendCell], burn: str) -> bool:
    """Writes the case's outcome per backend into its `backends_tested` (in the corpus' own
    formatting); returns whether the file changed."""
    today = _dt.datetime.now(_dt.UTC).date().isoformat()
    doc = read_json(path)  # read as a case before the run; a JsonFileError names it
    tested = dict(doc.get("backends_tested") or {})
    for c in cells:
        if c.outcome == "skipped":  # not run here (a host-dependent case): nothing measured
            continue
        entry = {"outcome": c.outcome, "burn": burn, "date": today}
        if c.outcome not in ("fails as recorded", "passes"):  # how it fails there, in a line
            entry["detail"] = f"{c.explained}: {c.detail}" if c.explained else c.detail
        tested[c.backend] = entry
    ordered = dict(sorted(tested.items(), key=lambda kv: BACKENDS.index(kv[0]) if kv[0] in BACKENDS else 99))
    if ordered == doc.get("backends_tested"):
        return False
    doc["backends_tested"] = ordered
    write_atomic(path, dumps(doc, indent=2) + "\n")
    return True



# how the burn reproducer (findings/reproducers/rust.py, written for Flex) spells each backend's device
DEVICES = {
    "flex": "Device::flex()",
    "ndarray": "Device::ndarray()",
    "wgpu": "Device::wgpu(burn::tensor::DeviceKind::DefaultDevice)",
    "vulkan": "Device::vulkan(burn::tensor::DeviceKind::DefaultDevice)",
    "tch": "Device::libtorch()",
}


def rust_on_backend(test: str, backend: str) -> str:
    """The burn reproducer of a case on `backend`: its devices that backend's (the test then
    needs burn's cargo feature of that name, and `#[allow(deprecated)]` for NdArray and tch)."""
    if backend == "flex":
        return test
    note = f"// on the {backend} backend: burn's `{backend}` cargo feature\n#[allow(deprecated)]\n"
    return note + test.replace(DEVICES["flex"], DEVICES[backend])
