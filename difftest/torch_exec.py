"""The PyTorch executor: runs a program in process and reports an Observation."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from .catalog import CATALOG
from .ir import Backward, Cut, Leaf, OpCall, Program, Region
from .observation import BackwardObs, ErrorObs, Observation, TensorObs, ValueObs

DTYPES = {"float32": torch.float32, "float64": torch.float64}


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
    if flat.dtype != torch.float64:
        flat = flat.to(torch.float64)
    return TensorObs(tuple(t.shape), tuple(flat.tolist()))


def flags(t: torch.Tensor) -> dict[str, bool]:
    return {
        "requires_grad": bool(t.requires_grad),
        "is_leaf": bool(t.is_leaf),
        "has_grad_fn": t.grad_fn is not None,
        "is_inference": bool(t.is_inference()),
    }


def run_torch(program: Program, dtype: str = "float32") -> Observation:
    """Execute `program`; a raised exception stops execution and becomes the error."""
    dt = DTYPES[dtype]
    env: dict[str, torch.Tensor] = {}
    values: list[ValueObs] = []
    backwards: list[BackwardObs] = []
    error: ErrorObs | None = None
    for i, st in enumerate(program.statements):
        try:
            if isinstance(st, Backward):
                backwards.append(_backward(st, env))
                continue
            t = _value(st, env, dt)
        except Exception as e:
            error = ErrorObs("exception", f"{type(e).__name__}: {e}".strip(), i, st.id)
            break
        env[st.id] = t
        values.append(ValueObs(st.id, tensor_obs(t), flags(t)))
    return Observation("torch" if dtype == "float32" else "torch64", tuple(values), tuple(backwards), error)


def _value(st: Leaf | OpCall | Cut, env: dict[str, torch.Tensor], dt: torch.dtype) -> torch.Tensor:
    if isinstance(st, Leaf):
        t = torch.tensor(st.data, dtype=dt).reshape(st.shape).clone()  # a base, not a view
        return t.requires_grad_(True) if st.require_grad else t
    with region_context(st.region):
        if isinstance(st, OpCall):
            spec = CATALOG[st.op]
            return spec.lower([env[x] for x in st.inputs], st.attrs)
        x = env[st.input]
        if st.cut in ("detach", "without_autodiff"):
            return x.detach()
        return x  # autodiff: PyTorch has no such state; identity


def _backward(st: Backward, env: dict[str, torch.Tensor]) -> BackwardObs:
    for t in env.values():
        if t.is_leaf:
            t.grad = None  # burn's backward returns fresh Gradients; never accumulate
    root = env[st.input]
    root.backward(torch.ones_like(root))  # type: ignore[no-untyped-call]
    grads: dict[str, TensorObs | None] = {}
    for ident, t in env.items():
        g = t.grad if t.is_leaf else None
        grads[ident] = tensor_obs(g) if g is not None else None
    return BackwardObs(st.id, grads)
