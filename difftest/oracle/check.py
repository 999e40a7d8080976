"""Run one program through both executors and compare against the model."""

from __future__ import annotations

from collections.abc import Sequence

from difftest.divergences.rules import Rule, rules_for
from difftest.exec.burn_worker import BurnWorker
from difftest.ops.validate import check_program
from difftest.oracle.compare import Verdict, compare
from difftest.oracle.model import predict
from difftest.oracle.numerics import arbitrate
from difftest.oracle.probes import RootProbe, probe_collector
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import Program


def check(program: Program, worker: BurnWorker, *, rules: Sequence[Rule] | None = None,
          probes: list[RootProbe] | None = None) -> Verdict:
    """`rules`: the divergences the model applies; by default the declared ones that hold for
    the burn version the worker was built with (a rule outside its range is not applied).
    `probes`: a list to fill with the program's root probes (probes.root_probes), collected by
    the model's own run of the program rather than by another."""
    if rules is None:
        rules = rules_for(worker.burn_version())
    shapes = check_program(program)
    pending = worker.submit(program)  # burn runs in its process while PyTorch runs here
    hook = probe_collector(program, rules, probes) if probes is not None else None
    prediction = predict(program, rules, at_burn_backward=hook)
    torch_obs = run_torch(program)
    burn_obs = pending.result()
    return compare(program, shapes, prediction, torch_obs, burn_obs, arbiter=arbitrate)
