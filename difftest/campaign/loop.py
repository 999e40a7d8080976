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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from difftest.exec.backends import DEFAULT_BACKEND
from difftest.exec.burn_worker import BurnWorker
from difftest.exec.coverage_map import worker_marks
from difftest.exec.inflight import in_flight
from difftest.findings.summary import MODULE_KEY
from difftest.oracle.compare import DISMISSED, Verdict, dismissal_reason
from difftest.oracle.probe_run import ProbeRun, check_with_probes_on
from difftest.program.ir import Program
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import DEFAULT_KNOWN_SITES, GenConfig
from difftest.strategies.generator import generate

SEED_STRIDE = 1_000_003


class Steering(Protocol):
    """Where program k's choices come from, told what each program reached (a guided campaign:
    difftest/campaign/guided.py)."""

    def choices(self, k: int) -> RandomChoices: ...

    def observe(self, program: Program, worker: BurnWorker, before: tuple[int, int] | None = None) -> bool: ...


def program_seed(seed: int, k: int) -> int:
    """The RandomChoices seed of program k of a campaign with seed `seed`."""
    return seed * SEED_STRIDE + k


def program_at(seed: int, k: int, ops: tuple[str, ...] | None = None, max_statements: int = 10,
               profile: str = "default", backends: tuple[str, ...] = (),
               known_sites: float = DEFAULT_KNOWN_SITES) -> Program:
    """Program k of a campaign (the same program `run_campaign` checks at index k; `backends`:
    the campaign's, whose refused calls the generator redraws)."""

    return generate(RandomChoices(program_seed(seed, k)),
                    GenConfig.profile(profile, ops=ops, max_statements=max_statements, backends=backends,
                                      p_known_site=known_sites))


def dismissals(verdict: Verdict) -> list[str]:
    """The mismatches arbitration dismissed (numeric agreement, ill-conditioning), as
    `verdict: reason` with numbers and statement ids left out (compare.dismissal_reason: an
    ill-conditioned element counts under the op whose kink reached it), so that a campaign's
    summary counts them by kind rather than listing every element's own reason."""
    return [dismissal_reason(m) for m in verdict.mismatches if m.verdict in DISMISSED]


def skipped(verdict: Verdict) -> dict[str, int]:
    """The values and gradients the comparison did not compare numerically, by reason."""
    return dict(verdict.skipped)


def program_result(runs: Mapping[str, tuple[Verdict, ProbeRun]]) -> tuple[Verdict, ProbeRun]:
    """A program's result on several backends (backend -> verdict and probe run, in the campaign's
    order), as one: the first backend's that shows a finding, else the first's."""
    return next((r for r in runs.values() if not r[0].ok), next(iter(runs.values())))


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
    worker: BurnWorker | Mapping[str, BurnWorker],
    *,
    seed: int = 0,
    programs: int = 2000,
    seconds: float = 0.0,
    ops: tuple[str, ...] | None = None,
    max_statements: int = 10,
    profile: str = "default",
    known_sites: float = DEFAULT_KNOWN_SITES,
    stop_at_first: bool = False,
    on_finding: Callable[[Verdict], None] | None = None,
    on_progress: Callable[[CampaignStats], None] | None = None,
    progress_every: float = 10.0,
    start: int = 0,
    stride: int = 1,
    deadline: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_program: Callable[[int, Verdict, dict[str, int], ProbeRun], None] | None = None,
    on_backends: Callable[[int, dict[str, tuple[Verdict, ProbeRun]], dict[str, int]], None] | None = None,
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
    it observes each program after its run and probes, before `on_program`.
    `worker` may be several, by backend name (one binary): each program runs on each, the model
    and PyTorch once (probe_run.check_with_probes_on); `on_backends(k, runs, op counts)` gets
    every backend's verdict and probe run, and the stats and `on_program` the program's
    (`program_result`), with dismissals, values not compared and probes summed over the
    backends. `steering` observes the first backend's worker."""
    workers = {worker.backend or DEFAULT_BACKEND: worker} if isinstance(worker, BurnWorker) else dict(worker)
    first = next(iter(workers.values()))

    cfg = GenConfig.profile(profile, ops=ops, max_statements=max_statements, backends=tuple(workers),
                            p_known_site=known_sites)
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
        # catalog ops by name, module kinds as "module:<kind>" (Summary.catalog_ops, module_kinds)
        op_counts = {e[3:] if e.startswith("op:") else e: v for e, v in c.events.items()
                     if e.startswith(("op:", MODULE_KEY))}
        stats.ops.update(op_counts)
        # on disk while the job checks and reports it (exec/inflight.py): written once for its run
        # and probes on every backend, and kept if the job dies before it is done
        with in_flight(workers.values(), program):
            before = worker_marks(first)
            runs = check_with_probes_on(program, workers, probes=probes)
            verdict, probed = program_result(runs)
            if steering is not None:
                steering.observe(program, first, before)
            for v, p in runs.values():
                stats.probes += p.probes
                stats.probes_checked += p.checked
                stats.probes_batch_only += p.batch_only_count
                stats.dismissals.update(dismissals(v))
                stats.skipped.update(skipped(v))
            stats.verdicts[verdict.kind] += 1
            stats.rules.update(verdict.prediction.rules_fired)
            stats.restarts = sum(w.restarts for w in workers.values())
            if on_backends is not None:
                on_backends(k, runs, op_counts)
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
