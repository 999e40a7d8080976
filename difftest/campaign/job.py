"""A campaign's job process (parallel.py starts one per `-j`): it runs its slice of the
campaign with its own burn worker (one per backend on several: `fuzz --backend flex,ndarray`)
and reports every program, finding and claim to the parent.

A program's `result` message carries its findings by key (findings/backends.py `triangulate`:
the triage key, with its layer class on several backends), and on several backends each
backend's verdict kind and whether its finding is known (None: it passed there)."""

from __future__ import annotations

import os
import queue
import signal
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from difftest.campaign.claims import recheck, shrunk
from difftest.campaign.guided import Frontier, Guide
from difftest.campaign.loop import dismissals, program_result, run_campaign, skipped
from difftest.exec.backends import DEFAULT_BACKEND
from difftest.exec.burn_worker import BurnWorker
from difftest.exec.coverage_map import load_map
from difftest.findings.backends import Shown, triangulate
from difftest.findings.corpus import case_from_verdict
from difftest.findings.table import report as table_report
from difftest.findings.triage import triage
from difftest.oracle.compare import Verdict
from difftest.strategies.config import DEFAULT_KNOWN_SITES, GenConfig

if TYPE_CHECKING:
    from difftest.oracle.probe_run import ProbeRun
    from difftest.oracle.probes import RootProbe

# Fault injection for the campaign's own crash handling: a job dies (SIGSEGV) on reaching this
# program index, as a crash inside PyTorch kills it (tests/differential/test_campaign.py); read
# in the parent, which passes it on in the job's spec.
CRASH_ENV = "DIFFTEST_JOB_CRASH_AT"


def crash_at() -> int:
    """The program a job dies on reaching ($DIFFTEST_JOB_CRASH_AT, fault injection for the tests
    of a job's crash), -1 for none; ValueError naming the variable when it is not an index."""
    text = os.environ.get(CRASH_ENV) or "-1"
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{CRASH_ENV}={text!r} is not a program index") from None


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
    backends: tuple[str, ...] = ()  # several: each program runs on each (fuzz --backend a,b); else one
    known_sites: float = DEFAULT_KNOWN_SITES  # GenConfig.p_known_site: the share of known bugs' triggers kept


def job_main(spec: JobSpec, results: Any, inbox: Any, stop: Any) -> None:
    """A job process: runs its slice of the campaign and reports every program to the parent."""
    # the parent handles Ctrl-C and SIGTERM (a terminal, `timeout`, a CI runner send them to the
    # whole process group) by stopping the jobs after their current program; the burn worker
    # inherits both (ignored signals stay ignored across exec), so neither looks like a crash
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    parent = os.getppid()
    workers: dict[str, BurnWorker] = {}
    try:
        import torch

        torch.set_num_threads(1)

        inflight = Path(spec.inflight_dir) if spec.inflight_dir else None
        # one worker per backend (several: `fuzz --backend flex,ndarray`); one: $DIFFTEST_BURN_BACKEND's
        started: tuple[str | None, ...] = spec.backends or (None,)
        for b in started:
            w = BurnWorker(spec.binary, timeout=spec.timeout, inflight_dir=inflight, fault=spec.fault, backend=b)
            workers[w.backend or DEFAULT_BACKEND] = w
            w.start()
        versions = {b: w.version() for b, w in workers.items()}
        several = len(workers) > 1
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

        def new_finding(k: int, shown: Shown, verdicts: dict[str, Verdict], probe: RootProbe | None) -> None:
            """A finding no known bug explains, first seen in this job: claimed, re-checked, shrunk, sent."""
            sig, b = shown.key, shown.backend
            where = f"program {k}" + (f", {probe.describe()}" if probe is not None else "")
            granted = claim(k, sig)
            again = recheck(shown.verdict, b, started, spec.binary, spec.timeout, spec.fault) if granted else None
            if again is not None and again != sig:
                # the program does not give the same finding in fresh workers: report both
                # observations as flaky instead of saving a bug
                case = case_from_verdict(shown.verdict, source=f"{spec.source} ({where})", burn_version=versions[b])
                case.record["recheck"] = again
                results.put(("flaky", spec.job, k, sig, case))
            elif again is not None:
                final = shrunk(shown, verdicts, workers, stop) if spec.shrink else shown.verdict
                case = case_from_verdict(final, source=f"{spec.source} ({where})", burn_version=versions[b])
                final_t = shown.triage if final is shown.verdict else triage(final, workers[b])
                case.record["triage"] = final_t.to_dict()
                case.reason = f"{final_t.describe()}\n{case.reason}"
                if several:  # the case runs on `b` (its record's backend); which backends show it, and the layer
                    case.record["shown_on"] = {"backends": list(shown.backends), "where": shown.layer}
                    case.reason = f"{shown.layer}\n{case.reason}"
                report = table_report(final) if spec.verbose else ""
                results.put(("case", spec.job, k, sig, case, len(shown.verdict.program), len(final.program), report))

        def on_backends(k: int, runs: dict[str, tuple[Verdict, ProbeRun]], ops: dict[str, int]) -> None:
            if k == crash_at:  # fault injection: the job process dies as a native crash would
                os.kill(os.getpid(), signal.SIGSEGV)
            verdicts = {b: v for b, (v, _) in runs.items()}
            shown = triangulate(verdicts, workers)
            for b, f in shown.items():
                if not f.known and f.key not in known:
                    known.add(f.key)
                    new_finding(k, f, verdicts, runs[b][1].probe)
            verdict, _ = program_result(runs)
            found = {f.key: (f.verdict.kind, f.triage.known.name if f.triage.known is not None else None,
                             list(f.backends) if several else None, f.layer if several else None)
                     for f in shown.values()}
            per_backend = ({b: (v.kind, None if b not in shown else shown[b].known) for b, v in verdicts.items()}
                           if several else None)
            restarts = sum(w.restarts for w in workers.values())
            probes = [sum(r.counts()[i] for _, r in runs.values()) for i in range(3)]
            results.put(("result", spec.job, k, verdict.kind, list(verdict.prediction.rules_fired), ops,
                         [d for v in verdicts.values() for d in dismissals(v)], restarts, found, *probes,
                         sum((Counter(skipped(v)) for v in verdicts.values()), Counter()), per_backend))

        guide = None
        first = next(iter(workers.values()))
        if spec.frontier is not None:
            cfg = GenConfig.profile(spec.profile, ops=spec.ops, max_statements=spec.max_statements,
                                    backends=tuple(workers), p_known_site=spec.known_sites)
            guide = Guide(Frontier.load(Path(spec.frontier)), cfg, spec.seed, spec.guided_share,
                          load_map(first).burn_edges)
        stats = run_campaign(
            workers, seed=spec.seed, programs=spec.programs, ops=spec.ops, max_statements=spec.max_statements,
            profile=spec.profile, known_sites=spec.known_sites, probes=spec.probes, steering=guide,
            start=spec.start, stride=spec.stride, deadline=spec.deadline,
            should_stop=lambda: stop.is_set() or orphaned(), on_backends=on_backends, keep_findings=False,
        )
        if guide is not None:
            results.put(("guided", spec.job, guide.stats()))
        results.put(("exit", spec.job, stats.programs, stats.seconds))
    except BaseException:
        results.put(("error", spec.job, traceback.format_exc()))
    finally:
        for w in workers.values():
            w.close()
