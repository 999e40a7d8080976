"""The PyTorch executor's sessions (torch_exec.py): what backwards leave behind, gradient
reads of a gradients handle, and optimizer steps on a copy of a module."""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import torch

from difftest.exec.torch_values import TorchModule, tensor_obs
from difftest.program.ir import Backward, Grad, Optimizer, Step
from difftest.program.observation import BackwardObs, TensorObs


class MissingGradient(Exception):
    """A `grad` of a value its gradients handle has no gradient for."""


@dataclass
class Session:
    """What a program's backwards leave behind: each gradients handle (the gradient each
    backward produced, per tensor), the optimizers' configurations and states."""

    handles: dict[str, dict[int, torch.Tensor]]
    optimizers: dict[str, Optimizer]
    optimizer_states: dict[str, dict[str, object]]


def _grad_holders(env: dict[str, torch.Tensor], modules: dict[str, TorchModule]) -> list[torch.Tensor]:
    """Every leaf tensor that can hold a `.grad`: the program's leaf values and every module
    handle's parameters (each once)."""
    out: dict[int, torch.Tensor] = {}
    for t in env.values():
        if t.is_leaf:
            out.setdefault(id(t), t)
    for handle in modules.values():
        for p in handle.module.parameters():
            out.setdefault(id(p), p)
    return list(out.values())


def _backward(st: Backward, env: dict[str, torch.Tensor], modules: dict[str, TorchModule],
              session: Session, holders: list[torch.Tensor] | None = None,
              accumulate: bool = True) -> BackwardObs:
    """`root.backward()`, with `.grad` accumulation made explicit: the handle holds what this
    backward produced (burn's fresh Gradients), and each `.grad` becomes what PyTorch's
    accumulation makes of it (the earlier `.grad` plus this backward's). `holders`: what
    `_grad_holders` gives for `env` and `modules`, when the caller has it. `accumulate=False`
    leaves each `.grad` this backward's alone, for a caller that puts every `.grad` back after
    (torch_probes.py); what is reported is the same."""
    if holders is None:
        holders = _grad_holders(env, modules)
    earlier = [t.grad for t in holders]
    for t in holders:
        t.grad = None
    root = env[st.input]
    fresh: dict[int, torch.Tensor] = {}  # by id of the holder: the gradient this backward gave it
    try:
        root.backward(torch.ones_like(root), retain_graph=st.retain_graph)  # type: ignore[no-untyped-call]
    finally:
        for t, before in zip(holders, earlier, strict=True):
            new = t.grad
            if new is not None:
                fresh[id(t)] = new
            if accumulate and before is not None:
                t.grad = before if new is None else before + new
    session.handles[st.id] = fresh
    grads: dict[str, TensorObs | None] = {}
    for ident, t in env.items():
        g = fresh.get(id(t)) if t.is_leaf else None
        grads[ident] = _tensor_obs(g) if g is not None else None
    return BackwardObs(st.id, grads)


def _grad(st: Grad, env: dict[str, torch.Tensor], session: Session) -> torch.Tensor:
    t = env[st.of]
    g = session.handles[st.grads].get(id(t)) if t.is_leaf else None
    if g is None:
        raise MissingGradient(f"{st.of!r} has no gradient in {st.grads!r}")
    return g


def _step(st: Step, modules: dict[str, TorchModule], session: Session) -> TorchModule:
    """`torch.optim.SGD(...).step()` on a copy of the module (burn's step returns a new module):
    the copy's parameters get the original's `.grad` (what PyTorch's step reads), the optimizer
    resumes from the state of the optimizer's previous step."""
    handle = modules[st.module]
    m = copy.deepcopy(handle.module)
    for new, old in zip(m.parameters(), handle.module.parameters()):
        new.grad = old.grad.detach().clone() if old.grad is not None else None
    cfg = session.optimizers[st.optimizer]
    opt = torch.optim.SGD(m.parameters(), lr=st.lr, momentum=cfg.momentum, dampening=cfg.dampening,
                          nesterov=cfg.nesterov, weight_decay=cfg.weight_decay)
    state = session.optimizer_states.get(st.optimizer)
    if state is not None:
        opt.load_state_dict(copy.deepcopy(state))  # type: ignore[arg-type]
    opt.step()
    session.optimizer_states[st.optimizer] = copy.deepcopy(opt.state_dict())  # type: ignore[arg-type]
    for p in m.parameters():
        p.grad = None  # a new handle starts without gradients, like burn's
    return replace(handle, module=m)


def _tensor_obs(t: torch.Tensor) -> TensorObs:
    return tensor_obs(t)
