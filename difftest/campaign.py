"""Campaigns: seeded streams of generated programs through both frameworks.

`difftest fuzz` is a campaign that saves findings; the detection-power suite runs campaigns
against a deliberately faulty interpreter and records how many programs it takes to notice.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .burn_worker import BurnWorker
from .compare import Verdict
from .runner import check


@dataclass
class CampaignStats:
    programs: int = 0
    seconds: float = 0.0
    verdicts: Counter[str] = field(default_factory=Counter)
    rules: Counter[str] = field(default_factory=Counter)
    ops: Counter[str] = field(default_factory=Counter)
    first_finding: int | None = None  # 1-based index of the first failing program
    findings: list[Verdict] = field(default_factory=list)


def run_campaign(
    worker: BurnWorker,
    *,
    seed: int = 0,
    programs: int = 2000,
    seconds: float = 0.0,
    ops: tuple[str, ...] | None = None,
    max_statements: int = 10,
    stop_at_first: bool = False,
    on_finding: Callable[[Verdict], None] | None = None,
    on_progress: Callable[[CampaignStats], None] | None = None,
    progress_every: float = 10.0,
) -> CampaignStats:
    from strategies import GenConfig, RandomChoices, generate

    cfg = GenConfig(ops=ops, max_statements=max_statements)
    cfg.op_specs()
    stats = CampaignStats()
    start = last = time.monotonic()
    while True:
        now = time.monotonic()
        if seconds and now - start >= seconds:
            break
        if not seconds and stats.programs >= programs:
            break
        c = RandomChoices(seed * 1_000_003 + stats.programs)
        program = generate(c, cfg)
        stats.programs += 1
        stats.ops.update({k[3:]: v for k, v in c.events.items() if k.startswith("op:")})
        verdict = check(program, worker)
        stats.verdicts[verdict.kind] += 1
        stats.rules.update(verdict.prediction.rules_fired)
        if not verdict.ok:
            stats.findings.append(verdict)
            if stats.first_finding is None:
                stats.first_finding = stats.programs
            if on_finding:
                on_finding(verdict)
            if stop_at_first:
                break
        if on_progress and now - last >= progress_every:
            last = now
            stats.seconds = now - start
            on_progress(stats)
    stats.seconds = time.monotonic() - start
    return stats
