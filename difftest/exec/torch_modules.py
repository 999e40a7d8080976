"""How PyTorch builds each module kind of difftest/program/module_kinds.py (one builder per
kind, from the statement's configuration and inline tensors, in PyTorch's names and layouts)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from difftest.divergences.running_stats import BATCH_NORM_RUNNING_VAR
from difftest.ops import tolerance as tol
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

    def update(self, x: torch.Tensor, uniform: Callable[[torch.Size], torch.Tensor] | None = None) -> None:
        """A train-mode forward's running-state update (pending until the next sync).
        `uniform` (the noise model's draws in [-1, 1]): the batch statistics get the rounding
        noise of float32 sums over a channel's elements (relative to the sums of |terms|)."""
        if not self.training:
            return
        self.sync()
        with torch.no_grad():
            x = x.detach()
            mean, var = BATCH_NORM_RUNNING_VAR.update(self.running_mean, self.running_var, x, self.momentum)
            if uniform is not None:
                dims = [d for d in range(x.dim()) if d != 1]
                size = tol.accumulation_noise(x.numel() // x.shape[1]) * self.momentum
                centered = x - x.mean(dim=dims, keepdim=True)
                mean = mean + size * x.abs().mean(dim=dims) * uniform(mean.shape).to(mean.dtype)
                var = var + size * (centered * centered).mean(dim=dims) * uniform(var.shape).to(var.dtype)
        self.pending.update(running_mean=mean, running_var=var)


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


def norm_groups(m: torch.nn.Module, x: torch.Tensor) -> NormGroups | None:
    """The groups a normalisation computes statistics over, for an input shaped like x; None
    when it computes none (eval-mode BatchNorm reads its running statistics)."""
    channel_shape = [1, -1] + [1] * (x.dim() - 2)
    w = getattr(m, "weight", None)
    weight = w.detach().to(x.dtype) if isinstance(w, torch.Tensor) else None
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
