"""Ties at burn's max / min updates (scatter, select_assign, scatter_nd with IndexingUpdateOp Max /
Min): burn gives a tie's whole gradient to both operands (the known bug
minmax-update-tie-grad-to-both), which shows only where the tied operands share a source. These
tests check that such programs are matched to that record by what fails (a written position's
tie), named after the update op, that a gradient scaled at the same op is still news, and how
ties rank as suspects."""

from __future__ import annotations

from dataclasses import replace

from difftest.exec.burn_worker import BurnWorker
from difftest.oracle.check import check
from difftest.program.ir import Program
from tests.differential.triaging import saved_program as _saved
from tests.differential.triaging import triaged as _triage
from tests.programs import backward, leaf, op


def test_a_tie_suspects_its_op_only_after_every_agreement(workers: dict[str, BurnWorker]) -> None:
    """scatter_max at a tie of two leaves: burn gives the gradient to both (1, 1), PyTorch splits it
    (0.5, 0.5); each lies between its leaf's one-sided limits (ill-conditioned). Such a suspect ranks
    below any agreement far from the float64 result (a Wgpu cosh gradient was named minimum at a tie
    after it), unless the agreement is too small to grow into the finding."""
    from difftest.findings.deviation import deviant, suspect_rank

    if "" not in workers:
        workers[""] = BurnWorker()
        workers[""].start()
    program = Program((leaf("a", [0.5, -1.0], rg=True), leaf("b", [0.5], rg=True),
                       op("y", "scatter_max", "a", "b", dim=0, indices={"shape": [1], "data": [0]}), backward("y")))
    v = check(program, workers[""])
    tie = deviant(v, "grad")
    assert v.ok and tie is not None and tie[1].verdict == "ill-conditioned", v.report()
    agreement = replace(tie[1], verdict="agreement")
    assert suspect_rank(31.0, agreement) > suspect_rank(1e30, tie[1]) > suspect_rank(30.0, tie[1])
    # a finding wrong by a factor 2: a tie off by as much explains it, an agreement 1e-12 off does not
    assert suspect_rank(1e30, tie[1], 0.5, 0.5) > suspect_rank(31.0, agreement, 1e-12, 0.5)
    assert suspect_rank(31.0, agreement, 1e-3, 0.5) > suspect_rank(1e30, tie[1], 0.5, 0.5)


def test_a_tie_burn_resolves_as_it_declares_suspects_nothing(workers: dict[str, BurnWorker]) -> None:
    """minimum at a tie: burn gives the gradient to its first operand (1, 0), its declared
    convention (minimum-tie), PyTorch splits it. Burn did what it documents: no suspect (a float64
    program whose hard_sigmoid value carried float32 rounding into a minimum(v, v) was named after
    the minimum instead of the known bug)."""
    from difftest.findings.deviation import deviant

    if "" not in workers:
        workers[""] = BurnWorker()
        workers[""].start()
    program = Program((leaf("a", [0.5, -1.0], rg=True), leaf("b", [0.5, -1.0], rg=True),
                       op("y", "minimum", "a", "b"), backward("y")))
    v = check(program, workers[""])
    assert v.ok and any(d.verdict == "ill-conditioned" for d in v.dismissals), v.report()
    assert deviant(v, "grad") is None


def test_a_max_update_of_a_value_by_itself_is_named_by_its_op(workers: dict[str, BurnWorker]) -> None:
    """select_max(x, x): every written position is a tie, where burn counts the gradient twice
    (minmax-update-tie-grad-to-both). With a leaf per position the op passes only by the kink
    judgment (two tied leaves), which is no evidence that the accumulation is wrong: the finding
    is the op's, not `accumulate`."""
    program = Program((leaf("x", [0.5, -1.0, 2.0, 0.25], rg=True),
                       op("y", "select_max", "x", "x", dim=0, indices=[0, 1, 2, 3]), backward("y")))
    t = _triage(workers, program, None)
    assert t.signature.startswith("burn-wrong:-:select_max:grad:wrong"), t.describe()
    assert t.known is not None and t.known.name == "minmax-update-tie-grad-to-both", t.describe()


def test_a_scatter_nd_max_of_a_value_by_itself_is_the_tie_bug_named_by_its_op(
        workers: dict[str, BurnWorker]) -> None:
    """scatter_nd_max(x, x) at the tuples [0], [1]: every written position a tie, whose gradient
    burn-autodiff's ScatterNdMinMax counts twice, as scatter's and select_assign's do."""
    program = Program((leaf("x", [0.5, -1.0, 2.0, 0.25], rg=True, shape=(2, 2)),
                       op("y", "scatter_nd_max", "x", "x", indices={"shape": [2, 1], "data": [0, 1]}),
                       backward("y")))
    t = _triage(workers, program, None)
    assert t.signature.startswith("burn-wrong:-:scatter_nd_max:grad:wrong"), t.describe()
    assert t.known is not None and t.known.name == "minmax-update-tie-grad-to-both", t.describe()


def test_a_scatter_nd_min_tie_with_a_gathered_slice_is_the_tie_bug(workers: dict[str, BurnWorker]) -> None:
    """scatter_nd_min of x's element (1, 0) by itself, gathered: a tie of two operands that share
    a source (x), at one written position of a rank-2 destination (k = 2). Only that element's
    gradient is wrong (2 in burn, 1 in PyTorch); the record reads which position the tuple writes."""
    idx = {"shape": [1, 2], "data": [1, 0]}
    program = Program((leaf("x", [0.5, -1.0, 2.0, 0.25, 1.5, -0.75], rg=True, shape=(2, 3)),
                       op("g", "gather_nd", "x", indices=idx), op("y", "scatter_nd_min", "x", "g", indices=idx),
                       op("s", "sum", "y"), backward("s")))
    t = _triage(workers, program, None)
    assert t.known is not None and t.known.name == "minmax-update-tie-grad-to-both", t.describe()
    # a gradient scaled at the same op is news beside the tie bug
    scaled = _triage(workers, program, "grad-scale:scatter_nd_min:1e-3")
    assert scaled.known is None and ":scatter_nd_min:" in scaled.signature, scaled.describe()


def test_a_max_update_of_a_value_by_a_permutation_of_itself_at_equal_elements_is_the_tie_bug(
        workers: dict[str, BurnWorker]) -> None:
    """select_max(v, v) along a permutation, v a mask_fill whose filled elements are equal: ties
    between different elements. v's gradient holds both roles, so its failing elements are
    destination positions and value positions at once: still the tie bug (the no-false-alarm
    campaign of tests/quality/test_sensitivity.py, seed 11, program 8325 of the catalog then,
    saved: the same seed generates other programs as the catalog grows)."""
    program = _saved("select-max-permutation-equal-elements.json")
    assert any(getattr(s, "op", None) == "select_max" for s in program.statements)
    t = _triage(workers, program, None)
    assert t.known is not None and t.known.name == "minmax-update-tie-grad-to-both", t.describe()


def test_a_value_from_a_gradient_read_at_a_tie_with_a_constant_is_burn_s_conventions(
        workers: dict[str, BurnWorker]) -> None:
    """select_min(x, c) with c a no_grad copy of x: every written position is a tie of the tracked
    destination and a constant, where burn's whole gradient to x (its convention
    select-min-tie-with-constant) and PyTorch's half are both subgradients. A value computed from
    the gradient read (sum_dim of it) is judged by burn's conventions composed: 2 in burn, 1 in
    PyTorch, no finding; a sum that is neither stays one."""
    from difftest.program.ir import Grad
    from tests.differential.test_compound_kinks import _verdicts
    from tests.programs import cut

    if "" not in workers:
        workers[""] = BurnWorker()
        workers[""].start()
    p = Program((leaf("x", [0.5, 2.0], rg=True), cut("c", "detach", "x", region="no_grad"),
                 op("v", "select_min", "x", "c", dim=0, indices=[0, 1]), backward("v", "bw"),
                 Grad("g", "bw", "x"), op("s", "sum_dim", "g", dim=0)))
    verdict = check(p, workers[""])
    assert verdict.ok, verdict.report()
    s = {m.statement: m for m in verdict.mismatches}.get("s")
    assert s is not None and s.verdict == "ill-conditioned" and "select-min-tie-with-constant" in s.detail, \
        verdict.report()
    burn_obs = replace(verdict.burn, values=tuple(
        replace(v, value=replace(v.value, data=(1.5,))) if v.id == "s" and v.value is not None else v
        for v in verdict.burn.values))
    assert _verdicts(p, verdict.torch, burn_obs)["s"] == "burn-wrong"


def test_a_tie_with_a_constant_read_into_a_matmul_is_no_finding(workers: dict[str, BurnWorker]) -> None:
    """The no-false-alarm campaign of tests/quality/test_sensitivity.py, seed 15, program 12,292:
    select_min of a value and a no_grad gather of it (a tie with a constant), whose gradient a
    read hands to a matmul. burn's gradient there is twice PyTorch's, and the matmul's value is
    what burn's conventions give composed."""
    if "" not in workers:
        workers[""] = BurnWorker()
        workers[""].start()
    verdict = check(_saved("tie-with-constant-gradient-read-into-matmul.json"), workers[""])
    assert verdict.ok, verdict.report()
    assert any("select-min-tie-with-constant" in m.detail for m in verdict.mismatches), verdict.report()


def test_a_tie_of_one_source_through_another_op_is_the_tie_bug_named_by_its_op(
        workers: dict[str, BurnWorker]) -> None:
    """The no-false-alarm campaign of tests/quality/test_sensitivity.py, seed 13, program 10,393:
    select_min(x3, prod_dim(x3, 0)) over a dim of size 1, so the two operands hold one value from
    one source and every written position is a tie whose gradient burn counts twice. With a leaf
    per operand the op passes (each gradient a subgradient); run with one leaf for both
    (one_op.value_aliases) it fails, and the record explains it there. Before, the localiser named
    a GroupNorm downstream as a suspect."""
    t = _triage(workers, _saved("tie-through-prod-dim-over-size-1.json"), None)
    assert ":select_min:grad:" in t.signature, t.describe()
    assert t.known is not None and t.known.name == "minmax-update-tie-grad-to-both", t.describe()


def test_inputs_alias_only_with_equal_values_from_a_shared_tracked_source(workers: dict[str, BurnWorker]) -> None:
    """value_aliases: an input holding an earlier input's value from the same tracked source
    (a reshape of it) is read as that input's leaf; equal values of two leaves, or of a value and
    a detached copy of it, are not."""
    from difftest.findings.one_op import value_aliases
    from tests.programs import cut

    if "" not in workers:
        workers[""] = BurnWorker()
        workers[""].start()
    x, y = leaf("x", [0.5, 2.0], rg=True), leaf("y", [0.5, 2.0], rg=True)

    def aliases(*statements: object) -> dict[str, str]:
        p = Program((*statements, backward("v")))  # type: ignore[arg-type]
        v = check(p, workers[""])
        return value_aliases(p, p.by_id()["v"], v.torch, v.burn)

    assert aliases(x, op("r", "reshape", "x", shape=[2]), op("v", "maximum", "x", "r")) == {"r": "x"}
    assert aliases(x, y, op("v", "maximum", "x", "y")) == {}
    assert aliases(x, cut("c", "detach", "x"), op("v", "maximum", "x", "c")) == {}


# a tie of two tracked operands of one update (hard_sigmoid's value and tril's zero of it) routed
# into hard_sigmoid's kink: burn's whole gradient to each operand times its convention at -3 (1/6)
# is 1/6 where PyTorch's half times 0 is 0 (seed 15 of the no-false-alarm campaign with kink
# leaves, program 15,322). The operands differ at 0.5, so no one-op run reads them as one value.
TIE_INTO_HARD_SIGMOID = Program((
    leaf("x", [0.5, -3.0], rg=True, shape=(1, 2)), op("h", "hard_sigmoid", "x"), op("t", "tril", "h", diagonal=-2),
    op("y", "scatter_nd_min", "h", "t", indices={"shape": [1, 1], "data": [0]}), op("s", "sum", "y"),
    backward("s")))


def test_a_tie_bug_routed_into_a_kink_is_the_tie_bug_where_its_model_reproduces_burn(
        workers: dict[str, BurnWorker]) -> None:
    """Neither op fails alone (each within its one-sided limits), so the localiser's suspect is
    hard_sigmoid, which no record names. The float64 reference with burn's convention at -3 and
    burn's tie behaviour at the update (reproduced.py) gives burn's 1/6: the tie bug's, at the
    update."""
    t = _triage(workers, TIE_INTO_HARD_SIGMOID, None)
    assert t.known is not None and t.known.name == "minmax-update-tie-grad-to-both", t.describe()
    assert any(("minmax-update-tie-grad-to-both", "y") in f.reproduced for f in t.faults), t.faults


def test_a_tie_bug_routed_into_a_kink_with_another_fault_is_news(workers: dict[str, BurnWorker]) -> None:
    """The same program with hard_sigmoid's gradient scaled by 1 + 1e-3: the model gives 1/6, burn
    0.16683; no reproduction, no record: news."""
    t = _triage(workers, TIE_INTO_HARD_SIGMOID, "grad-scale:hard_sigmoid:1e-3")
    assert t.known is None, t.describe()
    assert all(not f.reproduced for f in t.faults), t.faults


def test_the_tie_bugs_model_gives_each_tied_operand_the_whole_gradient() -> None:
    """The model of minmax-update-tie-grad-to-both (burn_conventions.BUG_MODELS) reproduces the
    record's own numbers: d/dx sum(select_max(x, x)) = 2 at every written position (PyTorch's 1),
    and with two tracked leaves tied, each gets the whole gradient (1, 1; PyTorch's 0.5, 0.5).
    The oracle's own composition (without bug models) has no convention here."""
    from difftest.divergences.known_bugs import KNOWN_BUGS
    from difftest.oracle.burn_conventions import BUG_MODELS, burn_convention_gradient

    assert {m.bug for m in BUG_MODELS.values()} <= {b.name for b in KNOWN_BUGS}  # each model is a record's
    by_itself = Program((leaf("x", [0.5, -1.0], rg=True), op("y", "select_max", "x", "x", dim=0, indices=[0, 1]),
                         op("s", "sum", "y"), backward("s")))
    assert burn_convention_gradient(by_itself, "x", "bw", 1, with_bugs=True) == (
        2.0, {"y": "minmax-update-tie-grad-to-both"})
    assert burn_convention_gradient(by_itself, "x", "bw", 1) is None
    two = Program((leaf("a", [0.5, -1.0], rg=True), leaf("b", [0.5], rg=True),
                   op("y", "scatter_min", "a", "b", dim=0, indices={"shape": [1], "data": [0]}),
                   op("s", "sum", "y"), backward("s")))
    assert burn_convention_gradient(two, "a", "bw", 0, with_bugs=True) == (1.0, {"y": "minmax-update-tie-grad-to-both"})
    assert burn_convention_gradient(two, "b", "bw", 0, with_bugs=True) == (1.0, {"y": "minmax-update-tie-grad-to-both"})
