"""Shape rules: an op's output shape from its input shapes and attributes (PyTorch semantics;
`ShapeError` when the op cannot take them), and the extents its accumulations reduce over."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from difftest.program.ir import Shape, numel
from difftest.program.shapes import ShapeError, broadcast, check_dim, matmul_shape, same_shapes

Attrs = dict[str, Any]


def same(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    return shapes[0]


def bcast(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    return broadcast(shapes[0], shapes[1])


def to_one(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    return (1,)


def keep_dim(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    d = check_dim(s, attrs["dim"])
    return s[:d] + (1,) + s[d + 1 :]


def along_dim(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    check_dim(shapes[0], attrs["dim"])
    return shapes[0]


def reshape_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    new = tuple(attrs["shape"])
    if numel(new) != numel(shapes[0]):
        raise ShapeError(f"reshape {list(shapes[0])} -> {list(new)} changes the element count")
    return new


def transpose_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    return s[:-2] + (s[-1], s[-2])


def swap_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = list(shapes[0])
    a, b = check_dim(shapes[0], attrs["dim1"], "dim1"), check_dim(shapes[0], attrs["dim2"], "dim2")
    s[a], s[b] = s[b], s[a]
    return tuple(s)


def permute_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s, axes = shapes[0], attrs["axes"]
    if sorted(axes) != list(range(len(s))):
        raise ShapeError(f"permute axes {axes} are not a permutation of 0..{len(s) - 1}")
    return tuple(s[a] for a in axes)


def unsqueeze_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s, d = shapes[0], attrs["dim"]
    if not 0 <= d <= len(s):
        raise ShapeError(f"unsqueeze dim={d} outside 0..{len(s)}")
    return s[:d] + (1,) + s[d:]


def squeeze_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    d = check_dim(s, attrs["dim"])
    if s[d] != 1:
        raise ShapeError(f"squeeze dim={d} has size {s[d]}, not 1")
    return s[:d] + s[d + 1 :]


def flip_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    for a in attrs["axes"]:
        check_dim(shapes[0], a, "axes")
    if len(set(attrs["axes"])) != len(attrs["axes"]):
        raise ShapeError("flip axes repeat")
    return shapes[0]


def slice_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s, ranges = list(shapes[0]), attrs["ranges"]
    if len(ranges) > len(s):
        raise ShapeError(f"slice has {len(ranges)} ranges for a rank-{len(s)} tensor")
    for i, (a, b) in enumerate(ranges):
        if not 0 <= a < b <= s[i]:
            raise ShapeError(f"slice range {[a, b]} does not fit dim {i} of size {s[i]}")
        s[i] = b - a
    return tuple(s)


def cat_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    d = check_dim(shapes[0], attrs["dim"])
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or s[:d] + s[d + 1 :] != shapes[0][:d] + shapes[0][d + 1 :]:
            raise ShapeError(f"cat along {d} needs equal other dims, got {[list(x) for x in shapes]}")
    return shapes[0][:d] + (sum(s[d] for s in shapes),) + shapes[0][d + 1 :]


def stack_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = same_shapes(shapes, "stack")
    d = attrs["dim"]
    if not 0 <= d <= len(s):
        raise ShapeError(f"stack dim={d} outside 0..{len(s)}")
    return s[:d] + (len(shapes),) + s[d:]


def expand_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s, target = shapes[0], tuple(attrs["shape"])
    if len(target) < len(s) or broadcast(s, target) != target:
        raise ShapeError(f"cannot expand {list(s)} to {list(target)}")
    return target


def repeat_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    d = check_dim(s, attrs["dim"])
    if attrs["times"] < 1:
        raise ShapeError("repeat_dim times must be >= 1")
    return s[:d] + (s[d] * attrs["times"],) + s[d + 1 :]


def gather_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    d = check_dim(s, attrs["dim"])
    idx = attrs["indices"]
    ishape = tuple(idx["shape"])
    if len(ishape) != len(s) or any(ishape[i] != s[i] for i in range(len(s)) if i != d):
        raise ShapeError(f"gather indices shape {list(ishape)} must match {list(s)} off dim {d}")
    if any(not 0 <= i < s[d] for i in idx["data"]):
        raise ShapeError(f"gather index out of range for dim {d} of size {s[d]}")
    return ishape


def select_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    d = check_dim(s, attrs["dim"])
    idx = attrs["indices"]
    if not idx or any(not 0 <= i < s[d] for i in idx):
        raise ShapeError(f"select indices {idx} out of range for dim {d} of size {s[d]}")
    return s[:d] + (len(idx),) + s[d + 1 :]


def mask_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = same_shapes(shapes, "mask ops")
    if tuple(attrs["mask"]["shape"]) != s:
        raise ShapeError(f"mask shape {attrs['mask']['shape']} must equal input shape {list(s)}")
    return s


def matmul_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    return matmul_shape(shapes[0], shapes[1])


# ---------------------------------------------------------------- reduced extents (accumulating ops)

def extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    return numel(shapes[0])


def dim_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    return shapes[0][attrs["dim"]]


def matmul_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    return shapes[0][-1]
