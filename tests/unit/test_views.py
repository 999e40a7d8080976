"""The catalog's declared views (`OpSpec.view`: the strides of PyTorch's result, which the
layout-sensitive checks read instead of running the op) against the strides PyTorch's result
really has (on dims of more than one element), for every op that declares one, on contiguous
inputs and, where the op takes any layout, on a transposed one."""

from __future__ import annotations

import pytest

from difftest.ops.catalog import OPS
from difftest.ops.lowering import result_strides
from difftest.program.ir import Shape
from difftest.program.shapes import ShapeError
from difftest.strategies.choices import RandomChoices

VIEWS = [op for op in OPS if op.view is not None and op.arity == 1]


def contiguous(shape: Shape) -> tuple[int, ...]:
    out, n = [], 1
    for size in reversed(shape):
        out.append(n)
        n *= size
    return tuple(reversed(out))


def transposed(shape: Shape) -> tuple[int, ...]:
    """The strides of a contiguous tensor of `shape` with its last two dims swapped, swapped
    back: a non-contiguous layout of `shape`."""
    if len(shape) < 2:
        return contiguous(shape)
    swapped = shape[:-2] + (shape[-1], shape[-2])
    s = contiguous(swapped)
    return s[:-2] + (s[-1], s[-2])


def significant(strides: tuple[int, ...], shape: Shape) -> tuple[int | None, ...]:
    """The strides that say where elements are: a dim of size 1 has one element, whatever its stride."""
    return tuple(st if size > 1 else None for st, size in zip(strides, shape, strict=True))


@pytest.mark.parametrize("spec", VIEWS, ids=lambda s: s.name)
def test_declared_view_is_pytorchs(spec: object) -> None:
    from difftest.ops.spec import OpSpec

    assert isinstance(spec, OpSpec)
    checked = 0
    for seed in range(60):
        c = RandomChoices(seed)
        rank = c.integer(max(spec.min_rank, 1), 3)
        shape = tuple(c.integer(1, 4) for _ in range(rank))
        attrs = spec.sample_attrs(c, [shape])
        if attrs is None:
            continue
        try:
            out = spec.shape([shape], attrs)
        except ShapeError:
            continue
        layouts = [contiguous(shape)] + ([] if spec.view_needs_contiguous else [transposed(shape)])
        for strides in layouts:
            declared, real = spec.view(shape, strides, attrs), result_strides(spec, [shape], [strides], attrs)
            assert len(declared) == len(out)
            assert significant(declared, out) == significant(real, out), (shape, strides, attrs, declared, real)
            checked += 1
    assert checked >= 20, f"{spec.name}: only {checked} layouts drawn"
