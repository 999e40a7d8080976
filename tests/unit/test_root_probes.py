"""Root probes in the model (difftest/oracle/probes.py) and the campaign's use of them
(difftest/exec/probes.py), without burn: which probes a program has, what the model predicts
for each, and how burn's outcomes are screened."""

from __future__ import annotations

from typing import Any

import pytest

from difftest.exec import probes as exec_probes
from difftest.exec.burn_worker import WorkerError
from difftest.exec.probes import disagrees, run_probes
from difftest.oracle.probes import RootProbe, root_probes
from difftest.program.ir import Backward, Cut, Leaf, OpCall, Program
from difftest.program.observation import ErrorObs, Observation


def _leaf(ident: str, require_grad: bool = True) -> Leaf:
    return Leaf(ident, (2,), (0.5, 1.0), "autodiff", require_grad)


SESSION = Program((
    _leaf("x0"), _leaf("x1"), _leaf("c", require_grad=False),
    OpCall("v", "mul", ("x0", "x1")),
    OpCall("s", "sum", ("v",)),
    Cut("d", "detach", "s"),
    Backward("bw", "s"),
    OpCall("w", "exp", ("x0",)),
    Backward("bw1", "w"),
))


def test_every_tracked_value_before_every_backward_is_a_probe() -> None:
    found = [(p.backward, p.root) for p in root_probes(SESSION)]
    # not the untracked leaf c, not the detached d, not a backward's own root
    assert found == [("bw", "x0"), ("bw", "x1"), ("bw", "v"),
                     ("bw1", "x0"), ("bw1", "x1"), ("bw1", "v"), ("bw1", "s")]


def test_the_model_predicts_each_probe() -> None:
    fails = {(p.backward, p.root): p.fails for p in root_probes(SESSION)}
    assert not any(fails[("bw", r)] for r in ("x0", "x1", "v"))
    # after bw consumed s's graph: a backward through it, or of a leaf it reached, panics in burn
    assert all(fails[("bw1", r)] for r in ("v", "s", "x0", "x1"))


def test_no_probe_past_a_predicted_failure() -> None:
    program = Program((*SESSION.statements, Backward("bw2", "v"), OpCall("u", "exp", ("x1",)), Backward("bw3", "u")))
    assert "bw2" in {p.backward for p in root_probes(program)}
    assert not {p.backward for p in root_probes(program)} & {"bw3"}  # burn's run ends at bw2


def test_a_probe_is_the_program_cut_at_its_backward_rerooted() -> None:
    probe = next(p for p in root_probes(SESSION) if (p.backward, p.root) == ("bw1", "x1"))
    program = probe.program(SESSION)
    assert program.statements[:-1] == SESSION.statements[:8]
    assert program.statements[-1] == Backward("bw1", "x1")
    assert probe.describe() == "root probe: backward 'bw1' rooted at 'x1'"


def test_screening_compares_the_outcome_with_the_prediction() -> None:
    ok, fails = RootProbe(6, "bw", "x0", False), RootProbe(8, "bw1", "v", True)
    def panic_at(i: int) -> ErrorObs:
        return ErrorObs("panic", "graph tape has already been consumed", i, "bw")

    assert not disagrees(ok, None) and not disagrees(fails, panic_at(8))
    assert disagrees(ok, panic_at(6))  # burn fails where the model says it succeeds
    assert disagrees(fails, None)  # burn succeeds where the model says it fails
    assert disagrees(fails, panic_at(3))  # burn fails, but elsewhere


class _Worker:
    """A stand-in for BurnWorker: `probe` answers `answer`."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def burn_version(self) -> str:
        return "0.22.1"

    def probe(self, program: Program, probes: Any) -> Any:
        return self.answer(probes) if callable(self.answer) else self.answer


def test_a_crashed_batch_is_checked_probe_by_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[Program] = []

    class _Verdict:
        def __init__(self, ok: bool) -> None:
            self.ok = ok

    def fake_check(program: Program, worker: Any, *, rules: Any = None) -> _Verdict:
        checked.append(program)
        return _Verdict(len(checked) != 2)  # the second probe is the one that crashes

    monkeypatch.setattr(exec_probes, "check", fake_check)
    crash = Observation("burn", error=ErrorObs("crash", "worker exited with status 134"))
    run = run_probes(SESSION, _Worker(crash))  # type: ignore[arg-type]
    assert run.probes == 7 and run.checked == 2 and run.probe is not None
    assert (run.probe.backward, run.probe.root) == ("bw", "x1")
    assert run.verdict is not None and checked[1] == run.probe.program(SESSION)

    # outcomes that all agree with the model: nothing is checked in full
    checked.clear()
    agree = _Worker(lambda ps: [None if not p.fails else ErrorObs("panic", "m", p.index, "bw1")
                                for p in root_probes(SESSION) for q in ps if (p.index, p.root) == tuple(q)])
    run = run_probes(SESSION, agree)  # type: ignore[arg-type]
    assert run.probes == 7 and run.checked == 0 and run.verdict is None and not checked


def test_a_worker_without_the_probe_request_is_a_clear_error() -> None:
    refused = Observation("burn", error=ErrorObs("invalid-request", 'unknown request "probe"'))
    with pytest.raises(WorkerError, match=r"refused the root probes.*--no-probes"):
        run_probes(SESSION, _Worker(refused))  # type: ignore[arg-type]
