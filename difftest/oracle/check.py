"""Run one program through both executors and compare against the model: on one burn worker
(`check`), or on several, one per burn backend (`check_on`: the model, PyTorch and the float64
runs arbitration needs are made once, each backend's observation judged against them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Protocol

from difftest.divergences.rules import Rule, rules_for
from difftest.exec.backends import DEFAULT_BACKEND
from difftest.exec.burn_worker import BurnWorker
from difftest.exec.torch_exec import BeforeBackward
from difftest.ops.validate import check_program
from difftest.oracle.compare import Verdict, compare
from difftest.oracle.model import BackwardHook, Prediction, predict
from difftest.oracle.numerics import TorchRuns, arbitrate
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import Program


class Alongside(Protocol):
    """Work done alongside a check, in its runs rather than in runs of its own (probe_run.py:
    the root probes). Each hook is asked for once, in this order."""

    def model_hooks(self) -> tuple[BackwardHook | None, BackwardHook | None]:
        """The model's `at_burn_backward` and `at_torch_backward` (they must not change the
        prediction)."""

    def torch_backward_hook(self) -> BeforeBackward | None:
        """The PyTorch run's `before_backward` (it must leave the run's state as it found it)."""

    def predicted(self) -> None:
        """Called once the model has run (its hooks with it), before PyTorch runs the program:
        burn is running it meanwhile, and requests sent now queue behind it."""


def check(program: Program, worker: BurnWorker, *, rules: Sequence[Rule] | None = None,
          alongside: Alongside | None = None, prediction: Prediction | None = None) -> Verdict:
    """`rules`: the divergences the model applies; by default the declared ones that hold for
    the burn version the worker was built with (a rule outside its range is not applied).
    `alongside`: hooks into the check's model and PyTorch runs (Alongside); the verdict is the
    same with them as without. `prediction`: the model's prediction for `program` under
    `rules`, when the caller has it (equal to `predict`'s: a root probe's, probe_predictions.py);
    the model is not run then (and `alongside` must be None)."""
    backend = worker.backend or DEFAULT_BACKEND
    return check_on(program, {backend: worker}, rules=rules, alongside=alongside, prediction=prediction)[backend]


def check_on(program: Program, workers: Mapping[str, BurnWorker], *, rules: Sequence[Rule] | None = None,
             alongside: Alongside | None = None, prediction: Prediction | None = None) -> dict[str, Verdict]:
    """The program's verdict on each worker (by backend name; workers of one binary, so of one
    burn version), as `check` gives it on each alone: every worker runs the program in its
    process while the model and PyTorch run here, once; each observation is compared with them,
    and the float64 runs arbitration needs are made once for all (TorchRuns)."""
    if rules is None:
        rules = rules_for(next(iter(workers.values())).burn_version())
    shapes = check_program(program)
    pending = {b: w.submit(program) for b, w in workers.items()}  # burn runs in its processes while PyTorch runs here
    if prediction is None:
        at_burn, at_torch = alongside.model_hooks() if alongside is not None else (None, None)
        prediction = predict(program, rules, at_burn_backward=at_burn, at_torch_backward=at_torch)
        if alongside is not None:
            alongside.predicted()
    else:
        assert alongside is None, "a check given its prediction runs no model to hook into"
    torch_obs = run_torch(program, before_backward=alongside.torch_backward_hook() if alongside else None)
    burn = {b: p.result() for b, p in pending.items()}
    arbiter = partial(arbitrate, runs=TorchRuns(program)) if len(burn) > 1 else arbitrate
    return {b: compare(program, shapes, prediction, torch_obs, obs, arbiter=arbiter) for b, obs in burn.items()}
