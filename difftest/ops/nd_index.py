"""gather_nd and scatter_nd (add): burn's multi-dimensional indexing (`Tensor::gather_nd`,
`Tensor::scatter_nd` with `IndexingUpdateOp::Add`), PyTorch's advanced indexing
(`x[tuple(idx.unbind(-1))]`, `index_put(..., accumulate=True)`). The indices are an `[n, k]`
integer tensor: n index tuples, each naming one slice `x[i0, ..., ik-1]` of the leading k dims,
repeats allowed (they accumulate: gather_nd's gradient, scatter_nd's values). Their attribute
sampler, partner rule, shape rules and extent; and those of scatter_nd with the other updates
(replace, multiply, max, min), which write each slice at most once, as burn's backwards of them
assume (index_reduce.py says why), and whose PyTorch side scatters rows of the input viewed as a
[slices, slice size] table (`nd_rows`). Torch-free at import."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from difftest.choices import Choices
from difftest.ops.sampling import Partners
from difftest.program.ir import Shape, numel
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


def indices_nd_distinct(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    """k leading dims (1 to the rank) and 1 to MAX_TUPLES distinct index tuples into them."""
    s = shapes[0]
    k = c.integer(1, len(s))
    pool = list(range(numel(s[:k])))
    rows = [pool.pop(c.integer(0, len(pool) - 1)) for _ in range(c.integer(1, min(MAX_TUPLES, len(pool))))]
    return {"indices": {"shape": [len(rows), k], "data": [i for r in rows for i in _unravel(r, s[:k])]}}


def _unravel(row: int, dims: Sequence[int]) -> list[int]:
    out = []
    for n in reversed(dims):
        row, i = divmod(row, n)
        out.append(i)
    return out[::-1]


def _rows(x: Shape, attrs: Attrs) -> list[int]:
    """Each index tuple's row in x viewed as [numel(x[:k]), numel(x[k:])]."""
    n, k = attrs["indices"]["shape"]
    data = attrs["indices"]["data"]
    rows = []
    for t in range(n):
        r = 0
        for j in range(k):
            r = r * x[j] + data[t * k + j]
        rows.append(r)
    return rows


def scatter_nd_distinct_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    out = scatter_nd_rule(shapes, attrs)
    if len(set(_rows(shapes[0], attrs))) != attrs["indices"]["shape"][0]:
        raise ShapeError(f"indices {attrs['indices']['data']} repeat a tuple "
                         "(burn's backward of this update assumes distinct positions)")
    return out


def nd_rows(attrs: Attrs, shapes: Sequence[Shape]) -> Attrs:
    """The PyTorch side's view of x as a table of slices: `nd_table` [slices, slice size], the
    slice size alone (`nd_width`), and the row of each index tuple (`nd_rows`)."""
    x = shapes[0]
    k = attrs["indices"]["shape"][1]
    width = numel(x[k:])
    return {"nd_table": [numel(x[:k]), width], "nd_width": width, "nd_rows": _rows(x, attrs)}


def scatter_nd_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    return int(attrs["indices"]["shape"][0]) + 1  # the destination plus every tuple that may land on it
