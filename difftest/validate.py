"""Full Python-side validation: schema, structure, op names, attributes and shapes."""

from __future__ import annotations

from .catalog import CATALOG
from .ir import Apply, Cut, Leaf, Module, OpCall, Param, Program, ProgramError, Shape, Statement, Transform
from .shapes import ShapeError


def infer_shapes(program: Program) -> dict[str, Shape]:
    """Shape of every value statement; raises ProgramError naming the statement."""
    shapes: dict[str, Shape] = {}
    roots: dict[str, Module] = {}  # module handle -> the module statement it derives from
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
        elif isinstance(st, Cut):
            shapes[st.id] = shapes[st.input]
        elif isinstance(st, Module):
            roots[st.id] = st
        elif isinstance(st, Transform):
            roots[st.id] = roots[st.input]
        elif isinstance(st, Apply):
            shapes[st.id] = apply_shape(roots[st.module], shapes[st.input], i, st)
        elif isinstance(st, Param):
            root = roots[st.module]
            assert root.weight is not None  # checked by the IR
            shapes[st.id] = root.weight.shape if st.param == "weight" else (root.out_features,)
    return shapes


def apply_shape(module: Module, x: Shape, index: int, st: Statement) -> Shape:
    """The output shape of `module` applied to an input of shape `x`."""
    if module.module == "dropout":
        return x
    if not x or x[-1] != module.in_features:
        raise ProgramError(
            f"linear with in = {module.in_features} applied to an input of shape {list(x)} "
            f"(the last dim must be {module.in_features})",
            index,
            st.id,
        )
    return x[:-1] + (module.out_features,)


def check_program(program: Program) -> dict[str, Shape]:
    return infer_shapes(program)
