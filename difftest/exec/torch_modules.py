"""How PyTorch builds a module statement: its kind's constructor (the entry's `pytorch` source,
difftest/program/modules/, the text the PyTorch reproducer prints) evaluated with `torch`, `F`
and this module's classes in scope, then every inline tensor copied into the same-named
parameter or buffer. BurnBatchNorm is the batch_norm kind's class: PyTorch's batch norm under
burn's running-state conventions."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from types import CodeType
from typing import Any

import torch

from difftest.divergences.running_stats import BATCH_NORM_RUNNING_VAR
from difftest.exec.torch_values import DTYPE_NAMES
from difftest.ops.spelling import TORCH_NAMESPACE_SOURCE
from difftest.program.ir import Module
from difftest.program.modules import module_kind

# a hook on a BatchNorm's running-statistics update: (input, new mean, new var, momentum) -> (mean, var)
Perturb = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]]


class BurnBatchNorm(torch.nn.Module):
    """BatchNorm over channel dim 1 with PyTorch's parameters (weight, bias) and buffers
    (running_mean, running_var), under burn's declared running-state conventions
    (difftest/divergences/running_stats.py): a train-mode forward's update of the running
    statistics is computed from the record batch-norm-running-var-biased's formula (not PyTorch's
    in-place update with the unbiased variance) and kept pending as burn's RunningState keeps it
    (running-state-lags-one-update): an eval-mode forward reads the buffers, which lag it until
    `sync` (the next train-mode forward, a param read, valid(), train()). The forward itself is
    PyTorch's `F.batch_norm`."""

    running_mean: torch.Tensor
    running_var: torch.Tensor

    def __init__(self, n: int, epsilon: float, momentum: float, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.epsilon = epsilon
        self.momentum = momentum
        self.weight = torch.nn.Parameter(torch.ones(n, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.zeros(n, dtype=dtype))
        self.register_buffer("running_mean", torch.zeros(n, dtype=dtype))
        self.register_buffer("running_var", torch.ones(n, dtype=dtype))
        # the pending update of each statistic (burn: one RunningState each), in a dict that
        # handles sharing the state share
        self.pending: dict[str, torch.Tensor] = {}

    def sync(self, names: tuple[str, ...] = ("running_mean", "running_var")) -> None:
        """burn's RunningState sync of these statistics: a pending update becomes the value."""
        for name in names:
            new = self.pending.pop(name, None)
            if new is not None:
                with torch.no_grad():
                    getattr(self, name).copy_(new)

    def share_state(self, other: BurnBatchNorm) -> None:
        """Share `other`'s running state (burn's clone shares its RunningState's Arc)."""
        self.running_mean = other.running_mean
        self.running_var = other.running_var
        self.pending = other.pending

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.stateless(x)
        self.update(x)
        return out

    def stateless(self, x: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """The forward without the running-state update, in x's dtype (the noise model re-runs
        it in float32 on the same inputs); `detach_params`: the parameters as constants."""
        dt = x.dtype
        w, b = self.weight.to(dt), self.bias.to(dt)
        if detach_params:
            w, b = w.detach(), b.detach()
        if not self.training:
            # a snapshot of the statistics (burn's value() is an immutable tensor): a later sync
            # updates the buffers in place, which must not touch what this forward saved
            mean, var = self.running_mean.to(dt).clone(), self.running_var.to(dt).clone()
            return torch.nn.functional.batch_norm(x, mean, var, w, b, training=False, eps=self.epsilon)
        return torch.nn.functional.batch_norm(x, None, None, w, b, training=True, eps=self.epsilon)

    def update(self, x: torch.Tensor, perturb: Perturb | None = None) -> None:
        """A train-mode forward's running-state update (pending until the next sync).
        `perturb(x, mean, var, momentum)`: the new statistics as the caller wants them instead
        (the noise model adds the rounding of float32 sums: difftest/oracle/sites.py)."""
        if not self.training:
            return
        self.sync()
        with torch.no_grad():
            x = x.detach()
            mean, var = BATCH_NORM_RUNNING_VAR.update(self.running_mean, self.running_var, x, self.momentum)
            if perturb is not None:
                mean, var = perturb(x, mean, var, self.momentum)
        self.pending.update(running_mean=mean, running_var=var)


@contextlib.contextmanager
def burn_inference_path(m: torch.nn.Module, plain: bool) -> Iterator[None]:
    """burn's BatchNorm trains only on an input on the autodiff device of a module whose own
    training flag is on (records batch-norm-trains-on-autodiff-device-only,
    batch-norm-freeze-survives-train): where it does not (`plain`) the forward is the inference
    one, reading the running statistics and leaving them as they are."""
    if not (plain and isinstance(m, BurnBatchNorm) and m.training):
        yield
        return
    m.training = False
    try:
        yield
    finally:
        m.training = True


def sync_state(m: torch.nn.Module, name: str | None = None) -> None:
    """Sync a module's running state if it has one: every statistic (valid(), train()) or the
    one read (a param read)."""
    if isinstance(m, BurnBatchNorm):
        m.sync((name,) if name is not None else ("running_mean", "running_var"))


def update_running_state(m: torch.nn.Module, x: torch.Tensor, perturb: Perturb | None = None) -> None:
    """The running-state update of a train-mode forward on `x` whose output was computed apart
    (the noise model's: difftest/oracle/sites.py), for a module with a running state."""
    assert isinstance(m, BurnBatchNorm), type(m).__name__
    m.update(x, perturb)


def share_state(new: torch.nn.Module, old: torch.nn.Module) -> None:
    if isinstance(new, BurnBatchNorm) and isinstance(old, BurnBatchNorm):
        new.share_state(old)


# the namespace a kind's constructor is evaluated in: the reproducer script's (torch, F) and
# the executor's own classes, which a script defines from the kind's `pytorch_helper`
NAMESPACE: dict[str, Any] = {"BurnBatchNorm": BurnBatchNorm}
exec(TORCH_NAMESPACE_SOURCE, NAMESPACE)


@functools.lru_cache(maxsize=1024)
def _compiled(source: str) -> CodeType:
    return compile(source, "<difftest module>", "eval")


def constructor(st: Module, dt: torch.dtype) -> str:
    """The PyTorch constructor of the statement `st` in dtype `dt` (the kind's spelling)."""
    return module_kind(st.module).pytorch(st, f", dtype=torch.{DTYPE_NAMES[dt]}")


def build_torch_module(st: Module, dt: torch.dtype) -> torch.nn.Module:
    """The module `st` builds: its kind's constructor, evaluated, with every inline tensor of the
    statement copied into the same-named parameter or buffer."""
    m = eval(_compiled(constructor(st, dt)), NAMESPACE)
    assert isinstance(m, torch.nn.Module), f"module {st.id!r}: the {st.module} constructor made {type(m).__name__}"
    with torch.no_grad():
        for name, t in st.tensors().items():
            target = getattr(m, name)
            assert isinstance(target, torch.Tensor), f"{type(m).__name__} has no tensor {name!r}"
            target.copy_(torch.tensor(t.data, dtype=dt).reshape(t.shape))
    return m
