"""Client for the persistent `difftest-burn --worker` process (JSON lines over stdio).

One worker per test process. A program is written to the in-flight directory before it is
sent and removed when its answer arrives, so a crash, a hang (no answer within the timeout; its
stack is read first, exec/stacks.py) or a malformed answer never loses the case: it becomes the
program's observation, and the worker restarts (exec/answers.py reads the answers).

The worker runs under an address-space limit (RLIMIT_AS, `memory_limit`): a program that would
take the machine's memory makes the worker's allocation fail, which aborts it: a crash like any
other. Programs are also checked against an element budget before they run (docs/format.md,
"Bounds"), on both sides; the limit is the backstop for what that budget does not foresee.
"""

from __future__ import annotations

import json
import os
import queue
import resource
import subprocess
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from difftest.exec.answers import MALFORMED, check_probe_answer, error_of, run_observation
from difftest.exec.backends import BACKEND_ENV
from difftest.exec.inflight import write_program
from difftest.exec.libtorch import worker_env
from difftest.exec.pending import Pending, PendingProbes, PendingRun
from difftest.exec.stacks import crashed_in, failure, stopped_in
from difftest.exec.worker_setup import DEFAULT_MEMORY_LIMIT as DEFAULT_MEMORY_LIMIT
from difftest.exec.worker_setup import MEMORY_LIMIT_ENV as MEMORY_LIMIT_ENV
from difftest.exec.worker_setup import WorkerError as WorkerError
from difftest.exec.worker_setup import default_memory_limit
from difftest.exec.worker_setup import find_binary as find_binary
from difftest.program.ir import Program
from difftest.program.jsonio import dumps, program_to_dict
from difftest.program.observation import BackwardObs, ErrorObs, Observation

PROTOCOL_VERSION = 1
DEFAULT_TIMEOUT = 60.0
RECYCLE_RSS_BYTES = 1 << 30  # burn keeps graphs of programs without backward: recycle past 1 GiB
# burn-autodiff's graph locator is process-global and keeps entries of graphs no backward
# consumed (a program without backward, a backward that panicked, the nodes a backward of a leaf
# did not reach), and every backward sweeps all of them: a worker's runs slow down as it ages
# (measured: 3 ms a program, probes included, at the start; 56 ms after 9,000 programs). A fresh
# worker every RECYCLE_RUNS programs run (a probe request counts each probe) costs ~8 ms.
RECYCLE_RUNS = 1000
RSS_CHECK_EVERY = 200  # requests served between two checks of the worker's resident set
TEST_REQUESTS_ENV = "DIFFTEST_BURN_TEST_REQUESTS"  # "1": the worker serves test-only requests
PROGRAM_REQUESTS = ("run", "probe")  # the requests a crash is read again under gdb for (stacks.crashed_in)


class BurnWorker:
    def __init__(
        self,
        binary: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        inflight_dir: Path | None = None,
        fault: str | None = None,
        memory_limit: int | None = None,
        test_requests: bool | None = None,
        backend: str | None = None,
    ) -> None:
        """`fault`: a DIFFTEST_BURN_FAULT spec (docs/format.md) for detection-power runs.
        `memory_limit`: the worker's address-space limit in bytes (0: unlimited; None: the
        default, $DIFFTEST_BURN_MEMORY_LIMIT or DEFAULT_MEMORY_LIMIT). `test_requests`: serve
        the test-only requests (`allocate`); None inherits $DIFFTEST_BURN_TEST_REQUESTS.
        `backend`: the burn backend (`--backend`; None: $DIFFTEST_BURN_BACKEND, else Flex)."""
        self.binary = binary or find_binary()
        self.backend = backend or os.environ.get(BACKEND_ENV) or None
        self.fault = fault
        if memory_limit is not None and memory_limit < 0:
            raise ValueError(f"memory_limit must be >= 0 bytes, got {memory_limit}")
        self.memory_limit: int | None = default_memory_limit() if memory_limit is None else (memory_limit or None)
        self.test_requests = test_requests
        self.timeout = timeout
        self.inflight_dir = inflight_dir
        self.held: Program | None = None  # written to inflight_dir by a caller (inflight.in_flight)
        self.stacks = True  # read a crashed or hung worker's stack with gdb (stacks.py) when gdb is installed
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=200)
        self._next_id = 0
        self.incarnation = 0  # bumped each time a process starts (pending.py: a request sent to an earlier one is lost)
        self._unanswered: deque[int] = deque()  # ids sent to this process whose answers are not read, in order
        self._early: dict[int, dict[str, Any]] = {}  # answers read ahead of the one asked for, by id
        # the program requests (run, probe) not answered yet, by id: one the worker dies on is run
        # again under gdb for its stack (stacks.crashed_in)
        self._programs: dict[int, str] = {}
        self._argv: list[str] = []
        self._env: dict[str, str] = {}
        self._rss_check_at = RSS_CHECK_EVERY
        self.restarts = 0  # after a crash, a hang or past RECYCLE_RSS_BYTES
        self.recycled = 0  # scheduled restarts (RECYCLE_RUNS)
        self.served = 0
        self._runs = 0  # programs run since the worker started
        self._burn_version: str | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        try:
            env = worker_env(self.binary)  # one OpenMP thread; a tch build's LibTorch (libtorch.py)
            env.pop("DIFFTEST_BURN_FAULT", None)
            if self.fault:
                env["DIFFTEST_BURN_FAULT"] = self.fault
            if self.test_requests is not None:
                env.pop(TEST_REQUESTS_ENV, None)
                if self.test_requests:
                    env[TEST_REQUESTS_ENV] = "1"
            self._argv = [self.binary, *(["--backend", self.backend] if self.backend else []), "--worker"]
            self._env = env
            self._proc = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
        except OSError as e:
            raise WorkerError(f"cannot start {self.binary}: {e}") from e
        self._runs = 0
        if self.memory_limit is not None:
            # Set from outside once the worker runs (it waits for its first request): a
            # preexec_fn would run between fork and exec, which is unsafe with the pump threads.
            try:
                resource.prlimit(self._proc.pid, resource.RLIMIT_AS, (self.memory_limit, self.memory_limit))
            except OSError as e:
                self.kill()
                raise WorkerError(f"cannot limit the worker's memory to {self.memory_limit} bytes: {e}") from e
        self._lines = queue.Queue()
        self.incarnation += 1
        self._unanswered.clear()
        self._early.clear()
        self._programs.clear()
        proc = self._proc
        threading.Thread(target=self._pump_stdout, args=(proc, self._lines), daemon=True).start()
        threading.Thread(target=self._pump_stderr, args=(proc,), daemon=True).start()

    def _pump_stdout(self, proc: subprocess.Popen[bytes], lines: queue.Queue[bytes | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def _pump_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self._stderr.append(line.decode(errors="replace").rstrip())

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        self.kill()
        self.restarts += 1
        self.start()

    def __enter__(self) -> BurnWorker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def stderr_tail(self, n: int = 20) -> str:
        return "\n".join(list(self._stderr)[-n:])

    # ------------------------------------------------------------------ raw protocol
    def send_line(self, line: str, timeout: float | None = None) -> dict[str, Any]:
        """Send one raw line, return the parsed answer. Raises TimeoutError / EOFError."""
        self._write(line)
        return self._read(timeout)

    def _write(self, line: str) -> None:
        self.start()
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        try:
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise EOFError(f"worker stdin closed: {e}") from e

    def _read(self, timeout: float | None = None) -> dict[str, Any]:
        proc = self._proc
        if proc is None:
            raise EOFError("worker is not running")
        try:
            raw = self._lines.get(timeout=timeout or self.timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer within {timeout or self.timeout:.0f}s") from None
        if raw is None:
            code = proc.wait()
            raise EOFError(f"worker exited with status {code}")
        if not raw.endswith(b"\n"):  # the stream ended inside a line: the process died while answering
            code = proc.wait()
            raise EOFError(f"worker exited with status {code} in the middle of an answer ({len(raw)} bytes written)")
        try:
            answer: dict[str, Any] = json.loads(raw)
        except ValueError as e:  # not JSON, or not UTF-8 (UnicodeDecodeError) at all
            raise WorkerError(f"worker answered non-JSON {raw[:200]!r}: {e}") from e
        return answer

    def request(self, kind: str, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        """The answer to a control request (`version`, `ops`, `status`, ...). A worker that exits
        instead (a bad DIFFTEST_BURN_FAULT spec, a binary that does not run here) is a
        WorkerError that says so, with its exit status and its last words; one silent past the
        timeout is one too, and is stopped (its late answer would be read as another request's)."""
        try:
            rid = self._send_request(kind, **fields)
            return self._answer(rid, timeout)
        except EOFError as e:
            raise WorkerError(self._exit_message(f"before answering its {kind!r} request", e)) from e
        except TimeoutError:
            self.kill()
            raise WorkerError(f"the burn worker {self.binary} did not answer its {kind} request within "
                              f"{timeout or self.timeout:g} s") from None

    def _exit_message(self, when: str, e: Exception) -> str:
        proc = self._proc
        code = None
        if proc is not None:
            try:
                code = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.05)  # let the stderr pump take the worker's last words
        status = f"exited with status {code}" if code is not None else f"stopped reading ({e})"
        # a dead worker is started again by the next write, so its last words may be there twice
        tail = "\n".join(dict.fromkeys(self.stderr_tail(5).splitlines()))
        return f"{self.binary} {status} {when}" + (f":\n{tail}" if tail else "")

    def _send_request(self, kind: str, **fields: Any) -> int:
        self._next_id += 1
        line = dumps({"request": kind, "id": self._next_id, **fields})
        self._write(line)
        self._unanswered.append(self._next_id)
        if kind in PROGRAM_REQUESTS:
            self._programs[self._next_id] = line
        return self._next_id

    def _answer(self, rid: int, timeout: float | None) -> dict[str, Any]:
        """The answer to request `rid` of this process. The worker answers in the order it was
        asked: the answers to requests sent before `rid` and not read yet are read first and
        kept for their readers."""
        early = self._early.pop(rid, None)
        if early is not None:
            return early
        if rid not in self._unanswered:
            raise WorkerError(f"request {rid} awaits no answer from this worker process")
        while True:
            answer = self._read(timeout)
            expected = self._unanswered[0]
            if answer.get("id") != expected:
                raise WorkerError(f"answer id {answer.get('id')!r} does not match request {expected}")
            self._unanswered.popleft()
            self._programs.pop(expected, None)
            if expected == rid:
                return answer
            self._early[expected] = answer

    def _dispatch(self, sent: Pending) -> None:
        """Send `sent`'s request to the current process (pending.py)."""
        try:
            sent.sent(self._send_request(sent.kind, **sent.fields), self.incarnation)
        except (EOFError, WorkerError) as e:
            sent.failed = self._failed(e, sent.inflight, "crash")

    def _observed_pending(self, sent: Pending) -> dict[str, Any] | Observation:
        """`sent`'s answer, or the observation of its crash or hang; sent again first when the
        process it went to was replaced before answering it."""
        if sent.lost:
            self._dispatch(sent)
        if sent.failed is not None:
            return sent.failed
        return self._observed_answer(sent.rid, sent.timeout, sent.inflight)

    def ops(self) -> list[dict[str, Any]]:
        return list(self.request("ops")["ops"])

    def version(self) -> dict[str, Any]:
        v: dict[str, Any] = self.request("version")["version"]
        self._burn_version = str(v.get("burn"))
        return v

    def burn_version(self) -> str:
        """The burn version the binary was built with (asked once; a binary does not change)."""
        if self._burn_version is None:
            self.version()
        assert self._burn_version is not None
        return self._burn_version

    def rss_bytes(self) -> int:
        return int(self.request("status")["rss_bytes"])

    # ------------------------------------------------------------------ programs
    def _observed_request(
        self, kind: str, timeout: float | None, pending: Path | None, **fields: Any
    ) -> dict[str, Any] | Observation:
        """The answer to a request, or, when the worker hangs or dies on it, a `timeout` or
        `crash` observation (the worker restarted for the next request)."""
        try:
            rid = self._send_request(kind, **fields)
        except (EOFError, WorkerError) as e:
            return self._failed(e, pending, "crash")
        return self._observed_answer(rid, timeout, pending)

    def _observed_answer(self, rid: int, timeout: float | None, pending: Path | None) -> dict[str, Any] | Observation:
        try:
            return self._answer(rid, timeout)
        except TimeoutError as e:
            return self._failed(e, pending, "timeout")
        except EOFError as e:  # the process died: on the first request it had not answered
            crashed = self._programs.get(self._unanswered[0]) if self._unanswered else None
            return self._failed(e, pending, "crash", crashed)
        except WorkerError as e:
            return self._failed(e, pending, "crash")

    def _failed(self, e: Exception, pending: Path | None, kind: str, crashed: str | None = None) -> Observation:
        if kind == "crash":
            time.sleep(0.05)  # let the stderr pump take the dying worker's last words
        # a hung worker is still there: where it is stuck is read before it is killed; a crashed
        # one is gone, and the program request it died on is run again under gdb
        stopped = stopped_in(self._proc.pid) if kind == "timeout" and self._proc and self.stacks else None
        if crashed is not None and self.stacks:
            stopped = crashed_in(self._argv, self._env, crashed, limit=self.memory_limit)
        tail = self.stderr_tail()
        self.restart()
        return Observation("burn", error=failure(kind, f"{e}\n{tail}".strip(), stopped),
                           meta={"inflight": str(pending) if pending else None})

    def allocate(self, nbytes: int, timeout: float | None = None) -> Observation:
        """Test only: has the worker allocate and touch `nbytes` bytes (the `allocate` request,
        served only with `test_requests`): `meta["allocated"]` the byte count; past the memory
        limit a `crash` (the worker restarted); refused, an `invalid-request` error."""
        answer = self._observed_request("allocate", timeout, None, bytes=nbytes)
        if isinstance(answer, Observation):
            return answer
        if not answer.get("ok"):
            return Observation("burn", error=error_of(answer))
        return Observation("burn", meta={"allocated": answer.get("allocated")})

    def run(self, program: Program | dict[str, Any], timeout: float | None = None) -> Observation:
        return self.submit(program, timeout).result()

    def submit(self, program: Program | dict[str, Any], timeout: float | None = None) -> PendingRun:
        """Send a program without waiting for its answer (the caller runs PyTorch meanwhile);
        `result()` of the returned handle waits. One program at a time per worker."""
        doc = program if isinstance(program, dict) else program_to_dict(program)
        return PendingRun(self, doc, timeout, self._write_inflight(doc, None if isinstance(program, dict) else program))

    def probe(self, program: Program, probes: Sequence[tuple[int, str]],
              timeout: float | None = None) -> list[ErrorObs | None] | Observation:
        """Root probes (difftest/oracle/probes.py) in one request: for each (backward index,
        root id), how burn's run of the statements before that backward, then the backward
        re-rooted there, ended (None: without error). A crash or hang of the worker gives its
        `crash` / `timeout` observation instead (the worker restarted); a refused request, an
        `invalid-request` one."""
        answer = self._probe_request(program, probes, timeout, grads=False)
        if isinstance(answer, Observation):
            return answer
        return [None if e is None else ErrorObs.from_dict(e) for e in answer["outcomes"]]

    def probe_grads(self, program: Program, probes: Sequence[tuple[int, str]],
                    timeout: float | None = None) -> list[tuple[ErrorObs | None, BackwardObs | None]] | Observation:
        """`probe`, with each probe's re-rooted backward as a run reports it (its gradient
        entries; None when the run failed before it): (outcome, backward) per probe."""
        return self.submit_probe_grads(program, probes, timeout).result()

    def submit_probe_grads(self, program: Program, probes: Sequence[tuple[int, str]],
                           timeout: float | None = None) -> PendingProbes:
        """`probe_grads` without waiting (PyTorch's side of the probes runs meanwhile); `result()` waits."""
        return self._send_probe(program, probes, timeout, grads=True)

    def _probe_request(self, program: Program, probes: Sequence[tuple[int, str]], timeout: float | None, *,
                       grads: bool) -> dict[str, Any] | Observation:
        """The answer to a `probe` request (`grads`: with gradients), or its crash, hang or refusal."""
        return self._send_probe(program, probes, timeout, grads=grads).answer()

    def _send_probe(self, program: Program, probes: Sequence[tuple[int, str]], timeout: float | None, *,
                    grads: bool) -> PendingProbes:
        doc = program_to_dict(program)
        fields: dict[str, Any] = {"program": doc, "probes": [[i, root] for i, root in probes]}
        if grads:
            fields["grads"] = True
        return PendingProbes(self, program, probes, fields, timeout, self._write_inflight(doc, program))

    def _finish_probe(self, sent: PendingProbes) -> dict[str, Any] | Observation:
        answer = self._observed_pending(sent)
        if isinstance(answer, Observation):
            return answer
        try:
            checked = check_probe_answer(answer, len(sent.probes))
        except MALFORMED as e:
            return self.malformed("probe", answer, e, sent.inflight)
        if sent.inflight:
            sent.inflight.unlink(missing_ok=True)
        self._served_one(len(sent.probes))
        return checked

    def _finish_run(self, run: PendingRun) -> Observation:
        answer = self._observed_pending(run)
        if isinstance(answer, Observation):
            return answer
        elapsed = time.monotonic() - run.started
        try:
            obs = run_observation(answer)
        except MALFORMED as e:
            return self.malformed("run", answer, e, run.inflight)
        if run.inflight:
            run.inflight.unlink(missing_ok=True)
        self._served_one()
        return Observation("burn", obs.values, obs.backwards, obs.error, {"seconds": elapsed})

    def malformed(self, kind: str, answer: Any, e: Exception, pending: Path | None) -> Observation:
        """A JSON answer not shaped as a `kind` answer (answers.py) is a crash: restart, keep the program."""
        return self._failed(WorkerError(f"{self.binary} gave a malformed answer to a {kind!r} request "
                                        f"({type(e).__name__}: {e}): {repr(answer)[:200]}"), pending, "crash")

    def _write_inflight(self, doc: dict[str, Any], program: Program | None) -> Path | None:
        """The request's own in-flight file (None: none kept, or its program is `held`)."""
        if self.inflight_dir is None or (program is not None and program is self.held):
            return None
        return write_program(self.inflight_dir, doc)

    def _served_one(self, runs: int = 1) -> None:
        self.served += 1
        self._runs += runs
        if self._unanswered:  # requests queued in this process: recycle after their answers
            return
        if self._runs >= RECYCLE_RUNS:
            self.kill()
            self.recycled += 1
            self.start()
        elif self.served >= self._rss_check_at:
            self._rss_check_at = self.served + RSS_CHECK_EVERY
            self._maybe_recycle()

    def _maybe_recycle(self) -> None:
        try:
            if self.rss_bytes() > RECYCLE_RSS_BYTES:
                self.restart()
        except (TimeoutError, EOFError, WorkerError):
            self.restart()
