"""Full Python-side validation: schema, structure, op names, attributes, shapes and the
element budget (docs/format.md, "Bounds")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from difftest.ops.catalog import CATALOG
from difftest.ops.value_dtypes import check_value_dtypes
from difftest.program.ir import (
    Apply,
    ByKind,
    Cut,
    Grad,
    Leaf,
    Module,
    OpCall,
    Param,
    Program,
    ProgramError,
    Shape,
    Statement,
    Step,
    Transform,
    module_inputs,
    numel,
)
from difftest.program.modules import ModuleError, check_indices, forward_shape, module_kind
from difftest.program.recent import remembered
from difftest.program.schema_messages import shown_number
from difftest.program.shapes import ShapeError

# The element budget, checked before anything runs (the Rust side has the same two constants
# in rust/src/program/bounds.rs). The memory experiments (difftest/memory/) are exempt: they use
# infer_shapes, not check_program, and measure larger tensors on purpose.
MAX_TENSOR_ELEMENTS = 1_000_000  # per tensor: every value, leaf, module weight and inline tensor
MAX_PROGRAM_ELEMENTS = 4_000_000  # summed over all of those in a program

INLINE_TENSOR_TYPES = ("int_tensor", "bool_tensor")


def _tensors_held(st: Statement) -> list[tuple[str, int]]:
    """(what, elements) of the tensors a statement holds besides its value: module weights and
    biases, inline attribute tensors (gather indices, masks)."""
    if isinstance(st, Module):
        return [(name, numel(t.shape)) for name, t in st.tensors().items()]
    if isinstance(st, OpCall) and st.op in CATALOG:
        return [
            (f"attribute {a.name!r}", numel(tuple(st.attrs[a.name]["shape"])))
            for a in CATALOG[st.op].attrs
            if a.type in INLINE_TENSOR_TYPES and isinstance(st.attrs.get(a.name), dict)
        ]
    return []


# The largest magnitude of an integer in an op attribute: PyTorch's kernels take some (a
# convolution's dilation, stride, padding) as 32-bit ints, so a larger one that a shape rule lets
# through (the dilation of a one-tap kernel) would fail inside PyTorch's run, not as bad input.
INT_ATTR_MAX = 2**31 - 1


def _ints_in(v: object) -> list[int]:
    """The integers an attribute value holds (a number, a list, a list of pairs, a tensor's data)."""
    if isinstance(v, dict):
        return _ints_in(v.get("data", []))
    if isinstance(v, list):
        return [x for item in v for x in _ints_in(item)]
    return [v] if isinstance(v, int) and not isinstance(v, bool) else []


def _check_attr_ints(st: Statement, index: int) -> None:
    """Raise ProgramError naming the statement for an attribute integer beyond INT_ATTR_MAX."""
    if not isinstance(st, OpCall):
        return
    for name, v in st.attrs.items():
        big = next((x for x in _ints_in(v) if abs(x) > INT_ATTR_MAX), None)
        if big is not None:
            raise ProgramError(f"{st.op}: attribute {name!r} holds {shown_number(big)}, beyond the 32-bit range of "
                               f"attribute integers (|n| <= {INT_ATTR_MAX})", index, st.id)


class _Budget:
    """Running element count of a program; raises ProgramError naming the statement."""

    def __init__(self) -> None:
        self.total = 0

    def add(self, tensors: list[tuple[str, int]], index: int, st: Statement) -> None:
        for what, n in tensors:
            if n > MAX_TENSOR_ELEMENTS:
                raise ProgramError(
                    f"{what} would make {n} elements; the limit is {MAX_TENSOR_ELEMENTS} per tensor", index, st.id
                )
            self.total += n
        if self.total > MAX_PROGRAM_ELEMENTS:
            raise ProgramError(
                f"the program's tensors would total {self.total} elements here; the limit is "
                f"{MAX_PROGRAM_ELEMENTS} per program",
                index,
                st.id,
            )


@dataclass
class _Shapes:
    """Shape inference so far: every value's shape, and the module statement each module
    handle derives from."""

    program: Program
    shapes: dict[str, Shape] = field(default_factory=dict)
    roots: dict[str, Module] = field(default_factory=dict)


def infer_shapes(program: Program, *, bounded: bool = False) -> dict[str, Shape]:
    """Shape of every value statement; raises ProgramError naming the statement. `bounded`:
    also check the element budget, statement by statement (the first offending statement is
    named, before any later shape error)."""
    return _shapes(program, bounded) if bounded else dict(_unbounded_shapes(program))


@remembered
def _unbounded_shapes(program: Program) -> dict[str, Shape]:
    """infer_shapes without the budget, for a program asked about again and again (the model,
    root probes)."""
    return _shapes(program, False)


def _shapes(program: Program, bounded: bool) -> dict[str, Shape]:
    run = _Shapes(program)
    shapes = run.shapes
    budget = _Budget() if bounded else None
    for i, st in enumerate(program.statements):
        _SHAPES.of(st)(run, i, st)
        if budget is not None:
            held = _tensors_held(st)
            if st.id in shapes:
                held.append((st.op if isinstance(st, OpCall) else st.kind, numel(shapes[st.id])))
            budget.add(held, i, st)
            _check_attr_ints(st, i)
    return shapes


def _leaf_shape(run: _Shapes, i: int, st: Leaf) -> None:
    run.shapes[st.id] = st.shape


def _op_shape(run: _Shapes, i: int, st: OpCall) -> None:
    spec = CATALOG.get(st.op)
    if spec is None:
        raise ProgramError(f"unknown op {st.op!r}", i, st.id)
    try:
        run.shapes[st.id] = spec.shape([run.shapes[x] for x in st.inputs], st.attrs)
    except ShapeError as e:
        raise ProgramError(str(e), i, st.id) from e


def _apply_shape(run: _Shapes, i: int, st: Apply) -> None:
    run.shapes[st.id] = apply_shape(run.roots[st.module], run.shapes[st.input], i, st)
    check_apply_input(run.roots[st.module], run.program, st, i)


def _param_shape(run: _Shapes, i: int, st: Param) -> None:
    tensor = run.roots[st.module].tensor(st.param)
    assert tensor is not None  # checked by the IR
    run.shapes[st.id] = tensor.shape


def _cut_shape(run: _Shapes, i: int, st: Cut) -> None:
    run.shapes[st.id] = run.shapes[st.input]


def _grad_shape(run: _Shapes, i: int, st: Grad) -> None:
    run.shapes[st.id] = run.shapes[st.of]  # a gradient has its value's shape


def _module_root(run: _Shapes, i: int, st: Module) -> None:
    run.roots[st.id] = st


def _derived_root(run: _Shapes, i: int, st: Transform | Step) -> None:
    """A transform or a step derives from the module handle it reads."""
    run.roots[st.id] = run.roots[module_inputs(st)[0]]


def _no_shape(run: _Shapes, i: int, st: Statement) -> None:
    """Not a value, nor a module handle."""


_SHAPES: ByKind[Callable[[_Shapes, int, Any], None]] = ByKind(
    "shapes",
    leaf=_leaf_shape,
    op=_op_shape,
    cut=_cut_shape,
    backward=_no_shape,
    module=_module_root,
    transform=_derived_root,
    apply=_apply_shape,
    param=_param_shape,
    grad=_grad_shape,
    zero_grad=_no_shape,
    optimizer=_no_shape,
    step=_derived_root,
)


def apply_shape(module: Module, x: Shape, index: int, st: Statement) -> Shape:
    """The output shape of `module` applied to an input of shape `x` (its kind's declaration,
    difftest/program/modules/)."""
    try:
        return forward_shape(module_kind(module.module), module.config(), module.tensor_shapes(), x)
    except ModuleError as e:
        raise ProgramError(str(e), index, st.id) from e


def check_apply_input(module: Module, program: Program, st: Apply, index: int) -> None:
    """An index-taking kind's forward (embedding) takes a leaf of indices (modules.check_indices)."""
    kind = module_kind(module.module)
    if kind.index_bound is None:
        return
    x = program.by_id().get(st.input)
    data = x.data if isinstance(x, Leaf) else None
    try:
        check_indices(kind, module.tensor_shapes(), data, isinstance(x, Leaf) and x.require_grad)
    except ModuleError as e:
        raise ProgramError(f"input {st.input!r}: {e}", index, st.id) from e


def check_program(program: Program) -> dict[str, Shape]:
    """Everything a program must satisfy before it runs: shapes, the element budget, and ops
    that run in their inputs' dtype, never on inputs of mixed dtypes (value_dtypes.py,
    ops/dtype_support.py)."""
    check_value_dtypes(program)
    shapes = infer_shapes(program, bounded=True)
    _unbounded_shapes.put(program, dict(shapes))  # the same shapes: the model and probes ask next
    return shapes
