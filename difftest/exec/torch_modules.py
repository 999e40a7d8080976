"""How PyTorch builds each module kind of difftest/program/module_kinds.py (one builder per
kind, from the statement's configuration and inline tensors, in PyTorch's names and layouts)."""

from __future__ import annotations

from collections.abc import Callable

import torch

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


TORCH_BUILDERS: dict[str, Callable[[Module, torch.dtype], torch.nn.Module]] = {
    "linear": _linear,
    "dropout": _dropout,
}


def build_torch_module(st: Module, dt: torch.dtype) -> torch.nn.Module:
    builder = TORCH_BUILDERS.get(st.module)
    if builder is None:
        raise ValueError(f"module {st.id!r}: no PyTorch builder for kind {st.module!r}")
    return builder(st, dt)
