"""A program run in PyTorch as the oracle needs it: the executor (difftest/exec/torch_exec.py)
told which batch_norm forwards follow burn onto its inference path (burn_devices.py). Every
PyTorch run of a program above the executor goes through `run`."""

from __future__ import annotations

from difftest.exec.torch_exec import AtEnd, BeforeBackward, ExecHooks, run_torch
from difftest.oracle.burn_devices import batch_norm_inference_applies
from difftest.program.ir import Program
from difftest.program.observation import Observation


def run(program: Program, dtype: str | None = None, *, hooks: ExecHooks | None = None,
        at_end: AtEnd | None = None, before_backward: BeforeBackward | None = None) -> Observation:
    """`program` in PyTorch, in its own dtype (`dtype` None) or in `dtype` (the float64 arbiter)."""
    return run_torch(program, dtype, burn_inference=batch_norm_inference_applies(program), hooks=hooks,
                     at_end=at_end, before_backward=before_backward)
