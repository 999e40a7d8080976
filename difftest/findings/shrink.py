"""Minimise a failing program outside Hypothesis (for `difftest fuzz` findings).

Greedy statement deletion: drop a statement together with everything that depends on it, keep
the deletion when the program still fails the same way; then simplify leaf data toward 0/1.
Hypothesis-driven tests shrink with Hypothesis itself; this is the same idea for campaigns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from difftest.ops.catalog import CATALOG
from difftest.ops.validate import check_program
from difftest.oracle.pytorch import run as run_torch
from difftest.program.dtypes import to_f32
from difftest.program.ir import Leaf, OpCall, Program, ProgramError, Statement, inputs_of

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
    return _valid(Program(tuple(kept), program.dtype))


def _valid(program: Program) -> Program | None:
    """`program` when it passes the checks a program must pass before it runs (a simplified
    leaf can break one: the indices of an embedding forward must stay integral), else None."""
    try:
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
    changed = True
    while changed and tries < budget:
        changed = False
        for st in reversed(best.statements):
            if tries >= budget:
                break
            cand = _without(best, st.id)
            if cand is None or len(cand) >= len(best):
                continue
            tries += 1
            if still_fails(cand):
                best, changed = cand, True
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
            cand = _valid(Program(best.statements[:i] + (replace(st, data=data),) + best.statements[i + 1 :],
                                  best.dtype))
            if cand is None:
                continue
            tries += 1
            if still_fails(cand):
                best = cand
                break
    return best
