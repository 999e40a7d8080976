"""PyTorch's side of the BatchNorm running-statistics conventions.

burn 0.22.1's side is measured in rust/src/batch_norm_evidence.rs on the same batches: the same
momentum update, but running_var takes the biased batch variance. These tests pin what PyTorch
does, computed from the formulas, so the two measurements can be compared.
"""

from __future__ import annotations

import torch

X1 = [[1.0, 2.0], [4.0, 8.0], [3.0, -1.0], [0.5, 2.5]]
X2 = [[0.0, 1.0], [-2.0, 3.0], [5.0, 1.5], [2.0, -0.5]]
MOMENTUM = 0.3


def running(batches: list[list[list[float]]], unbiased: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """`new = (1 - m) old + m batch` from zeros / ones, in float64."""
    mean, var = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    for b in batches:
        x = torch.tensor(b, dtype=torch.float64)
        mean = (1 - MOMENTUM) * mean + MOMENTUM * x.mean(0)
        var = (1 - MOMENTUM) * var + MOMENTUM * x.var(0, unbiased=unbiased)
    return mean, var


def two_train_forwards(no_grad: bool) -> torch.nn.BatchNorm1d:
    bn = torch.nn.BatchNorm1d(2, momentum=MOMENTUM).train()
    with torch.set_grad_enabled(not no_grad):
        for b in (X1, X2):
            bn(torch.tensor(b))
    return bn


def test_running_stats_use_the_unbiased_variance() -> None:
    bn = two_train_forwards(no_grad=False)
    mean, unbiased = running([X1, X2], unbiased=True)
    _, biased = running([X1, X2], unbiased=False)
    assert bn.running_mean is not None and bn.running_var is not None
    torch.testing.assert_close(bn.running_mean.double(), mean)
    torch.testing.assert_close(bn.running_var.double(), unbiased)
    assert not torch.allclose(bn.running_var.double(), biased)


def test_train_mode_updates_under_no_grad() -> None:
    """burn updates only on the autodiff device with the training flag; PyTorch only asks for
    the training flag, with grad mode on or off and whatever the input's requires_grad."""
    bn = two_train_forwards(no_grad=True)
    mean, var = running([X1, X2], unbiased=True)
    assert bn.running_mean is not None and bn.running_var is not None
    torch.testing.assert_close(bn.running_mean.double(), mean)
    torch.testing.assert_close(bn.running_var.double(), var)


def test_eval_uses_the_running_stats() -> None:
    bn = two_train_forwards(no_grad=False).eval()
    x = torch.tensor(X1)
    mean, var = running([X1, X2], unbiased=True)
    expected = (x.double() - mean) / torch.sqrt(var + bn.eps)
    torch.testing.assert_close(bn(x).detach().double(), expected, rtol=1e-5, atol=1e-6)
