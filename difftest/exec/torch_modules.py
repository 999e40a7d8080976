"""How PyTorch builds each module kind of difftest/program/module_kinds.py (one builder per
kind, from the statement's configuration and inline tensors, in PyTorch's names and layouts)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from difftest.divergences.running_stats import BATCH_NORM_RUNNING_VAR
from difftest.program.ir import InlineTensor, Module


def _tensor(t: InlineTensor, dt: torch.dtype) -> torch.Tensor:
    return torch.tensor(t.data, dtype=dt).reshape(t.shape)


def _copy_tensors(m: torch.nn.Module, st: Module, dt: torch.dtype) -> torch.nn.Module:
    """Every inline tensor of `st` copied into the same-named parameter or buffer of `m`."""
    with torch.no_grad():
        for name, t in st.tensors().items():
            target = getattr(m, name)
            assert isinstance(target, torch.Tensor), f"{type(m).__name__} has no tensor {name!r}"
            target.copy_(_tensor(t, dt))
    return m


def _linear(st: Module, dt: torch.dtype) -> torch.nn.Module:
    """nn.Linear: weight [out, in] and bias copied from the data, the parameters requiring grad."""
    out_f, in_f = st.weight.shape if st.weight is not None else (0, 0)
    return _copy_tensors(torch.nn.Linear(in_f, out_f, bias=st.bias is not None, dtype=dt), st, dt)


def _dropout(st: Module, dt: torch.dtype) -> torch.nn.Module:
    return torch.nn.Dropout(st.p)


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

    def __init__(self, st: Module, dt: torch.dtype):
        super().__init__()
        n = int(st.attrs["num_features"])
        self.epsilon = float(st.attrs["epsilon"])
        self.momentum = float(st.attrs["momentum"])
        self.weight = torch.nn.Parameter(torch.ones(n, dtype=dt))
        self.bias = torch.nn.Parameter(torch.zeros(n, dtype=dt))
        self.register_buffer("running_mean", torch.zeros(n, dtype=dt))
        self.register_buffer("running_var", torch.ones(n, dtype=dt))
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


def share_state(new: torch.nn.Module, old: torch.nn.Module) -> None:
    if isinstance(new, BurnBatchNorm) and isinstance(old, BurnBatchNorm):
        new.share_state(old)


def _batch_norm(st: Module, dt: torch.dtype) -> torch.nn.Module:
    return _copy_tensors(BurnBatchNorm(st, dt), st, dt)


def _layer_norm(st: Module, dt: torch.dtype) -> torch.nn.Module:
    """nn.LayerNorm over the last dim (normalized_shape = [d_model])."""
    m = torch.nn.LayerNorm(int(st.attrs["d_model"]), eps=float(st.attrs["epsilon"]), bias=st.bias is not None,
                           dtype=dt)
    return _copy_tensors(m, st, dt)




def _rms_norm(st: Module, dt: torch.dtype) -> torch.nn.Module:
    """nn.RMSNorm over the last dim, with the statement's epsilon (burn's formula: rms_norm in
    module_kinds.py)."""
    m = torch.nn.RMSNorm(int(st.attrs["d_model"]), eps=float(st.attrs["epsilon"]), dtype=dt)
    return _copy_tensors(m, st, dt)


def _group_norm(st: Module, dt: torch.dtype) -> torch.nn.Module:
    """nn.GroupNorm(num_groups, num_channels, eps, affine = weight and bias given): burn's
    formula (group_norm in module_kinds.py)."""
    m = torch.nn.GroupNorm(int(st.attrs["num_groups"]), int(st.attrs["num_channels"]),
                           eps=float(st.attrs["epsilon"]), affine=st.weight is not None, dtype=dt)
    return _copy_tensors(m, st, dt)


def _conv2d(st: Module, dt: torch.dtype) -> torch.nn.Module:
    """nn.Conv2d with the weight [C_out, C_in / groups, kh, kw] and bias copied from the data."""
    assert st.weight is not None
    c_out, per_group, kh, kw = st.weight.shape
    g = int(st.attrs["groups"])
    m = torch.nn.Conv2d(per_group * g, c_out, (kh, kw), stride=tuple(st.attrs["stride"]),
                        padding=tuple(st.attrs["padding"]), dilation=tuple(st.attrs["dilation"]), groups=g,
                        bias=st.bias is not None, dtype=dt)
    return _copy_tensors(m, st, dt)


class IndexEmbedding(torch.nn.Embedding):
    """nn.Embedding whose forward takes the program's leaf of integral indices, converted with
    `.long()` (burn: `.int()`; the IR's values are floats, module_kinds.check_indices)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = super().forward(x.long())
        return out


def _embedding(st: Module, dt: torch.dtype) -> torch.nn.Module:
    """nn.Embedding(num_embeddings, embedding_dim) with the weight copied from the data."""
    assert st.weight is not None
    rows, dim = st.weight.shape
    return _copy_tensors(IndexEmbedding(rows, dim, dtype=dt), st, dt)


TORCH_BUILDERS: dict[str, Callable[[Module, torch.dtype], torch.nn.Module]] = {
    "linear": _linear,
    "dropout": _dropout,
    "batch_norm": _batch_norm,
    "layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    "group_norm": _group_norm,
    "conv2d": _conv2d,
    "embedding": _embedding,
}


def build_torch_module(st: Module, dt: torch.dtype) -> torch.nn.Module:
    builder = TORCH_BUILDERS.get(st.module)
    if builder is None:
        raise ValueError(f"module {st.id!r}: no PyTorch builder for kind {st.module!r}")
    return builder(st, dt)
