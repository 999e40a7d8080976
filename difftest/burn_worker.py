"""Client for the persistent `difftest-burn --worker` process (JSON lines over stdio).

One worker per test process. A program is written to the in-flight directory before it is
sent and removed when its answer arrives, so a crash or a hang never loses the case. A crash
(the process exits) or a hang (no answer within the timeout) becomes that program's
observation; the worker is restarted for the next program.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import subprocess
import sysconfig
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from .ir import Program
from .jsonio import dumps, program_to_dict
from .observation import ErrorObs, Observation

PROTOCOL_VERSION = 1
DEFAULT_TIMEOUT = 60.0
RECYCLE_RSS_BYTES = 1 << 30  # burn keeps graphs of programs without backward: recycle past 1 GiB


class WorkerError(RuntimeError):
    """The worker could not be started or answered something that is not the protocol."""


def find_binary() -> str:
    """Where difftest-burn is: $DIFFTEST_BURN if set; otherwise the most recently built of the
    installed copy (next to the `difftest` script) and the cargo target directories, so a
    `cargo build --release` during development is picked up without reinstalling."""
    env = os.environ.get("DIFFTEST_BURN")
    if env:
        if not Path(env).is_file():
            raise WorkerError(f"DIFFTEST_BURN={env} does not exist")
        return env
    here = Path(__file__).resolve().parent.parent
    candidates = [
        Path(sysconfig.get_path("scripts")) / "difftest-burn",
        here / "rust" / "target" / "release" / "difftest-burn",
        Path.home() / ".cache" / "difftest" / "target" / "release" / "difftest-burn",
    ]
    if os.environ.get("CARGO_TARGET_DIR"):
        candidates.append(Path(os.environ["CARGO_TARGET_DIR"]) / "release" / "difftest-burn")
    existing = [c for c in candidates if c.is_file()]
    if existing:
        return str(max(existing, key=lambda c: c.stat().st_mtime))
    found = shutil.which("difftest-burn")
    if found:
        return found
    raise WorkerError(
        "difftest-burn not found: install the project (`pip install -e .` builds it), "
        "or set DIFFTEST_BURN to the binary"
    )


def program_digest(doc: dict[str, Any]) -> str:
    return hashlib.sha256(dumps(doc).encode()).hexdigest()[:16]


class BurnWorker:
    def __init__(
        self,
        binary: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        inflight_dir: Path | None = None,
        fault: str | None = None,
    ) -> None:
        """`fault`: a DIFFTEST_BURN_FAULT spec (docs/format.md) for detection-power runs."""
        self.binary = binary or find_binary()
        self.fault = fault
        self.timeout = timeout
        self.inflight_dir = inflight_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=200)
        self._next_id = 0
        self.restarts = 0
        self.served = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        try:
            env = dict(os.environ)
            env.pop("DIFFTEST_BURN_FAULT", None)
            if self.fault:
                env["DIFFTEST_BURN_FAULT"] = self.fault
            self._proc = subprocess.Popen(
                [self.binary, "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
        except OSError as e:
            raise WorkerError(f"cannot start {self.binary}: {e}") from e
        self._lines = queue.Queue()
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
        self.start()
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        try:
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise EOFError(f"worker stdin closed: {e}") from e
        try:
            raw = self._lines.get(timeout=timeout or self.timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer within {timeout or self.timeout:.0f}s") from None
        if raw is None:
            code = proc.wait()
            raise EOFError(f"worker exited with status {code}")
        try:
            answer: dict[str, Any] = json.loads(raw)
        except json.JSONDecodeError as e:
            raise WorkerError(f"worker answered non-JSON {raw[:200]!r}: {e}") from e
        return answer

    def request(self, kind: str, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        self._next_id += 1
        rid = self._next_id
        answer = self.send_line(dumps({"request": kind, "id": rid, **fields}), timeout)
        if answer.get("id") != rid:
            raise WorkerError(f"answer id {answer.get('id')!r} does not match request {rid}")
        return answer

    def ops(self) -> list[dict[str, Any]]:
        ans = self.request("ops")
        ops: list[dict[str, Any]] = ans["ops"]
        return ops

    def version(self) -> dict[str, Any]:
        v: dict[str, Any] = self.request("version")["version"]
        return v

    def rss_bytes(self) -> int:
        return int(self.request("status")["rss_bytes"])

    # ------------------------------------------------------------------ programs
    def run(self, program: Program | dict[str, Any], timeout: float | None = None) -> Observation:
        doc = program if isinstance(program, dict) else program_to_dict(program)
        pending = self._write_inflight(doc)
        started = time.monotonic()
        try:
            answer = self.request("run", timeout, program=doc)
        except TimeoutError as e:
            tail = self.stderr_tail()
            self.restart()
            return Observation("burn", error=ErrorObs("timeout", f"{e}\n{tail}".strip()),
                               meta={"inflight": str(pending) if pending else None})
        except (EOFError, WorkerError) as e:
            tail = self.stderr_tail()
            self.restart()
            return Observation("burn", error=ErrorObs("crash", f"{e}\n{tail}".strip()),
                               meta={"inflight": str(pending) if pending else None})
        if pending:
            pending.unlink(missing_ok=True)
        self.served += 1
        if self.served % 200 == 0:
            self._maybe_recycle()
        elapsed = time.monotonic() - started
        if not answer.get("ok"):
            err = answer.get("error") or {}
            return Observation(
                "burn",
                error=ErrorObs(
                    err.get("kind", "invalid"), err.get("message", ""), err.get("index"), err.get("statement")
                ),
                meta={"seconds": elapsed},
            )
        obs = Observation.from_dict(answer["result"], "burn")
        return Observation("burn", obs.values, obs.backwards, obs.error, {"seconds": elapsed})

    def _write_inflight(self, doc: dict[str, Any]) -> Path | None:
        if self.inflight_dir is None:
            return None
        self.inflight_dir.mkdir(parents=True, exist_ok=True)
        path = self.inflight_dir / f"{program_digest(doc)}-{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(dumps(doc, indent=1))
        os.replace(tmp, path)
        return path

    def _maybe_recycle(self) -> None:
        try:
            if self.rss_bytes() > RECYCLE_RSS_BYTES:
                self.restart()
        except (TimeoutError, EOFError, WorkerError):
            self.restart()
