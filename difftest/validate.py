"""Full Python-side validation: schema, structure, op names, attributes and shapes."""

from __future__ import annotations

from .catalog import CATALOG
from .ir import Backward, Leaf, OpCall, Program, ProgramError, Shape
from .shapes import ShapeError


def infer_shapes(program: Program) -> dict[str, Shape]:
    """Shape of every value statement; raises ProgramError naming the statement."""
    shapes: dict[str, Shape] = {}
    for i, st in enumerate(program.statements):
        if isinstance(st, Leaf):
            shapes[st.id] = st.shape
        elif isinstance(st, OpCall):
            spec = CATALOG.get(st.op)
            if spec is None:
                raise ProgramError(f"unknown op {st.op!r}", i, st.id)
            try:
                shapes[st.id] = spec.shape([shapes[x] for x in st.inputs], st.attrs)
            except ShapeError as e:
                raise ProgramError(str(e), i, st.id) from e
        elif isinstance(st, Backward):
            continue
        else:
            shapes[st.id] = shapes[st.input]
    return shapes


def check_program(program: Program) -> dict[str, Shape]:
    return infer_shapes(program)
