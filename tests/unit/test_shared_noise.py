"""The noise model draws a normalisation's statistics' rounding once per group
(difftest/oracle/shared_noise.py): a regression test for the campaign false alarm
corpus/findings/1e1d395140fc41d2.json, where per-element draws averaged a shared error away."""

from __future__ import annotations

import torch

from difftest.exec.torch_modules import BurnBatchNorm
from difftest.ops import tolerance as tol
from difftest.oracle.shared_noise import shared_norm_noise


def _ones(shape: torch.Size) -> torch.Tensor:
    return torch.ones(shape, dtype=torch.float64)


def _close_together(n: int = 64) -> torch.Tensor:
    """One group of values near 10 (|mean| / sigma ~ 100): the shared mean's rounding dominates."""
    gen = torch.Generator().manual_seed(0)
    return 10.0 + 0.1 * torch.randn(2, n, generator=gen, dtype=torch.float64)


def test_the_mean_rounding_shifts_the_whole_group_by_one_error() -> None:
    m = torch.nn.LayerNorm(64, eps=0.0, dtype=torch.float64)
    x = _close_together()
    delta = shared_norm_noise(m, [x], _ones, "float32")
    assert delta is not None
    acc = tol.accumulation_noise(64, "float32")
    var = x.var(dim=-1, unbiased=False, keepdim=True)
    sigma = var.sqrt()
    xhat = (x - x.mean(dim=-1, keepdim=True)) / sigma
    shift = acc * x.abs().mean(dim=-1, keepdim=True)  # the mean's rounding, drawn at +1
    want = ((x - x.mean(dim=-1, keepdim=True)) - shift) / torch.sqrt((var + shift**2) * (1 + acc)) - xhat
    torch.testing.assert_close(delta, want, rtol=1e-6, atol=0.0)
    # one error per group: a sum over the group keeps it whole (n times the shift), not sqrt(n) times
    assert torch.all(delta.sum(dim=-1).abs() > 0.9 * 64 * (shift / sigma).squeeze(-1))


def test_the_backward_sums_over_the_group_round_once_per_group() -> None:
    m = torch.nn.LayerNorm(64, eps=0.0, dtype=torch.float64)
    x = _close_together().requires_grad_(True)
    g = torch.linspace(-1.0, 1.0, 64, dtype=torch.float64).expand(2, 64)
    draws: list[torch.Size] = []

    def backward_only(shape: torch.Size) -> torch.Tensor:
        """0 for the forward's two draws (mean, variance), +1 for the backward's sums."""
        draws.append(shape)
        return torch.zeros(shape, dtype=torch.float64) if len(draws) <= 2 else _ones(shape)

    delta = shared_norm_noise(m, [x], backward_only, "float32")
    assert delta is not None
    assert float(delta.detach().abs().max()) == 0.0  # no forward rounding drawn
    (grad,) = torch.autograd.grad((delta * g).sum(), [x])
    assert len(draws) == 4 and all(d == torch.Size([2, 1]) for d in draws)  # one draw per group
    # the mean's gradient, a sum of n terms of size |g| / sigma, rounds by acc times their sum
    # once, and every element of the group receives 1/n of that one error: over the group it adds
    # up whole (the variance's sum reaches x along x - mean, which sums to zero over the group)
    acc = tol.accumulation_noise(64, "float32")
    sigma = x.detach().var(dim=-1, unbiased=False, keepdim=True).sqrt()
    shared = (acc * g.abs().sum(dim=-1, keepdim=True) / sigma).squeeze(-1)
    total = grad.sum(dim=-1).abs()
    assert torch.all(total > 0.5 * shared) and torch.all(total < 2.0 * shared), (total, shared)


def test_group_norm_groups_channels_and_eval_batch_norm_shares_nothing() -> None:
    gn = torch.nn.GroupNorm(2, 4, eps=1e-5, dtype=torch.float64)
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    delta = shared_norm_noise(gn, [x], _ones, "float32")
    assert delta is not None and delta.shape == x.shape
    # channels 0-1 are one group, 2-3 another: each group's shift is one number
    acc = tol.accumulation_noise(2 * 5, "float32")
    xg = x.reshape(3, 2, -1)
    var = xg.var(dim=2, unbiased=False, keepdim=True)
    shift = acc * xg.abs().mean(dim=2, keepdim=True)  # the mean's rounding, drawn at +1
    centred = xg - xg.mean(dim=2, keepdim=True)
    xhat = centred / torch.sqrt(var + 1e-5)
    shifted = (centred - shift) / torch.sqrt((var + shift**2) * (1 + acc) + 1e-5)
    torch.testing.assert_close(delta, (shifted - xhat).reshape(x.shape), rtol=1e-6, atol=1e-18)

    bn = BurnBatchNorm(4, 1e-5, 0.1, torch.float64)
    bn.train()
    assert shared_norm_noise(bn, [x], _ones, "float32") is not None
    bn.eval()  # the running statistics are constants: nothing shared to round
    assert shared_norm_noise(bn, [x], _ones, "float32") is None


def test_a_groups_rounding_is_drawn_at_its_full_size_whatever_the_draw() -> None:
    """One draw per group per noise run: a small uniform draw would measure a small fraction of
    the rounding for the whole group (a false alarm of the 20,000-program check). The draw gives
    the sign only: -0.05 measures what -1 does."""
    m = torch.nn.LayerNorm(64, eps=0.0, dtype=torch.float64)
    x = _close_together()

    def small(shape: torch.Size) -> torch.Tensor:
        return torch.full(shape, -0.05, dtype=torch.float64)

    def minus_one(shape: torch.Size) -> torch.Tensor:
        return -_ones(shape)

    delta, full = shared_norm_noise(m, [x], small, "float32"), shared_norm_noise(m, [x], minus_one, "float32")
    assert delta is not None and full is not None
    torch.testing.assert_close(delta, full, rtol=0.0, atol=0.0)
    assert float(delta.abs().max()) > 0.0
