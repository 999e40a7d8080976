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
second one abandons the jobs at once (SIGKILL). The jobs ignore both signals (the forkserver does
too), and so do their burn workers, which inherit that: a Ctrl-C in a terminal, or the SIGTERM of
`timeout` or a CI runner, sent to the whole process group, must not look like a crash of a job
or of the interpreter.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from difftest.campaign.guided import Frontier
from difftest.campaign.job import JobSpec, crash_at, job_main
from difftest.divergences.known_bugs import KNOWN_BUGS
from difftest.exec.backends import DEFAULT_BACKEND
from difftest.exec.burn_worker import find_binary
from difftest.findings.saving import save_case
from difftest.findings.signature import first_by_signature, scan_corpus
from difftest.findings.summary import Summary, Timeline
from difftest.strategies.config import DEFAULT_KNOWN_SITES

if TYPE_CHECKING:
    pass

# What a job needs, imported once by the forkserver (so starting a job takes milliseconds, not
# the seconds of importing torch in every job). torch._dynamo is what PyTorch imports on the
# first optimizer a job builds (an SGD step: ~1 s of imports, measured, in every job otherwise).
PRELOAD = ("torch", "torch._dynamo", "difftest.campaign.parallel", "difftest.campaign.loop", "difftest.oracle.check",
           "difftest.findings.shrink", "difftest.findings.corpus", "difftest.findings.signature",
           "difftest.findings.triage", "difftest.campaign.claims", "difftest.campaign.job", "difftest.strategies")




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


# ---------------------------------------------------------------------- the parent

MAX_REVIVALS = 20  # times one job is started again after its process died, per campaign


def _keep_crashed(inflight: Path | None, pid: int | None, k: int) -> Path | None:
    """Move the programs a dead job process had in flight (its burn worker writes each before
    sending it, named <digest>-<pid>.json) to `.difftest/crashes/`, named by the program index,
    so the crash can be replayed (`difftest run FILE`); the first of them, or None."""
    if inflight is None or pid is None or not inflight.is_dir():
        return None
    crashes = inflight.parent / "crashes"
    kept = None
    for path in sorted(inflight.glob(f"*-{pid}.json")):
        crashes.mkdir(parents=True, exist_ok=True)
        target = crashes / f"program-{k}-{path.name}"
        path.replace(target)
        kept = kept or target
    return kept


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
    frontier: Path | None = None  # guided (campaign/guided.py): the frontier directory; binary a coverage build
    guided_share: float = 0.5
    backends: tuple[str, ...] = ()  # several: each program runs on each (one worker each per job)
    known_sites: float = DEFAULT_KNOWN_SITES  # GenConfig.p_known_site (fuzz --known-sites)

    def source(self) -> str:
        parts = [f"difftest fuzz --seed {self.seed}"]
        if self.backends and self.backends != (DEFAULT_BACKEND,):  # the generator redraws what they refuse
            parts.append(f"--backend {','.join(self.backends)}")
        if self.ops:
            parts.append(f"--ops {','.join(self.ops)}")
        if self.max_statements != 10:
            parts.append(f"--max-statements {self.max_statements}")
        if self.profile in ("float32", "float64", "float16", "bfloat16"):
            parts.append(f"--dtype {self.profile}")
        elif self.profile != "default":
            parts.append(f"--profile {self.profile}")
        if self.known_sites != DEFAULT_KNOWN_SITES:
            parts.append(f"--known-sites {self.known_sites:g}")
        if not self.probes:
            parts.append("--no-probes")
        if self.frontier is not None:
            parts.append(f"--guided --frontier {self.frontier}")
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
    """Starts the forkserver (if not yet running) with SIGINT and SIGTERM ignored and blocked:
    it inherits both at exec, keeps them while it imports PRELOAD, and hands them on to every job
    it forks and on to their burn workers. (Started otherwise, a Ctrl-C to the process group
    during those imports kills it.) Blocked, a signal that arrives meanwhile stays pending here,
    and reaches the parent's handler when it is unblocked (Linux never discards a blocked signal)."""
    from multiprocessing import forkserver

    ctx.set_forkserver_preload(list(PRELOAD))  # imported once, in the server the jobs fork from
    if threading.current_thread() is not threading.main_thread():
        forkserver.ensure_running()
        return
    stops = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    old = {s: signal.signal(s, signal.SIG_IGN) for s in stops}
    try:
        forkserver.ensure_running()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)


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
    # the interpreter, resolved here: a job is forked from the forkserver, whose environment is
    # that of the first campaign this process ran ($DIFFTEST_BURN may have changed since)
    binary = opts.binary or find_binary()
    findings_dir = opts.corpus / "findings"
    scan = scan_corpus(opts.corpus)
    known = first_by_signature(scan.signatures(statuses=None))  # any case that recorded the signature
    for why in scan.unreadable:  # left out of `known`: their findings would show as new
        console.print(f"warning: a corpus case that cannot be read is not counted as known: {why}", markup=False,
                      highlight=False)
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
            j, opts.seed, start, stride, n, deadline, opts.ops, opts.max_statements, binary, opts.timeout,
            opts.fault, str(opts.inflight_dir) if opts.inflight_dir else None, frozenset(known), opts.source(),
            opts.shrink, opts.verbose, opts.profile, opts.probes, crash_at(),
            str(opts.frontier) if opts.frontier is not None else None, opts.guided_share,
            opts.backends if len(opts.backends) > 1 else (), opts.known_sites,
        ))
    inboxes: dict[int, Any] = {}
    procs: dict[int, Any] = {}
    restarts: dict[int, int] = {}
    claimed: set[str] = set()
    done: set[int] = set()
    dead_since: dict[int, float] = {}
    last: dict[int, int] = {}  # job -> the last program index it reported
    reported: dict[int, int] = {}  # job -> how many programs it reported
    revived: dict[int, int] = {}  # job -> how many times it was started again after dying
    display = _Display(console, opts, console.is_terminal if opts.live is None else opts.live)
    began = time.monotonic()
    timeline = Timeline(f"seed {opts.seed}, shard {opts.shard}/{opts.shards}, {jobs} job(s)", [(0.0, 0)], every=0.5)
    summary.timelines.append(timeline)

    def handle(msg: tuple[Any, ...]) -> None:
        tag, j = msg[0], msg[1]
        if not summary.startup:
            summary.startup = time.monotonic() - began
        if tag == "result":
            (_, _, k, kind, rules, ops, dismissed, worker_restarts, found, probes, probes_checked, batch_only,
             not_compared, per_backend) = msg
            last[j] = k
            reported[j] = reported.get(j, 0) + 1
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
            if per_backend is not None:
                summary.note_backends(per_backend)
            for sig, (found_kind, bug, backends, layer) in found.items():  # by key: job.py
                f = summary.finding(sig, found_kind)
                f.count += 1
                f.first = k if f.first is None else min(f.first, k)
                if bug is not None:
                    f.bug = bug
                    f.path, f.known = evidence.get(bug, bug), True
                elif f.path is None and sig in known:
                    f.path, f.known = str(known[sig]), True
                if backends is not None:
                    f.backends, f.layer = backends, layer
        elif tag == "claim":
            _, _, k, sig = msg
            granted = sig not in known and sig not in claimed
            claimed.add(sig)
            inboxes[j].put(granted)
        elif tag == "flaky":
            _, _, k, sig, case = msg
            flaky_dir = (opts.inflight_dir.parent if opts.inflight_dir else Path(".difftest")) / "flaky"
            saved = save_case(case, flaky_dir)
            path = saved.path
            if saved.warning:
                display.print(f"warning: {saved.warning}")
            f = summary.finding(sig, case.record.get("verdict", {}).get("kind", "?"))
            f.flaky = str(path)
            f.first = k if f.first is None else min(f.first, k)
            display.print(f"  flaky {sig}\n    program {k} gives {case.record['recheck']} in a fresh worker; "
                          f"both observations: {path}")
        elif tag == "case":
            _, _, k, sig, case, before, after, report = msg
            case.record["signature"] = sig
            saved = save_case(case, findings_dir)
            path, created = saved.path, saved.created
            if saved.warning:
                display.print(f"warning: {saved.warning}")
            f = summary.finding(sig, case.record.get("verdict", {}).get("kind", "?"))
            f.path, f.known, f.shrunk = str(path), not created, (before, after)
            f.first = k if f.first is None else min(f.first, k)
            if created:
                summary.saved.append(str(path))
            note = "" if created else " (a case with this program is already in the corpus)"
            display.print(f"  finding {sig}\n    program {k}, shrunk {before} -> {after} statements: {path}{note}")
            if report:
                display.print(report)
        elif tag == "guided":
            summary.add_guided(msg[2])
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
                p.kill()  # the jobs ignore SIGTERM
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
            def launch(spec: JobSpec) -> None:
                inboxes[spec.job] = ctx.Queue()
                p = ctx.Process(target=job_main, args=(spec, results, inboxes[spec.job], stop),
                                name=f"difftest-job-{spec.job}", daemon=True)
                p.start()
                procs[spec.job] = p

            def revive(j: int, p: Any) -> None:
                """A job process that died itself (its burn worker's crashes it survives: a crash
                of PyTorch or Python): keep the program it was running, say so, and start it
                again after that program, so that the rest of its slice still runs."""
                spec = specs_by_job[j]
                crashed = last[j] + spec.stride if j in last else spec.start
                kept = _keep_crashed(opts.inflight_dir, p.pid, crashed)
                left = spec.programs - reported.get(j, 0) - 1
                again = not stop.is_set() and revived.get(j, 0) < MAX_REVIVALS and (spec.deadline or left > 0)
                summary.errors.append(
                    f"job {j} died (exit code {p.exitcode}) running program {crashed}: the job process itself "
                    f"crashed (PyTorch or Python, not the burn worker); "
                    + (f"its program: {kept}" if kept else "its program was not written")
                    + ("; restarted after it" if again else ""))
                display.print(summary.errors[-1])
                if not again:
                    done.add(j)
                    return
                revived[j] = revived.get(j, 0) + 1
                specs_by_job[j] = replace(spec, start=crashed + spec.stride, programs=left)
                last.pop(j, None)
                reported[j] = 0
                dead_since.pop(j, None)
                launch(specs_by_job[j])

            specs_by_job = {spec.job: spec for spec in specs}
            for spec in specs:
                launch(spec)
            with display:
                while len(done) < len(procs):
                    try:
                        msg = results.get(timeout=0.2)
                    except queue.Empty:
                        now = time.monotonic()
                        for j, p in procs.items():
                            if j in done or p.is_alive():
                                continue
                            # a job that died: let its last messages arrive, then start it again
                            if now - dead_since.setdefault(j, now) > 2.0:
                                revive(j, p)
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
    if opts.frontier is not None:
        frontier = Frontier.load(opts.frontier)
        summary.guided.update(frontier=str(opts.frontier), entries=len(frontier.entries), edges=len(frontier.edges),
                              share=opts.guided_share)
    return summary
