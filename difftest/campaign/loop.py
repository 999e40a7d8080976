"""Campaigns: seeded streams of generated programs through both frameworks.

`difftest fuzz` is a campaign that saves findings (run in parallel jobs by `parallel.py`); the
detection-power suite runs campaigns against a deliberately faulty interpreter and records how
many programs it takes to notice.

Program k of seed s is always `generate(RandomChoices(s * 1_000_003 + k))`: a campaign is a set
of program indices, so it can be split among jobs and shards (`start`, `stride`) and give the
same programs however it is split. A program that passes is probed at the other roots its
backwards could have had (root probes, difftest/oracle/probe_run.py) unless `probes=False`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from difftest.exec.burn_worker import BurnWorker
from difftest.oracle.compare import DISMISSED, Verdict
from difftest.oracle.probe_run import ProbeRun, check_with_probes
from difftest.program.ir import Program
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate

SEED_STRIDE = 1_000_003


class Steering(Protocol):
    """Where program k's choices come from, told what each program reached (a guided campaign:
    difftest/campaign/guided.py)."""

    def choices(self, k: int) -> RandomChoices: ...

    def observe(self, program: Program, worker: BurnWorker) -> bool: ...


def program_seed(seed: int, k: int) -> int:
    """The RandomChoices seed of program k of a campaign with seed `seed`."""
    return seed * SEED_STRIDE + k


def program_at(seed: int, k: int, ops: tuple[str, ...] | None = None, max_statements: int = 10,
               profile: str = "default") -> Program:
    """Program k of a campaign (the same program `run_campaign` checks at index k)."""

    return generate(RandomChoices(program_seed(seed, k)),
                    GenConfig.profile(profile, ops=ops, max_statements=max_statements))


def dismissals(verdict: Verdict) -> list[str]:
    """The mismatches arbitration dismissed (numeric agreement, ill-conditioning), as
    `verdict:reason` (the reason from the evidence, else the mismatch kind)."""
    return [f"{m.verdict}:{m.evidence.get('reason', m.kind)}" for m in verdict.mismatches if m.verdict in DISMISSED]


def skipped(verdict: Verdict) -> dict[str, int]:
    """The values and gradients the comparison did not compare numerically, by reason."""
    return dict(verdict.skipped)


@dataclass
class CampaignStats:
    programs: int = 0
    seconds: float = 0.0
    verdicts: Counter[str] = field(default_factory=Counter)
    rules: Counter[str] = field(default_factory=Counter)
    ops: Counter[str] = field(default_factory=Counter)
    dismissals: Counter[str] = field(default_factory=Counter)  # see `dismissals`
    skipped: Counter[str] = field(default_factory=Counter)  # see `skipped`
    restarts: int = 0  # of the burn worker (crashes, hangs, memory recycling)
    probes: int = 0  # root probes run on burn (difftest/oracle/probe_run.py)
    probes_checked: int = 0  # of them, checked in full (outcome or gradients failed the screen)
    probes_batch_only: int = 0  # probes that failed in burn's batch only (state leaking between runs; ProbeRun)
    first_finding: int | None = None  # 1-based count of programs run up to the first failing one
    findings: list[Verdict] = field(default_factory=list)


def run_campaign(
    worker: BurnWorker,
    *,
    seed: int = 0,
    programs: int = 2000,
    seconds: float = 0.0,
    ops: tuple[str, ...] | None = None,
    max_statements: int = 10,
    profile: str = "default",
    stop_at_first: bool = False,
    on_finding: Callable[[Verdict], None] | None = None,
    on_progress: Callable[[CampaignStats], None] | None = None,
    progress_every: float = 10.0,
    start: int = 0,
    stride: int = 1,
    deadline: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_program: Callable[[int, Verdict, dict[str, int], ProbeRun], None] | None = None,
    keep_findings: bool = True,
    probes: bool = True,
    steering: Steering | None = None,
) -> CampaignStats:
    """Checks programs `start`, `start + stride`, ... (`programs` of them, or until `seconds`
    have passed, or until the wall-clock `deadline` (time.time()), or until `should_stop()`).
    `on_program(k, verdict, op counts, probe run)` is called after each program; `keep_findings=False`
    keeps failing verdicts out of `stats.findings` (long campaigns that report them elsewhere).
    `probes`: a program that passes is probed at the other roots its backwards could have had
    (difftest/oracle/probe_run.py); a failing probe's verdict is the program's (`ProbeRun.probe` says
    which). `steering`: program k's choices come from it (else the seeded RandomChoices of k), and
    it observes each program after its run and probes, before `on_program`."""

    cfg = GenConfig.profile(profile, ops=ops, max_statements=max_statements)
    cfg.op_specs()
    stats = CampaignStats()
    begin = last = time.monotonic()
    while True:
        now = time.monotonic()
        if seconds and now - begin >= seconds:
            break
        if deadline is not None and time.time() >= deadline:
            break
        if not seconds and deadline is None and stats.programs >= programs:
            break
        if should_stop is not None and should_stop():
            break
        k = start + stride * stats.programs
        c = steering.choices(k) if steering is not None else RandomChoices(program_seed(seed, k))
        program = generate(c, cfg)
        stats.programs += 1
        op_counts = {e[3:]: v for e, v in c.events.items() if e.startswith("op:")}
        stats.ops.update(op_counts)
        verdict, probed = check_with_probes(program, worker, probes=probes)
        if steering is not None:
            steering.observe(program, worker)
        stats.probes += probed.probes
        stats.probes_checked += probed.checked
        stats.probes_batch_only += probed.batch_only_count
        stats.verdicts[verdict.kind] += 1
        stats.rules.update(verdict.prediction.rules_fired)
        stats.dismissals.update(dismissals(verdict))
        stats.skipped.update(skipped(verdict))
        stats.restarts = worker.restarts
        if on_program is not None:
            on_program(k, verdict, op_counts, probed)
        if not verdict.ok:
            if keep_findings:
                stats.findings.append(verdict)
            if stats.first_finding is None:
                stats.first_finding = stats.programs
            if on_finding:
                on_finding(verdict)
            if stop_at_first:
                break
        if on_progress and now - last >= progress_every:
            last = now
            stats.seconds = now - begin
            on_progress(stats)
    stats.seconds = time.monotonic() - begin
    return stats
