"""The shape rule of convolutions (PyTorch's `torch.nn.functional` conventions: an image is
`[N, C, H, W]`, a convolution weight `[C_out, C_in / groups, k...]`, a transposed
convolution's `[C_in, C_out / groups, k...]`): shared by the conv ops (difftest/ops/nn_shapes.py)
and the conv2d module kind (modules/conv2d.py), so it lives in the program layer both read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from difftest.program.shapes import Shape, ShapeError

Attrs = dict[str, Any]
ShapeRule = Callable[[Sequence[Shape], Attrs], Shape]


# ---------------------------------------------------------------- helpers


def _spatial(attrs: Attrs, name: str, n: int) -> list[int]:
    v = attrs[name]
    if len(v) != n:
        raise ShapeError(f"attribute {name}={v} needs {n} value(s), one per spatial dim")
    return list(v)


def _positive(attrs: Attrs, *names: str) -> None:
    for name in names:
        v = attrs[name]
        if any(x < 1 for x in (v if isinstance(v, list) else [v])):
            raise ShapeError(f"attribute {name}={v} must be >= 1")


def _rank(shape: Shape, rank: int, what: str) -> None:
    if len(shape) != rank:
        raise ShapeError(f"{what} must have rank {rank}, got {list(shape)}")


def conv_out(size: int, k: int, stride: int, padding: int, dilation: int) -> int:
    """PyTorch's (and burn's) output size of a convolution or pooling along one dim."""
    return (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1


def conv_transpose_out(size: int, k: int, stride: int, padding: int, padding_out: int, dilation: int) -> int:
    return (size - 1) * stride - 2 * padding + dilation * (k - 1) + padding_out + 1


def _sizes(out: Sequence[int], what: str) -> None:
    if any(o < 1 for o in out):
        raise ShapeError(f"{what}: the output would have a spatial size < 1 ({list(out)})")


# ---------------------------------------------------------------- convolutions


def conv(n: int, transposed: bool = False) -> ShapeRule:
    """The shape rule of conv{n}d (`transposed`: conv_transpose{n}d): inputs x, weight and an
    optional bias."""

    def rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
        what = f"conv{'_transpose' if transposed else ''}{n}d"
        if len(shapes) not in (2, 3):
            raise ShapeError(f"{what} takes an input, a weight and an optional bias, got {len(shapes)} inputs")
        x, w = shapes[0], shapes[1]
        _rank(x, n + 2, f"{what} input")
        _rank(w, n + 2, f"{what} weight")
        stride, padding, dilation = (_spatial(attrs, a, n) for a in ("stride", "padding", "dilation"))
        _positive(attrs, "stride", "dilation", "groups")
        g = attrs["groups"]
        if transposed:
            if w[0] != x[1] or x[1] % g:
                raise ShapeError(f"{what}: weight {list(w)} needs [C_in={x[1]}, C_out / groups, k...] "
                                 f"with C_in divisible by groups={g}")
            c_out = w[1] * g
            pad_out = _spatial(attrs, "padding_out", n)
            for i in range(n):
                if pad_out[i] >= max(stride[i], dilation[i]):
                    raise ShapeError(f"{what}: padding_out {pad_out} must be smaller than stride or dilation")
            out = [conv_transpose_out(x[2 + i], w[2 + i], stride[i], padding[i], pad_out[i], dilation[i])
                   for i in range(n)]
        else:
            if x[1] % g or w[0] % g or w[1] * g != x[1]:
                raise ShapeError(f"{what}: weight {list(w)} needs [C_out, C_in / groups, k...] for "
                                 f"C_in={x[1]}, groups={g} (both channel counts divisible by groups)")
            c_out = w[0]
            out = [conv_out(x[2 + i], w[2 + i], stride[i], padding[i], dilation[i]) for i in range(n)]
        if len(shapes) == 3 and shapes[2] != (c_out,):
            raise ShapeError(f"{what}: bias {list(shapes[2])} must be [{c_out}]")
        _sizes(out, what)
        return (x[0], c_out, *out)

    return rule
