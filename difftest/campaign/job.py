"""A campaign's job process (parallel.py starts one per `-j`): it runs its slice of the
campaign with its own burn worker and reports every program, finding and claim to the parent."""

from __future__ import annotations

import os
import queue
import signal
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from difftest.campaign.claims import KNOWN_PREFIX, recheck, shrunk
from difftest.campaign.guided import Frontier, Guide
from difftest.campaign.loop import dismissals, run_campaign, skipped
from difftest.exec.burn_worker import BurnWorker
from difftest.exec.coverage_map import load_map
from difftest.findings.corpus import case_from_verdict
from difftest.findings.table import report as table_report
from difftest.findings.triage import triage
from difftest.oracle.compare import Verdict
from difftest.strategies.config import GenConfig

if TYPE_CHECKING:
    from difftest.oracle.probe_run import ProbeRun

# Fault injection for the campaign's own crash handling: a job dies (SIGSEGV) on reaching this
# program index, as a crash inside PyTorch kills it (tests/differential/test_campaign.py); read
# in the parent, which passes it on in the job's spec.
CRASH_ENV = "DIFFTEST_JOB_CRASH_AT"


@dataclass(frozen=True)
class JobSpec:
    job: int
    seed: int
    start: int
    stride: int
    programs: int  # ignored with a deadline
    deadline: float | None  # time.time() at which to stop (--time)
    ops: tuple[str, ...] | None
    max_statements: int
    binary: str | None
    timeout: float
    fault: str | None
    inflight_dir: str | None
    known: frozenset[str]  # signatures of the corpus's cases (not saved again)
    source: str
    shrink: bool = True
    verbose: bool = False
    profile: str = "default"
    probes: bool = True
    crash_at: int = -1  # fault injection (CRASH_ENV, read by the parent): die on reaching this program
    frontier: str | None = None  # a guided campaign's frontier directory (campaign/guided.py)
    guided_share: float = 0.5  # of a guided campaign's programs, mutations of frontier entries


def job_main(spec: JobSpec, results: Any, inbox: Any, stop: Any) -> None:
    """A job process: runs its slice of the campaign and reports every program to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C; the burn worker inherits this
    parent = os.getppid()
    worker = None
    try:
        import torch

        torch.set_num_threads(1)

        inflight = Path(spec.inflight_dir) if spec.inflight_dir else None
        worker = BurnWorker(spec.binary, timeout=spec.timeout, inflight_dir=inflight, fault=spec.fault)
        worker.start()
        version = worker.version()
        known = set(spec.known)
        crash_at = spec.crash_at

        def orphaned() -> bool:
            return os.getppid() != parent

        def claim(k: int, sig: str) -> bool:
            results.put(("claim", spec.job, k, sig))
            while True:
                try:
                    return bool(inbox.get(timeout=0.5))
                except queue.Empty:
                    if orphaned():
                        return False

        def on_program(k: int, verdict: Verdict, ops: dict[str, int], probed: ProbeRun) -> None:
            if k == crash_at:  # fault injection: the job process dies as a native crash would
                os.kill(os.getpid(), signal.SIGSEGV)
            probe = probed.probe
            sig = None
            if not verdict.ok:
                t = triage(verdict, worker)
                sig = f"{KNOWN_PREFIX}{t.known.name}" if t.known is not None else t.signature
                if t.known is None and sig not in known:
                    known.add(sig)
                    where = f"program {k}" + (f", {probe.describe()}" if probe is not None else "")
                    again = recheck(verdict, spec.binary, spec.timeout, spec.fault) if claim(k, sig) else None
                    if again is not None and again != sig:
                        # the program does not give the same finding in a fresh worker: report both
                        # observations as flaky instead of saving a bug
                        case = case_from_verdict(verdict, source=f"{spec.source} ({where})", burn_version=version)
                        case.record["recheck"] = again
                        results.put(("flaky", spec.job, k, sig, case))
                    elif again is not None:
                        final = shrunk(verdict, sig, worker, stop) if spec.shrink else verdict
                        case = case_from_verdict(final, source=f"{spec.source} ({where})", burn_version=version)
                        final_t = t if final is verdict else triage(final, worker)
                        case.record["triage"] = final_t.to_dict()
                        case.reason = f"{final_t.describe()}\n{case.reason}"
                        report = table_report(final) if spec.verbose else ""
                        results.put(("case", spec.job, k, sig, case, len(verdict.program), len(final.program),
                                     report))
            assert worker is not None
            results.put(("result", spec.job, k, verdict.kind, list(verdict.prediction.rules_fired), ops,
                         dismissals(verdict), worker.restarts, sig, *probed.counts(), skipped(verdict)))

        guide = None
        if spec.frontier is not None:
            cfg = GenConfig.profile(spec.profile, ops=spec.ops, max_statements=spec.max_statements)
            guide = Guide(Frontier.load(Path(spec.frontier)), cfg, spec.seed, spec.guided_share,
                          load_map(worker).burn_edges)
        stats = run_campaign(
            worker, seed=spec.seed, programs=spec.programs, ops=spec.ops, max_statements=spec.max_statements,
            profile=spec.profile, probes=spec.probes, steering=guide,
            start=spec.start, stride=spec.stride, deadline=spec.deadline,
            should_stop=lambda: stop.is_set() or orphaned(), on_program=on_program, keep_findings=False,
        )
        if guide is not None:
            results.put(("guided", spec.job, guide.stats()))
        results.put(("exit", spec.job, stats.programs, stats.seconds))
    except BaseException:
        results.put(("error", spec.job, traceback.format_exc()))
    finally:
        if worker is not None:
            worker.close()
