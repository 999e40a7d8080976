"""Root probes in the model (difftest/oracle/probes.py) and the campaign's use of them
(difftest/oracle/probe_run.py), without burn: which probes a program has, what the model predicts
for each, and how burn's outcomes are screened."""

from __future__ import annotations

from typing import Any, cast

import pytest

from difftest.exec.burn_worker import WorkerError
from difftest.findings.summary import Summary
from difftest.oracle import probe_run as exec_probes
from difftest.oracle.probe_run import ProbeRun, disagrees, run_probes, same_burn_result
from difftest.oracle.probes import RootProbe, root_probes
from difftest.program.ir import Backward, Cut, Leaf, OpCall, Program
from difftest.program.observation import BackwardObs, ErrorObs, Observation, TensorObs


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
    """A stand-in for BurnWorker: `probe_grads` (and the pending request of `submit_probe_grads`)
    answers `answer`."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def burn_version(self) -> str:
        return "0.22.1"

    def probe_grads(self, program: Program, probes: Any) -> Any:
        return self.answer(probes) if callable(self.answer) else self.answer

    def submit_probe_grads(self, program: Program, probes: Any) -> Any:
        answer = self.probe_grads(program, probes)
        return type("Pending", (), {"result": lambda self: answer})()


class _Verdict:
    def __init__(self, ok: bool, burn: Observation | None = None) -> None:
        self.ok = ok
        self.burn = burn or Observation("burn")
        self.prediction = type("P", (), {"nondet": frozenset()})()


_NO_RANDOM = type("P", (), {"nondet": frozenset()})()  # a prediction with no random values


# burn-autodiff's panic for a backward through a consumed graph (the predicted failure of these probes)
TAPE_CONSUMED = "Cannot run backward: graph tape has already been consumed at NodeId(3)."


def _as_predicted(probes: Any) -> list[tuple[ErrorObs | None, BackwardObs | None]]:
    """burn's batch answer when every probe ends as the model predicts (gradients: x0's)."""
    by_key = {(p.index, p.root): p for p in root_probes(SESSION)}
    out: list[tuple[ErrorObs | None, BackwardObs | None]] = []
    for q in probes:
        p = by_key[tuple(q)]
        if p.fails:
            out.append((ErrorObs("panic", TAPE_CONSUMED, p.index, p.backward), None))
        else:
            out.append((None, BackwardObs(p.backward, {"x0": TensorObs((2,), (1.0, 1.0))})))
    return out


def test_a_crashed_batch_is_checked_probe_by_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[Program] = []

    def fake_check(program: Program, worker: Any, *, rules: Any = None, prediction: Any = None) -> _Verdict:
        checked.append(program)
        return _Verdict(len(checked) != 2)  # the second probe is the one that crashes

    monkeypatch.setattr(exec_probes, "check", fake_check)
    crash = Observation("burn", error=ErrorObs("crash", "worker exited with status 134"))
    run = run_probes(SESSION, _Worker(crash))  # type: ignore[arg-type]
    assert run.probes == 7 and run.checked == 7 and run.probe is not None  # every probe, one by one
    assert (run.probe.backward, run.probe.root) == ("bw", "x1")
    assert run.verdict is not None and checked[1] == run.probe.program(SESSION)
    assert run.batch_error is None and run.batch_only_count == 0  # the crash is the probe's

    # a crash no probe reproduces on its own is the batch's
    checked.clear()
    monkeypatch.setattr(exec_probes, "check", lambda program, worker, rules=None, prediction=None: _Verdict(True))
    run = run_probes(SESSION, _Worker(crash))  # type: ignore[arg-type]
    assert run.verdict is None and run.batch_error == crash.error and run.batch_only_count == 1

    # outcomes that all agree with the model, gradients that pass the screen: nothing is checked
    monkeypatch.setattr(exec_probes, "check", fake_check)
    monkeypatch.setattr(exec_probes, "screen", lambda program, items, *_: [True for _ in items])
    checked.clear()
    run = run_probes(SESSION, _Worker(_as_predicted), prediction=_NO_RANDOM)  # type: ignore[arg-type]
    assert run.probes == 7 and run.screened == 3 and run.checked == 0 and run.verdict is None and not checked


def test_every_failing_probe_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradients that fail the screen make their probes suspects; each suspect's full check
    decides, and every failing one is in `failures`, the first being the program's verdict."""
    wrong = {("bw", "x1"), ("bw", "v")}  # the probes whose gradients are wrong
    monkeypatch.setattr(exec_probes, "screen",
                        lambda program, items, *_: [(p.backward, p.root) not in wrong for p, _ in items])
    verdicts: dict[Program, _Verdict] = {}

    def fake_check(program: Program, worker: Any, *, rules: Any = None, prediction: Any = None) -> _Verdict:
        bw = program.statements[-1]
        assert isinstance(bw, Backward)
        verdicts[program] = _Verdict((bw.id, bw.input) not in wrong)
        return verdicts[program]

    monkeypatch.setattr(exec_probes, "check", fake_check)
    run = run_probes(SESSION, _Worker(_as_predicted), prediction=_NO_RANDOM)  # type: ignore[arg-type]
    assert run.screened == 3 and run.checked == 2
    assert [(f.probe.backward, f.probe.root) for f in run.failures] == [("bw", "x1"), ("bw", "v")]
    assert run.probe == run.failures[0].probe and run.verdict is run.failures[0].verdict
    assert all(cast(object, f.verdict) is verdicts[f.probe.program(SESSION)] for f in run.failures)
    assert run.batch_only == []


def test_a_probe_that_fails_only_in_the_batch_is_batch_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A suspect whose full check passes is batch-only when burn's separate run differs from
    its batched one; when they agree, it is neither a failure nor batch-only."""
    monkeypatch.setattr(exec_probes, "screen", lambda program, items, *_: [p.root == "x0" for p, _ in items])
    same = BackwardObs("bw", {"x0": TensorObs((2,), (1.0, 1.0))})
    other = BackwardObs("bw", {"x0": TensorObs((2,), (2.0, 1.0))})

    def fake_check(program: Program, worker: Any, *, rules: Any = None, prediction: Any = None) -> _Verdict:
        bw = program.statements[-1]
        assert isinstance(bw, Backward)
        # x1's separate run reports other gradients than its batched run; v's the same ones
        return _Verdict(True, Observation("burn", backwards=(other if bw.input == "x1" else same,)))

    monkeypatch.setattr(exec_probes, "check", fake_check)
    run = run_probes(SESSION, _Worker(_as_predicted), prediction=_NO_RANDOM)  # type: ignore[arg-type]
    assert run.checked == 2 and run.verdict is None and run.failures == []
    assert [(p.backward, p.root) for p in run.batch_only] == [("bw", "x1")] and run.batch_only_count == 1
    assert same_burn_result(None, same, Observation("burn", backwards=(same,)), "x1", frozenset(), SESSION)
    assert not same_burn_result(ErrorObs("panic", "m", 6, "bw"), None, Observation("burn", backwards=(same,)),
                                "x1", frozenset(), SESSION)


def test_a_worker_without_the_probe_request_is_a_clear_error() -> None:
    refused = Observation("burn", error=ErrorObs("invalid-request", 'unknown request "probe"'))
    with pytest.raises(WorkerError, match=r"refused the root probes.*--no-probes"):
        run_probes(SESSION, _Worker(refused))  # type: ignore[arg-type]


def test_campaign_summaries_count_batch_only_probes() -> None:
    s = Summary(probes=9, probes_checked=3, probes_batch_only=2)
    back = Summary.from_dict(s.to_dict())
    assert (back.probes, back.probes_checked, back.probes_batch_only) == (9, 3, 2)
    back.absorb(s)
    assert back.probes_batch_only == 4
    assert ProbeRun(probes=5, checked=2, batch_only=[RootProbe(6, "bw", "x0", False)]).counts() == (5, 2, 1)


def test_the_check_collects_the_probes_root_probes_gives_without_changing_the_prediction() -> None:
    """`check` collects a program's probes in the model's own burn run (predict's
    at_burn_backward): the same probes as root_probes, and the same prediction as without."""
    from difftest.divergences.rules import RULES
    from difftest.oracle.model import predict
    from difftest.oracle.probes import probe_collector
    from difftest.strategies.choices import RandomChoices
    from difftest.strategies.config import GenConfig
    from difftest.strategies.generator import generate

    for k in range(150):
        program = generate(RandomChoices(5_000 + k), GenConfig(p_another_backward=0.6, p_training=0.3))
        found: list[RootProbe] = []
        hooked = predict(program, at_burn_backward=probe_collector(program, RULES, found))
        assert found == root_probes(program), k
        assert hooked == predict(program), k


def test_a_probes_prediction_from_the_programs_model_run_is_predict_of_its_program() -> None:
    """probe_prediction (the screen's prediction for a probe's program, from the states the
    model's run of the program recorded before each backward) equals predict of the probe's
    program, for every probe of generated programs with several backwards."""
    from difftest.divergences.rules import RULES
    from difftest.oracle.model import predict
    from difftest.oracle.probe_predictions import BackwardStates, probe_prediction
    from difftest.strategies.choices import RandomChoices
    from difftest.strategies.config import GenConfig
    from difftest.strategies.generator import generate

    checked = 0
    for k in range(60):
        program = generate(RandomChoices(9_000 + k), GenConfig(p_another_backward=0.6, p_training=0.3))
        recorded = BackwardStates()
        main = predict(program, at_burn_backward=recorded.hook("burn"), at_torch_backward=recorded.hook("torch"))
        for probe in root_probes(program):
            made = probe_prediction(program, probe, recorded, main, RULES)
            assert made == predict(probe.program(program)), (k, probe)
            checked += 1
    assert checked > 300


def test_a_probes_outcome_is_that_of_predict_of_its_program_and_leaves_the_run_unchanged() -> None:
    """The collector steps each probe's backward only as far as its outcome, on the run's own
    state: what it predicts is what predict of the probe's program predicts for burn's backward,
    and the run's prediction is the one predict gives without the collector."""
    from difftest.divergences.rules import RULES
    from difftest.oracle.model import predict
    from difftest.oracle.probes import probe_collector
    from difftest.strategies.choices import RandomChoices
    from difftest.strategies.config import GenConfig
    from difftest.strategies.generator import generate

    checked = failing = 0
    for k in range(60):
        program = generate(RandomChoices(7_000 + k), GenConfig(p_another_backward=0.6, p_training=0.3))
        collected: list[RootProbe] = []
        hooked = predict(program, RULES, at_burn_backward=probe_collector(program, RULES, collected))
        assert hooked == predict(program, RULES), k
        for probe in collected:
            failure = predict(probe.program(program), RULES).burn.failure
            assert failure is None or failure[0] == probe.index, (k, probe, failure)
            assert probe.fails == (failure is not None), (k, probe)
            checked += 1
            failing += probe.fails
    assert checked > 300 and failing > 10, (checked, failing)
