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
    carries_gradient,
    depends_on,
    descendants,
    gradient_sources,
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
    "CHECKPOINTING",
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
    "carries_gradient",
    "depends_on",
    "descendants",
    "gradient_sources",
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


# burn's GradientCheckpointingStrategy values, as a program names them; "disabled" is burn's default
CHECKPOINTING = ("disabled", "balanced")


@dataclass(frozen=True)
class Program:
    statements: tuple[Statement, ...]
    # every leaf, module parameter and float value is created in it (docs/format.md#dtypes)
    dtype: str = "float32"
    # burn's gradient-checkpointing strategy for the autodiff device
    # (docs/format.md#gradient-checkpointing); PyTorch runs every program the same way
    checkpointing: str = "disabled"

    def __post_init__(self) -> None:
        if self.checkpointing not in CHECKPOINTING:
            raise ProgramError(f"unknown gradient_checkpointing {self.checkpointing!r} "
                               f"(known: {', '.join(CHECKPOINTING)})")
        check_structure(self)

    def with_statements(self, statements: tuple[Statement, ...]) -> Program:
        """A checked program of `statements` with this program's dtype and checkpointing: what
        a shrunk, localised or rebuilt variant of it must keep to fail the same way."""
        return Program(statements, self.dtype, self.checkpointing)

    def prefix(self, n: int) -> Program:
        """The program of the first `n` statements, unchecked: each statement's structure check
        reads only the statements before it and the dtype, which it shares with this checked
        program (root probes take many prefixes of one program)."""
        return _unchecked(self.statements[:n], self.dtype, self.checkpointing)

    def rerooted(self, index: int, root: str) -> Program:
        """The statements before `index` (a backward), then that backward rooted at `root`, a
        value defined before it: a root probe's program (difftest/oracle/probes.py), unchecked
        as `prefix` is (the backward keeps its id; its root is an earlier value)."""
        bw = self.statements[index]
        assert isinstance(bw, Backward), (index, bw)
        return self.prefix(index).extended(Backward(bw.id, root))

    def extended(self, backward: Backward) -> Program:
        """This program, then `backward`, whose id is new and whose root is a value of it (the
        caller's to ensure), unchecked as `prefix` is."""
        return _unchecked((*self.statements, backward), self.dtype, self.checkpointing)

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


def _unchecked(statements: tuple[Statement, ...], dtype: str, checkpointing: str) -> Program:
    """A Program made without `check_structure` (Program.prefix says when that is sound)."""
    program = object.__new__(Program)
    object.__setattr__(program, "statements", statements)
    object.__setattr__(program, "dtype", dtype)
    object.__setattr__(program, "checkpointing", checkpointing)
    return program
