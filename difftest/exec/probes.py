"""Root probes in campaigns (difftest/oracle/probes.py): a program that passed is probed at
every other root its backwards could have had.

burn runs every probe of a program in one request (the worker's `probe`: outcomes only); a
probe whose outcome differs from the model's prediction gets a full check (PyTorch, the model,
arbitration), and the first one whose verdict fails is the program's finding. A crash or hang of
the batch is found the same way: the probes are then checked one by one until one fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from difftest.divergences.rules import Rule, rules_for
from difftest.exec.burn_worker import BurnWorker, WorkerError
from difftest.exec.runner import check
from difftest.oracle.compare import Verdict
from difftest.oracle.probes import RootProbe, root_probes
from difftest.program.ir import Program
from difftest.program.observation import ErrorObs, Observation


@dataclass
class ProbeRun:
    probes: int = 0  # probes run on burn
    checked: int = 0  # of them, checked in full (their outcome differed from the prediction)
    verdict: Verdict | None = None  # the first failing verdict of a probe
    probe: RootProbe | None = None  # its probe


def disagrees(probe: RootProbe, outcome: ErrorObs | None) -> bool:
    """Whether burn's outcome of `probe` differs from the model's prediction (a failure at the
    probe's backward, or none)."""
    if outcome is None:
        return probe.fails
    return not probe.fails or outcome.index != probe.index


def run_probes(program: Program, worker: BurnWorker, *, rules: Sequence[Rule] | None = None) -> ProbeRun:
    """The root probes of `program` (which passed its own check) on `worker`'s burn."""
    if rules is None:
        rules = rules_for(worker.burn_version())
    probes = root_probes(program, rules)
    run = ProbeRun(probes=len(probes))
    if not probes:
        return run
    outcomes = worker.probe(program, [(p.index, p.root) for p in probes])
    if isinstance(outcomes, Observation) and outcomes.error is not None and outcomes.error.kind == "invalid-request":
        raise WorkerError(f"difftest-burn refused the root probes of a program: {outcomes.error.message} "
                          "(a build without the `probe` request? rebuild it, or run without probes: "
                          "difftest fuzz --no-probes)")
    if isinstance(outcomes, Observation):  # the batch crashed or hung: find the probe that does
        suspects: list[RootProbe] = probes
    else:
        suspects = [p for p, o in zip(probes, outcomes, strict=True) if disagrees(p, o)]
    for p in suspects:
        run.checked += 1
        verdict = check(p.program(program), worker, rules=rules)
        if not verdict.ok:
            run.verdict, run.probe = verdict, p
            break
    return run


def check_with_probes(program: Program, worker: BurnWorker, *, probes: bool = True,
                      rules: Sequence[Rule] | None = None) -> tuple[Verdict, ProbeRun]:
    """The program's verdict, or, when it passed, the first failing verdict of its root probes
    (`ProbeRun.probe` says which); with the probe counts."""
    if rules is None:
        rules = rules_for(worker.burn_version())
    verdict = check(program, worker, rules=rules)
    if not probes or not verdict.ok:
        return verdict, ProbeRun()
    run = run_probes(program, worker, rules=rules)
    return (run.verdict if run.verdict is not None else verdict), run
