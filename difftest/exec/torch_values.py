"""What the PyTorch executor's parts share (torch_exec.py runs programs, torch_session.py its
sessions): dtypes by name, regions, a tensor's observation and flags, a module handle and its
forward."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from difftest.program.ir import Region
from difftest.program.modules import module_kind
from difftest.program.observation import TensorObs

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


@contextlib.contextmanager
def region_context(region: Region) -> Iterator[None]:
    if region == "no_grad":
        with torch.no_grad():
            yield
    elif region == "inference_mode":
        with torch.inference_mode():
            yield
    else:
        yield


def tensor_obs(t: torch.Tensor) -> TensorObs:
    flat = t.detach().reshape(-1)
    dtype = DTYPE_NAMES.get(flat.dtype, str(flat.dtype).removeprefix("torch."))
    if not flat.is_floating_point():  # a float dtype's elements are Python floats exactly as they are
        flat = flat.to(torch.float64)
    return TensorObs(tuple(t.shape), tuple(flat.tolist()), dtype)


def flags(t: torch.Tensor) -> dict[str, bool]:
    return {
        "requires_grad": bool(t.requires_grad),
        "is_leaf": bool(t.is_leaf),
        "has_grad_fn": t.grad_fn is not None,
        "is_inference": bool(t.is_inference()),
    }


@dataclass(frozen=True)
class TorchModule:
    """A module handle: the nn.Module, its kind (a name in difftest/program/modules/) and
    whether its forward runs under `torch.no_grad()` (a module derived from `valid` and not
    trained since: `model.eval()` + `no_grad`)."""

    module: torch.nn.Module
    kind: str
    no_grad: bool = False


def apply_module(handle: TorchModule, x: torch.Tensor) -> torch.Tensor:
    """The handle's forward on `x`: seeded before a forward that draws random numbers (dropout,
    as difftest-burn seeds burn's), on indices as a LongTensor for a kind that takes them (the
    program's leaf holds them as floats: embedding)."""
    kind = module_kind(handle.kind)
    if kind.random:
        # the CPU generator alone: torch.manual_seed also queues the seed for every accelerator
        # backend, formatting a stack trace each time (0.1 ms), for the same CPU draws
        torch.default_generator.manual_seed(0)
    if kind.index_bound is not None:
        x = x.long()
    if handle.no_grad:
        with torch.no_grad():
            out: torch.Tensor = handle.module(x)
            return out
    out = handle.module(x)
    return out
