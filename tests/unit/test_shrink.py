"""The campaign shrinker (difftest/findings/shrink.py): deletion with dependents, and bypassing
a value (its readers read one of its inputs), so a fault in an op shrinks to the op and the
backward that shows it."""

from __future__ import annotations

from difftest.findings.shrink import shrink
from difftest.program.ir import Backward, OpCall, Program
from difftest.program.statements import Grad, ancestors
from tests.programs import backward, leaf, op, program


def _exp_reaches_a_backward(p: Program) -> bool:
    """A stand-in for "fails the same way" when exp's derivative is wrong: some backward's root
    is computed from an exp of a tracked value."""
    by_id = {st.id: st for st in p.statements}
    exps = {st.id for st in p.statements if isinstance(st, OpCall) and st.op == "exp"}
    return any(isinstance(st, Backward) and exps & ancestors(by_id, st.input) for st in p.statements)


def test_a_value_between_the_fault_and_the_backward_is_bypassed() -> None:
    # deletion alone cannot drop mul or sum: the backward depends on them, and goes with them
    p = program(leaf("x0", [0.3, 0.7], rg=True), op("v0", "exp", "x0"), leaf("x1", [1.5], rg=True),
                op("v1", "mul", "v0", "x1"), op("v2", "sum", "v1"), backward("v2"))
    small = shrink(p, _exp_reaches_a_backward)
    assert [st.id for st in small.statements] == ["x0", "v0", "bw"], small
    assert small.statements[-1] == Backward("bw", "v0")


def test_a_value_whose_gradient_is_read_is_not_bypassed() -> None:
    """A `grad` reads the gradient of a value, not the value: rewiring it to the value's input
    would read another gradient, so such a value stays (or goes with its readers)."""
    p = program(leaf("x0", [0.3, 0.7], rg=True), op("v0", "exp", "x0"), op("v1", "sum", "v0"),
                backward("v1"), Grad("g", "bw", "v1"))

    def fails(q: Program) -> bool:
        return _exp_reaches_a_backward(q) and any(isinstance(st, Grad) and st.of == "v1" for st in q.statements)

    small = shrink(p, fails)
    assert [st.id for st in small.statements] == ["x0", "v0", "v1", "bw", "g"], small


def test_optimizer_settings_the_fault_does_not_need_go_back_to_their_defaults() -> None:
    """A finding in momentum's dampening keeps the dampening and the momentum it needs; the
    weight decay it does not need is dropped from the reproducer."""
    from difftest.program.ir import Apply, InlineTensor, Module
    from difftest.program.statements import Optimizer, Step

    p = program(leaf("x", [0.5, 0.5], shape=[1, 2]),
                Module("m0", "linear", InlineTensor((1, 2), (0.25, -0.5)), None),
                Optimizer("o", "sgd", 0.9, 0.25, False, 0.03125),
                Apply("y0", "m0", "x"), backward("y0"), Step("m1", "o", "m0", "bw", 0.25),
                Apply("y1", "m1", "x"), backward("y1", "bw1"), Step("m2", "o", "m1", "bw1", 0.25))

    def damped(q: Program) -> bool:
        return any(isinstance(s, Optimizer) and s.dampening > 0 for s in q.statements) and \
            sum(isinstance(s, Step) for s in q.statements) == 2

    (opt,) = [s for s in shrink(p, damped).statements if isinstance(s, Optimizer)]
    assert (opt.momentum, opt.dampening, opt.weight_decay, opt.nesterov) == (0.9, 0.25, 0.0, False), opt


def test_a_fault_that_is_not_its_dtypes_shrinks_to_a_float32_program() -> None:
    """A bfloat16 or float64 program whose fault shows in float32 too is reported in float32, the
    reproducer burn's own tests take; one whose fault is its dtype's keeps that dtype."""
    statements = (leaf("x0", [0.5, 0.75], rg=True), op("v0", "exp", "x0"), backward("v0"))
    for dtype in ("bfloat16", "float64", "float16"):
        p = Program(statements, dtype)
        assert shrink(p, _exp_reaches_a_backward).dtype == "float32", dtype

        def only_in_its_dtype(q: Program, d: str = dtype) -> bool:
            return q.dtype == d and _exp_reaches_a_backward(q)

        assert shrink(p, only_in_its_dtype).dtype == dtype
