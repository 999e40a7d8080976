"""Localising a fault in how burn's gradient checkpointing recomputes an op's output.

Under balanced checkpointing burn keeps the outputs of compute-bound ops only; a memory-bound
op's output (sin, exp, add, ...) that a later backward reads is recomputed from its inputs by
the op's *retro-forward*, a second implementation of its forward. A wrong retro-forward shows in
no program of the op alone: the op's own backward reads its inputs, which are leaves there. It
shows in the backward of whatever reads the op's output, in every program where an op reads it
(exp of it, log of it, a product with it), so without an experiment of its own one such fault
became a `graph` finding named after each reader.

The experiment: the op alone on its recorded inputs (one_op.one_op_program), then a reader whose
backward needs the op's output, `y * y` (mul's backward reads both operands), and the backward of
that. Right without checkpointing and wrong with it, the op's output as burn recomputes it is
wrong: the fault is the op's, mechanism `recompute`, and the one-op program with its reader is
the reproducer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from difftest.findings.one_op import one_op_program
from difftest.ops.validate import check_program
from difftest.oracle.compare import Verdict
from difftest.program.ir import Backward, OpCall, Program, ProgramError, Statement

READER = "mul"  # y * y: its backward reads y, the output checkpointing recomputes
RESULT = "y"  # the one-op program's result (one_op.one_op_program)


def with_reader(p: Program) -> Program | None:
    """The one-op program `p`, its backward rooted at `y * y` instead of `y`; None when `p`
    has no backward of y or the reader does not fit (a result that is not a float)."""
    last = p.statements[-1] if p.statements else None
    if not isinstance(last, Backward) or last.input != RESULT:
        return None
    statements = (*p.statements[:-1], OpCall("yy", READER, (RESULT, RESULT)), Backward(last.id, "yy"))
    try:
        q = p.with_statements(statements)
        check_program(q)
    except (ProgramError, ValueError):
        return None
    return q


@dataclass(frozen=True)
class Recomputed:
    """An op whose output, as burn's checkpointing recomputes it, is wrong: its statement in the
    program, the experiment that shows it, the map of its leaves to input positions, and the
    experiment's (failing) verdict."""

    statement: Statement
    program: Program
    positions: dict[str, int]
    verdict: Verdict


def recompute_fault(verdict: Verdict, path: Iterable[Statement], grads: bool,
                    judge: Callable[[Program], Verdict | None]) -> Recomputed | None:
    """The first op of `path` whose experiment fails with the program's checkpointing and passes
    without it; None when the program is not checkpointed or no op's does."""
    if verdict.program.checkpointing == "disabled":
        return None
    for st, p, positions in _experiments(verdict, path, grads):
        v = judge(p)
        if v is None or v.ok:
            continue
        plain = judge(Program(p.statements, p.dtype, "disabled"))
        if plain is not None and plain.ok:
            return Recomputed(st, p, positions, v)
    return None


def _experiments(verdict: Verdict, path: Iterable[Statement],
                 grads: bool) -> Iterator[tuple[Statement, Program, dict[str, int]]]:
    for st in path:
        built = one_op_program(verdict.program, st, verdict.torch, verdict.burn, grads=grads)
        if built is None:
            continue
        p, positions = built
        q = with_reader(p)
        if q is not None:
            yield st, q, positions
