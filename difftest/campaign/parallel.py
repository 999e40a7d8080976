"""Parallel, sharded, deduplicated campaigns: `difftest fuzz -j N --shard I/N` and `difftest merge`.

A campaign is a set of program indices (program k of seed s is `RandomChoices(s * 1_000_003 + k)`,
campaign.py). Shard I of N owns the indices k ≡ I (mod N) — its first `programs` of them — and
job j of J within the shard takes every J-th of those: k = I + N·j + N·J·t. So the programs a
campaign checks depend on the seed and the shard only, never on the number of jobs or on timing,
and the shards of a campaign are disjoint.

Each job is a process (forkserver context: forked from a server process that imported torch and
difftest once, before any thread exists) with `torch.set_num_threads(1)` and its own burn worker.
It sends the parent one message per program (verdict kind, rules, ops, dismissals, signature) and
asks the parent before shrinking a failing program whose signature (signature.py) it has not seen:
the parent grants the first claim of a signature that is not in the corpus, so each new signature
is shrunk once, in the job that found it, and only the parent writes the corpus.

Ctrl-C (SIGINT) or SIGTERM to the parent stops the jobs after their current program (a shrink
in progress stops early and its best program so far is saved); the summary covers what ran. A
second one abandons the jobs at once. The jobs ignore SIGINT (the forkserver does too), and so do
their burn workers, which inherit it: a Ctrl-C in a terminal, sent to the whole process group,
must not look like a crash of the interpreter.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from difftest.campaign.claims import KNOWN_PREFIX, recheck, shrunk
from difftest.campaign.loop import dismissals, run_campaign, skipped
from difftest.divergences.known_bugs import KNOWN_BUGS
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import case_from_verdict, save_case
from difftest.findings.signature import corpus_signatures
from difftest.findings.summary import Summary, Timeline
from difftest.findings.table import report as table_report
from difftest.findings.triage import triage
from difftest.oracle.compare import Verdict

if TYPE_CHECKING:
    from difftest.oracle.probe_run import ProbeRun

# What a job needs, imported once by the forkserver (so starting a job takes milliseconds, not
# the seconds of importing torch in every job). torch._dynamo is what PyTorch imports on the
# first optimizer a job builds (an SGD step: ~1 s of imports, measured, in every job otherwise).
PRELOAD = ("torch", "torch._dynamo", "difftest.campaign.parallel", "difftest.campaign.loop", "difftest.oracle.check",
           "difftest.findings.shrink", "difftest.findings.corpus", "difftest.findings.signature",
           "difftest.findings.triage", "difftest.campaign.claims", "strategies")




# ---------------------------------------------------------------------- partition

def job_slice(shard: int, shards: int, job: int, jobs: int) -> tuple[int, int]:
    """(start, stride) of the program indices job `job` of `jobs` runs in shard `shard` of `shards`."""
    return shard + shards * job, shards * jobs


def job_programs(programs: int, job: int, jobs: int) -> int:
    """How many of a shard's `programs` job `job` of `jobs` runs (the shard's t-th index goes to
    job t mod jobs)."""
    return max(0, -(-(programs - job) // jobs))


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N` (0 <= I < N) -> (I, N)."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected I/N, e.g. 0/4") from None
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"--shard {text!r}: need 0 <= I < N")
    return i, n


# ---------------------------------------------------------------------- jobs

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


def _job_main(spec: JobSpec, results: Any, inbox: Any, stop: Any) -> None:
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

        stats = run_campaign(
            worker, seed=spec.seed, programs=spec.programs, ops=spec.ops, max_statements=spec.max_statements,
            profile=spec.profile, probes=spec.probes,
            start=spec.start, stride=spec.stride, deadline=spec.deadline,
            should_stop=lambda: stop.is_set() or orphaned(), on_program=on_program, keep_findings=False,
        )
        results.put(("exit", spec.job, stats.programs, stats.seconds))
    except BaseException:
        results.put(("error", spec.job, traceback.format_exc()))
    finally:
        if worker is not None:
            worker.close()


# ---------------------------------------------------------------------- the parent

@dataclass
class FuzzOptions:
    seed: int = 0
    programs: int = 2000  # for this shard
    seconds: float = 0.0  # instead of programs
    ops: tuple[str, ...] | None = None
    max_statements: int = 10
    jobs: int = 1
    shard: int = 0
    shards: int = 1
    corpus: Path = Path("corpus")  # findings are saved under corpus/findings/
    timeout: float = 60.0
    fault: str | None = None
    binary: str | None = None  # difftest-burn (default: find_binary, $DIFFTEST_BURN)
    inflight_dir: Path | None = Path(".difftest") / "inflight"
    progress_every: float = 10.0  # seconds between plain progress lines
    verbose: bool = False
    live: bool | None = None  # a live display (None: when the console is a terminal)
    shrink: bool = True
    profile: str = "default"  # the generator's distribution (difftest.strategies.config.PROFILES)
    probes: bool = True  # root probes of every passing program (difftest/oracle/probe_run.py)

    def source(self) -> str:
        parts = [f"difftest fuzz --seed {self.seed}"]
        if self.ops:
            parts.append(f"--ops {','.join(self.ops)}")
        if self.max_statements != 10:
            parts.append(f"--max-statements {self.max_statements}")
        if self.profile in ("float32", "float64", "float16", "bfloat16"):
            parts.append(f"--dtype {self.profile}")
        elif self.profile != "default":
            parts.append(f"--profile {self.profile}")
        if not self.probes:
            parts.append("--no-probes")
        if self.fault:
            parts.append(f"--fault {self.fault}")
        return " ".join(parts)


@dataclass
class _Interrupts:
    count: int = 0
    first: float = 0.0
    abandon: bool = False  # a second signal, at least DEBOUNCE seconds after the first


DEBOUNCE = 0.5  # `timeout` and some shells deliver one Ctrl-C twice (to the process and its group)


@contextmanager
def _stop_signals(stop: Any) -> Iterator[_Interrupts]:
    """SIGINT / SIGTERM set `stop`; a second one asks to abandon the jobs. The handler only sets
    flags (the parent loop acts on them), so no exception lands in the middle of starting a job."""
    state = _Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        state.count += 1
        if state.count == 1:
            state.first = now
        elif now - state.first >= DEBOUNCE:
            state.abandon = True
        stop.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield state
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _start_forkserver(ctx: Any) -> None:
    """Starts the forkserver (if not yet running) with SIGINT ignored and blocked: it inherits
    both at exec, keeps them while it imports PRELOAD, and hands them on to every job it forks
    and on to their burn workers. (Started otherwise, a Ctrl-C to the process group during those
    imports kills it.) Blocked, a SIGINT that arrives meanwhile stays pending here, and reaches
    the parent's handler when it is unblocked (Linux never discards a blocked signal)."""
    from multiprocessing import forkserver

    ctx.set_forkserver_preload(list(PRELOAD))  # imported once, in the server the jobs fork from
    if threading.current_thread() is not threading.main_thread():
        forkserver.ensure_running()
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, old)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class _Display:
    """A rich progress bar on a terminal, plain periodic lines elsewhere."""

    def __init__(self, console: Console, opts: FuzzOptions, live: bool) -> None:
        self.console = console
        self.opts = opts
        self.live = live
        self.start = time.monotonic()
        self.last = self.start
        self.progress: Progress | None = None
        self.task: Any = None
        self.stopping = False

    def __enter__(self) -> _Display:
        if self.live:
            self.progress = Progress(SpinnerColumn(), TimeElapsedColumn(), BarColumn(bar_width=20),
                                     TextColumn("{task.fields[info]}"), console=self.console, transient=True)
            total = self.opts.seconds if self.opts.seconds else self.opts.programs
            self.task = self.progress.add_task("fuzz", total=total, info="starting jobs")
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def print(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def update(self, s: Summary, *, force: bool = False) -> None:
        now = time.monotonic()
        elapsed = now - self.start
        rate = s.programs / elapsed if elapsed > 0 else 0.0
        info = (f"{s.programs} programs, {rate:.0f}/s, {len(s.findings)} distinct finding(s), "
                f"{s.restarts} worker restart(s)")
        if self.stopping:
            info += ", stopping"
        if self.progress is not None:
            if force or now - self.last >= 0.2:
                self.last = now
                done = min(elapsed, self.opts.seconds) if self.opts.seconds else s.programs
                self.progress.update(self.task, completed=done, info=info)
        elif force or now - self.last >= self.opts.progress_every:
            self.last = now
            self.print("  " + info)


def fuzz(opts: FuzzOptions, console: Console | None = None) -> Summary:
    """Runs a campaign in `opts.jobs` job processes; saves one shrunk case per new signature
    under `opts.corpus/findings/` and returns the summary (also after Ctrl-C)."""

    console = console or Console()
    findings_dir = opts.corpus / "findings"
    known = corpus_signatures(opts.corpus, statuses=None)  # any case that recorded the signature
    evidence = {b.name: next((e for e in b.knowledge.evidence if e.startswith("corpus/")), b.name) for b in KNOWN_BUGS}
    summary = Summary(seed=opts.seed, jobs=max(1, opts.jobs), shard=f"{opts.shard}/{opts.shards}")
    deadline = time.time() + opts.seconds if opts.seconds else None
    ctx = mp.get_context("forkserver")
    results: Any = ctx.Queue()
    stop: Any = ctx.Event()
    specs: list[JobSpec] = []
    jobs = max(1, opts.jobs)
    for j in range(jobs):
        n = job_programs(opts.programs, j, jobs)
        if deadline is None and n == 0:
            continue
        start, stride = job_slice(opts.shard, opts.shards, j, jobs)
        specs.append(JobSpec(
            j, opts.seed, start, stride, n, deadline, opts.ops, opts.max_statements, opts.binary, opts.timeout,
            opts.fault, str(opts.inflight_dir) if opts.inflight_dir else None, frozenset(known), opts.source(),
            opts.shrink, opts.verbose, opts.profile, opts.probes,
        ))
    inboxes: dict[int, Any] = {}
    procs: dict[int, Any] = {}
    restarts: dict[int, int] = {}
    claimed: set[str] = set()
    done: set[int] = set()
    dead_since: dict[int, float] = {}
    display = _Display(console, opts, console.is_terminal if opts.live is None else opts.live)
    began = time.monotonic()
    timeline = Timeline(f"seed {opts.seed}, shard {opts.shard}/{opts.shards}, {jobs} job(s)", [(0.0, 0)], every=0.5)
    summary.timelines.append(timeline)

    def handle(msg: tuple[Any, ...]) -> None:
        tag, j = msg[0], msg[1]
        if not summary.startup:
            summary.startup = time.monotonic() - began
        if tag == "result":
            (_, _, k, kind, rules, ops, dismissed, worker_restarts, sig, probes, probes_checked, batch_only,
             not_compared) = msg
            summary.programs += 1
            summary.probes += probes
            summary.probes_checked += probes_checked
            summary.probes_batch_only += batch_only
            timeline.note(time.monotonic() - began, summary.programs)
            summary.verdicts[kind] += 1
            summary.rules.update(rules)
            summary.ops.update(ops)
            summary.dismissals.update(dismissed)
            summary.skipped.update(not_compared)
            restarts[j] = worker_restarts
            summary.restarts = sum(restarts.values())
            if sig is not None:
                f = summary.finding(sig, kind)
                f.count += 1
                f.first = k if f.first is None else min(f.first, k)
                if sig.startswith(KNOWN_PREFIX):
                    f.bug = sig[len(KNOWN_PREFIX):]
                    f.path, f.known = evidence.get(f.bug, f.bug), True
                elif f.path is None and sig in known:
                    f.path, f.known = str(known[sig]), True
        elif tag == "claim":
            _, _, k, sig = msg
            granted = sig not in known and sig not in claimed
            claimed.add(sig)
            inboxes[j].put(granted)
        elif tag == "flaky":
            _, _, k, sig, case = msg
            flaky_dir = (opts.inflight_dir.parent if opts.inflight_dir else Path(".difftest")) / "flaky"
            path, _ = save_case(case, flaky_dir)
            f = summary.finding(f"flaky:{sig}", "flaky")
            f.count += 1
            f.path = str(path)
            f.first = k if f.first is None else min(f.first, k)
            display.print(f"  flaky {sig}\n    program {k} gives {case.record['recheck']} in a fresh worker; "
                          f"both observations: {path}")
        elif tag == "case":
            _, _, k, sig, case, before, after, report = msg
            case.record["signature"] = sig
            path, created = save_case(case, findings_dir)
            f = summary.finding(sig, case.record.get("verdict", {}).get("kind", "?"))
            f.path, f.known, f.shrunk = str(path), not created, (before, after)
            f.first = k if f.first is None else min(f.first, k)
            if created:
                summary.saved.append(str(path))
            note = "" if created else " (a case with this program is already in the corpus)"
            display.print(f"  finding {sig}\n    program {k}, shrunk {before} -> {after} statements: {path}{note}")
            if report:
                display.print(report)
        elif tag == "exit":
            done.add(j)
        elif tag == "error":
            done.add(j)
            summary.errors.append(f"job {j}: {msg[2]}")
            display.print(f"job {j} failed:\n{msg[2]}")
            stop.set()

    def _abandon() -> None:
        """Terminates the jobs, then reads what they sent before (their findings included)."""
        for p in procs.values():
            if p.is_alive():
                p.terminate()
        while True:
            try:
                handle(results.get(timeout=0.5))
            except queue.Empty:
                break
            except Exception:  # a message cut off by terminate(): nothing more to read
                break

    with _stop_signals(stop) as interrupts:
        try:
            _start_forkserver(ctx)
            for spec in specs:
                inboxes[spec.job] = ctx.Queue()
                p = ctx.Process(target=_job_main, args=(spec, results, inboxes[spec.job], stop),
                                name=f"difftest-job-{spec.job}", daemon=True)
                p.start()
                procs[spec.job] = p
            with display:
                while len(done) < len(procs):
                    try:
                        msg = results.get(timeout=0.2)
                    except queue.Empty:
                        now = time.monotonic()
                        for j, p in procs.items():
                            if j in done or p.is_alive():
                                continue
                            # a job that died: let its last messages arrive, then give up on it
                            if now - dead_since.setdefault(j, now) > 2.0:
                                done.add(j)
                                summary.errors.append(f"job {j} died (exit code {p.exitcode})")
                                display.print(summary.errors[-1])
                    else:
                        handle(msg)
                    if interrupts.abandon:
                        break
                    if stop.is_set() and not display.stopping:
                        display.stopping = True
                        if interrupts.count:
                            display.print("interrupted: the jobs finish their current program "
                                          "(Ctrl-C again to abandon them)")
                    display.update(summary)
                display.update(summary, force=True)
            if interrupts.abandon:  # the second Ctrl-C: abandon the jobs
                display.print("abandoning the jobs")
                _abandon()
        except KeyboardInterrupt:  # from a signal handler that is not ours (not the main thread)
            interrupts.count += 1
            _abandon()
        finally:
            summary.interrupted = interrupts.count > 0
            for p in procs.values():
                p.join(timeout=5)
                if p.is_alive():
                    p.kill()
                    p.join()
    summary.seconds = time.monotonic() - began
    timeline.close(summary.seconds, summary.programs)
    return summary
