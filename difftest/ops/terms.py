"""The size of the terms an op's value or gradient sums, for ops whose formula cancels (the
catalog's `grad_terms` / `value_terms`; noise.py). Torch-free at import: tensor methods only."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

Attrs = dict[str, Any]


def tanh_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # both frameworks compute 1 - y**2 from the rounded output y: near |y| = 1 the terms cancel
    y = x[0].tanh()
    return [g * (1.0 + y * y)]


def sigmoid_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # y * (1 - y) from the rounded output y: near y = 1 the terms of 1 - y cancel
    y = x[0].sigmoid()
    return [g * y * (1.0 + y)]


def gelu_value(x: Sequence[Tensor], a: Attrs, dtype: str) -> Tensor:
    # x * 0.5 * (1 + erf(x / sqrt 2)): for x << 0 the terms of 1 + erf cancel, leaving noise of
    # float32 size relative to |x| / 2 (PyTorch's float32 forward shows it)
    return x[0].abs() * 0.5 * (1.0 + (x[0] / math.sqrt(2.0)).erf().abs())


def hard_sigmoid_value(x: Sequence[Tensor], a: Attrs, dtype: str) -> Tensor:
    # x * (1/6) + 1/2 inside (-3, 3) (burn's form; PyTorch's is (x + 3) / 6): near the lower kink
    # the two terms cancel, and the product's rounding is of the size of the terms, not of the
    # result; outside, the result is clamped to exactly 0 or 1
    inside = x[0].abs() < 3.0
    return (x[0].abs() / 6.0 + 0.5) * inside


def gelu_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # Phi(x) + x * phi(x), with Phi = 0.5 * (1 + erf(x / sqrt 2)): the same cancellation in the
    # tail (burn's float32 backward shows it)
    phi = (-0.5 * x[0] * x[0]).exp() / math.sqrt(2.0 * math.pi)
    return [g * (0.5 * (1.0 + (x[0] / math.sqrt(2.0)).erf().abs()) + x[0].abs() * phi)]



def mish_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # tanh(sp) + x * sech(sp)**2 * sigmoid(x), sp = softplus(x): the two terms cancel where the
    # derivative crosses zero (x near -1.19), leaving the rounding of each at its own size
    t = x[0].exp().log1p().tanh()
    return [g * (t.abs() + x[0].abs() * (1.0 - t * t) * x[0].sigmoid())]

def softmax_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # burn: exp(x - max) / sum(exp(x - max)); its backward sums s*g and s * sum(s*g)
    s = x[0].softmax(a["dim"])
    return [s * (g + (s * g).sum(a["dim"], keepdim=True))]


def log_softmax_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # burn: x - log(sum(exp(x - max))) - max; its backward sums g and softmax * sum(g)
    s = x[0].softmax(a["dim"])
    return [g + s * g.sum(a["dim"], keepdim=True)]


def log_softmax_value(x: Sequence[Tensor], a: Attrs, dtype: str) -> Tensor:
    # burn: shifted - log(sum(exp(shifted))), shifted = x - max: the sum is at least 1 and rounds
    # by its dtype's eps, so its log carries an absolute error of that size, which the result
    # keeps where it is near 0 (an element that dominates its row: -log(1 + 2.6e-5) in float32 is
    # -2.563e-5 where the float64 result is -2.574e-5); the terms are |shifted|, |log sum| and 1
    d = a["dim"]
    shifted = x[0] - x[0].amax(d, keepdim=True)
    lse = shifted.exp().sum(d, keepdim=True).log()
    return shifted.abs() + lse.abs() + 1.0


def _cross_terms(a: Tensor, b: Tensor, dim: int) -> Tensor:
    """Per component i of cross(a, b) along `dim`, the sizes of the two products it subtracts:
    |a[i+1] b[i+2]| + |a[i+2] b[i+1]| (indices mod 3), which cancel where the result is small."""
    a, b = a.abs(), b.abs()
    return a.roll(-1, dim) * b.roll(-2, dim) + a.roll(-2, dim) * b.roll(-1, dim)


def cross_value(x: Sequence[Tensor], a: Attrs, dtype: str) -> Tensor:
    # a[i+1] b[i+2] - a[i+2] b[i+1]: rounded in each framework its own way (PyTorch may fuse a
    # multiply-add), so the result carries ulps of the products, not of itself
    return _cross_terms(x[0], x[1], a["dim"])


def cross_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # burn: cross(b, g) for a, cross(g, a) for b: the same cancellation
    return [_cross_terms(x[1], g, a["dim"]), _cross_terms(g, x[0], a["dim"])]
