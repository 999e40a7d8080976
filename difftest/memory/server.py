"""The processes that measure: every measurement runs in a fresh process, so that its resident
set holds nothing but what the measured forwards leave.

burn: a `memory` / `memory_program` request as the only request of a fresh
`difftest-burn --worker` (`burn_request`; burn's graph state is process-wide). PyTorch: a child
forked per measurement from `TorchServer` (`python -m difftest.memory.server`), which imported
torch once; the children are `torch_mode_child` (a mode of the seed's table),
`torch_program_child` (a generated check) and `torch_session_child` (a mode of the session
experiment, difftest/memory/session.py).

Allocator noise. Besides the warm-up, the children run with glibc's mmap threshold fixed
(`MALLOC_MMAP_THRESHOLD_`, see `ALLOCATOR_ENV`). By default glibc raises that threshold when a
large mmapped block is freed, so later multi-MiB tensors land on the heap, whose holes show up
as RSS growth that is no tensor at all: measured here, PyTorch's nograd-keep row at n=1024 read
+4 to +88 MiB from run to run with the default, +0.0 with the fixed threshold, and every
growing row reads exactly the model's saved bytes (20 x 8 MiB = +160.2). `--default-malloc`
measures without it, as the reference figures were.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from difftest.exec.burn_worker import WorkerError, find_binary
from difftest.exec.torch_values import region_context
from difftest.memory.model import MIB, Measured, forward_part
from difftest.ops.catalog import CATALOG
from difftest.program.ir import Cut, OpCall
from difftest.program.jsonio import decode_floats, program_from_dict

CHILD_TIMEOUT = 600.0
# Large blocks always mmapped (and unmapped when freed): RSS then tracks live tensors.
ALLOCATOR_ENV: dict[str, str] = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}


def child_env(fixed_malloc: bool) -> dict[str, str]:
    env = dict(os.environ)
    for key in ALLOCATOR_ENV:
        env.pop(key, None)
    if fixed_malloc:
        env.update(ALLOCATOR_ENV)
    return env


def rows_of(report: dict[str, Any]) -> Measured:
    return [(r["label"], float(r["rss_growth_mib"])) for r in report["rows"]]


class TorchServer:
    """A PyTorch fork server: `python -m difftest.memory.server`, started with the children's
    allocator environment, imports torch once; for each request it forks a child
    that runs one measurement and exits. Every measurement thus runs in a fresh process (its
    own heap, no graphs, no tensors: the server never runs a torch op), without paying the
    seconds of `import torch` each time. One JSON request per line on stdin, one JSON answer
    per line on stdout."""

    def __init__(self, *, fixed_malloc: bool = True) -> None:
        project_root = str(Path(__file__).resolve().parents[2])  # holds the difftest package
        env = child_env(fixed_malloc)
        env["PYTHONPATH"] = os.pathsep.join(x for x in (project_root, env.get("PYTHONPATH", "")) if x)
        env["OMP_NUM_THREADS"] = "1"
        self.fixed_malloc = fixed_malloc
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "difftest.memory.server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
        )

    def request(self, req: dict[str, Any], what: str, *, stdin_doc: str | None = None) -> dict[str, Any]:
        """Sends `req` (with `stdin_doc`, a JSON text, spliced in as its "program")."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        text = json.dumps(req, allow_nan=False)
        if stdin_doc is not None:
            text = text[:-1] + ', "program": ' + stdin_doc + "}"
        try:
            self.proc.stdin.write(text + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # reported below with the server's stderr
        ready, _, _ = select.select([self.proc.stdout], [], [], CHILD_TIMEOUT)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            self._stderr.seek(0)
            err = self._stderr.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"torch memory server died or timed out during {what}:\n{err}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"torch memory child {what} failed:\n{answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_SERVERS: dict[bool, TorchServer] = {}


def torch_server(fixed_malloc: bool = True) -> TorchServer:
    """This process's fork server for the given allocator setting, started on first use."""
    server = _SERVERS.get(fixed_malloc)
    if server is None or server.proc.poll() is not None:
        server = _SERVERS[fixed_malloc] = TorchServer(fixed_malloc=fixed_malloc)
    return server


@atexit.register
def _close_servers() -> None:
    for server in _SERVERS.values():
        server.close()
    _SERVERS.clear()


def serve_torch() -> int:
    """The fork server's loop (`python -m difftest.memory.server`)."""
    import torch

    torch.set_num_threads(1)
    for line in sys.stdin:
        if not line.strip():
            continue
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the measuring child
            os.close(read_end)
            code = 0
            try:
                req = json.loads(line)
                if req["kind"] == "mode":
                    out = torch_mode_child(req["mode"], req["n"], req["iters"])
                elif req["kind"] == "session":
                    out = torch_session_child(
                        req["mode"], req["n"], req["batch"], req["warmup"], req["steps"], req["iters"]
                    )
                else:
                    out = torch_program_child(req["program"], req["iters"], req["then_backward"])
                text = json.dumps(out)
            except BaseException:  # reported to the client, never raised in the server
                text, code = json.dumps({"error": traceback.format_exc()}), 1
            with os.fdopen(write_end, "w") as f:
                f.write(text)
            os._exit(code)
        os.close(write_end)
        with os.fdopen(read_end) as f:
            answer = f.read()
        os.waitpid(pid, 0)
        sys.stdout.write((answer or json.dumps({"error": "the child wrote nothing"})) + "\n")
        sys.stdout.flush()
    return 0


def burn_request(request: str, what: str, *, fixed_malloc: bool) -> Measured:
    """Sends `request` (a JSON text) as the only request of a fresh `difftest-burn --worker`
    (burn's graph state is process-wide, so the process must not have served anything before)
    and returns the rows of its report."""
    return rows_of(burn_report(request, what, fixed_malloc=fixed_malloc))


def burn_report(request: str, what: str, *, fixed_malloc: bool) -> dict[str, Any]:
    """Like `burn_request`, but the whole report (`"memory"` of the answer)."""
    done = subprocess.run(
        [find_binary(), "--worker"],
        input=request + "\n",
        capture_output=True,
        text=True,
        env=child_env(fixed_malloc),
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise WorkerError(f"difftest-burn memory {what} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    answer = json.loads(lines[-1])
    if not answer.get("ok"):
        raise WorkerError(f"memory request {what} failed: {answer.get('error')}")
    report: dict[str, Any] = answer["memory"]
    return report


def torch_mode_child(mode: str, n: int, iters: int) -> dict[str, Any]:
    """A PyTorch mode of the seed's table (difftest/memory/table.py); run it in a fresh process
    (a forked child of the server, or `difftest memory --torch-mode`)."""
    import psutil
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    proc = psutil.Process()

    def forward(x: torch.Tensor) -> torch.Tensor:
        return ((x.exp() * x) @ x).sum()

    p = torch.randn(n, n, requires_grad=True)
    forward(p).backward()  # type: ignore[no-untyped-call]  # warm up allocator and kernels
    p.grad = None
    base = proc.memory_info().rss
    kept: list[torch.Tensor] = []
    for _ in range(iters):
        if mode == "drop":
            forward(p)
        elif mode == "keep":
            kept.append(forward(p))
        elif mode == "detach-keep":
            kept.append(forward(p.detach()))
        elif mode == "nograd-keep":
            with torch.no_grad():
                kept.append(forward(p))
        else:
            raise ValueError(f"unknown torch memory mode {mode!r}")
    growth = (proc.memory_info().rss - base) / MIB
    return {"mode": mode, "rows": [{"label": f"{iters} forwards", "rss_growth_mib": growth}]}


def torch_program_child(doc: dict[str, Any], iters: int, then_backward: bool) -> dict[str, Any]:
    """The PyTorch side of a generated check (run in a forked child of the server); the same
    phases as burn's `memory_program` request. Gradients are dropped after each backward
    (burn's `Gradients` die with the backward's result)."""
    import psutil
    import torch


    torch.set_num_threads(1)
    proc = psutil.Process()
    # Leaf data goes from JSON straight to torch (decoding millions of floats through the IR
    # takes seconds); the IR gets one-element stand-ins, as the child only needs the structure.
    leaves: dict[str, torch.Tensor] = {}
    structure = dict(doc, statements=[dict(raw) for raw in doc["statements"]])
    for raw in structure["statements"]:
        if raw.get("kind") == "leaf":
            try:
                t = torch.tensor(raw["data"], dtype=torch.float32)
            except (TypeError, ValueError):  # "NaN", "Infinity" strings
                t = torch.tensor(decode_floats(raw["data"]), dtype=torch.float32)
            t = t.reshape(raw["shape"])
            leaves[raw["id"]] = t.requires_grad_(True) if raw["require_grad"] else t
            raw.update(shape=[1], data=[0.0])
    forward, root = forward_part(program_from_dict(structure, validate=False))
    leaves = {k: v for k, v in leaves.items() if k in forward.by_id()}

    def run_forward() -> dict[str, torch.Tensor]:
        env = dict(leaves)
        for st in forward.statements:
            if isinstance(st, OpCall):
                with region_context(st.region):
                    env[st.id] = CATALOG[st.op].lower([env[x] for x in st.inputs], st.attrs)
            elif isinstance(st, Cut):
                with region_context(st.region):
                    env[st.id] = env[st.input] if st.cut == "autodiff" else env[st.input].detach()
        return env

    def forward_backward() -> None:
        env = run_forward()
        if root is not None:
            r = env[root]
            r.backward(torch.ones_like(r))  # type: ignore[no-untyped-call]
            for t in leaves.values():
                t.grad = None

    def repeat() -> None:
        for _ in range(iters):
            run_forward()  # results dropped

    forward_backward()  # warm-up
    base = proc.memory_info().rss

    def growth() -> float:
        return float(proc.memory_info().rss - base) / MIB

    repeat()
    rows = [{"label": f"{iters} forwards", "rss_growth_mib": growth()}]
    if then_backward and root is not None:
        forward_backward()
        rows.append({"label": "then one backward", "rss_growth_mib": growth()})
        repeat()
        rows.append({"label": f"{iters} more forwards", "rss_growth_mib": growth()})
    return {"iters": iters, "rows": rows}


# The session's optimizer, as rust/src/memory_session.rs sets it.
SESSION_LR = 0.01
SESSION_MOMENTUM = 0.9


def torch_session_child(mode: str, n: int, batch: int, warmup: int, steps: int, iters: int) -> dict[str, Any]:
    """The PyTorch side of the session experiment (difftest/memory/session.py), the same phases
    as burn's `memory_session` request: a bias-free `Linear(n, n)` trained on a fixed batch with
    `((fc(x) - t) ** 2).mean()`, backward and an SGD step (`SESSION_LR`, `SESSION_MOMENTUM`),
    `warmup` steps, then `steps` steps sampled (row: the largest growth), then `iters` forwards
    without backward, dropped (then one step and `iters` more) or kept. Run it in a fresh
    process (a forked child of the server)."""
    import psutil
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    proc = psutil.Process()
    fc = torch.nn.Linear(n, n, bias=False)
    x = torch.rand(batch, n) * 2 - 1
    t = torch.rand(batch, n) * 2 - 1
    opt = torch.optim.SGD(fc.parameters(), lr=SESSION_LR, momentum=SESSION_MOMENTUM)

    def loss() -> torch.Tensor:
        y: torch.Tensor = fc(x)
        return (y - t).square().mean()

    def train_step() -> None:
        opt.zero_grad()
        loss().backward()  # type: ignore[no-untyped-call]
        opt.step()

    for _ in range(warmup):
        train_step()
    base = proc.memory_info().rss

    def growth() -> float:
        return float(proc.memory_info().rss - base) / MIB

    samples = []
    for _ in range(steps):
        train_step()
        samples.append(growth())
    rows = [{"label": f"{steps} steps", "rss_growth_mib": max([0.0, *samples])}]
    kept: list[torch.Tensor] = []

    def forwards() -> None:
        for _ in range(iters):
            if mode == "drop":
                loss()
            elif mode == "keep":
                kept.append(loss())
            else:
                raise ValueError(f"unknown torch memory session mode {mode!r}")

    forwards()
    rows.append({"label": f"{iters} forwards", "rss_growth_mib": growth()})
    if mode == "drop":
        train_step()
        rows.append({"label": "then one step", "rss_growth_mib": growth()})
        forwards()
        rows.append({"label": f"{iters} more forwards", "rss_growth_mib": growth()})
    return {"mode": mode, "samples_mib": samples, "rows": rows}


if __name__ == "__main__":
    sys.exit(serve_torch())
