"""Program IR: a straight-line SSA list of statements (docs/format.md).

The IR is plain frozen dataclasses. Validation of structure lives here (ids, references);
validation of op attributes and shapes lives with the op catalog (`catalog.py`).
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

DEVICES: tuple[Device, ...] = ("autodiff", "plain")
REGIONS: tuple[Region, ...] = ("grad", "no_grad", "inference_mode")
CUTS: tuple[CutKind, ...] = ("detach", "without_autodiff", "autodiff")

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


Statement = Union[Leaf, OpCall, Cut, Backward]
ValueStatement = Union[Leaf, OpCall, Cut]


def inputs_of(st: Statement) -> tuple[str, ...]:
    if isinstance(st, Leaf):
        return ()
    if isinstance(st, OpCall):
        return st.inputs
    return (st.input,)


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
        return [s.id for s in self.statements if not isinstance(s, Backward)]

    def by_id(self) -> dict[str, Statement]:
        return {s.id: s for s in self.statements}

    def leaves(self) -> list[Leaf]:
        return [s for s in self.statements if isinstance(s, Leaf)]

    def __len__(self) -> int:
        return len(self.statements)


def check_structure(program: Program) -> None:
    """Ids unique and well-formed; inputs refer to earlier value statements; leaf data fits."""
    seen_values: set[str] = set()
    seen: set[str] = set()
    for i, st in enumerate(program.statements):
        if not ID_PATTERN.match(st.id):
            raise ProgramError(f"id {st.id!r} does not match {ID_PATTERN.pattern}", i, st.id)
        if st.id in seen:
            raise ProgramError("duplicate id", i, st.id)
        for ref in inputs_of(st):
            if ref not in seen_values:
                what = "a later or unknown" if ref not in seen else "a backward"
                raise ProgramError(f"input {ref!r} refers to {what} statement", i, st.id)
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
        seen.add(st.id)
        if not isinstance(st, Backward):
            seen_values.add(st.id)
