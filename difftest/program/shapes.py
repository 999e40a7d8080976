"""Shape rules shared by the op catalog (PyTorch semantics; burn follows via rank promotion)."""

from __future__ import annotations

from collections.abc import Sequence

# the IR's rank limit and shape type, defined here because the IR's module kinds read these rules
MAX_RANK = 4
Shape = tuple[int, ...]


class ShapeError(ValueError):
    """Inputs or attributes that an op cannot take."""


def broadcast(a: Shape, b: Shape) -> Shape:
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise ShapeError(f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


def check_dim(shape: Shape, dim: object, name: str = "dim") -> int:
    if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim < len(shape):
        raise ShapeError(f"{name}={dim!r} is not a dim of a rank-{len(shape)} tensor")
    return dim


def check_rank(shape: Shape) -> Shape:
    if not 1 <= len(shape) <= MAX_RANK:
        raise ShapeError(f"result rank {len(shape)} outside 1..{MAX_RANK}")
    return shape


def matmul_shape(a: Shape, b: Shape) -> Shape:
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"matmul needs rank >= 2, got {list(a)} and {list(b)}")
    if a[-1] != b[-2]:
        raise ShapeError(f"matmul inner dims differ: {list(a)} @ {list(b)}")
    batch = broadcast(a[:-2], b[:-2]) if (a[:-2] or b[:-2]) else ()
    return tuple(batch) + (a[-2], b[-1])


def same_shapes(shapes: Sequence[Shape], what: str) -> Shape:
    first = shapes[0]
    for s in shapes[1:]:
        if s != first:
            raise ShapeError(f"{what} needs equal shapes, got {[list(x) for x in shapes]}")
    return first
