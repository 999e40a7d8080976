"""Triage of programs where a known bug shows (difftest/findings/triage.py): what the known
bug explains is matched by its record's site and effect, through its consequences (a later
backward, a step, a rule's stale prediction), and a new bug after it is named after the new one.

Faults are compiled into difftest-burn and switched on per worker (DIFFTEST_BURN_FAULT,
rust/src/fault.rs).
"""

from __future__ import annotations

from typing import Any

import pytest

from difftest.divergences.known_bugs import KNOWN_BUGS
from difftest.exec.burn_worker import BurnWorker
from difftest.program.ir import Grad, Program
from tests.differential.triaging import saved_program as _saved
from tests.differential.triaging import triaged as _triage
from tests.programs import backward, cut, leaf, op


def test_a_new_bug_after_a_known_one_is_named_after_the_new_one(workers: dict[str, BurnWorker]) -> None:
    """The program shows a known bug first (float64 hard_sigmoid computed in f32 on the autodiff
    device) and a new one later (exp's value scaled): the case is the new bug's, signed by exp,
    not by the op of the known bug that shows first."""
    program = Program((
        leaf("x", [0.1, -0.4, 0.9], rg=True), op("y", "hard_sigmoid", "x"),
        leaf("z", [0.3, -0.7, 1.1], rg=True), op("e", "exp", "z"), op("s", "sum", "e"), backward("s"),
    ), "float64")
    known = _triage(workers, Program(program.statements[:2], "float64"), None)
    assert known.known is not None and known.known.name == "hard-sigmoid-autodiff-f64-in-f32", known.describe()
    t = _triage(workers, program, "value-scale:exp:1e-6")
    assert t.known is None and ":exp:" in t.signature, t.describe()


def test_a_known_bug_is_localised_to_the_call_that_shows_it_not_an_earlier_no_grad_one(
        workers: dict[str, BurnWorker]) -> None:
    """hard_sigmoid in float64 is wrong on burn's autodiff kernel only: a call in a no_grad
    region runs the inner backend's kernel and is right. The value of the later call in the grad
    region is the finding, and an earlier no_grad call on its path is not its site: the one-op
    program runs a call in the region the program ran it in (seed 14's no-false-alarm campaign
    with kink leaves, program 8,695: signed by the no_grad call, so no record matched)."""
    program = Program((
        leaf("x", [0.1, -0.4, 0.9], rg=True), op("h", "hard_sigmoid", "x", region="no_grad"),
        leaf("z", [0.3, -0.7, 1.1], rg=True), op("a", "add", "h", "z"), op("y", "hard_sigmoid", "a"),
        op("s", "sum", "y"), backward("s"),
    ), "float64")
    t = _triage(workers, program, None)
    assert t.localisation is not None and t.localisation.statement == "y", t.describe()
    assert t.known is not None and t.known.name == "hard-sigmoid-autodiff-f64-in-f32", t.describe()


@pytest.mark.parametrize("root_op", ["exp", "sin", "mul_scalar"])
def test_a_backward_that_seeds_its_root_wrong_is_one_finding_not_one_per_op(
        workers: dict[str, BurnWorker], root_op: str) -> None:
    """Every gradient of a backward rooted at a non-scalar value is scaled (the backward's own
    seed, not any op's derivative): each op alone would fail too, and a campaign saved 127 cases
    named after 24 ops. The backward of a bare leaf of the root's shape shows it: one signature,
    the backward's, whichever op the program roots it at."""
    attrs: dict[str, Any] = {"scalar": 1.5} if root_op == "mul_scalar" else {}
    program = Program((leaf("x", [0.3, -0.7, 1.1], rg=True), op("y", root_op, "x", **attrs), backward("y")))
    t = _triage(workers, program, "root-grad-scale:0.01")
    assert t.localisation is not None and t.localisation.where == "backward", t.describe()
    assert t.signature.startswith("burn-wrong:-:backward:grad:wrong "), t.describe()
    # an op's own wrong derivative at a non-scalar root is still the op's
    own = _triage(workers, program, f"grad-scale:{root_op}:0.01")
    assert own.localisation is not None and own.localisation.where == root_op, own.describe()


def test_a_backward_of_a_used_detached_leaf_is_the_used_leaf_bug(workers: dict[str, BurnWorker]) -> None:
    """burn's detach of a require-grad leaf is a new require-grad leaf (leaf-detach): a backward
    rooted at it after an op read it panics as a used leaf's does (a generated program of the
    campaign chunks, seed 0, 2026-12-05)."""
    program = Program((leaf("x0", [2.8, 0.5, 1.9, 0.2, 0.6, 2.2, 2.8, -2.8], rg=True, shape=[4, 2]),
                       leaf("x", [0.7, 2.4], rg=True, shape=[1, 2]), cut("c", "detach", "x"),
                       op("v", "maximum", "c", "x"), op("w", "slice_assign", "x0", "v", ranges=[[3, 4]]),
                       backward("c")))
    t = _triage(workers, program, None)
    assert t.known is not None and t.known.name == "backward-of-used-leaf-panics", t.describe()


def test_a_backward_rooted_at_an_op_that_started_its_own_graph_is_the_used_leaf_bug(
        workers: dict[str, BurnWorker]) -> None:
    """burn's backward unregisters the leaves it reaches, so sinh of such a leaf starts a graph
    keyed by itself; mul and add merge that graph into x1's, then x1's into x0's, and the sinh
    stays keyed to the emptied middle graph: a backward rooted at it panics, as one rooted at a
    used leaf does (the same GraphLocator merge; a campaign, seed 405, float64 sessions,
    program 3,367). Without the first backward, the sinh joins x's graph and the panic is news."""
    tail = (op("y", "sinh", "x"), op("m", "mul", "y", "x1"), op("a", "add", "m", "x0"), backward("y", "bw1"))
    leaves = (leaf("x0", [0.5, 0.5, 0.5], rg=True), leaf("x1", [0.5], rg=True), leaf("x", [0.5, 0.5, 0.5], rg=True))
    for first in (backward("x", "bw"), op("s", "sum", "x")):
        program = Program((*leaves, first, *((backward("s", "bw"),) if first.id == "s" else ()), *tail))
        t = _triage(workers, program, None)
        assert t.known is not None and t.known.name == "backward-of-used-leaf-panics", t.describe()
    from difftest.divergences.known_bugs import Fault
    from difftest.findings.explaining import known_bug_of

    unreached = Program((*leaves, *tail))
    fault = Fault("outcome", "bw1", unreached, "float32", "burn", "graph tape has already been consumed at NodeId(4)")
    assert known_bug_of([fault], KNOWN_BUGS) is None


def test_a_later_backward_through_a_read_of_a_known_bugs_gradient_is_its_consequence(
        workers: dict[str, BurnWorker]) -> None:
    """scatter_max(v, v) ties every element with itself (minmax-update-tie-grad-to-both: burn
    gives 2 where PyTorch gives 1) and x1's gradient is read, scaled into x4's next backward.
    That backward comes before x1's own finding in the order findings are localised (a new
    source first), yet it is the read's consequence: with burn's read value on both sides it
    agrees (a sessions campaign, seed 406, program 9,447, was signed by the scatter_nd_mul)."""
    program = Program((
        leaf("x0", [0.25], rg=True, shape=[1, 1]), leaf("x1", [0.5, 2.5], rg=True, shape=[1, 2]),
        op("v", "add", "x0", "x1"), op("t", "scatter_max", "v", "v", dim=1, indices={"shape": [1, 2], "data": [0, 1]}),
        op("s", "sum", "t"), backward("s", "bw"), Grad("g", "bw", "x1"),
        leaf("x4", [1.25, 0.75], rg=True),
        op("w", "scatter_nd_mul", "g", "x4", indices={"shape": [2, 2], "data": [0, 1, 0, 0]}),
        op("s2", "sum", "w"), backward("s2", "bw2"),
    ))
    t = _triage(workers, program, None)
    assert t.known is not None and t.known.name == "minmax-update-tie-grad-to-both", t.describe()


def test_an_f32_momentum_step_that_cancels_is_the_momentum_bug(workers: dict[str, BurnWorker]) -> None:
    """A float64 Nesterov step (momentum 0.9, f32 in burn-optim) takes w = -0.385 to -0.000488:
    burn's result is 4.8e-9 off, 10 f32 ulps of the result but a fraction of one of the -0.385 the
    update cancelled, which bounds the f32 error (a campaign, seed 405, float64 sessions,
    program 6,499). The record reads the step's terms; a step off by more than f32 rounding of
    them is news."""
    from difftest.program.ir import Module, Optimizer, Param, Step
    from difftest.program.statements import Apply, InlineTensor, ZeroGrad

    program = Program((
        leaf("x", [0.3589901924133301, -1.0393047332763672, -1.710297703742981, 1.9532060623168945], shape=[4, 1]),
        leaf("t", [-0.49936163425445557, -1.4591429233551025, 0.04761636257171631, 1.094689130783081], shape=[4, 1]),
        Module("m0", "linear", InlineTensor((1, 1), (-0.3852764964103699,)), None),
        Optimizer("o", "sgd", momentum=0.9, nesterov=True, weight_decay=0.03125),
        Apply("y", "m0", "x"), op("d", "sub", "y", "t"), op("q", "square", "d"), op("l", "mean", "q"),
        ZeroGrad("z"), backward("l"), Step("m1", "o", "m0", "bw", 0.0625), Param("w", "m1", "weight"),
    ), "float64")
    t = _triage(workers, program, None)
    assert t.known is not None and t.known.name == "sgd-momentum-f32-in-float64", t.describe()
    assert t.faults[0].terms and t.faults[0].terms[0] > 0.38, t.faults
    from dataclasses import replace

    from difftest.divergences.bug_records import within_f32_rounding_of_its_tensor

    (r, _), = t.faults[0].pairs
    assert not within_f32_rounding_of_its_tensor(replace(t.faults[0], pairs=((r, r + 1e-5),)))


def test_a_backward_a_consumed_graph_rule_failed_is_explained_by_an_untracked_value_before_it(
        workers: dict[str, BurnWorker]) -> None:
    """powi_scalar(x, 0) is untracked in burn (powi-zero-untracked), so the first backward does not
    reach x, and a second backward rooted at x runs where backward-consumes-graph predicted a
    consumed graph: the rule's stale-rule finding is that bug's, whose site lies in the graph the
    first backward consumed, not upstream of x (a 20,000-program campaign, seed 301, program 11555)."""
    program = Program((leaf("x", [0.5, 0.5, 0.5, 0.5], rg=True), op("p", "powi_scalar", "x", exponent=0),
                       leaf("y", [1.0, 2.0, 3.0, 4.0], rg=True), op("a", "add", "p", "y"), backward("a", "bw"),
                       backward("x", "bw1")))
    t = _triage(workers, program, None)
    assert t.known is not None and t.known.name == "powi-zero-untracked", t.describe()


def test_a_backward_that_ran_where_a_consumed_graph_was_predicted_is_the_untracked_bug(
        workers: dict[str, BurnWorker]) -> None:
    """The model predicts that a backward through gelu(x) fails, an earlier backward having
    consumed it; burn runs it, because powi_scalar(gelu(x), 0) is untracked (powi-zero-untracked)
    and the later graph never reaches gelu. The outcome finding has no message (no error): the
    record's (the no-false-alarm campaign of tests/quality/test_sensitivity.py, seed 13, program 2525
    of the catalog then, saved)."""
    t = _triage(workers, _saved("powi-zero-consumed-graph-ran.json"), None)
    assert t.known is not None and t.known.name == "powi-zero-untracked", t.describe()


def test_a_known_step_error_amplified_beyond_the_localisation_budget_is_the_known_bug(
        workers: dict[str, BurnWorker]) -> None:
    """Three float64 SGD steps with momentum 0.9 (f32 in burn-optim: sgd-momentum-f32-in-float64)
    and values computed from the stepped linear: more findings than triage localises one by one,
    and the last, cos(exp(gelu(loss))), amplifies the step's f32 error beyond what the record
    bounds where it is seen. Localised as the others were, it is the step's error, every op on
    the way right (a campaign, seed 432, float64 sessions, program 14,682, was signed as news)."""
    t = _triage(workers, _saved("sgd-momentum-amplified-after-the-budget.json"), None)
    assert t.known is not None and t.known.name == "sgd-momentum-f32-in-float64", t.describe()


@pytest.mark.parametrize("fault", [None, "grad-scale:rms_norm:2e-6"])
def test_a_composite_known_bug_is_matched_by_its_composition_not_a_bound(
        workers: dict[str, BurnWorker], fault: str | None) -> None:
    """A float64 RmsNorm computes its rms in float32 (rms-norm-f64-rms-in-f32): burn computes the
    forward exactly as its declared parts, the cast to float32 included, and PyTorch's run of
    them agrees (composed.as_composed). A second fault of the forward's gradient, 2e-6 relative
    (about 17 float32 units: within the 64-unit bound the record's gradient was matched by), is
    no part of the composition, and is news."""
    from difftest.program.ir import Apply, Backward, InlineTensor, Leaf, Module, OpCall

    m = Module("m", "rms_norm", weight=InlineTensor((3,), (1.0, 0.5, 2.0)), attrs={"d_model": 3, "epsilon": 1e-3})
    p = Program((m, Leaf("x", (2, 3), (0.3, -0.7, 1.1, 0.9, 2.3, -1.4), "autodiff", True),
                 Apply("y", "m", "x"), OpCall("s", "sum", ("y",)), Backward("bw", "s")), "float64")
    t = _triage(workers, p, fault)
    if fault is None:
        assert t.known is not None and t.known.name == "rms-norm-f64-rms-in-f32", t.describe()
        assert t.localisation is not None and t.localisation.as_composed is True
    else:
        assert t.known is None, t.describe()
        assert t.localisation is not None and t.localisation.as_composed is False


def test_a_float64_rms_norm_whose_parts_round_apart_from_pytorch_is_the_known_bug(
        workers: dict[str, BurnWorker]) -> None:
    """Seed 301, program 6,142: a float64 RmsNorm (d_model 2) of a remainder. Its parts take the
    mean of two squares in float32, where PyTorch's rounding happened to land 30 times nearer the
    float64 result than burn's: no deviation beyond that rounding, so no part is named, and burn
    computes the forward as its parts, which PyTorch's run agrees with: the known bug."""
    t = _triage(workers, _saved("rms-norm-f64-parts-round-apart.json"), None)
    assert t.known is not None and t.known.name == "rms-norm-f64-rms-in-f32", t.describe()
