"""Program IR: a straight-line SSA list of statements (docs/format.md).

The IR is plain frozen dataclasses. Validation of structure lives here (ids, references);
validation of op attributes and shapes lives with the op catalog (`difftest/ops/spec.py`, `shape_rules.py`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from difftest.program.dtypes import FLOAT_DTYPES, first_unrepresentable
from difftest.program.module_kinds import MODULE_KINDS as KIND_CATALOG
from difftest.program.module_kinds import ModuleError, module_kind

FORMAT_NAME = "difftest-program"
FORMAT_VERSION = 2  # the newest; a program without session statements is still written as 1
FORMAT_VERSIONS = (1, 2)
MAX_RANK = 4
ID_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Device = Literal["autodiff", "plain"]
Region = Literal["grad", "no_grad", "inference_mode"]
CutKind = Literal["detach", "without_autodiff", "autodiff"]
ModuleKind = str  # a name in difftest/program/module_kinds.py MODULE_KINDS
TransformKind = Literal["valid", "train", "no_grad", "freeze", "unfreeze"]
ParamName = str  # a tensor (parameter or buffer) its module kind declares
OptimizerKind = Literal["sgd"]

DEVICES: tuple[Device, ...] = ("autodiff", "plain")
REGIONS: tuple[Region, ...] = ("grad", "no_grad", "inference_mode")
CUTS: tuple[CutKind, ...] = ("detach", "without_autodiff", "autodiff")
MODULES: tuple[ModuleKind, ...] = tuple(KIND_CATALOG)
TRANSFORMS: tuple[TransformKind, ...] = ("valid", "train", "no_grad", "freeze", "unfreeze")
PARAMS: tuple[ParamName, ...] = tuple(dict.fromkeys(t.name for k in KIND_CATALOG.values() for t in k.tensors))
OPTIMIZERS: tuple[OptimizerKind, ...] = ("sgd",)

Shape = tuple[int, ...]


class ProgramError(ValueError):
    """A program that does not conform, with the statement it is about."""

    def __init__(self, message: str, index: int | None = None, statement: str | None = None):
        self.index = index
        self.statement = statement
        where = ""
        if index is not None:
            where = f"statement {index}" + (f" (id {statement!r})" if statement else "") + ": "
        super().__init__(where + message)
        self.detail = message


def numel(shape: Shape) -> int:
    return math.prod(shape)


@dataclass(frozen=True)
class Leaf:
    id: str
    shape: Shape
    data: tuple[float, ...]
    device: Device = "autodiff"
    require_grad: bool = False

    kind: Literal["leaf"] = field(default="leaf", init=False)


@dataclass(frozen=True)
class OpCall:
    id: str
    op: str
    inputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict, hash=False)
    region: Region = "grad"

    kind: Literal["op"] = field(default="op", init=False)


@dataclass(frozen=True)
class Cut:
    id: str
    cut: CutKind
    input: str
    region: Region = "grad"

    kind: Literal["cut"] = field(default="cut", init=False)


@dataclass(frozen=True)
class Backward:
    """A backward pass from `input`, defining the gradients handle `id` (burn: the `Gradients`
    it returns; PyTorch: the gradients this pass produced, `.grad` accumulation kept apart).
    `retain_graph`: PyTorch keeps the graph's saved tensors (burn has no such option)."""

    id: str
    input: str
    retain_graph: bool = False

    kind: Literal["backward"] = field(default="backward", init=False)


@dataclass(frozen=True)
class Grad:
    """A value: the gradient of value `of` in the gradients handle `grads` (a backward)
    (burn `of.grad(&grads)`; PyTorch the gradient that backward produced for `of`)."""

    id: str
    grads: str
    of: str

    kind: Literal["grad"] = field(default="grad", init=False)


@dataclass(frozen=True)
class ZeroGrad:
    """PyTorch: every `.grad` is cleared (`optimizer.zero_grad()`, `x.grad = None`); burn has
    nothing to clear (each backward returns fresh gradients)."""

    id: str

    kind: Literal["zero_grad"] = field(default="zero_grad", init=False)


@dataclass(frozen=True)
class Optimizer:
    """An optimizer handle (stateful: momentum buffers persist across its steps)."""

    id: str
    optimizer: OptimizerKind = "sgd"
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0

    kind: Literal["optimizer"] = field(default="optimizer", init=False)


@dataclass(frozen=True)
class Step:
    """One optimizer step on the module handle `module` with the gradients of the handle `grads`,
    defining a new module handle (burn `optim.step(lr, module, GradientsParams::from_module(..))`;
    PyTorch `optimizer.step()` on a copy, which reads the parameters' `.grad`)."""

    id: str
    optimizer: str
    module: str
    grads: str
    lr: float

    kind: Literal["step"] = field(default="step", init=False)


@dataclass(frozen=True)
class InlineTensor:
    """A float tensor given inline (module weights): row-major data, float32 values."""

    shape: Shape
    data: tuple[float, ...]


@dataclass(frozen=True)
class Module:
    """A module handle (not a value) of a kind in difftest/program/module_kinds.py: `linear`
    (weight [out, in], optional bias [out]), `dropout` (probability p), and the kinds declared
    there. `attrs` holds the configuration other than dropout's `p`, `buffers` the inline
    tensors other than weight and bias (running statistics), in PyTorch's names and layouts."""

    id: str
    module: ModuleKind
    weight: InlineTensor | None = None
    bias: InlineTensor | None = None
    p: float = 0.0
    attrs: dict[str, Any] = field(default_factory=dict, hash=False)
    buffers: dict[str, InlineTensor] = field(default_factory=dict, hash=False)

    kind: Literal["module"] = field(default="module", init=False)

    def attr(self, name: str) -> Any:
        return self.p if name == "p" else self.attrs[name]

    def config(self) -> dict[str, Any]:
        """The kind's configuration attributes, by name."""
        return {a.name: self.attr(a.name) for a in module_kind(self.module).attrs}

    def tensor(self, name: str) -> InlineTensor | None:
        if name == "weight":
            return self.weight
        if name == "bias":
            return self.bias
        return self.buffers.get(name)

    def tensors(self) -> dict[str, InlineTensor]:
        """The inline tensors given, by name (absent optional ones left out)."""
        out = {"weight": self.weight, "bias": self.bias, **self.buffers}
        return {k: v for k, v in out.items() if v is not None}

    def tensor_shapes(self) -> dict[str, Shape]:
        return {k: v.shape for k, v in self.tensors().items()}

    @property
    def in_features(self) -> int:
        assert self.weight is not None
        return self.weight.shape[1]

    @property
    def out_features(self) -> int:
        assert self.weight is not None
        return self.weight.shape[0]


@dataclass(frozen=True)
class Transform:
    """A module handle derived from `input` (a module or transform) by a burn Module method."""

    id: str
    transform: TransformKind
    input: str

    kind: Literal["transform"] = field(default="transform", init=False)


@dataclass(frozen=True)
class Apply:
    """The forward of `module` (a module or transform) on the value `input`."""

    id: str
    module: str
    input: str

    kind: Literal["apply"] = field(default="apply", init=False)


@dataclass(frozen=True)
class Param:
    """A parameter of the linear module `module`, in PyTorch's layout."""

    id: str
    module: str
    param: ParamName

    kind: Literal["param"] = field(default="param", init=False)


Statement = Union[Leaf, OpCall, Cut, Backward, Module, Transform, Apply, Param, Grad, ZeroGrad, Optimizer, Step]
VALUE_KINDS = (Leaf, OpCall, Cut, Apply, Param, Grad)
MODULE_KINDS = (Module, Transform, Step)
SESSION_KINDS = (Grad, ZeroGrad, Optimizer, Step)  # format version 2


def is_value(st: Statement) -> bool:
    """Whether `st` defines a value (reported in `values`, usable as an input)."""
    return isinstance(st, VALUE_KINDS)


def value_inputs(st: Statement) -> tuple[str, ...]:
    """The values `st` computes from (a `grad` reads a gradient handle, not its value `of`)."""
    if isinstance(st, (Leaf, Module, Param, Transform, Grad, ZeroGrad, Optimizer, Step)):
        return ()
    if isinstance(st, OpCall):
        return st.inputs
    return (st.input,)


def module_inputs(st: Statement) -> tuple[str, ...]:
    """The module handles `st` reads."""
    if isinstance(st, (Apply, Param, Step)):
        return (st.module,)
    if isinstance(st, Transform):
        return (st.input,)
    return ()


def handle_inputs(st: Statement) -> tuple[str, ...]:
    """The gradients handles (backwards) and optimizers `st` reads, and the value a `grad` is of."""
    if isinstance(st, Grad):
        return (st.grads, st.of)
    if isinstance(st, Step):
        return (st.optimizer, st.grads)
    return ()


def ancestors(by_id: dict[str, Statement], ident: str) -> set[str]:
    """The values `ident` is computed from, itself included (unknown ids are skipped)."""
    out: set[str] = set()
    todo = [ident]
    while todo:
        x = todo.pop()
        if x in out or x not in by_id:
            continue
        out.add(x)
        todo.extend(value_inputs(by_id[x]))
    return out


def inputs_of(st: Statement) -> tuple[str, ...]:
    """Every earlier statement `st` refers to (values, module handles, gradients handles,
    optimizers)."""
    return module_inputs(st) + value_inputs(st) + handle_inputs(st)


def region_of(st: Statement) -> Region:
    if isinstance(st, (OpCall, Cut)):
        return st.region
    return "grad"


@dataclass(frozen=True)
class Program:
    statements: tuple[Statement, ...]
    # every leaf, module parameter and float value is created in it (docs/format.md#dtypes)
    dtype: str = "float32"

    def __post_init__(self) -> None:
        check_structure(self)

    def value_ids(self) -> list[str]:
        return [s.id for s in self.statements if is_value(s)]

    def by_id(self) -> dict[str, Statement]:
        return {s.id: s for s in self.statements}

    def leaves(self) -> list[Leaf]:
        return [s for s in self.statements if isinstance(s, Leaf)]

    def __len__(self) -> int:
        return len(self.statements)

    @property
    def format_version(self) -> int:
        """The oldest format version that holds the program (1 unless it has sessions)."""
        session = any(isinstance(s, SESSION_KINDS) for s in self.statements) or any(
            isinstance(s, Backward) and s.retain_graph for s in self.statements)
        return 2 if session else 1


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


def root_module(program: Program, ident: str, by_id: dict[str, Statement] | None = None) -> Module:
    """The `module` statement a module handle (a module or a chain of transforms) derives from."""
    table = by_id if by_id is not None else program.by_id()
    st = table[ident]
    while isinstance(st, (Transform, Step)):
        st = table[st.input if isinstance(st, Transform) else st.module]
    assert isinstance(st, Module), f"{ident!r} is not a module handle"
    return st
