"""Structural checks of a program (ir.py's `Program` runs them when it is built): ids unique and
well-formed, references to earlier statements of the right kind, data that fits its shape and
dtype, module statements that their kind accepts."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from difftest.program.dtypes import FLOAT_DTYPES, first_unrepresentable
from difftest.program.modules import ModuleError, module_kind
from difftest.program.shapes import MAX_RANK
from difftest.program.statements import (
    CUTS,
    DEVICES,
    ID_PATTERN,
    MODULE_KINDS,
    OPTIMIZERS,
    REGIONS,
    TRANSFORMS,
    VALUE_KINDS,
    Backward,
    Cut,
    Grad,
    Leaf,
    Module,
    OpCall,
    Optimizer,
    Param,
    ProgramError,
    Statement,
    Step,
    Transform,
    is_value,
    module_inputs,
    numel,
    root_module,
    value_inputs,
)

if TYPE_CHECKING:
    from difftest.program.ir import Program


def _kind_name(st: Statement) -> str:
    return st.kind


def check_structure(program: Program) -> None:
    """Ids unique and well-formed; inputs refer to earlier value statements and module fields
    to earlier module handles; leaf and module data fit their shapes (and, in a program whose
    dtype is not float32, are values of that dtype; float32 data are rounded on load)."""
    if program.dtype not in FLOAT_DTYPES:
        raise ProgramError(f"unknown program dtype {program.dtype!r} (known: {', '.join(FLOAT_DTYPES)})")
    exact = program.dtype != "float32"
    seen: dict[str, Statement] = {}
    for i, st in enumerate(program.statements):
        if not ID_PATTERN.match(st.id):
            raise ProgramError(f"id {st.id!r} does not match {ID_PATTERN.pattern}", i, st.id)
        if st.id in seen:
            raise ProgramError("duplicate id", i, st.id)
        for ref in value_inputs(st):
            if ref not in seen:
                raise ProgramError(f"input {ref!r} refers to a later or unknown statement", i, st.id)
            if not is_value(seen[ref]):
                raise ProgramError(f"input {ref!r} refers to a {_kind_name(seen[ref])} statement, not a value",
                                   i, st.id)
        _check_handles(st, i, seen)
        for ref in module_inputs(st):
            field_name = "input" if isinstance(st, Transform) else "module"
            if ref not in seen:
                raise ProgramError(f"{field_name} {ref!r} refers to a later or unknown statement", i, st.id)
            if not isinstance(seen[ref], MODULE_KINDS):
                raise ProgramError(f"{field_name} {ref!r} refers to a {_kind_name(seen[ref])} statement, "
                                   "not a module or transform", i, st.id)
        if isinstance(st, Module):
            _check_module(st, i)
        if exact:
            for what, data in _float_data(st):
                bad = first_unrepresentable(data, program.dtype)
                if bad is not None:
                    raise ProgramError(f"{what}[{bad[0]}] = {bad[1]!r} is not a {program.dtype} value (the "
                                       f"program's dtype): round the data to {program.dtype}", i, st.id)
        if isinstance(st, Transform) and st.transform not in TRANSFORMS:
            raise ProgramError(f"unknown transform {st.transform!r}", i, st.id)
        if isinstance(st, Param):
            root = root_module(program, st.module, seen)
            spec = module_kind(root.module)
            if spec.tensor(st.param) is None:
                has = ", ".join(t.name for t in spec.tensors)
                what = f"no {st.param!r} (its parameters and buffers: {has})" if has else "no parameters"
                raise ProgramError(f"module {st.module!r} is a {root.module}, which has {what}", i, st.id)
            if root.tensor(st.param) is None:
                raise ProgramError(f"module {st.module!r} is a {root.module} without a {st.param}", i, st.id)
        if isinstance(st, Leaf):
            if not 1 <= len(st.shape) <= MAX_RANK:
                raise ProgramError(f"rank {len(st.shape)} outside 1..{MAX_RANK}", i, st.id)
            if any(d < 1 for d in st.shape):
                raise ProgramError(f"shape {list(st.shape)} has a dimension < 1", i, st.id)
            if len(st.data) != numel(st.shape):
                raise ProgramError(
                    f"data has {len(st.data)} elements, shape {list(st.shape)} needs "
                    f"{numel(st.shape)}",
                    i,
                    st.id,
                )
            if st.device not in DEVICES:
                raise ProgramError(f"unknown device {st.device!r}", i, st.id)
        if isinstance(st, (OpCall, Cut)) and st.region not in REGIONS:
            raise ProgramError(f"unknown region {st.region!r}", i, st.id)
        if isinstance(st, Cut) and st.cut not in CUTS:
            raise ProgramError(f"unknown cut {st.cut!r}", i, st.id)
        if isinstance(st, OpCall) and not st.inputs:
            raise ProgramError("op without inputs", i, st.id)
        seen[st.id] = st


def _float_data(st: Statement) -> list[tuple[str, tuple[float, ...]]]:
    """The float data a statement holds: a leaf's, a module's parameters and buffers."""
    if isinstance(st, Leaf):
        return [("data", st.data)]
    if isinstance(st, Module):
        return [(name, t.data) for name, t in st.tensors().items()]
    return []


def _check_handles(st: Statement, i: int, seen: dict[str, Statement]) -> None:
    """References to gradients handles and optimizers, and the session statements' numbers."""
    def earlier(ref: str, what: str, kinds: tuple[type, ...], name: str) -> Statement:
        if ref not in seen:
            raise ProgramError(f"{what} {ref!r} refers to a later or unknown statement", i, st.id)
        if not isinstance(seen[ref], kinds):
            raise ProgramError(f"{what} {ref!r} refers to a {_kind_name(seen[ref])} statement, not {name}",
                               i, st.id)
        return seen[ref]

    if isinstance(st, Grad):
        earlier(st.grads, "grads", (Backward,), "a backward")
        earlier(st.of, "of", VALUE_KINDS, "a value")
        order = list(seen)
        if order.index(st.of) > order.index(st.grads):
            raise ProgramError(f"value {st.of!r} is defined after backward {st.grads!r}, which cannot hold its "
                               "gradient", i, st.id)
    elif isinstance(st, Optimizer):
        if st.optimizer not in OPTIMIZERS:
            raise ProgramError(f"unknown optimizer {st.optimizer!r}", i, st.id)
        for name in ("momentum", "dampening", "weight_decay"):
            x = getattr(st, name)
            if not (math.isfinite(x) and x >= 0):
                raise ProgramError(f"{name} = {x!r} must be finite and >= 0", i, st.id)
        if st.nesterov and (st.momentum <= 0 or st.dampening != 0):
            raise ProgramError("nesterov needs momentum > 0 and dampening = 0", i, st.id)
    elif isinstance(st, Step):
        opt = earlier(st.optimizer, "optimizer", (Optimizer,), "an optimizer")
        earlier(st.grads, "grads", (Backward,), "a backward")
        if not (math.isfinite(st.lr) and st.lr > 0):
            raise ProgramError(f"lr = {st.lr!r} must be finite and > 0", i, st.id)
        if st.module in seen and isinstance(seen[st.module], MODULE_KINDS):
            root = _root_id(seen, st.module)
            root_st = seen[root]
            if isinstance(root_st, Module) and not module_kind(root_st.module).steppable:
                raise ProgramError(f"module {st.module!r} is a {root_st.module}, which optimizer steps do not "
                                   "act on (its running state is not modelled across steps)", i, st.id)
            for other in seen.values():
                if isinstance(other, Step) and other.optimizer == opt.id and other.module in seen \
                        and _root_id(seen, other.module) != root:
                    raise ProgramError(f"optimizer {opt.id!r} already steps module {_root_id(seen, other.module)!r}; "
                                       f"{st.module!r} derives from {root!r} (one optimizer per module)", i, st.id)


def _root_id(seen: dict[str, Statement], ident: str) -> str:
    st = seen[ident]
    while isinstance(st, (Transform, Step)):
        st = seen[st.input if isinstance(st, Transform) else st.module]
    return st.id


def _check_module(st: Module, i: int) -> None:
    """The module's kind is known, its attributes pass their checks, and its inline tensors
    are the kind's, with the shapes its configuration derives."""
    try:
        spec = module_kind(st.module)
    except ModuleError as e:
        raise ProgramError(str(e), i, st.id) from e
    for a in spec.attrs:
        if a.name != "p" and a.name not in st.attrs:
            raise ProgramError(f"a {st.module} module needs the attribute {a.name!r}", i, st.id)
        err = a.check(st.attr(a.name))
        if err:
            raise ProgramError(err, i, st.id)
    names = {a.name for a in spec.attrs}
    for k in st.attrs:
        if k not in names:
            raise ProgramError(f"a {st.module} module has no attribute {k!r}", i, st.id)
    given = st.tensors()
    for name in given:
        if spec.tensor(name) is None:
            raise ProgramError(f"a {st.module} module has no {name}", i, st.id)
    for t in spec.tensors:
        if t.name not in given and not t.optional:
            raise ProgramError(f"a {st.module} module needs a {t.name}", i, st.id)
    try:
        want = spec.shapes(st.config(), st.tensor_shapes())
    except ModuleError as e:
        raise ProgramError(str(e), i, st.id) from e
    for name, x in given.items():
        if x.shape != want[name]:
            raise ProgramError(f"{name} has shape {list(x.shape)} but the {st.module} module needs "
                               f"{list(want[name])}", i, st.id)
        if len(x.data) != numel(x.shape):
            raise ProgramError(f"{name} data has {len(x.data)} elements, shape {list(x.shape)} needs "
                               f"{numel(x.shape)}", i, st.id)
