"""A hang or crash of burn's worker is signed by the op it happens at (findings/hangs.py): two
hanging ops are two cases, not one `program`-wide hang; and a hang's re-runs wait a short
timeout, so localising and shrinking one takes seconds, not a minute per run."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.hangs import PROBE_TIMEOUT, failing_site, shorter_timeouts
from difftest.findings.triage import triage
from difftest.oracle.check import check
from difftest.program.ir import Program
from difftest.program.jsonio import program_from_dict

# gdb reads a hung worker's stack, and a crashed one's from its request run again
NEEDS_GDB = pytest.mark.skipif(shutil.which("gdb") is None,
                               reason="gdb reads a hung or crashed worker's stack (.ci/run installs it); "
                                      "https://sourceware.org/gdb/")


def _program() -> Program:
    statements: list[dict[str, Any]] = [
        {"id": "x", "kind": "leaf", "shape": [2, 3], "data": [0.5, -1.0, 2.0, 1.5, 0.25, -0.75],
         "device": "autodiff", "require_grad": True},
        {"id": "a", "kind": "op", "op": "exp", "inputs": ["x"]},
        {"id": "b", "kind": "op", "op": "cumsum", "inputs": ["a"], "attrs": {"dim": 1}},
        {"id": "c", "kind": "op", "op": "tanh", "inputs": ["b"]},
        {"id": "s", "kind": "op", "op": "sum", "inputs": ["c"]},
        {"id": "bw", "kind": "backward", "input": "s"}]
    return program_from_dict({"format": "difftest-program", "version": 1, "statements": statements})


@pytest.mark.parametrize(("fault", "kind", "site"), [
    ("hang:cumsum", "timeout", "b"), ("hang:tanh", "timeout", "c"), ("abort:exp", "crash", "a")])
def test_a_hang_or_crash_is_found_at_its_op(fault: str, kind: str, site: str) -> None:
    with BurnWorker(fault=fault, timeout=1.0) as worker:
        verdict = check(_program(), worker)
        (m,) = [f for f in verdict.findings if f.kind == kind]
        assert m.statement is None  # the worker answered nothing: the program is all it names
        assert failing_site(verdict, worker, m) == site
        op = {"a": "exp", "b": "cumsum", "c": "tanh"}[site]
        assert triage(verdict, worker).signature.startswith(f"{kind}:burn:{op}:{kind}")


def test_two_hanging_ops_are_two_signatures() -> None:
    signatures = set()
    for fault in ("hang:cumsum", "hang:tanh"):
        with BurnWorker(fault=fault, timeout=1.0) as worker:
            signatures.add(triage(check(_program(), worker), worker).signature)
    assert len(signatures) == 2, signatures


def test_a_hangs_reruns_wait_the_short_timeout() -> None:
    with BurnWorker(fault="hang:cumsum", timeout=60.0) as worker:
        with shorter_timeouts([worker], 1.0):
            error = worker.run(_program()).error
            assert error is not None and error.kind == "timeout"
            assert "within 1s" in error.message, error.message  # not the worker's 60 s
        assert worker.timeout == 60.0  # its own timeout again after
    assert PROBE_TIMEOUT < 60.0


def _orphan(tmp_path: Any, delay: float) -> int:
    """A campaign-like parent that starts a worker (`delay` seconds later, through a shell) with
    the environment BurnWorker gives it, hands it a program that hangs, and is killed; the
    worker's pid."""
    import json
    import signal
    import subprocess
    import sys

    from difftest.exec.burn_worker import find_binary

    parent = tmp_path / "parent.py"
    program = {"format": "difftest-program", "version": 1, "statements": [
        {"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0], "device": "autodiff", "require_grad": True},
        {"id": "y", "kind": "op", "op": "exp", "inputs": ["x"]}]}
    parent.write_text(
        "import subprocess, sys, time\n"
        "from difftest.exec.libtorch import worker_env\n"
        f"env = dict(worker_env({find_binary()!r}), DIFFTEST_BURN_FAULT='hang:exp')\n"
        f"p = subprocess.Popen(['sh', '-c', 'sleep {delay}; exec \"$0\" --worker', {find_binary()!r}],\n"
        "                     stdin=subprocess.PIPE, env=env)\n"
        f"p.stdin.write({json.dumps({'request': 'run', 'id': 1, 'program': program})!r}.encode() + b'\\n')\n"
        "p.stdin.flush()\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, str(parent)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    worker = int(proc.stdout.readline())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return worker


def _outlives(worker: int, seconds: float) -> bool:
    """Whether `worker` is still running after `seconds` (gone, or a zombie not yet reaped by
    whoever adopted it, is not running); killed if it is."""
    import os
    import signal
    import time
    from pathlib import Path

    stat = Path(f"/proc/{worker}/stat")
    for _ in range(int(seconds * 10)):
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        except (FileNotFoundError, ProcessLookupError):
            return False
        time.sleep(0.1)
    os.kill(worker, signal.SIGKILL)
    return True


@pytest.mark.parametrize("delay", [0.0, 1.0])
def test_a_hung_worker_exits_when_its_campaign_is_killed(tmp_path: Any, delay: float) -> None:
    """A worker stuck in a kernel reads no more requests and would not see its stdin close: it
    watches its parent, and exits once that is gone (an orphaned hung worker spun on for good).
    It does so also when the parent was killed before the worker started (delay 1 s): it knows
    its parent from BurnWorker's environment, not from whoever has adopted it by then."""
    worker = _orphan(tmp_path, delay)
    assert not _outlives(worker, 10.0 + delay), "the hung worker outlived its parent"


@NEEDS_GDB
def test_a_hung_workers_stack_is_read_before_it_is_killed() -> None:
    """The worker's stack is read with gdb while it hangs (exec/stacks.py). The interpreter's
    own hang fault sleeps in difftest-burn's code, not in burn: its threads are read, the fault's
    frame among them, and no burn site is named, so the hang keeps its op's signature."""
    import time

    from difftest.exec.stacks import site_of, threads_of

    with BurnWorker(fault="hang:cumsum", timeout=4.0) as worker:
        pending = worker.submit(_program())
        time.sleep(1.0)
        assert worker.pid is not None
        threads = threads_of(worker.pid)
        assert threads, "gdb read no thread of the hung worker"
        functions = [f.function for t in threads for f in t]
        assert any(f.startswith("difftest_burn::fault::") for f in functions), functions
        assert site_of(threads) is None
        error = pending.result().error
        assert error is not None and error.kind == "timeout" and error.site is None


@NEEDS_GDB
def test_a_hang_stopped_in_a_function_is_signed_by_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The path from a hung worker to the finding's signature: the worker reads the stack before
    it kills the process, the error records the site, the signature names it. No released burn
    hangs, so the interpreter's own fault stands in: its crate is counted as burn's here."""
    import re

    from difftest.exec import stacks

    monkeypatch.setattr(stacks, "_BURN", re.compile(r"^difftest_burn::fault::"))
    with BurnWorker(fault="hang:cumsum", timeout=2.0) as worker:
        verdict = check(_program(), worker)
        error = verdict.burn.error
        assert error is not None and error.kind == "timeout"
        assert error.site is not None and error.site.startswith("difftest_burn::fault::"), error
        assert "stopped in difftest_burn::fault::" in error.message
        signature = triage(verdict, worker).signature
    assert signature.startswith(f"timeout:burn:{error.site}:timeout"), signature


@NEEDS_GDB
def test_a_crash_in_a_function_is_signed_by_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A crashed worker is gone: the request it died on runs again under gdb, which reads the
    stack of the thread the signal stopped (stacks.crashed_in); the error records the site and
    the frames, the signature names the site. No released burn crashes, so the interpreter's own
    abort fault stands in: its crate is counted as burn's here."""
    import re

    from difftest.exec import stacks

    monkeypatch.setattr(stacks, "_BURN", re.compile(r"^difftest_burn::fault::"))
    with BurnWorker(fault="abort:exp", timeout=10.0) as worker:
        verdict = check(_program(), worker)
        error = verdict.burn.error
        assert error is not None and error.kind == "crash"
        assert error.site is not None and error.site.startswith("difftest_burn::fault::"), error
        assert "crashed in difftest_burn::fault::" in error.message
        assert any(f.startswith("std::process::abort") for f in error.stack), error.stack
        signature = triage(verdict, worker).signature
    assert signature.startswith(f"crash:burn:{error.site}:crash exit -6"), signature


@NEEDS_GDB
def test_a_crash_outside_burn_keeps_its_ops_signature_and_its_bisection_reads_no_stack(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The abort fault's stack has no burn frame: no site, and the finding is signed by the op
    the bisection finds; the bisection's own re-runs read no stack (each would cost a gdb run)."""
    from difftest.exec import burn_worker, stacks

    reads: list[str] = []

    def counted(*a: Any, **k: Any) -> stacks.Stopped | None:
        reads.append(a[2])
        return stacks.crashed_in(*a, **k)

    monkeypatch.setattr(burn_worker, "crashed_in", counted)
    with BurnWorker(fault="abort:exp", timeout=10.0) as worker:
        verdict = check(_program(), worker)
        error = verdict.burn.error
        assert error is not None and error.kind == "crash" and error.site is None, error
        assert len(reads) == 1 and '"request": "run"' in reads[0]
        assert triage(verdict, worker).signature.startswith("crash:burn:exp:crash")
        assert len(reads) == 1, f"{len(reads)} gdb runs: the bisection read stacks"
