"""The cotangent PyTorch propagates to each op's result in one backward of a program: what the
localiser seeds an op's one-op program with, so that the op's vector-Jacobian product is checked
with the very gradient that reached it (localise.py), not only with ones or a fixed pattern."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from difftest.oracle.pytorch import run as run_torch
from difftest.oracle.sites import OpSite, SiteHooks
from difftest.program.ir import Backward, Program


class CotangentHooks(SiteHooks):
    """Site hooks that run every op and module forward as is and record, for each result a
    backward reaches, the gradient that reaches it. A backward first reaches its root (with
    ones): when the root `root` is reached, what earlier backwards recorded is dropped, so that
    after a program ending in the backward of `root`, `seen` holds that backward's only."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.seen: dict[str, torch.Tensor] = {}

    def on_site(self, site: OpSite, inputs: Sequence[torch.Tensor],
                compute: Callable[[Sequence[torch.Tensor]], torch.Tensor]) -> torch.Tensor:
        y = compute(inputs)
        if y.requires_grad:
            def keep(g: torch.Tensor, ident: str = site.id) -> None:
                if ident == self.root:
                    self.seen.clear()
                self.seen[ident] = g.detach().clone()

            y.register_hook(keep)  # type: ignore[no-untyped-call]
        return y


def cotangents(program: Program, backward: str) -> dict[str, tuple[tuple[int, ...], tuple[float, ...]]]:
    """For the backward `backward`, each op or module result it reaches and the gradient PyTorch
    propagated to it (shape, data), from a run of the program up to that backward in the
    program's dtype. Empty when the backward is not in the program or the run fails first."""
    index = next((i for i, st in enumerate(program.statements) if isinstance(st, Backward) and st.id == backward),
                 None)
    if index is None:
        return {}
    bw = program.statements[index]
    assert isinstance(bw, Backward)
    hooks = CotangentHooks(bw.input)
    obs = run_torch(program.with_statements(program.statements[: index + 1]), hooks=hooks)
    if obs.error is not None:
        return {}
    return {k: (tuple(g.shape), tuple(float(x) for x in g.reshape(-1).tolist())) for k, g in hooks.seen.items()}
