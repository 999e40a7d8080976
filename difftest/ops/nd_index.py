"""gather_nd and scatter_nd (add): burn's multi-dimensional indexing (`Tensor::gather_nd`,
`Tensor::scatter_nd` with `IndexingUpdateOp::Add`), PyTorch's advanced indexing
(`x[tuple(idx.unbind(-1))]`, `index_put(..., accumulate=True)`). The indices are an `[n, k]`
integer tensor: n index tuples, each naming one slice `x[i0, ..., ik-1]` of the leading k dims,
repeats allowed (they accumulate: gather_nd's gradient, scatter_nd's values). Their attribute
sampler, partner rule, shape rules and extent. Torch-free at import."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from difftest.choices import Choices
from difftest.ops.sampling import Partners
from difftest.program.ir import Shape
from difftest.program.shapes import ShapeError

Attrs = dict[str, Any]

MAX_TUPLES = 4  # index tuples drawn: 1 to 4


def indices_nd(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    """k leading dims (1 to the rank) and 1 to MAX_TUPLES index tuples into them."""
    s = shapes[0]
    k = c.integer(1, len(s))
    n = c.integer(1, MAX_TUPLES)
    data = [c.integer(0, s[j] - 1) for _ in range(n) for j in range(k)]
    return {"indices": {"shape": [n, k], "data": data}}


def _check(x: Shape, attrs: Attrs, op: str) -> Shape:
    """The shape of the slices the indices select: [n] + x[k:]."""
    idx = attrs["indices"]
    ishape = tuple(idx["shape"])
    if len(ishape) != 2:
        raise ShapeError(f"{op} indices must be [n, k], got {list(ishape)}")
    n, k = ishape
    if not 1 <= k <= len(x):
        raise ShapeError(f"{op} indices index {k} leading dims of a rank-{len(x)} input")
    for t in range(n):
        for j in range(k):
            i = idx["data"][t * k + j]
            if not 0 <= i < x[j]:
                raise ShapeError(f"{op} index {i} out of range for dim {j} of size {x[j]}")
    return (n,) + x[k:]


def gather_nd_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    return _check(shapes[0], attrs, "gather_nd")


def scatter_nd_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    x, values = shapes[0], shapes[1]
    want = _check(x, attrs, "scatter_nd")
    if values != want:
        raise ShapeError(f"scatter_nd values shape {list(values)} must be {list(want)} (n, then x's dims after k)")
    return x


def _slices(c: Choices, first: Shape, attrs: Attrs, max_dim: int) -> Iterator[Shape]:
    yield gather_nd_rule([first], attrs)


SLICES = Partners("nd-slices", _slices, after_attrs=True)  # values of the selected slices' shape


def scatter_nd_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    return int(attrs["indices"]["shape"][0]) + 1  # the destination plus every tuple that may land on it
