"""Root probes on burn (difftest/oracle/probe_run.py): the worker's `probe` request, and what probes
add to a campaign: burn's outcome and gradients at every other root a program's backwards could
have had."""

from __future__ import annotations

from pathlib import Path

from difftest.campaign.loop import run_campaign
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import load_case
from difftest.findings.triage import triage
from difftest.oracle.check import check
from difftest.oracle.probe_run import check_with_probes, disagrees
from difftest.oracle.probes import root_probes
from difftest.program.ir import Backward, Leaf, OpCall, Program
from difftest.program.observation import Observation

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
USED_LEAF = CORPUS / "bugs" / "backward-of-used-leaf-panics.json"


def _leaf(ident: str) -> Leaf:
    return Leaf(ident, (2,), (0.5, 1.0), "autodiff", True)


def test_burn_outcomes_of_probes_are_as_the_model_predicts(burn_worker: BurnWorker) -> None:
    # two graphs, a backward of one, a second backward: probes before each, through and beside
    # the consumed graph
    program = Program((
        _leaf("x0"), _leaf("x1"), _leaf("x2"),
        OpCall("v", "mul", ("x0", "x1")), OpCall("s", "sum", ("v",)),
        OpCall("u", "exp", ("x2",)), OpCall("t", "sum", ("u",)),
        Backward("bw", "s"), Backward("bw1", "t"),
    ))
    probes = root_probes(program)
    assert {p.fails for p in probes} == {False, True}  # both kinds are exercised
    outcomes = burn_worker.probe(program, [(p.index, p.root) for p in probes])
    assert not isinstance(outcomes, Observation), outcomes
    assert [p.root for p, o in zip(probes, outcomes, strict=True) if disagrees(p, o)] == []


def test_probe_gradients_are_those_of_a_run_of_the_probe(burn_worker: BurnWorker) -> None:
    """The batched gradients of a probe are the ones a run of the probe's program reports for
    its backward (a batch leaks nothing between its runs here)."""
    program = Program((
        _leaf("x0"), _leaf("x1"), OpCall("v", "mul", ("x0", "x1")), OpCall("u", "exp", ("v",)),
        OpCall("s", "sum", ("u",)), Backward("bw", "s"),
    ))
    probes = root_probes(program)
    answer = burn_worker.probe_grads(program, [(p.index, p.root) for p in probes])
    assert not isinstance(answer, Observation), answer
    for p, (outcome, bw) in zip(probes, answer, strict=True):
        run = burn_worker.run(p.program(program))
        assert outcome is None and run.error is None and bw == run.backwards[-1], p


def test_probes_compare_gradients_at_non_scalar_roots() -> None:
    """`root-grad-scale` scales the gradients of backwards rooted at non-scalar values only: a
    program whose backward is rooted at a sum passes, and its probes, rooted at the values
    before it, find burn's wrong gradients (each failing probe reported)."""
    program = Program((
        _leaf("x0"), _leaf("x1"), OpCall("v", "mul", ("x0", "x1")), OpCall("u", "exp", ("v",)),
        OpCall("s", "sum", ("u",)), Backward("bw", "s"),
    ))
    with BurnWorker(fault="root-grad-scale:1e-3") as worker:
        assert check(program, worker).ok
        verdict, probed = check_with_probes(program, worker)
    assert not verdict.ok and verdict.kind == "burn-wrong", verdict.report()
    assert probed.probe is not None and probed.probe.root != "s"
    assert verdict.program == probed.probe.program(program)
    assert any(m.kind == "grad" and m.verdict == "burn-wrong" for m in verdict.findings), verdict.report()
    assert {f.probe.root for f in probed.failures} == {"x0", "x1", "v", "u"}  # every non-scalar root
    assert probed.screened == probed.probes == 4 and probed.checked == 4 and probed.batch_only == []


def test_a_bad_probe_request_names_the_probe(burn_worker: BurnWorker) -> None:
    program = Program((_leaf("x0"), OpCall("s", "sum", ("x0",)), Backward("bw", "s")))
    answer = burn_worker.probe(program, [(1, "x0")])
    assert isinstance(answer, Observation) and answer.error is not None
    assert answer.error.kind == "invalid-request"
    assert 'probe 0: statement 1 (id "s") is not a backward' in answer.error.message
    assert burn_worker.probe(program, [(2, "x0")]) == [None]  # the worker serves the next request


def test_probes_find_the_used_leaf_bug_in_a_program_that_passes(burn_worker: BurnWorker) -> None:
    """The known bug's program with its backward rooted at the last op (which burn computes):
    the program passes; its probe at the leaf x2 is the bug, explained by its known-bug record."""
    case = load_case(USED_LEAF)
    stmts = case.program.statements
    assert isinstance(stmts[-1], Backward) and stmts[-1].input == "x2"
    program = Program((*stmts[:-1], Backward("bw", "v1")), case.program.dtype)
    assert check(program, burn_worker).ok
    verdict, probed = check_with_probes(program, burn_worker)
    assert probed.probe is not None and (probed.probe.backward, probed.probe.root) == ("bw", "x2")
    assert not verdict.ok and verdict.program == case.program
    known = triage(verdict, burn_worker).known
    assert known is not None and known.name == "backward-of-used-leaf-panics"


def test_the_default_campaign_finds_a_known_bug_within_2000_programs(burn_worker: BurnWorker) -> None:
    """The default generator, seed 0, with probes: its first finding is a known bug (its record's
    site and effect explain it; a campaign counts it and does not save it again). Since boundary
    values changed the choice sequence, the first is div-scalar-grad-f32-reciprocal (a module
    parameter's div_scalar, which the generator does not avoid), then backward-of-used-leaf-panics
    many times; the probe that finds the latter is tested above on its own program."""
    stats = run_campaign(burn_worker, seed=0, programs=2000, stop_at_first=True)
    assert stats.findings and stats.first_finding is not None and stats.first_finding <= 2000
    known = triage(stats.findings[0], burn_worker).known
    assert known is not None, stats.findings[0].report()
    assert stats.probes > stats.programs  # several probes a program


def test_without_probes_the_campaign_checks_only_the_programs(burn_worker: BurnWorker) -> None:
    stats = run_campaign(burn_worker, seed=0, programs=30, probes=False)
    assert stats.probes == stats.probes_checked == 0 and stats.programs == 30
