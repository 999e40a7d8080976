"""The corpus on several burn backends of one difftest-burn build (docs/backends.md).

Marked `backends`: skipped unless `pytest --run-backends flex,ndarray tests/backends -p no:xdist`.
The build (burn 0.22.1 with the named backends) is made once into the cache outside the
repository (minutes; later runs find it). Checked: the binary has the backends and every worker
runs on the one it is asked for; every seed and findings case is judged as on Flex on each
backend, or refused as ops/backend_support.py records (which this measures); each bug case
shows on each backend the way its `backends_tested` record says (the layer `difftest show`
reports from it), and triage knows it as its record on the backends the record declares.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from difftest.exec.backends import binary_backends, extra_features, parse_backends
from difftest.exec.burn_builds import BurnSpec, build
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.across import known_bug_of
from difftest.findings.backends import case_cell, judged_cell, program_cell, run_on, where
from difftest.findings.corpus import iter_case_files, load_case
from difftest.findings.triage import MAX_LOCALISED, triage
from difftest.ops.backend_support import refusal
from difftest.oracle.check import check
from difftest.program.ir import Program
from difftest.program.statements import Backward, Grad, Leaf, OpCall

pytestmark = pytest.mark.backends

CORPUS = Path(__file__).resolve().parents[2] / "corpus"


@pytest.fixture(scope="module")
def backends(request: pytest.FixtureRequest) -> tuple[str, ...]:
    return parse_backends(str(request.config.getoption("--run-backends")))


@pytest.fixture(scope="module")
def binary(backends: tuple[str, ...]) -> str:
    return str(build(BurnSpec(version="0.22.1", backends=extra_features(backends))).binary)


@pytest.fixture(scope="module")
def workers(binary: str, backends: tuple[str, ...]) -> Iterator[dict[str, BurnWorker]]:
    ws = {b: BurnWorker(binary, backend=b) for b in backends}
    yield ws
    for w in ws.values():
        w.close()


def test_the_build_runs_each_backend_it_has(binary: str, backends: tuple[str, ...],
                                            workers: dict[str, BurnWorker]) -> None:
    assert set(backends) <= set(binary_backends(binary))
    for b, w in workers.items():
        v = w.version()
        assert (v["backend"], v["burn"]) == (b, "0.22.1")


def _cases(*folders: str) -> list[Path]:
    return iter_case_files([CORPUS / f for f in folders])


@pytest.mark.parametrize("path", _cases("seed", "findings"), ids=lambda p: p.stem)
def test_passing_and_divergence_cases_hold_on_every_backend(path: Path, workers: dict[str, BurnWorker]) -> None:
    """Each holds as on Flex, or what it does instead is declared for the backend: the refusal
    ops/backend_support.py records (measured here) or a known bug declared there."""
    case = load_case(path)
    if case.memory is not None:
        pytest.skip("a memory case measures RSS in fresh processes (tests/memory)")
    for b, w in workers.items():
        verdict = check(case.program, w)
        refused = refusal(case.program, b)
        if refused is not None:  # the backend refuses the program: the refusal recorded, measured
            assert verdict.burn.error is not None and refused in verdict.burn.error.message, (b, verdict.burn.error)
            continue
        cell = judged_cell(case, b, verdict, w)
        assert cell.ok, cell.to_dict()


@pytest.mark.parametrize("path", _cases("bugs", "backends"), ids=lambda p: p.stem)
def test_bug_cases_show_where_recorded(path: Path, workers: dict[str, BurnWorker]) -> None:
    case = load_case(path)
    if (why := case.not_here()) is not None:
        pytest.skip(f"{path.name} {why}: the corpus replay skips it the same way")
    recorded = case.record.get("backends_tested") or {}
    tested = [b for b in workers if b in recorded]
    if not tested:
        pytest.skip(f"{path.name} records no outcome on {', '.join(workers)} "
                    "(`difftest versions --backend ... --record`)")
    for b in tested:
        cell = case_cell(case, b, check(case.program, workers[b]))
        assert cell.outcome == recorded[b]["outcome"], (b, cell.to_dict())


@pytest.mark.parametrize("path", _cases("bugs", "backends"), ids=lambda p: p.stem)
def test_bug_cases_are_known_on_the_backends_their_record_declares(path: Path,
                                                                   workers: dict[str, BurnWorker]) -> None:
    """Triage on each backend: the case's record explains it where declared (`backends`), and
    no record of that name does elsewhere (it passes there, or is news)."""
    case = load_case(path)
    bug = known_bug_of(case)
    assert bug is not None, f"{path.name}: no known-bug record names it"
    if (why := case.not_here()) is not None:
        pytest.skip(f"{path.name} {why}: the corpus replay skips it the same way")
    for b, w in workers.items():
        if refusal(case.program, b) is not None:
            continue  # a backend refusing the program's dtype or op cannot show it (the corpus test checks the refusal)
        verdict = check(case.program, w)
        known = triage(verdict, w).known if not verdict.ok else None
        if bug.shows_on(b):
            assert known is not None, (b, verdict.findings[0].line() if verdict.findings else "passes")
        else:
            assert known is None or known.name != bug.name, (b, known.name)


def test_a_known_backend_bug_with_many_findings_downstream_is_still_known(workers: dict[str, BurnWorker]) -> None:
    """More findings than triage localises (MAX_LOCALISED): the ones past it are matched where
    the program shows them, as the record's effect downstream of its site."""
    if "ndarray" not in workers:
        pytest.skip("needs the ndarray backend")
    leaf = Leaf("x", (3,), (0.3, -1.2, 2.0), "autodiff", True)
    unary = ("exp", "tanh", "sin", "cos", "neg", "square", "sqrt", "abs", "sinh", "cosh", "atan", "erf", "log1p")
    ops = [OpCall("y", "sigmoid", ("x",))] + [OpCall(f"z{i}", op, ("y",)) for i, op in enumerate(unary)]
    program = Program((leaf, *ops), dtype="float64")
    verdict = check(program, workers["ndarray"])
    assert len(verdict.findings) > MAX_LOCALISED
    known = triage(verdict, workers["ndarray"]).known
    assert known is not None and known.name == "ndarray-sigmoid-f64-in-f32"


def test_a_fault_in_one_backends_build_is_reported_as_that_backends(binary: str,
                                                                    workers: dict[str, BurnWorker]) -> None:
    """A fault scoped to NdArray (`on:ndarray:<spec>`, docs/format.md) stands for a bug in
    burn-ndarray's kernels: the same program fails on NdArray alone, and `where` names the crate."""
    if not {"flex", "ndarray"} <= set(workers):
        pytest.skip("needs the flex and ndarray backends")
    program = Program((Leaf("x", (2,), (0.5, 1.5), "autodiff", True), OpCall("y", "exp", ("x",)),
                       OpCall("s", "sum", ("y",)), Backward("bw", "s")))
    faulty = {b: BurnWorker(binary, backend=b, fault="on:ndarray:grad-scale:exp:1e-3") for b in ("flex", "ndarray")}
    try:
        assert all(w.version()["fault"] == "on:ndarray:grad-scale:exp:1e-3" for w in faulty.values())
        cells = {b: program_cell(b, v) for b, v in run_on(program, faulty).items()}
    finally:
        for w in faulty.values():
            w.close()
    assert cells["flex"].ok and not cells["ndarray"].ok, cells
    located = where({b: c.fails for b, c in cells.items()})
    assert located.startswith("shows on ndarray only") and "burn-ndarray" in located, located


def test_a_known_gradient_bug_read_as_a_value_is_still_known(workers: dict[str, BurnWorker]) -> None:
    """NdArray's gelu gradient read with `grad(x; bw)` and negated: the values computed from the
    read are that backward's gradient as the program shows it (the gelu record's effect)."""
    if "ndarray" not in workers:
        pytest.skip("needs the ndarray backend")
    program = Program((Leaf("x", (3,), (0.5, 1.0, -2.0), "autodiff", True), OpCall("y", "gelu", ("x",)),
                       OpCall("s", "sum", ("y",)), Backward("bw", "s"), Grad("g", "bw", "x"),
                       OpCall("z", "neg", ("g",))))
    verdict = check(program, workers["ndarray"])
    assert {m.statement for m in verdict.findings} >= {"g", "z"}
    known = triage(verdict, workers["ndarray"]).known
    assert known is not None and known.name == "ndarray-gelu-grad-tanh-approximation"
