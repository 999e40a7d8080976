"""Run one program through both executors and compare against the model."""

from __future__ import annotations

from collections.abc import Sequence

from .burn_worker import BurnWorker
from .compare import Verdict, compare
from .ir import Program
from .model import predict
from .numerics import arbitrate
from .rules import RULES, Rule
from .torch_exec import run_torch
from .validate import check_program


def check(program: Program, worker: BurnWorker, *, rules: Sequence[Rule] = RULES) -> Verdict:
    shapes = check_program(program)
    pending = worker.submit(program)  # burn runs in its process while PyTorch runs here
    prediction = predict(program, rules)
    torch_obs = run_torch(program)
    burn_obs = pending.result()
    return compare(program, shapes, prediction, torch_obs, burn_obs, arbiter=arbitrate)
