"""The model's layout of every op's PyTorch result against PyTorch's own, on inputs of the
layouts programs make (contiguous, and with the last two dims swapped back from a transpose),
and every declared view (`OpSpec.view`: how a view's strides follow its input's) against the
strides of PyTorch's view, on dims of more than one element.

The layout decides what the model predicts downstream: a `reshape` (PyTorch's
`x.contiguous().view(...)`) of a contiguous value is a view, which under no_grad reports
`requires_grad`; of any other value it is a copy, which does not. An op whose result PyTorch
lays out after its inputs (advanced indexing, `index_put` on a clone) but which declares no
`view`, `keeps_layout` or `measured_layout` is predicted contiguous, and a campaign then
reports PyTorch's flags as wrong."""

from __future__ import annotations

import pytest

from difftest.divergences.states import TorchState
from difftest.ops.catalog import OPS
from difftest.ops.lowering import result_strides
from difftest.ops.spec import OpSpec
from difftest.ops.strides import contiguous_strides as contiguous
from difftest.oracle.base_states import _torch_op
from difftest.program.ir import Shape
from difftest.program.shapes import ShapeError
from difftest.program.statements import OpCall
from difftest.strategies.choices import RandomChoices

MAX_DIM = 4


def transposed(shape: Shape) -> tuple[int, ...]:
    """The strides of a contiguous tensor of `shape` with its last two dims swapped, swapped
    back: a non-contiguous layout of `shape`."""
    if len(shape) < 2:
        return contiguous(shape)
    s = contiguous(shape[:-2] + (shape[-1], shape[-2]))
    return s[:-2] + (s[-1], s[-2])


def significant(strides: tuple[int, ...], shape: Shape) -> tuple[int | None, ...]:
    """The strides that say where elements are: a dim of size 1 has one element, whatever its stride."""
    return tuple(st if size > 1 else None for st, size in zip(strides, shape, strict=True))


def draw_call(spec: OpSpec, c: RandomChoices) -> tuple[list[Shape], dict[str, object]] | None:
    """Input shapes and attributes as the generator draws them (first input, partners, attributes)."""
    if spec.first_input is not None:
        first = spec.first_input.draw(c)
    else:
        first = tuple(c.integer(1, MAX_DIM) for _ in range(c.integer(max(spec.min_rank, 1), 4)))
    shapes = [first]
    attrs: dict[str, object] | None = {}
    if spec.partners is not None and not spec.partners.after_attrs:
        shapes += list(spec.partners.draw(c, first, {}, MAX_DIM))
    attrs = spec.sample_attrs(c, shapes)
    if attrs is None:
        return None
    if spec.partners is not None and spec.partners.after_attrs:
        shapes += list(spec.partners.draw(c, first, attrs, MAX_DIM))
    try:
        spec.shape(shapes, attrs)
    except ShapeError:
        return None
    return shapes, attrs


@pytest.mark.parametrize("spec", OPS, ids=lambda s: s.name)
def test_predicted_layout_is_pytorchs(spec: OpSpec) -> None:
    checked = 0
    for seed in range(40):
        drawn = draw_call(spec, RandomChoices(seed))
        if drawn is None:
            continue
        shapes, attrs = drawn
        out = spec.shape(shapes, attrs)
        names = tuple(f"x{i}" for i in range(len(shapes)))
        table = dict(zip(names, shapes, strict=True)) | {"y": out}
        for layout in (contiguous, transposed):
            strides = [layout(s) for s in shapes]
            ins = [TorchState(False, True, False, False, strides=st) for st in strides]
            predicted = _torch_op(OpCall("y", spec.name, names, attrs), ins, table, None).strides
            try:
                real = result_strides(spec, shapes, strides, attrs)
            except (RuntimeError, IndexError, ValueError) as e:  # values of 0.5 outside the op's domain
                pytest.fail(f"{spec.name} did not run on {shapes} {attrs}: {e}")
            assert significant(predicted, out) == significant(real, out), (shapes, strides, attrs, predicted, real)
            checked += 1
    assert checked >= 10, f"{spec.name}: only {checked} calls drawn"


@pytest.mark.parametrize("spec", [op for op in OPS if op.view is not None and op.arity == 1], ids=lambda s: s.name)
def test_declared_view_is_pytorchs(spec: OpSpec) -> None:
    checked = 0
    for seed in range(60):
        c = RandomChoices(seed)
        shape = tuple(c.integer(1, MAX_DIM) for _ in range(c.integer(max(spec.min_rank, 1), 3)))
        attrs = spec.sample_attrs(c, [shape])
        if attrs is None:
            continue
        try:
            out = spec.shape([shape], attrs)
        except ShapeError:
            continue
        assert spec.view is not None
        for strides in [contiguous(shape)] + ([] if spec.view_needs_contiguous else [transposed(shape)]):
            declared, real = spec.view(shape, strides, attrs), result_strides(spec, [shape], [strides], attrs)
            assert len(declared) == len(out)
            assert significant(declared, out) == significant(real, out), (shape, strides, attrs, declared, real)
            checked += 1
    assert checked >= 20, f"{spec.name}: only {checked} layouts drawn"
