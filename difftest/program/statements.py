"""The statements of a program (the IR's vocabulary, docs/format.md): one frozen dataclass per
statement kind and the helpers that read them. `Program` (ir.py) holds them and runs the
structural checks (structure.py), which read these types."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, NamedTuple, TypeVar, Union, get_args

from difftest.program.modules import MODULE_KINDS as KIND_CATALOG
from difftest.program.modules import module_kind
from difftest.program.shapes import Shape

if TYPE_CHECKING:
    from difftest.program.ir import Program

FORMAT_NAME = "difftest-program"
FORMAT_VERSION = 2  # the newest; a program without session statements is still written as 1
FORMAT_VERSIONS = (1, 2)
ID_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Device = Literal["autodiff", "plain"]
Region = Literal["grad", "no_grad", "inference_mode"]
CutKind = Literal["detach", "without_autodiff", "autodiff"]
ModuleKind = str  # a name in difftest/program/modules/ MODULE_KINDS
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
    """A module handle (not a value) of a kind in difftest/program/modules/: `linear`
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


STATEMENT_KINDS: tuple[type[Statement], ...] = get_args(Statement)
KIND_NAMES: dict[str, type[Statement]] = {k.kind: k for k in STATEMENT_KINDS}  # JSON's "kind" -> its class

H = TypeVar("H")


class ByKind(Generic[H]):
    """One concern's dispatch over the statement kinds (the JSON form, the text, the model's
    step, the PyTorch executor, a reproducer's lines, ...): one handler per kind, looked up by
    the statement's exact class. Every kind must have its handler, checked when the table is
    built, so a new statement kind cannot be forgotten by any concern (tests/unit/test_dispatch.py
    checks every table against the kinds declared in this module)."""

    def __init__(self, concern: str, /, **handlers: H) -> None:
        """`handlers`: one per kind, by the kind's name in the JSON form (`leaf=`, `op=`, ...)."""
        missing = [name for name in KIND_NAMES if name not in handlers]
        unknown = [name for name in handlers if name not in KIND_NAMES]
        if missing or unknown:
            raise TypeError(f"{concern}: no handler for the statement kind(s) {missing}"
                            + (f"; {unknown} are not statement kinds" if unknown else ""))
        self.concern = concern
        self.handlers: dict[type, H] = {KIND_NAMES[name]: handler for name, handler in handlers.items()}
        DISPATCH_TABLES.append(self)

    def of(self, st: Statement) -> H:
        """The handler of `st`'s kind."""
        return self.handlers[type(st)]


DISPATCH_TABLES: list[ByKind[Any]] = []  # every table built so far (tests/unit/test_dispatch.py)


class Reads(NamedTuple):
    """The earlier statements a statement refers to, by role (a named tuple: built for every
    look-up, hundreds of thousands of times a campaign minute)."""

    modules: tuple[str, ...] = ()  # module handles (modules, transforms, steps)
    values: tuple[str, ...] = ()  # the values it computes from
    handles: tuple[str, ...] = ()  # gradients handles (backwards), optimizers, the value a grad is of


_NOTHING = Reads()
_READS: ByKind[Callable[[Any], Reads]] = ByKind(
    "references",
    leaf=lambda st: _NOTHING,
    op=lambda st: Reads(values=st.inputs),
    cut=lambda st: Reads(values=(st.input,)),
    backward=lambda st: Reads(values=(st.input,)),
    module=lambda st: _NOTHING,
    transform=lambda st: Reads(modules=(st.input,)),
    apply=lambda st: Reads(modules=(st.module,), values=(st.input,)),
    param=lambda st: Reads(modules=(st.module,)),
    grad=lambda st: Reads(handles=(st.grads, st.of)),  # a grad reads a gradient handle, not its value `of`
    zero_grad=lambda st: _NOTHING,
    optimizer=lambda st: _NOTHING,
    step=lambda st: Reads(modules=(st.module,), handles=(st.optimizer, st.grads)),
)


def reads(st: Statement) -> Reads:
    return _READS.handlers[type(st)](st)  # _READS.of(st), without the call


def is_value(st: Statement) -> bool:
    """Whether `st` defines a value (reported in `values`, usable as an input)."""
    return isinstance(st, VALUE_KINDS)


def value_inputs(st: Statement) -> tuple[str, ...]:
    """The values `st` computes from (a `grad` reads a gradient handle, not its value `of`)."""
    return reads(st).values


def module_inputs(st: Statement) -> tuple[str, ...]:
    """The module handles `st` reads."""
    return reads(st).modules


def handle_inputs(st: Statement) -> tuple[str, ...]:
    """The gradients handles (backwards) and optimizers `st` reads, and the value a `grad` is of."""
    return reads(st).handles


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


def carries_gradient(st: Statement) -> bool:
    """Whether a gradient flows from the statement's inputs to its result: not through an op or
    cut of a no_grad or inference_mode region, nor through a detach or without_autodiff."""
    if isinstance(st, OpCall):
        return st.region == "grad"
    if isinstance(st, Cut):
        return st.cut == "autodiff" and st.region == "grad"
    return True


def gradient_sources(by_id: dict[str, Statement], ident: str) -> set[str]:
    """The values a gradient of `ident` flows back to, itself included: its ancestors reached
    through statements that carry a gradient (`carries_gradient`)."""
    out: set[str] = set()
    todo = [ident]
    while todo:
        x = todo.pop()
        st = by_id.get(x)
        if x in out or st is None:
            continue
        out.add(x)
        if carries_gradient(st):
            todo.extend(value_inputs(st))
    return out


def depends_on(by_id: dict[str, Statement], ident: str) -> set[str]:
    """The values `ident` depends on: its ancestors and, through each gradient read among them
    (`g = grad(x; bw)`), the ancestors of that backward's root (the read's value is computed by
    the backward, from its graph)."""
    out: set[str] = set()
    todo = [ident]
    while todo:
        more = ancestors(by_id, todo.pop()) - out
        out |= more
        for x in more:
            st = by_id.get(x)
            bw = by_id.get(st.grads) if isinstance(st, Grad) else None
            if isinstance(bw, Backward):
                todo.append(bw.input)
    return out


def descendants(statements: Iterable[Statement], sources: set[str] | frozenset[str]) -> set[str]:
    """The statements computed from one of `sources` (themselves included): those whose
    `ancestors` meet them, in one pass over `statements` in program order (inputs come first)."""
    out = set(sources)
    for st in statements:
        if any(x in out for x in value_inputs(st)):
            out.add(st.id)
    return out


def inputs_of(st: Statement) -> tuple[str, ...]:
    """Every earlier statement `st` refers to (values, module handles, gradients handles,
    optimizers)."""
    r = reads(st)
    return r.modules + r.values + r.handles


def region_of(st: Statement) -> Region:
    if isinstance(st, (OpCall, Cut)):
        return st.region
    return "grad"


def root_module(program: Program, ident: str, by_id: dict[str, Statement] | None = None) -> Module:
    """The `module` statement a module handle (a module or a chain of transforms) derives from."""
    table = by_id if by_id is not None else program.by_id()
    st = table[ident]
    while isinstance(st, (Transform, Step)):
        st = table[st.input if isinstance(st, Transform) else st.module]
    assert isinstance(st, Module), f"{ident!r} is not a module handle"
    return st
