"""Program IR: a straight-line SSA list of statements (docs/format.md).

The IR is plain frozen dataclasses: the statements (statements.py, re-exported here) and
`Program`, which checks its structure when built (ids, references: structure.py); validation of
op attributes and shapes lives with the op catalog (`difftest/ops/validate.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from difftest.program.shapes import MAX_RANK, Shape
from difftest.program.statements import (
    CUTS,
    DEVICES,
    DISPATCH_TABLES,
    FORMAT_NAME,
    FORMAT_VERSION,
    FORMAT_VERSIONS,
    ID_PATTERN,
    KIND_NAMES,
    MODULE_KINDS,
    MODULES,
    OPTIMIZERS,
    PARAMS,
    REGIONS,
    SESSION_KINDS,
    STATEMENT_KINDS,
    TRANSFORMS,
    VALUE_KINDS,
    Apply,
    Backward,
    ByKind,
    Cut,
    CutKind,
    Device,
    Grad,
    InlineTensor,
    Leaf,
    Module,
    ModuleKind,
    OpCall,
    Optimizer,
    OptimizerKind,
    Param,
    ParamName,
    ProgramError,
    Reads,
    Region,
    Statement,
    Step,
    Transform,
    TransformKind,
    ZeroGrad,
    ancestors,
    handle_inputs,
    inputs_of,
    is_value,
    module_inputs,
    numel,
    reads,
    region_of,
    root_module,
    value_inputs,
)
from difftest.program.structure import check_structure

__all__ = [
    "CUTS",
    "DEVICES",
    "DISPATCH_TABLES",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "FORMAT_VERSIONS",
    "ID_PATTERN",
    "KIND_NAMES",
    "MAX_RANK",
    "MODULES",
    "MODULE_KINDS",
    "OPTIMIZERS",
    "PARAMS",
    "REGIONS",
    "SESSION_KINDS",
    "STATEMENT_KINDS",
    "TRANSFORMS",
    "VALUE_KINDS",
    "Apply",
    "Backward",
    "ByKind",
    "Cut",
    "CutKind",
    "Device",
    "Grad",
    "InlineTensor",
    "Leaf",
    "Module",
    "ModuleKind",
    "OpCall",
    "Optimizer",
    "OptimizerKind",
    "Param",
    "ParamName",
    "Program",
    "ProgramError",
    "Reads",
    "Region",
    "Shape",
    "Statement",
    "Step",
    "Transform",
    "TransformKind",
    "ZeroGrad",
    "ancestors",
    "handle_inputs",
    "inputs_of",
    "is_value",
    "module_inputs",
    "numel",
    "reads",
    "region_of",
    "root_module",
    "value_inputs",
]


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
