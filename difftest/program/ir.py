"""Program IR: a straight-line SSA list of statements (docs/format.md).

The IR is plain frozen dataclasses. Validation of structure lives here (ids, references);
validation of op attributes and shapes lives with the op catalog (`difftest/ops/spec.py`, `shape_rules.py`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Union

FORMAT_NAME = "difftest-program"
FORMAT_VERSION = 1
MAX_RANK = 4
ID_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Device = Literal["autodiff", "plain"]
Region = Literal["grad", "no_grad", "inference_mode"]
CutKind = Literal["detach", "without_autodiff", "autodiff"]
ModuleKind = Literal["linear", "dropout"]
TransformKind = Literal["valid", "train", "no_grad", "freeze", "unfreeze"]
ParamName = Literal["weight", "bias"]

DEVICES: tuple[Device, ...] = ("autodiff", "plain")
REGIONS: tuple[Region, ...] = ("grad", "no_grad", "inference_mode")
CUTS: tuple[CutKind, ...] = ("detach", "without_autodiff", "autodiff")
MODULES: tuple[ModuleKind, ...] = ("linear", "dropout")
TRANSFORMS: tuple[TransformKind, ...] = ("valid", "train", "no_grad", "freeze", "unfreeze")
PARAMS: tuple[ParamName, ...] = ("weight", "bias")

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
    id: str
    input: str

    kind: Literal["backward"] = field(default="backward", init=False)


@dataclass(frozen=True)
class InlineTensor:
    """A float tensor given inline (module weights): row-major data, float32 values."""

    shape: Shape
    data: tuple[float, ...]


@dataclass(frozen=True)
class Module:
    """A module handle (not a value): `linear` (weight [out, in], optional bias [out]) or
    `dropout` (probability p)."""

    id: str
    module: ModuleKind
    weight: InlineTensor | None = None
    bias: InlineTensor | None = None
    p: float = 0.0

    kind: Literal["module"] = field(default="module", init=False)

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


Statement = Union[Leaf, OpCall, Cut, Backward, Module, Transform, Apply, Param]
VALUE_KINDS = (Leaf, OpCall, Cut, Apply, Param)
MODULE_KINDS = (Module, Transform)


def is_value(st: Statement) -> bool:
    """Whether `st` defines a value (reported in `values`, usable as an input)."""
    return isinstance(st, VALUE_KINDS)


def value_inputs(st: Statement) -> tuple[str, ...]:
    """The values `st` reads."""
    if isinstance(st, (Leaf, Module, Param)):
        return ()
    if isinstance(st, OpCall):
        return st.inputs
    if isinstance(st, Transform):
        return ()
    return (st.input,)


def module_inputs(st: Statement) -> tuple[str, ...]:
    """The module handles `st` reads."""
    if isinstance(st, (Apply, Param)):
        return (st.module,)
    if isinstance(st, Transform):
        return (st.input,)
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
    """Every earlier statement `st` refers to (values and module handles)."""
    return module_inputs(st) + value_inputs(st)


def region_of(st: Statement) -> Region:
    if isinstance(st, (OpCall, Cut)):
        return st.region
    return "grad"


@dataclass(frozen=True)
class Program:
    statements: tuple[Statement, ...]

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


def _kind_name(st: Statement) -> str:
    return st.kind


def check_structure(program: Program) -> None:
    """Ids unique and well-formed; inputs refer to earlier value statements and module fields
    to earlier module handles; leaf and module data fit their shapes."""
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
        for ref in module_inputs(st):
            field_name = "input" if isinstance(st, Transform) else "module"
            if ref not in seen:
                raise ProgramError(f"{field_name} {ref!r} refers to a later or unknown statement", i, st.id)
            if not isinstance(seen[ref], MODULE_KINDS):
                raise ProgramError(f"{field_name} {ref!r} refers to a {_kind_name(seen[ref])} statement, "
                                   "not a module or transform", i, st.id)
        if isinstance(st, Module):
            _check_module(st, i)
        if isinstance(st, Transform) and st.transform not in TRANSFORMS:
            raise ProgramError(f"unknown transform {st.transform!r}", i, st.id)
        if isinstance(st, Param):
            if st.param not in PARAMS:
                raise ProgramError(f"unknown param {st.param!r}", i, st.id)
            root = root_module(program, st.module, seen)
            if root.module != "linear":
                raise ProgramError(f"module {st.module!r} is a {root.module}, which has no parameters", i, st.id)
            if st.param == "bias" and root.bias is None:
                raise ProgramError(f"module {st.module!r} is a linear without a bias", i, st.id)
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


def _check_module(st: Module, i: int) -> None:
    if st.module not in MODULES:
        raise ProgramError(f"unknown module {st.module!r}", i, st.id)
    if st.module == "dropout":
        if st.weight is not None or st.bias is not None:
            raise ProgramError("a dropout module has no weight or bias", i, st.id)
        if not (0.0 <= st.p <= 1.0):
            raise ProgramError(f"p = {st.p!r} is outside [0, 1]", i, st.id)
        return
    w = st.weight
    if w is None:
        raise ProgramError("a linear module needs a weight", i, st.id)
    if len(w.shape) != 2 or any(d < 1 for d in w.shape):
        raise ProgramError(f"weight shape {list(w.shape)} is not [out, in] with dims >= 1", i, st.id)
    if len(w.data) != numel(w.shape):
        raise ProgramError(f"weight data has {len(w.data)} elements, shape {list(w.shape)} needs "
                           f"{numel(w.shape)}", i, st.id)
    b = st.bias
    if b is not None:
        if b.shape != (w.shape[0],):
            raise ProgramError(f"bias has shape {list(b.shape)} but the weight [out, in] = {list(w.shape)} "
                               f"needs [{w.shape[0]}]", i, st.id)
        if len(b.data) != w.shape[0]:
            raise ProgramError(f"bias data has {len(b.data)} elements, needs {w.shape[0]}", i, st.id)


def root_module(program: Program, ident: str, by_id: dict[str, Statement] | None = None) -> Module:
    """The `module` statement a module handle (a module or a chain of transforms) derives from."""
    table = by_id if by_id is not None else program.by_id()
    st = table[ident]
    while isinstance(st, Transform):
        st = table[st.input]
    assert isinstance(st, Module), f"{ident!r} is not a module handle"
    return st
