"""Rounding that many elements share: a normalisation's statistics.

A normalisation computes one mean and one variance per group of n elements and every element
of the group reads them. Their rounding (a float32 sum of n terms: about `eps * sqrt(n)` of the
size of the terms) is therefore one error per group, not one per element: it shifts (the mean)
or scales (the variance) the whole group's output together, and the backward's sums over the
group (the gradients of the mean and of the standard deviation) round once per group as well.
Downstream, a reduction over the group adds such a shared error coherently, n times one error,
where independent per-element noise would add up to only sqrt(n) times it. Where the group's
values sit close together (|mean| / sigma large) the shift is amplified too: burn's two-pass
float32 statistics differ from PyTorch's by a few ulps of the mean, which a later nonlinearity
and a reduction turn into gradient differences far above per-element noise (a float32
GroupNorm program of the default campaign, seed 0 program 1023, is the evidence: burn's
gradient error there is what a mean 3 ulps off gives, element by element).

`shared_norm_noise` gives the noise runs (noise.py) that error as a differentiable
perturbation: the normalised output computed with its statistics perturbed once per group, and
with the backward's per-group sums perturbed once per group, minus the same computed exactly.

Each such rounding is drawn at its full size with a random sign, not uniformly in [-1, 1]. A
per-element draw has many elements to reach its bound in some run; a group's statistic has one
draw per noise run, and the largest of NOISE_SAMPLES uniform draws is below half the bound one
time in 16 (below a fifth one time in 600), so the measured noise of a whole group would
depend on luck. A float32 program of the 20,000-program check (seed 301, program 18,370) had
burn's GroupNorm mean 10 ulps off, 0.56 of the modelled rounding, judged burn-wrong because the
four runs happened to draw that group's statistics small: the measured noise downstream was a
tenth of burn's error (tests/differential/data/group-norm-statistics-drawn-small.json).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from difftest.ops import tolerance as tol
from difftest.oracle.norm_terms import norm_groups

Uniform = Callable[[torch.Size], torch.Tensor]  # uniform draws in [-1, 1], float64


class _SharedSum(torch.autograd.Function):
    """Forward: a per-group statistic [..., 1] spread over its group [..., n]. Backward: the sum
    of the gradient over the group plus the rounding of a sum of n terms, `acc * sum |g| * u`
    with one u per group (every element of the group reads the same rounded sum)."""

    @staticmethod
    def forward(ctx: Any, stat: torch.Tensor, n: int, acc: float, uniform: Uniform) -> torch.Tensor:
        ctx.acc, ctx.uniform = acc, uniform
        return stat.expand(*stat.shape[:-1], n).clone()

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        g = grads[0]
        total = g.sum(dim=-1, keepdim=True)
        size = g.abs().sum(dim=-1, keepdim=True)
        noise = ctx.acc * size * ctx.uniform(total.shape).to(total.dtype)
        return total + noise, None, None, None


def _normalised(view: torch.Tensor, centred: bool, eps: float, acc: float, uniform: Uniform | None) -> torch.Tensor:
    """x_hat over the last dim of `view`, with the statistics' shared rounding (uniform given)
    or exactly (uniform None)."""
    n = view.shape[-1]

    def spread(stat: torch.Tensor) -> torch.Tensor:
        if uniform is None:
            return stat.expand_as(view)
        out: torch.Tensor = _SharedSum.apply(stat, n, acc, uniform)
        return out

    def rounded(stat: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
        return stat if uniform is None else stat + acc * size * uniform(stat.shape).to(stat.dtype)

    centred_view = view
    if centred:
        mean = rounded(view.mean(dim=-1, keepdim=True), view.detach().abs().mean(dim=-1, keepdim=True))
        centred_view = view - spread(mean)
    square = centred_view.square().mean(dim=-1, keepdim=True)
    square = rounded(square, square.detach())
    return centred_view / spread(torch.sqrt(square + eps))


def shared_norm_noise(m: torch.nn.Module, inputs: Sequence[torch.Tensor], uniform: Uniform,
                      dtype: str, tracked_scale: bool = False) -> torch.Tensor | None:
    """The shared rounding of normalisation `m`'s statistics on its input, in the program's
    `dtype`, as a differentiable perturbation of its output (None: it computes no statistics).
    `tracked_scale`: the perturbation reaches the weight's gradient too (its gradient sums the
    normalised values times the cotangent, and a statistic's rounding shifts every one of them)."""
    x = inputs[0]
    groups = norm_groups(m, x, tracked_scale)
    if groups is None:
        return None

    def signs(shape: torch.Size) -> torch.Tensor:  # the draws consumed as before, each at its full size
        return torch.sign(uniform(shape))

    view = groups.view(x)
    acc = tol.accumulation_noise(view.shape[-1], dtype)
    delta = groups.restore(_normalised(view, groups.centred, groups.eps, acc, signs)
                           - _normalised(view, groups.centred, groups.eps, acc, None))
    return delta * groups.scale if groups.scale is not None else delta
