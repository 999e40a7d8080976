"""PyTorch's gradients at root probes (difftest/oracle/probe_run.py), one forward per backward,
or none: a run of the whole program can serve every backward's probes on its way
(`probes_before_backwards`; a campaign's check runs the program anyway).

A probe's program is the statements before one of the program's backwards, then that backward
rooted elsewhere. Every probe of the same backward shares those statements, so PyTorch runs them
once and then the backward of each probe's root from the state they leave: with the graph's
saved tensors retained (a probe's backward must not free what the next one traverses; a single
backward's gradients do not depend on it), and every `.grad` put back as it was after each (a
backward's gradients are read as what it adds, torch_exec._backward). The result of each is
what `run_torch` of the probe's program reports for its backward: its gradient entries, or the
error it raised.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from difftest.exec.torch_exec import BeforeBackward, ExecHooks, run_torch
from difftest.exec.torch_session import Session, _backward, _grad_holders
from difftest.exec.torch_values import TorchModule
from difftest.program.ir import Backward, Program
from difftest.program.observation import BackwardObs, ErrorObs

ProbeResult = BackwardObs | ErrorObs


def torch_probe_grads(prefix: Program, backward: Backward, roots: Sequence[str],
                      dtype: str | None = None, *, burn_inference: frozenset[str],
                      hooks: ExecHooks | None = None) -> list[ProbeResult]:
    """For each root, PyTorch's report of `backward` rooted there after the statements of
    `prefix` (a program's statements before that backward): its gradient entries, or how it
    failed (a failure of the statements before it is every root's). `dtype`: run in it (float64
    for a reference) instead of the program's. `burn_inference` and `hooks`: as run_torch's
    (hooks whose backward depends on nothing but what the forward saved give each root what a
    run of its probe's program gives it: the graph is retained between the roots)."""
    index = len(prefix.statements)
    results: list[ProbeResult] = []

    def backwards(env: dict[str, torch.Tensor], modules: dict[str, TorchModule], session: Session) -> None:
        results.extend(probe_backwards(index, backward, roots, env, modules, session))

    obs = run_torch(prefix, dtype, burn_inference=burn_inference, hooks=hooks, at_end=backwards)
    if obs.error is not None:
        return [obs.error for _ in roots]
    return results


def probe_backwards(index: int, backward: Backward, roots: Sequence[str], env: dict[str, torch.Tensor],
                    modules: dict[str, TorchModule], session: Session) -> list[ProbeResult]:
    """`backward` (statement `index`) rooted at each of `roots` from the state a run has
    reached before it, each as `_backward` reports it (or the exception it raised, as run_torch
    reports one), leaving the state as it was: the graph retained, every `.grad` and the
    gradients handle of `backward`'s id put back after each."""
    results: list[ProbeResult] = []
    holders = _grad_holders(env, modules)
    had_handle = backward.id in session.handles
    handle = session.handles.get(backward.id)
    for root in roots:
        kept = [t.grad for t in holders]
        try:
            results.append(_backward(Backward(backward.id, root, retain_graph=True), env, modules, session,
                                     holders, accumulate=False))
        except Exception as e:  # as run_torch reports an exception at a statement
            results.append(ErrorObs("exception", f"{type(e).__name__}: {e}".strip(), index, backward.id))
        finally:
            for t, g in zip(holders, kept, strict=True):
                t.grad = g
    if had_handle:
        assert handle is not None
        session.handles[backward.id] = handle
    else:
        session.handles.pop(backward.id, None)
    return results


def probes_before_backwards(program: Program, wanted: dict[int, Sequence[str]],
                            results: dict[int, list[ProbeResult]]) -> BeforeBackward:
    """run_torch's `before_backward` that, at each backward statement i of `program` in
    `wanted`, runs it rooted at each of `wanted[i]` (probe_backwards) into `results[i]`: in a
    run of the whole program, what torch_probe_grads gives for each prefix, with the run's own
    statements, values and backwards unchanged."""

    def before(i: int, env: dict[str, torch.Tensor], modules: dict[str, TorchModule], session: Session) -> None:
        roots = wanted.get(i)
        if roots is not None:
            bw = program.statements[i]
            assert isinstance(bw, Backward), (i, bw)
            results[i] = probe_backwards(i, bw, roots, env, modules, session)

    return before
