"""scatter and select_assign with the updates other than add: replace, multiply, max, min
(burn's `IndexingUpdateOp::{Assign, Mul, Max, Min}`; PyTorch's `scatter`, `scatter_reduce` and
`index_reduce` with `include_self=True`). Their entries' attribute samplers, shape rules and
domains; the domains serve scatter_nd's updates too (nd_index.py). Torch-free at import:
predicates use tensor methods of their arguments.

Every one of them writes each destination position at most once: burn's backwards of these
updates assume it (its source says so: with a repeated position the gradient is undefined), and
with the replacing update which value lands is undefined in both frameworks. So the samplers
draw distinct positions and the shape rules reject repeats, as for select_replace.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from difftest.choices import Choices
from difftest.ops.domains import KINK_GAP, Domain, off_or_on
from difftest.ops.tensor_ops import scatter_rule, select_replace_rule
from difftest.program.ir import Shape, numel
from difftest.program.shapes import ShapeError

if TYPE_CHECKING:
    from torch import Tensor

Attrs = dict[str, Any]

MAX_WRITES = 4  # positions written along dim: 1 to this many (and at most the dim's size)

# ---------------------------------------------------------------- samplers


def scatter_distinct(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    """Indices of the destination's shape but along dim (1 to MAX_WRITES there), each line
    along dim naming distinct positions."""
    s = shapes[0]
    d = c.integer(0, len(s) - 1)
    k = c.integer(1, min(MAX_WRITES, s[d]))
    ishape = list(s)
    ishape[d] = k
    lines = numel(tuple(ishape)) // k
    picked = [_distinct(c, s[d], k) for _ in range(lines)]
    # lay the lines out in the indices' row-major order: position j of line l sits at
    # (outer, j, inner) with l = outer * inner_size + inner
    inner = numel(tuple(s[d + 1 :]))
    data = [0] * (lines * k)
    for line, positions in enumerate(picked):
        outer, rest = divmod(line, inner)
        for j, p in enumerate(positions):
            data[(outer * k + j) * inner + rest] = p
    return {"dim": d, "indices": {"shape": ishape, "data": data}}


def select_distinct(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    """1 to MAX_WRITES distinct indices along a dim."""
    s = shapes[0]
    d = c.integer(0, len(s) - 1)
    return {"dim": d, "indices": _distinct(c, s[d], c.integer(1, min(MAX_WRITES, s[d])))}


def _distinct(c: Choices, size: int, k: int) -> list[int]:
    pool = list(range(size))
    return [pool.pop(c.integer(0, len(pool) - 1)) for _ in range(k)]


# ---------------------------------------------------------------- shape rules


def scatter_distinct_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    out = scatter_rule(shapes, attrs)
    if _lines_repeat(attrs["indices"]["shape"], attrs["indices"]["data"], attrs["dim"]):
        raise ShapeError(f"indices {attrs['indices']['data']} repeat a position along dim {attrs['dim']} "
                         "(burn's backward of this update assumes distinct positions)")
    return out


def select_distinct_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    return select_replace_rule(shapes, attrs)


def _lines_repeat(shape: Sequence[int], data: Sequence[int], dim: int) -> bool:
    """Whether some line of the indices along `dim` (the other coordinates fixed) names a
    position twice."""
    k = shape[dim]
    inner = numel(tuple(shape[dim + 1 :]))
    outer = numel(tuple(shape[:dim]))
    for o in range(outer):
        for i in range(inner):
            line = [data[(o * k + j) * inner + i] for j in range(k)]
            if len(set(line)) != k:
                return True
    return False


# ---------------------------------------------------------------- domains


def _at_written(x: Tensor, attrs: Attrs) -> Tensor:
    """The destination's elements at the positions the update writes, in the values' shape."""
    idx = attrs["indices"]
    if "dim" not in attrs:  # scatter_nd: [n, k] index tuples, each selecting a slice
        return x[tuple(x.new_tensor(idx["data"]).long().reshape(idx["shape"]).unbind(-1))]
    if isinstance(idx, dict):  # scatter: an index per value
        at = x.new_tensor(idx["data"]).long().reshape(idx["shape"])
        return x.gather(attrs["dim"], at)
    return x.index_select(attrs["dim"], x.new_tensor(idx).long())


def _gap_to_values(xs: Sequence[Tensor], attrs: Attrs) -> Tensor:
    return _at_written(xs[0].double(), attrs) - xs[1].double()


NO_TIES_WRITTEN = Domain(
    "no-ties-written",
    "max/min of a written value equal to the destination's: PyTorch splits the gradient evenly, "
    "burn gives all of it to both; |destination - value| >= 0.01 where written",
    lambda xs, a: bool((_gap_to_values(xs, a).abs() >= KINK_GAP).all()),
    tags=("kink",),
    at_kinks=lambda xs, a: bool(off_or_on(_gap_to_values(xs, a)).all()),
)


PRODUCT_WRITTEN = Domain(
    "product-written",
    "PyTorch's gradient of a multiplying update divides the product by each factor, which loses "
    "the gradient where the product underflows: factors |x| in [0.25, 2] (zero excluded too: the "
    "generator evaluates in float32, where a float64 program's tiny values are zeros)",
    lambda xs, a: all(bool(((x.abs() >= 0.25) & (x.abs() <= 2.0)).all()) for x in xs),
    ((0.3, 1.8),),
    boundary=((0.25, -0.25, 2.0, -2.0, 1.0),),
)
