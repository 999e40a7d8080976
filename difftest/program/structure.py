"""Structural checks of a program (ir.py's `Program` runs them when it is built): ids unique and
well-formed, references to earlier statements of the right kind, data that fits its shape and
dtype, module statements that their kind accepts."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

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
    ByKind,
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


@dataclass
class _Checking:
    """The statement being checked and what came before it."""

    program: Program
    index: int
    seen: dict[str, Statement]  # the earlier statements by id

    def fail(self, message: str, st: Statement) -> NoReturn:
        raise ProgramError(message, self.index, st.id)

    def earlier(self, st: Statement, ref: str, what: str, kinds: tuple[type, ...], name: str) -> Statement:
        """The earlier statement `ref` names, which must be one of `kinds`."""
        if ref not in self.seen:
            self.fail(f"{what} {ref!r} refers to a later or unknown statement", st)
        if not isinstance(self.seen[ref], kinds):
            self.fail(f"{what} {ref!r} refers to a {_kind_name(self.seen[ref])} statement, not {name}", st)
        return self.seen[ref]

    def module_refs(self, st: Statement, field_name: str = "module") -> None:
        """The module handles `st` reads (in its field `field_name`) are earlier modules,
        transforms or steps."""
        for ref in module_inputs(st):
            if ref not in self.seen:
                self.fail(f"{field_name} {ref!r} refers to a later or unknown statement", st)
            if not isinstance(self.seen[ref], MODULE_KINDS):
                self.fail(f"{field_name} {ref!r} refers to a {_kind_name(self.seen[ref])} statement, "
                          "not a module or transform", st)

    def float_data(self, st: Statement, data: list[tuple[str, tuple[float, ...]]]) -> None:
        """In a program whose dtype is not float32, the data are values of that dtype."""
        dtype = self.program.dtype
        if dtype == "float32":
            return
        for what, xs in data:
            bad = first_unrepresentable(xs, dtype)
            if bad is not None:
                self.fail(f"{what}[{bad[0]}] = {bad[1]!r} is not a {dtype} value (the program's dtype): round "
                          f"the data to {dtype}", st)

    def region(self, st: OpCall | Cut) -> None:
        if st.region not in REGIONS:
            self.fail(f"unknown region {st.region!r}", st)


def check_structure(program: Program) -> None:
    """Ids unique and well-formed; inputs refer to earlier value statements and module fields
    to earlier module handles; leaf and module data fit their shapes (and, in a program whose
    dtype is not float32, are values of that dtype; float32 data are rounded on load)."""
    if program.dtype not in FLOAT_DTYPES:
        raise ProgramError(f"unknown program dtype {program.dtype!r} (known: {', '.join(FLOAT_DTYPES)})")
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
        _CHECKS.of(st)(_Checking(program, i, seen), st)
        seen[st.id] = st


def _leaf(c: _Checking, st: Leaf) -> None:
    c.float_data(st, [("data", st.data)])
    if not 1 <= len(st.shape) <= MAX_RANK:
        c.fail(f"rank {len(st.shape)} outside 1..{MAX_RANK}", st)
    if any(d < 1 for d in st.shape):
        c.fail(f"shape {list(st.shape)} has a dimension < 1", st)
    if len(st.data) != numel(st.shape):
        c.fail(f"data has {len(st.data)} elements, shape {list(st.shape)} needs {numel(st.shape)}", st)
    if st.device not in DEVICES:
        c.fail(f"unknown device {st.device!r}", st)


def _op(c: _Checking, st: OpCall) -> None:
    c.region(st)
    if not st.inputs:
        c.fail("op without inputs", st)


def _cut(c: _Checking, st: Cut) -> None:
    c.region(st)
    if st.cut not in CUTS:
        c.fail(f"unknown cut {st.cut!r}", st)


def _module(c: _Checking, st: Module) -> None:
    _check_module(st, c.index)
    c.float_data(st, [(name, t.data) for name, t in st.tensors().items()])


def _transform(c: _Checking, st: Transform) -> None:
    c.module_refs(st, "input")
    if st.transform not in TRANSFORMS:
        c.fail(f"unknown transform {st.transform!r}", st)


def _param(c: _Checking, st: Param) -> None:
    c.module_refs(st)
    root = root_module(c.program, st.module, c.seen)
    spec = module_kind(root.module)
    if spec.tensor(st.param) is None:
        has = ", ".join(t.name for t in spec.tensors)
        what = f"no {st.param!r} (its parameters and buffers: {has})" if has else "no parameters"
        c.fail(f"module {st.module!r} is a {root.module}, which has {what}", st)
    if root.tensor(st.param) is None:
        c.fail(f"module {st.module!r} is a {root.module} without a {st.param}", st)


def _grad(c: _Checking, st: Grad) -> None:
    c.earlier(st, st.grads, "grads", (Backward,), "a backward")
    c.earlier(st, st.of, "of", VALUE_KINDS, "a value")
    order = list(c.seen)
    if order.index(st.of) > order.index(st.grads):
        c.fail(f"value {st.of!r} is defined after backward {st.grads!r}, which cannot hold its gradient", st)


def _optimizer(c: _Checking, st: Optimizer) -> None:
    if st.optimizer not in OPTIMIZERS:
        c.fail(f"unknown optimizer {st.optimizer!r}", st)
    for name in ("momentum", "dampening", "weight_decay"):
        x = getattr(st, name)
        if not (math.isfinite(x) and x >= 0):
            c.fail(f"{name} = {x!r} must be finite and >= 0", st)
    if st.nesterov and (st.momentum <= 0 or st.dampening != 0):
        c.fail("nesterov needs momentum > 0 and dampening = 0", st)


def _step(c: _Checking, st: Step) -> None:
    seen = c.seen
    opt = c.earlier(st, st.optimizer, "optimizer", (Optimizer,), "an optimizer")
    c.earlier(st, st.grads, "grads", (Backward,), "a backward")
    if not (math.isfinite(st.lr) and st.lr > 0):
        c.fail(f"lr = {st.lr!r} must be finite and > 0", st)
    if st.module in seen and isinstance(seen[st.module], MODULE_KINDS):
        root = _root_id(seen, st.module)
        root_st = seen[root]
        if isinstance(root_st, Module) and not module_kind(root_st.module).steppable:
            c.fail(f"module {st.module!r} is a {root_st.module}, which optimizer steps do not act on (its "
                   "running state is not modelled across steps)", st)
        for other in seen.values():
            if isinstance(other, Step) and other.optimizer == opt.id and other.module in seen \
                    and _root_id(seen, other.module) != root:
                c.fail(f"optimizer {opt.id!r} already steps module {_root_id(seen, other.module)!r}; "
                       f"{st.module!r} derives from {root!r} (one optimizer per module)", st)
    c.module_refs(st)


def _nothing(c: _Checking, st: Statement) -> None:
    """No checks of its own (its references are checked above)."""


# each kind's own checks, in the order their errors are reported
_CHECKS: ByKind[Callable[[_Checking, Any], None]] = ByKind(
    "structure checks",
    leaf=_leaf,
    op=_op,
    cut=_cut,
    backward=_nothing,
    module=_module,
    transform=_transform,
    apply=lambda c, st: c.module_refs(st),
    param=_param,
    grad=_grad,
    zero_grad=_nothing,
    optimizer=_optimizer,
    step=_step,
)


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
