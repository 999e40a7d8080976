"""Minimise a failing program outside Hypothesis (for `difftest fuzz` findings).

Greedy statement deletion: drop a statement together with everything that depends on it, or
bypass it (its readers read one of its inputs instead, as program reducers such as C-Reduce
hoist an operand over its operator: `sum(exp(x))`'s backward becomes `exp(x)`'s), keep the change
when the program still fails the same way (first without gradient checkpointing and in float32,
where it fails there too); then put settings back at their defaults (an
optimizer's weight decay, nesterov, dampening, momentum) and simplify leaf data toward 0/1.
Hypothesis-driven tests shrink with Hypothesis itself; this is the same idea for campaigns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch

from difftest.ops.catalog import CATALOG
from difftest.ops.validate import check_program
from difftest.oracle.pytorch import run as run_torch
from difftest.program.dtypes import to_f32
from difftest.program.ir import Leaf, OpCall, Program, ProgramError, Statement, inputs_of
from difftest.program.statements import ByKind, Optimizer, value_inputs

Still = Callable[[Program], bool]


def _without(program: Program, ident: str) -> Program | None:
    dropped = {ident}
    kept: list[Statement] = []
    for st in program.statements:
        if st.id in dropped or any(x in dropped for x in inputs_of(st)):
            dropped.add(st.id)
            continue
        kept.append(st)
    if not kept:
        return None
    return _valid(program, tuple(kept))


# The statement with every reference to a value in `old` (a value read as a value: an op's,
# cut's, backward's or module forward's input) read as `new`; module handles, gradient handles
# and the value a `grad` reads the gradient of are not values read and stay.
_REWIRED: ByKind[Callable[[Any, str, str], Statement]] = ByKind(
    "value references rewired",
    leaf=lambda st, old, new: st,
    op=lambda st, old, new: replace(st, inputs=tuple(new if x == old else x for x in st.inputs)),
    cut=lambda st, old, new: replace(st, input=new) if st.input == old else st,
    backward=lambda st, old, new: replace(st, input=new) if st.input == old else st,
    module=lambda st, old, new: st,
    transform=lambda st, old, new: st,
    apply=lambda st, old, new: replace(st, input=new) if st.input == old else st,
    param=lambda st, old, new: st,
    grad=lambda st, old, new: st,
    zero_grad=lambda st, old, new: st,
    optimizer=lambda st, old, new: st,
    step=lambda st, old, new: st,
)


def _optimizer_defaults(st: Optimizer) -> Iterator[Statement]:
    """The optimizer with one setting back at its default (none, plain SGD): weight decay,
    nesterov, dampening, then momentum (with the settings that need it)."""
    if st.weight_decay:
        yield replace(st, weight_decay=0.0)
    if st.nesterov:
        yield replace(st, nesterov=False)
    if st.dampening:
        yield replace(st, dampening=0.0)
    if st.momentum:
        yield replace(st, momentum=0.0, dampening=0.0, nesterov=False)


def _none(st: Any) -> Iterator[Statement]:
    return iter(())


# Simpler settings of a statement (the values it reads stay): the same statement with a setting
# that a finding may not need back at its default, tried after the deletions so a reproducer
# names only the settings its fault needs. Leaf data is simplified apart (shrink's last pass).
_SIMPLER: ByKind[Callable[[Any], Iterator[Statement]]] = ByKind(
    "simpler settings", leaf=_none, op=_none, cut=_none, backward=_none, module=_none, transform=_none,
    apply=_none, param=_none, grad=_none, zero_grad=_none, optimizer=_optimizer_defaults, step=_none,
)


def _bypassed(program: Program, ident: str, by: str) -> Program | None:
    """`program` without the value `ident`, its readers reading `by` (one of its inputs)
    instead; None when something reads it otherwise (a `grad` of it) or the result does not
    pass the program checks (a shape or dtype the readers cannot take)."""
    kept: list[Statement] = []
    for st in program.statements:
        if st.id == ident:
            continue
        if ident in inputs_of(st) and ident not in value_inputs(st):
            return None
        kept.append(_REWIRED.of(st)(st, ident, by) if ident in value_inputs(st) else st)
    return _valid(program, tuple(kept))


def _candidates(best: Program) -> Iterator[Program]:
    """Smaller programs than `best`, last statements first: each statement deleted with its
    dependents, then each value bypassed by each of its inputs."""
    for st in reversed(best.statements):
        cand = _without(best, st.id)
        if cand is not None and len(cand) < len(best):
            yield cand
    for st in reversed(best.statements):
        for by in dict.fromkeys(value_inputs(st)):
            cand = _bypassed(best, st.id, by)
            if cand is not None:
                yield cand


def _valid(base: Program, statements: tuple[Statement, ...], checkpointing: str | None = None,
           dtype: str | None = None) -> Program | None:
    """`statements` as a program like `base` (its dtype and checkpointing, or `dtype` and
    `checkpointing`) when it passes the checks a program must pass before it runs (a simplified
    leaf can break one: the indices of an embedding forward must stay integral), else None."""
    try:
        program = Program(statements, dtype or base.dtype, checkpointing or base.checkpointing)
        check_program(program)
    except (ProgramError, ValueError):
        return None
    return program


def in_domain(program: Program) -> bool:
    """Every op's inputs lie in its declared domain (as the generator guarantees), an input
    exactly at a kink or tie included (the generator's boundary values put some there)."""
    obs = run_torch(program)
    values = {v.id: torch.tensor(v.value.data, dtype=torch.float32).reshape(v.value.shape) for v in obs.values}
    for st in program.statements:
        if isinstance(st, OpCall) and all(x in values for x in st.inputs):
            if not CATALOG[st.op].domain.accepts([values[x] for x in st.inputs], st.attrs, at_kinks=True):
                return False
    return True


def shrink(program: Program, still_fails: Still, *, budget: int = 300) -> Program:
    """Smallest variant found that still fails the same way and stays in every op's domain."""
    original = still_fails
    still_fails = lambda p: in_domain(p) and original(p)
    best = program
    tries = 0
    # without burn's gradient checkpointing first: a finding keeps it only when it needs it,
    # which then says the fault is in the checkpointed instance of burn's autodiff
    if best.checkpointing != "disabled":
        plain = _valid(best, best.statements, checkpointing="disabled")
        tries += 1
        if plain is not None and still_fails(plain):
            best = plain
    # in float32 next: a fault that is not the dtype's shows there too, and a float32 program is
    # the reproducer burn's own tests take (a half or float64 program's data are float32 values)
    if best.dtype != "float32":
        single = _valid(best, best.statements, dtype="float32")
        tries += 1
        if single is not None and still_fails(single):
            best = single
    changed = True
    while changed and tries < budget:
        changed = False
        for cand in _candidates(best):
            if tries >= budget:
                break
            tries += 1
            if still_fails(cand):
                best, changed = cand, True
                break
    for i in range(len(best.statements)):
        settling = True
        while settling:  # each setting in turn, from the statement as the last success left it
            settling = False
            st = best.statements[i]
            for simpler_st in _SIMPLER.of(st)(st):
                if tries >= budget:
                    return best
                settled = _valid(best, best.statements[:i] + (simpler_st,) + best.statements[i + 1:])
                if settled is None:
                    continue
                tries += 1
                if still_fails(settled):
                    best, settling = settled, True
                    break
    for i, st in enumerate(best.statements):
        if not isinstance(st, Leaf):
            continue
        for simple in (0.5, 1.0, 2.0):
            if tries >= budget:
                return best
            data = tuple(to_f32(simple) for _ in st.data)
            if data == st.data:
                continue
            simpler = _valid(best, best.statements[:i] + (replace(st, data=data),) + best.statements[i + 1 :])
            if simpler is None:
                continue
            tries += 1
            if still_fails(simpler):
                best = simpler
                break
    return best
