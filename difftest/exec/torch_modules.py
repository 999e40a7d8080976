"""How PyTorch builds each module kind of difftest/program/module_kinds.py (one builder per
kind, from the statement's configuration and inline tensors, in PyTorch's names and layouts)."""

from __future__ import annotations

from collections.abc import Callable

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


class BurnBatchNorm(torch.nn.Module):
    """BatchNorm over channel dim 1 with PyTorch's parameters (weight, bias) and buffers
    (running_mean, running_var), whose train-mode forward updates the running statistics under
    burn's declared convention (difftest/divergences/running_stats.py), computed from that
    record's formula instead of PyTorch's in-place update (the unbiased variance). The forward
    itself is PyTorch's `F.batch_norm`."""

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return torch.nn.functional.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                                  training=False, eps=self.epsilon)
        out = torch.nn.functional.batch_norm(x, None, None, self.weight, self.bias, training=True, eps=self.epsilon)
        with torch.no_grad():
            mean, var = BATCH_NORM_RUNNING_VAR.update(self.running_mean, self.running_var, x.detach(),
                                                      self.momentum)
            self.running_mean.copy_(mean)
            self.running_var.copy_(var)
        return out


def _batch_norm(st: Module, dt: torch.dtype) -> torch.nn.Module:
    return _copy_tensors(BurnBatchNorm(st, dt), st, dt)


def _layer_norm(st: Module, dt: torch.dtype) -> torch.nn.Module:
    """nn.LayerNorm over the last dim (normalized_shape = [d_model])."""
    m = torch.nn.LayerNorm(int(st.attrs["d_model"]), eps=float(st.attrs["epsilon"]), bias=st.bias is not None,
                           dtype=dt)
    return _copy_tensors(m, st, dt)


# module kinds whose train-mode forwards update buffers in place; the handles a transform
# derives keep sharing them where burn's do (a clone shares its RunningState: no_grad, freeze,
# unfreeze; valid and train copy it: rust/src/batch_norm_evidence.rs)
SHARES_BUFFERS_ACROSS = ("no_grad", "freeze", "unfreeze")


TORCH_BUILDERS: dict[str, Callable[[Module, torch.dtype], torch.nn.Module]] = {
    "linear": _linear,
    "dropout": _dropout,
    "batch_norm": _batch_norm,
    "layer_norm": _layer_norm,
}


def build_torch_module(st: Module, dt: torch.dtype) -> torch.nn.Module:
    builder = TORCH_BUILDERS.get(st.module)
    if builder is None:
        raise ValueError(f"module {st.id!r}: no PyTorch builder for kind {st.module!r}")
    return builder(st, dt)
