"""One statement on its own (localise.py): the one-op program of an op or module forward, run
on the inputs a program recorded for it, and the reads that make a module's parameters'
gradients observable."""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import TYPE_CHECKING

from difftest.ops.validate import infer_shapes
from difftest.ops.value_dtypes import value_dtypes
from difftest.program.ir import (
    Apply,
    Backward,
    Leaf,
    Module,
    OpCall,
    Param,
    Program,
    ProgramError,
    Statement,
    Transform,
    gradient_sources,
    root_module,
)
from difftest.program.modules import module_kind
from difftest.program.observation import Observation

if TYPE_CHECKING:
    pass


PARAM_READ = "param_"  # a read of a module's parameter this module adds: `param_<name>`


def param_reads(program: Program, handle: str, taken: Collection[str] | None = None) -> list[Param]:
    """A read (`param_<name>`) of each parameter the module handle `handle` has (its buffers
    not: they are not differentiated), where no statement is named so: of `program`, where the
    reads are added to it, else `taken`, the names of the program they are added to (a one-op
    program built beside `program`, which may itself read the parameters under those names: a
    localiser's own program); [] when the handle's module cannot be found."""
    table = program.by_id()
    names = set(table) if taken is None else set(taken)
    try:
        root = root_module(program, handle, table)
    except (KeyError, AssertionError):
        return []
    return [Param(f"{PARAM_READ}{spec.name}", handle, spec.name) for spec in module_kind(root.module).tensors
            if not spec.buffer and root.tensor(spec.name) is not None and f"{PARAM_READ}{spec.name}" not in names]


def module_chain(table: dict[str, Statement], handle: str) -> list[Statement] | None:
    """The module statement and the transforms a handle derives from, root first; None when a
    step is on the chain (its parameters at apply time are not the module's inline ones)."""
    chain: list[Statement] = []
    st = table.get(handle)
    while isinstance(st, Transform):
        chain.append(st)
        st = table.get(st.input)
    if not isinstance(st, Module):
        return None
    chain.append(st)
    return chain[::-1]


HARNESS_OP = "mul"  # the op a seeded one-op program applies its cotangent with (burn seeds a backward with ones only)


def cotangent(n: int) -> tuple[float, ...]:
    """A fixed cotangent that is not constant (ones give a zero vector-Jacobian product for ops
    whose outputs sum to a constant, softmax and the normalisations), exact in every dtype."""
    return tuple(0.5 + ((5 * i) % 8) / 8 for i in range(n))


def value_aliases(program: Program, st: Statement, torch_obs: Observation,
                  burn_obs: Observation) -> dict[str, str]:
    """Inputs of the op `st` that are other statements than an earlier input but hold its value
    (equal shape and elements, as PyTorch recorded them) and share a tracked source with it (a
    value burn tracked that a gradient of each flows back to: not across a cut or a no_grad
    region): `select_min(x, prod_dim(x, 0))` over a dim
    of size 1. Each maps to that earlier input. In the program the op's gradients at such inputs
    reach one source and are summed there, which a leaf per input does not show (a tie whose
    operands each get the whole gradient): the op is also run with them one leaf (`alias`)."""
    if not isinstance(st, OpCall) or len(set(st.inputs)) < 2:
        return {}
    table = program.by_id()

    def tracked(ident: str) -> bool:
        b = burn_obs.value(ident)
        return b is not None and b.flags.get("is_tracked") is True

    out: dict[str, str] = {}
    for j, b_id in enumerate(st.inputs):
        for a_id in st.inputs[:j]:
            if a_id == b_id or b_id in out or not (tracked(a_id) and tracked(b_id)):
                continue
            ta, tb = torch_obs.value(a_id), torch_obs.value(b_id)
            if ta is None or tb is None or ta.value.shape != tb.value.shape or ta.value.data != tb.value.data:
                continue
            if any(tracked(x) for x in gradient_sources(table, a_id) & gradient_sources(table, b_id)):
                out[b_id] = a_id
                break
    return out


def one_op_program(program: Program, st: Statement, torch_obs: Observation, burn_obs: Observation,
                   *, seeded: bool = False, grads: bool = False, split: bool = False,
                   seed: tuple[float, ...] | None = None, burn_inputs: bool = False,
                   as_tracked: bool = False,
                   alias: dict[str, str] | None = None) -> tuple[Program, dict[str, int]] | None:
    """`st` alone on the inputs PyTorch recorded for it (burn's where PyTorch stopped before
    it), each a leaf that requires grad on the device burn had it on, and the backward of its
    result (seeded with ones; `seeded`: of its product with `seed`, the cotangent PyTorch
    propagated to it, or the constant `cotangent`); the leaf -> input position map. None when
    an input was not recorded or the statement cannot stand alone. `grads`: every input is an
    autodiff leaf that requires grad, whatever device it had, so the inputs whose gradient is
    wrong are the op's, not the program's. `split`: a value read at several input positions
    (`prelu(x, x)`) becomes one leaf per position, so each operand's derivative is observed on
    its own (a dropped operand shows as a missing gradient, whatever the other operand adds).
    `burn_inputs`: on the inputs burn computed instead (an op whose error shows only on them).
    `as_tracked`: each input requires grad only where burn tracked it in the program (a
    backward that is wrong only when some inputs are constants: `cat` slicing the gradient by
    the tracked inputs alone). `alias`: inputs read as the leaf of another input
    (`value_aliases`), as a value read at several positions is."""
    table = program.by_id()
    dtypes = value_dtypes(program)
    inputs = st.inputs if isinstance(st, OpCall) else (st.input,) if isinstance(st, Apply) else ()
    if not inputs:
        return None
    dtype = dtypes.get(inputs[0], program.dtype)
    if any(dtypes.get(i, program.dtype) != dtype for i in inputs):
        return None
    # a module whose forward reads its input as indices (embedding) differentiates its
    # parameters only: its input stays a leaf that does not require grad
    indices = isinstance(st, Apply) and _index_input(table, st)
    out: list[Statement] = []
    leaf_of: dict[str, str] = {}
    positions: dict[str, int] = {}
    names: list[str] = []
    for pos, ident in enumerate(inputs):
        ident = (alias or {}).get(ident, ident)
        if ident in leaf_of and not split:
            names.append(leaf_of[ident])
            continue
        # PyTorch's recorded input; burn's where PyTorch stopped before it (an error of its own)
        b = burn_obs.value(ident)
        t = (b if burn_inputs and b is not None else None) or torch_obs.value(ident) or b
        if t is None:
            return None
        on_autodiff = grads or (b.flags.get("is_autodiff", True) if b is not None else True)
        tracked = not as_tracked or (b is not None and b.flags.get("is_tracked") is True)
        name = f"a{len(positions)}"
        leaf_of[ident] = name
        names.append(name)
        positions[name] = pos
        out.append(Leaf(name, t.value.shape, t.value.data, "autodiff" if on_autodiff else "plain",
                        on_autodiff and not indices and tracked))
    # an op the program ran outside the grad region (no_grad, inference_mode) runs there again
    # when only its value is asked: burn runs such an op on the inner backend's kernel, not the
    # autodiff one (hard-sigmoid-autodiff-f64-in-f32 is wrong in the latter alone), and its
    # result has no gradient to take
    region = st.region if isinstance(st, OpCall) and not grads else "grad"
    if isinstance(st, OpCall):
        out.append(OpCall("y", st.op, tuple(names), dict(st.attrs), region))
    else:
        assert isinstance(st, Apply)
        chain = module_chain(table, st.module)
        if chain is None:
            return None
        out[:0] = chain
        out.append(Apply("y", chain[-1].id, leaf_of[st.input]))
        # a read of each of the module's parameters, so that their gradients are observed too:
        # a forward whose input gradient vanishes (layer_norm over two elements gives +-1 for
        # any input) shows a wrong derivative in its parameters' gradients only. After the
        # forward, so that a wrong input gradient stays the finding reported first
        out.extend(param_reads(program, chain[-1].id, {s.id for s in out}))
    if region == "grad" and (any(isinstance(s, Leaf) and s.require_grad for s in out)
                             or (grads and any(isinstance(s, Param) for s in out))):
        root = "y"
        if seeded:

            try:
                shape = infer_shapes(Program(tuple(out), dtype))["y"]
            except (ProgramError, ValueError):
                return None
            n = math.prod(shape)
            out.append(Leaf("ct", shape, seed if seed is not None and len(seed) == n else cotangent(n),
                            "autodiff", False))
            out.append(OpCall("z", HARNESS_OP, ("y", "ct")))
            root = "z"
        out.append(Backward("bw", root))
    try:
        return Program(tuple(out), dtype, program.checkpointing), positions
    except ProgramError:
        return None


def harness_program(p: Program) -> Program | None:
    """The control of the seeded one-op program `p` (one_op_program with `seeded`): its cotangent
    applied to a fresh leaf of the op's result shape, with nothing else. Its gradient is the
    cotangent itself, exactly in every dtype; a wrong one is the harness's (its `mul`), and then
    every seeded experiment fails whatever op it holds. None when `p` is not seeded."""
    table = p.by_id()
    ct, z = table.get("ct"), table.get("z")
    if not isinstance(ct, Leaf) or not isinstance(z, OpCall) or z.op != HARNESS_OP:
        return None
    try:
        return Program((Leaf("a0", ct.shape, cotangent(len(ct.data)), "autodiff", True), ct,
                        OpCall("z", HARNESS_OP, ("a0", "ct")), Backward("bw", "z")), p.dtype, p.checkpointing)
    except ProgramError:
        return None


def _index_input(table: dict[str, Statement], st: Apply) -> bool:
    """Whether the module `st` applies reads its input as indices (ModuleKind.index_bound)."""
    chain = module_chain(table, st.module)
    root = chain[0] if chain else None
    return isinstance(root, Module) and module_kind(root.module).index_bound is not None


def seed_program(shape: tuple[int, ...], dtype: str, checkpointing: str = "disabled") -> Program:
    """The backward of a fresh require-grad leaf of `shape`, rooted at the leaf itself: no op,
    only how the backward seeds its root (ones of the root's shape; its gradient is that seed).
    A wrong gradient here is the backward's own, whatever op a program roots it at."""
    n = math.prod(shape)
    return Program((Leaf("a0", shape, cotangent(n), "autodiff", True), Backward("bw", "a0")), dtype, checkpointing)
