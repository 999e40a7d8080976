"""burn's module functions: shape rules, reduced extents, attribute samplers, partner
shapes and input domains of the convolution, pooling, embedding and interpolation ops.

Conventions of PyTorch's `torch.nn.functional` (an image is `[N, C, H, W]`, a sequence
`[N, C, L]`, a convolution weight `[C_out, C_in / groups, k...]`, a transposed convolution's
`[C_in, C_out / groups, k...]`). Torch-free at import: domain predicates use tensor methods.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from difftest.choices import Choices
from difftest.ops.domains import KINK_GAP, Domain
from difftest.ops.sampling import FirstInput, Partners
from difftest.program.conv_shapes import _positive, _rank, _sizes, _spatial, conv_out
from difftest.program.conv_shapes import conv as conv  # the conv ops' shape rule, read here with the others
from difftest.program.ir import Shape, numel
from difftest.program.shapes import ShapeError

if TYPE_CHECKING:
    from torch import Tensor

Attrs = dict[str, Any]
ShapeRule = Callable[[Sequence[Shape], Attrs], Shape]
AttrSampler = Callable[[Choices, Sequence[Shape]], "Attrs | None"]

# fresh inputs stay small: the element budget of a program, and float32 sums of few terms
MAX_BATCH = 2
MAX_CHANNELS = 4
MAX_SPATIAL = 6


def _image(rank: int) -> FirstInput:
    def draw(c: Choices) -> Shape:
        lead = (c.integer(1, MAX_BATCH), c.integer(1, MAX_CHANNELS))
        return lead + tuple(c.integer(1, MAX_SPATIAL) for _ in range(rank - 2))

    return FirstInput(rank, draw)


IMAGE = _image(4)  # [N, C, H, W]
SEQUENCE = _image(3)  # [N, C, L]


def _table(c: Choices) -> Shape:
    return (c.integer(1, 5), c.integer(1, 4))


TABLE = FirstInput(2, _table)  # an embedding table [num_embeddings, dim]


def conv_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    """Terms per output element: C_in / groups times the kernel (plus the bias)."""
    w = shapes[1]
    return numel(tuple(w[1:])) + (len(shapes) == 3)


def conv_transpose_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    # at most every input channel of the group times every kernel position reach one output
    w = shapes[1]
    groups: int = attrs["groups"]
    return (shapes[0][1] // groups) * numel(tuple(w[2:])) + (len(shapes) == 3)


def conv_attrs(n: int, transposed: bool = False) -> AttrSampler:
    def draw(c: Choices, shapes: Sequence[Shape]) -> Attrs:
        channels = shapes[0][1]
        groups = c.choice([g for g in range(1, channels + 1) if channels % g == 0])
        attrs: Attrs = {
            "stride": [c.integer(1, 2) for _ in range(n)],
            "padding": [c.integer(0, 1) for _ in range(n)],
            "dilation": [1 if c.boolean(0.7) else 2 for _ in range(n)],
            "groups": groups,
        }
        if transposed:
            attrs["padding_out"] = [c.integer(0, max(s, d) - 1) for s, d in zip(attrs["stride"], attrs["dilation"])]
        return attrs

    return draw


def _conv_partners(transposed: bool) -> Partners:
    def draw(c: Choices, first: Shape, attrs: Attrs, max_dim: int) -> Iterator[Shape]:
        g = attrs["groups"]
        kernel = tuple(c.integer(1, 3) for _ in first[2:])
        per_group = c.integer(1, 2)
        if transposed:
            yield (first[1], per_group) + kernel
            c_out = per_group * g
        else:
            c_out = per_group * g
            yield (c_out, first[1] // g) + kernel
        if c.boolean(0.6):
            yield (c_out,)

    return Partners("conv-weight" + ("-transposed" if transposed else ""), draw, after_attrs=True)


CONV = _conv_partners(False)  # weight [C_out, C_in / groups, k...], then a bias [C_out] or none
CONV_TRANSPOSE = _conv_partners(True)  # weight [C_in, C_out / groups, k...], then a bias or none


# ---------------------------------------------------------------- pooling


def pool_rule(n: int) -> ShapeRule:
    """The output shape of a pooling over the last `n` dims of an input of rank n + 2."""
    def rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
        x = shapes[0]
        _rank(x, n + 2, "pooling input")
        kernel, stride, padding = (_spatial(attrs, a, n) for a in ("kernel", "stride", "padding"))
        _positive(attrs, "kernel", "stride")
        if any(p > k // 2 for p, k in zip(padding, kernel)):
            raise ShapeError(f"pooling padding {padding} must be at most half the kernel {kernel}")
        out = [conv_out(x[2 + i], kernel[i], stride[i], padding[i], 1) for i in range(n)]
        _sizes(out, "pooling")
        return (x[0], x[1], *out)

    return rule


def avg_pool_rule(n: int) -> ShapeRule:
    pooled = pool_rule(n)

    def rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
        if attrs["count_include_pad"] not in (0, 1):
            raise ShapeError(f"count_include_pad={attrs['count_include_pad']} must be 0 or 1")
        return pooled(shapes, attrs)

    return rule


def pool_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    return int(math.prod(attrs["kernel"]))


def pool_attrs(average: bool, n: int = 2) -> AttrSampler:
    def draw(c: Choices, shapes: Sequence[Shape]) -> Attrs:
        kernel = [c.integer(1, 3) for _ in range(n)]
        attrs: Attrs = {
            "kernel": kernel,
            "stride": [c.integer(1, 3) for _ in range(n)],
            "padding": [c.integer(0, k // 2) for k in kernel],
        }
        if average:
            attrs["count_include_pad"] = c.integer(0, 1)
        return attrs

    return draw


def adaptive_rule(n: int) -> ShapeRule:
    def rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
        x = shapes[0]
        _rank(x, n + 2, f"adaptive_avg_pool{n}d input")
        out = _spatial(attrs, "output_size", n)
        return (x[0], x[1], *out)

    return rule


def adaptive_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    x, out = shapes[0], attrs["output_size"]
    return math.prod(math.ceil(x[2 + i] / out[i]) + 1 for i in range(len(out)))


def adaptive_attrs(n: int) -> AttrSampler:
    def draw(c: Choices, shapes: Sequence[Shape]) -> Attrs:
        return {"output_size": [c.integer(1, 4) for _ in range(n)]}

    return draw


def _windows(x: Tensor, attrs: Attrs) -> Tensor:
    """The pooling windows of x (over its dims after the first two), padded with -inf:
    [N, C, out..., kernel elements]."""
    kernel, stride, padding = attrs["kernel"], attrs["stride"], attrs["padding"]
    n = len(kernel)
    spatial = x.shape[2:]
    padded = x.double().new_full((*x.shape[:2], *(s + 2 * p for s, p in zip(spatial, padding))), -math.inf)
    padded[(slice(None), slice(None), *(slice(p, p + s) for p, s in zip(padding, spatial)))] = x.double()
    win = padded
    for i in range(n):
        win = win.unfold(2 + i, kernel[i], stride[i])
    return win.reshape(*win.shape[: 2 + n], -1)


def _unique_window_max(xs: Sequence[Tensor], attrs: Attrs, exact: bool = False) -> bool:
    """The largest element of every window is unique by the kink gap (with `exact`, or tied exactly)."""
    win = _windows(xs[0], attrs)
    if win.shape[-1] < 2:
        return True
    top = win.sort(dim=-1, descending=True).values
    gap = top[..., 0] - top[..., 1]
    return bool(((gap > KINK_GAP) | (gap == 0)).all() if exact else (gap > KINK_GAP).all())


UNIQUE_WINDOW_MAX = Domain(
    "unique-window-max",
    "max pooling routes the gradient to the argmax of each window: the largest element of every "
    "window is unique by 0.01 (ties split or pick by convention)",
    _unique_window_max,
    tags=("kink",),
    at_kinks=lambda xs, a: _unique_window_max(xs, a, exact=True),
)


# ---------------------------------------------------------------- embedding


def embedding_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    w = shapes[0]
    _rank(w, 2, "embedding weight")
    idx = attrs["indices"]
    ishape = tuple(idx["shape"])
    _rank(ishape, 2, "embedding indices")
    if any(not 0 <= i < w[0] for i in idx["data"]):
        raise ShapeError(f"embedding index out of range for {w[0]} embeddings")
    return (*ishape, w[1])


def embedding_attrs(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    """Indices [B, L] into the table's rows, with at least one row picked twice (when there are
    two or more indices), so that gradients must accumulate."""
    rows = shapes[0][0]
    ishape = [c.integer(1, 2), c.integer(1, 4)]
    data = [c.integer(0, rows - 1) for _ in range(numel(tuple(ishape)))]
    if len(data) > 1 and len(set(data)) == len(data):
        data[-1] = data[0]
    return {"indices": {"shape": ishape, "data": data}}


def embedding_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    data: list[int] = attrs["indices"]["data"]
    return max(data.count(i) for i in set(data))


# ---------------------------------------------------------------- interpolation


def interpolate_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    x = shapes[0]
    _rank(x, 4, "interpolate input")
    out = _spatial(attrs, "output_size", 2)
    if attrs.get("align_corners", 0) not in (0, 1):
        raise ShapeError(f"align_corners={attrs['align_corners']} must be 0 or 1")
    return (x[0], x[1], *out)


def interpolate_attrs(bilinear: bool) -> AttrSampler:
    def draw(c: Choices, shapes: Sequence[Shape]) -> Attrs:
        attrs: Attrs = {"output_size": [c.integer(1, MAX_SPATIAL) for _ in range(2)]}
        if bilinear:
            attrs["align_corners"] = c.integer(0, 1)
        return attrs

    return draw


def bilinear_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    return 4  # each output mixes at most four input pixels


def bilinear_value(xs: Sequence[Tensor], attrs: Attrs, dtype: str) -> Tensor:
    """The size of the terms a float32 bilinear interpolation rounds: PyTorch computes the
    interpolation weights in float32, so an output on an input pixel (weight 1 on it, 0 on its
    neighbours in float64) still mixes in its neighbours at a weight of a few ulps; its error
    scales with the largest |x| of its 2x2 stencil, not with |x| at the pixel (a campaign's
    false alarm: 96 ulps of the pixel next to neighbours 1000 times larger). Each pixel's 3x3
    neighbourhood maximum, interpolated: every stencil corner's value covers the whole cell."""
    import torch.nn.functional as F

    spread = F.max_pool2d(xs[0].abs(), 3, stride=1, padding=1)
    return F.interpolate(spread, size=list(attrs["output_size"]), mode="bilinear",
                         align_corners=attrs["align_corners"] == 1)


def adaptive_saves(attrs: Attrs, shapes: Sequence[Shape]) -> bool:
    """PyTorch's adaptive_avg_pool2d to [1, 1] is a mean, which saves nothing (measured); its
    adaptive_avg_pool1d is adaptive_avg_pool2d to [1, L]."""
    return any(o != 1 for o in attrs["output_size"])
