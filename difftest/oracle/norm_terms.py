"""A normalisation's terms, as the noise model needs them (sites.py, shared_noise.py): the
normalised values, the groups its statistics are computed over, its tolerance class, the sizes of
its gradient's terms, a stateless forward; and the rounding noise of a BatchNorm's running
statistics. The executor runs the modules (difftest/exec/torch_modules.py); what their rounding
is, is known here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from difftest.exec.torch_modules import BurnBatchNorm
from difftest.ops import tolerance as tol

Uniform = Callable[[torch.Size], torch.Tensor]


def normalized(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x normalised as the module's forward normalises it, before weight and bias (no state
    update): batch statistics in train mode, the running ones in eval mode (BatchNorm), the last
    dim's (LayerNorm)."""
    if isinstance(m, BurnBatchNorm):
        if m.training:
            return torch.nn.functional.batch_norm(x, None, None, training=True, eps=m.epsilon)
        return torch.nn.functional.batch_norm(x, m.running_mean, m.running_var, training=False, eps=m.epsilon)
    if isinstance(m, torch.nn.RMSNorm):
        assert m.eps is not None
        return torch.nn.functional.rms_norm(x, m.normalized_shape, eps=m.eps)
    if isinstance(m, torch.nn.GroupNorm):
        return torch.nn.functional.group_norm(x, m.num_groups, eps=m.eps)
    assert isinstance(m, torch.nn.LayerNorm), type(m).__name__
    return torch.nn.functional.layer_norm(x, m.normalized_shape, eps=m.eps)


@dataclass(frozen=True)
class NormGroups:
    """How a normalisation groups its input for its statistics: `view(x)` is x as [..., n] (each
    row one group of n elements sharing a mean and a variance), `restore` its inverse, `scale`
    the affine weight broadcast to x's shape (or None), `centred`: the mean is subtracted
    (RMSNorm subtracts none)."""

    view: Callable[[torch.Tensor], torch.Tensor]
    restore: Callable[[torch.Tensor], torch.Tensor]
    scale: torch.Tensor | None
    centred: bool
    eps: float


def norm_groups(m: torch.nn.Module, x: torch.Tensor, tracked_scale: bool = False) -> NormGroups | None:
    """The groups a normalisation computes statistics over, for an input shaped like x; None
    when it computes none (eval-mode BatchNorm reads its running statistics). `scale` is the
    weight detached, or tracked (`tracked_scale`: a gradient reaches the weight through it)."""
    channel_shape = [1, -1] + [1] * (x.dim() - 2)
    w = getattr(m, "weight", None)
    weight = (w if tracked_scale else w.detach()).to(x.dtype) if isinstance(w, torch.Tensor) else None
    if isinstance(m, BurnBatchNorm):
        if not m.training:
            return None
        moved = x.transpose(0, 1).shape
        return NormGroups(lambda t: t.transpose(0, 1).reshape(moved[0], -1),
                          lambda t: t.reshape(moved).transpose(0, 1),
                          weight.reshape(channel_shape) if weight is not None else None, True, m.epsilon)
    if isinstance(m, torch.nn.GroupNorm):
        return NormGroups(lambda t: t.reshape(x.shape[0], m.num_groups, -1), lambda t: t.reshape(x.shape),
                          weight.reshape(channel_shape) if weight is not None else None, True, m.eps)
    assert isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm)), type(m).__name__
    k = len(m.normalized_shape)
    lead = x.shape[: x.dim() - k]
    eps = m.eps if m.eps is not None else torch.finfo(x.dtype).eps
    return NormGroups(lambda t: t.reshape(*lead, -1), lambda t: t.reshape(x.shape), weight,
                      isinstance(m, torch.nn.LayerNorm), eps)


# a normalisation's rounding: the mean it subtracts is a sum over the normalised elements, whose
# rounding the division by the standard deviation amplifies (|x| / sigma): it behaves as an input
# error of a few ulps (implementations sum in different orders: burn two passes, PyTorch Welford)
NORMALIZE = tol.ToleranceClass("normalize", 4 * tol.F32_EPS, 4 * tol.F32_EPS,
                               reason="normalisation: the subtracted mean's rounding, divided by sigma")


def stateless_norm(m: torch.nn.Module, x: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
    """A normalisation's forward without state updates, in x's dtype; `detach_params`: the
    parameters as constants."""
    if isinstance(m, BurnBatchNorm):
        return m.stateless(x, detach_params)
    dt = x.dtype
    if isinstance(m, torch.nn.RMSNorm):
        assert m.weight is not None and m.eps is not None
        w = m.weight.to(dt).detach() if detach_params else m.weight.to(dt)
        return torch.nn.functional.rms_norm(x, m.normalized_shape, w, m.eps)
    if isinstance(m, torch.nn.GroupNorm):
        gw = m.weight.to(dt) if m.weight is not None else None
        gb = m.bias.to(dt) if m.bias is not None else None
        if detach_params:
            gw, gb = (gw.detach() if gw is not None else None), (gb.detach() if gb is not None else None)
        return torch.nn.functional.group_norm(x, m.num_groups, gw, gb, m.eps)
    assert isinstance(m, torch.nn.LayerNorm), type(m).__name__
    w = m.weight.to(dt)
    b = m.bias.to(dt) if m.bias is not None else None
    if detach_params:
        w, b = w.detach(), (b.detach() if b is not None else None)
    return torch.nn.functional.layer_norm(x, m.normalized_shape, w, b, m.eps)


def norm_grad_terms(m: torch.nn.Module, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The size of the terms a normalisation's input gradient sums, per element, from |g|:
    dx = (g w - mean(g w) - x_hat mean(g w x_hat)) / sigma over the normalised dims (batch
    statistics), or g w / sigma (eval-mode BatchNorm: the running statistics are constants)."""
    with torch.no_grad():
        if isinstance(m, BurnBatchNorm):
            shape = [1, -1] + [1] * (x.dim() - 2)
            w = m.weight.detach().abs().reshape(shape)
            if not m.training:
                return g * w / torch.sqrt(m.running_var.reshape(shape) + m.epsilon)
            dims = [d for d in range(x.dim()) if d != 1]
            eps = m.epsilon
        elif isinstance(m, torch.nn.RMSNorm):
            # dx = (g w - x_hat mean(g w x_hat)) / rms
            assert m.weight is not None and m.eps is not None
            gw = g * m.weight.detach().abs()
            rms = torch.sqrt((x * x).mean(dim=-1, keepdim=True) + m.eps)
            xhat = (x / rms).abs()
            return (gw + xhat * (gw * xhat).mean(dim=-1, keepdim=True)) / rms
        elif isinstance(m, torch.nn.GroupNorm):
            # LayerNorm's terms over each group of channels: [N, C, *] viewed as [N, G, rest]
            cshape = [1, -1] + [1] * (x.dim() - 2)
            gw = g * (m.weight.detach().abs().reshape(cshape) if m.weight is not None else 1.0)
            xg, gwg = x.reshape(x.shape[0], m.num_groups, -1), gw.reshape(x.shape[0], m.num_groups, -1)
            sigma = torch.sqrt(xg.var(dim=2, unbiased=False, keepdim=True) + m.eps)
            xhat = ((xg - xg.mean(dim=2, keepdim=True)) / sigma).abs()
            terms = (gwg + gwg.mean(dim=2, keepdim=True) + xhat * (gwg * xhat).mean(dim=2, keepdim=True)) / sigma
            return terms.reshape(x.shape)
        else:
            assert isinstance(m, torch.nn.LayerNorm), type(m).__name__
            w = m.weight.detach().abs()
            dims, eps = [-1], m.eps
        sigma = torch.sqrt(x.var(dim=dims, unbiased=False, keepdim=True) + eps)
        xhat = ((x - x.mean(dim=dims, keepdim=True)) / sigma).abs()
        gw = g * w
        return (gw + gw.mean(dim=dims, keepdim=True) + xhat * (gw * xhat).mean(dim=dims, keepdim=True)) / sigma


def normalized_terms(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The size of the terms of x_hat = (x - mean) / sigma, per element: |x_hat| plus the
    subtracted mean's own size, mean(|x|) / sigma (its rounding is shared by the whole normalised
    group, so a sum of g x_hat over the group, the weight's gradient, keeps it where the exact sum
    cancels); RMSNorm subtracts nothing."""
    with torch.no_grad():
        xhat = normalized(m, x).abs()
        if isinstance(m, torch.nn.RMSNorm):
            return xhat
        if isinstance(m, BurnBatchNorm):
            shape = [1, -1] + [1] * (x.dim() - 2)
            if not m.training:
                sigma = torch.sqrt(m.running_var.reshape(shape) + m.epsilon)
                return xhat + m.running_mean.abs().reshape(shape) / sigma
            dims, eps = [d for d in range(x.dim()) if d != 1], m.epsilon
        elif isinstance(m, torch.nn.GroupNorm):
            xg = x.reshape(x.shape[0], m.num_groups, -1)
            sigma = torch.sqrt(xg.var(dim=2, unbiased=False, keepdim=True) + m.eps)
            return xhat + (xg.abs().mean(dim=2, keepdim=True) / sigma).expand_as(xg).reshape(x.shape)
        else:
            assert isinstance(m, torch.nn.LayerNorm), type(m).__name__
            dims, eps = list(range(x.dim() - len(m.normalized_shape), x.dim())), m.eps
        sigma = torch.sqrt(x.var(dim=dims, unbiased=False, keepdim=True) + eps)
        return xhat + x.abs().mean(dim=dims, keepdim=True) / sigma


def running_stat_noise(uniform: Uniform) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float],
                                                     tuple[torch.Tensor, torch.Tensor]]:
    """A BatchNorm running-statistics update with the rounding noise of float32 sums over a
    channel's elements (relative to the sums of |terms|), from the noise runs' draws."""

    def perturb(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor,
                momentum: float) -> tuple[torch.Tensor, torch.Tensor]:
        dims = [d for d in range(x.dim()) if d != 1]
        size = tol.accumulation_noise(x.numel() // x.shape[1]) * momentum
        centered = x - x.mean(dim=dims, keepdim=True)
        mean = mean + size * x.abs().mean(dim=dims) * uniform(mean.shape).to(mean.dtype)
        var = var + size * (centered * centered).mean(dim=dims) * uniform(var.shape).to(var.dtype)
        return mean, var

    return perturb
