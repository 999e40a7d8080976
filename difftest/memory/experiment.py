"""The memory differential (DESIGN.md golden output 4, issue 5).

A PyTorch graph dies with its output; burn keeps the saved tensors of every recorded forward in
a process-wide graph until the next `backward()`. This module measures that in both
frameworks, one fresh process per measurement, and checks each observation against what the
semantic model predicts.

The model.
* `saved_storage` asks the flag model (`model.predict`, with its own rules such as
  leaf-detach) which ops each framework records, and the op catalog which inputs they save
  (`saves`, narrowed by `SAVED_FOR_OTHER`): the storage a forward allocates and keeps for
  backward (a saved view or cut keeps its base; leaves exist anyway).
* Base semantics are PyTorch's: saved tensors live as long as an output that reaches them.
  The declared rule `GRAPH_RETAINED` overrides that for burn: they live until a backward, kept
  output or not, and `surviving_ops` says which of them a backward does not free (graphs
  that hold another live leaf, following burn's graph bookkeeping).
* `expectations` turns the bytes into one expectation per reported row: "grows" (at least
  `GROWS_FRACTION` of the retained bytes times the forwards), "flat" (under the fixed
  `FLAT_SLACK_MIB`), and after a backward "no further growth" (not past the earlier peak:
  allocator pages are reused) or "keeps growing" (past it by half the surviving bytes). It
  refuses an experiment whose predicted growth could not be told from the slack.

The experiments.
* The seed's table (`SEED_MODES`, `run_table`): `((p.exp() * p) @ p).sum()` on an n x n
  parameter, 20 times after a warm-up forward+backward, per mode. `main` (`difftest memory`)
  prints it beside the seed's figures and exits 1 when a row contradicts its expectation.
* Generated checks (`MemoryCheck`, drawn by strategies/memory.py): any program's forward part
  repeated, dropping every result, and optionally one backward and as many forwards again.
* The corpus case corpus/seed/memory-table.json (`MemoryExperiment`) replays the table.

Processes. burn: a `memory` / `memory_program` request as the only request of a fresh
`difftest-burn --worker`. PyTorch: a child forked per measurement from `TorchServer`, which
imported torch once (`python -m difftest.memory --torch-mode M` runs one mode directly).

Allocator noise. Besides the seed's warm-up, the children run with glibc's mmap threshold fixed
(`MALLOC_MMAP_THRESHOLD_`, see `ALLOCATOR_ENV`). By default glibc raises that threshold when a
large mmapped block is freed, so later multi-MiB tensors land on the heap, whose holes show up
as RSS growth that is no tensor at all: measured here, PyTorch's nograd-keep row at n=1024 read
+4 to +88 MiB from run to run with the default, +0.0 with the fixed threshold, and every
growing row reads exactly the model's saved bytes (20 x 8 MiB = +160.2). `--default-malloc`
measures without it, as the seed did.
"""


from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import json
import os
import select
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from difftest.divergences.rules import Framework
from difftest.exec.burn_worker import WorkerError, find_binary
from difftest.ops.catalog import CATALOG
from difftest.oracle.model import predict
from difftest.oracle.states import BurnState, State, TorchState
from difftest.program.ir import Backward, Cut, Leaf, OpCall, Program, Region, Statement, numel
from difftest.program.validate import infer_shapes

MIB = 1024 * 1024
F32_BYTES = 4
FLAT_SLACK_MIB = 10.0  # "stays flat": growth under this fixed slack (allocator noise)
GROWS_FRACTION = 0.5  # "grows": at least this fraction of the bytes predicted retained
CHILD_TIMEOUT = 600.0
# Large blocks always mmapped (and unmapped when freed): RSS then tracks live tensors.
ALLOCATOR_ENV: dict[str, str] = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}

CutMode = Literal["none", "detach", "without_autodiff", "no_grad"]
Verdict = Literal["grows", "flat", "no-further-growth", "keeps-growing", "unchecked"]


@dataclass(frozen=True)
class MemoryRule:
    """A declared divergence about memory (the flag rules live in rules.py)."""

    name: str
    framework: Framework
    reason: str
    section: str

    def __str__(self) -> str:
        return f"{self.name} ({self.framework}, DESIGN.md {self.section})"


GRAPH_RETAINED = MemoryRule(
    name="graph-retained-until-backward",
    framework="burn",
    reason="burn keeps the graph of every recorded forward (with its saved tensors) in a "
    "process-wide structure that only backward() cleans; dropping the output frees nothing. "
    "PyTorch frees a graph with its output. detach() of a require-grad leaf is still a "
    "require-grad leaf in burn, so forwards on it are recorded and retained too.",
    section="1 (golden output 4)",
)
# The memory rules the model applies when a caller passes no `rules` (looked up at call time).
MEMORY_RULES: tuple[MemoryRule, ...] = (GRAPH_RETAINED,)


@dataclass(frozen=True)
class Mode:
    """One mode of the seed's experiment, described by what it does to the forward."""

    framework: Framework
    name: str
    cut: CutMode  # what the forward's input is: p itself, a cut of p, or p inside no_grad
    keep: bool  # outputs are kept alive (a list) instead of dropped
    then_backward: bool = False  # then one backward of a fresh forward, then the forwards again
    seed_mib: tuple[float, ...] = ()  # the seed's figures, one per row


SEED_MODES: tuple[Mode, ...] = (
    Mode("torch", "drop", "none", keep=False, seed_mib=(0.0,)),
    Mode("torch", "keep", "none", keep=True, seed_mib=(144.6,)),
    Mode("torch", "detach-keep", "detach", keep=True, seed_mib=(0.0,)),
    Mode("torch", "nograd-keep", "no_grad", keep=True, seed_mib=(0.0,)),
    Mode("burn", "drop", "none", keep=False, then_backward=True, seed_mib=(147.0, 163.1, 163.1)),
    Mode("burn", "keep", "none", keep=True, seed_mib=(147.1,)),
    Mode("burn", "without-autodiff", "without_autodiff", keep=False, seed_mib=(0.1,)),
    Mode("burn", "detach", "detach", keep=False, seed_mib=(145.0,)),
)
SEED_N = 1024
SEED_ITERS = 20


def find_mode(framework: str, name: str) -> Mode:
    for m in SEED_MODES:
        if m.framework == framework and m.name == name:
            return m
    known = ", ".join(f"{m.framework}/{m.name}" for m in SEED_MODES)
    raise ValueError(f"unknown memory mode {framework}/{name} (known: {known})")


def labels(iters: int, then_backward: bool) -> tuple[str, ...]:
    """The rows a repeated-forward run reports (both workers use these labels)."""
    if then_backward:
        return (f"{iters} forwards", "then one backward", f"{iters} more forwards")
    return (f"{iters} forwards",)


def row_labels(mode: Mode, iters: int) -> tuple[str, ...]:
    return labels(iters, mode.then_backward)


# ---------------------------------------------------------------------------------- the model


def forward_program(cut: CutMode, n: int, *, backward: bool = False) -> Program:
    """The experiment's forward as a program: `((x.exp() * x) @ x).sum()`, `x` the cut of `p`
    (with `backward`, followed by the backward of the sum, as the burn drop mode runs it)."""
    statements: list[Statement] = [Leaf("p", (n, n), (0.0,) * (n * n), "autodiff", True)]
    x, region = "p", "grad"
    if cut in ("detach", "without_autodiff"):
        statements.append(Cut("x", cut, "p"))
        x = "x"
    elif cut == "no_grad":
        region = "no_grad"
    r: Region = "no_grad" if region == "no_grad" else "grad"
    statements += [
        OpCall("e", "exp", (x,), region=r),
        OpCall("m", "mul", ("e", x), region=r),
        OpCall("y", "matmul", ("m", x), region=r),
        OpCall("s", "sum", ("y",), region=r),
    ]
    if backward:
        statements.append(Backward("bw", "s"))
    return Program(tuple(statements))


def forward_part(program: Program) -> tuple[Program, str | None]:
    """The statements a repeated forward runs (everything before the first backward) and the
    root of that backward (None when the program has none)."""
    for i, st in enumerate(program.statements):
        if isinstance(st, Backward):
            return Program(program.statements[:i]), st.input
    return program, None


# Binary ops whose saved inputs serve only the *other* input's gradient (d(a*b)/da = b,
# d(a@b)/da = grad @ b^T): input i is kept only when the other input is recorded. Both
# frameworks do this (PyTorch's derivatives.yaml; burn's `rhs_tracked.then(|| checkpoint(lhs))`).
SAVED_FOR_OTHER: frozenset[str] = frozenset({"mul", "matmul"})


def _recorded(state: State | None) -> bool:
    """Whether the op that produced `state` was recorded in a graph."""
    if isinstance(state, BurnState):
        return state.is_tracked
    if isinstance(state, TorchState):
        return state.has_grad_fn
    return False


def _needs_grad(state: State | None) -> bool:
    """Whether a gradient flows into a value (it is part of a graph)."""
    if isinstance(state, BurnState):
        return state.is_tracked
    if isinstance(state, TorchState):
        return state.requires_grad
    return False


def _storage_root(ident: str, by_id: dict[str, Statement]) -> str:
    """The value whose storage `ident` shares: through cuts (same storage, other flags) and
    PyTorch views (catalog `view`) to the leaf or op result that allocated it. A saved view
    keeps its whole base alive."""
    while True:
        st = by_id[ident]
        if isinstance(st, Cut):
            ident = st.input
        elif isinstance(st, OpCall) and CATALOG[st.op].view is not None:
            ident = st.inputs[0]
        else:
            return ident


def saved_storage(program: Program, framework: Framework) -> dict[str, frozenset[str]]:
    """What one forward of `program` (its statements before the first backward) saves for
    backward in `framework`: storage the forward allocated (results of non-view ops; leaves
    exist anyway) that a recorded op saves (the catalog's `saves`, narrowed by
    `SAVED_FOR_OTHER`), mapped to the ids of the recorded ops that save it."""
    forward, _ = forward_part(program)
    prediction = predict(forward).of(framework)
    by_id = forward.by_id()
    saved: dict[str, set[str]] = {}
    for st in forward.statements:
        if not (isinstance(st, OpCall) and _recorded(prediction.states.get(st.id))):
            continue
        for i in CATALOG[st.op].saves:
            if i >= len(st.inputs):
                continue
            if st.op in SAVED_FOR_OTHER and not any(
                _needs_grad(prediction.states.get(x)) for j, x in enumerate(st.inputs) if j != i
            ):
                continue
            root = by_id[_storage_root(st.inputs[i], by_id)]
            if isinstance(root, OpCall):
                saved.setdefault(root.id, set()).add(st.id)
    return {k: frozenset(v) for k, v in saved.items()}


def _bytes_of(program: Program, values: Iterable[str]) -> int:
    shapes = infer_shapes(forward_part(program)[0])
    return sum(numel(shapes[v]) * F32_BYTES for v in values)


def saved_bytes_per_forward(program: Program, framework: Framework) -> int:
    """Bytes `framework` saves for backward when it runs `program`'s forward once."""
    return _bytes_of(program, saved_storage(program, framework))


class _Graphs:
    """Union-find over graph tokens; a graph is *old* when it holds a live leaf's node."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.old: set[str] = set()

    def find(self, k: str) -> str:
        while self.parent.setdefault(k, k) != k:
            k = self.parent[k]
        return k

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            if rb in self.old:
                self.old.add(ra)

    def is_old(self, k: str) -> bool:
        return self.find(k) in self.old


def _assign_graphs(
    forward: Program, states: dict[str, State], leaves: dict[str, str], graphs: _Graphs
) -> dict[str, str]:
    """The graph of every recorded value's node in one run of `forward`, as burn's graph
    locator assigns them: a program leaf is in the graph `leaves` maps it to (unmapped: none);
    an op joins the graphs of its recorded inputs, merging them, or starts a fresh graph;
    burn's detach of a require-grad leaf makes a new leaf in a fresh graph; an `autodiff` cut
    of a recorded value is that value."""
    node: dict[str, str] = dict(leaves)
    for st in forward.statements:
        state = states.get(st.id)
        if isinstance(st, Leaf) or not _recorded(state):
            continue
        if isinstance(st, Cut):
            if isinstance(state, BurnState) and state.key == st.id:
                node[st.id] = f"fresh:{st.id}"
            elif st.input in node:
                node[st.id] = node[st.input]
        elif isinstance(st, OpCall):
            parents = [node[x] for x in st.inputs if x in node]
            for other in parents[1:]:
                graphs.union(parents[0], other)
            node[st.id] = parents[0] if parents else f"fresh:{st.id}"
    return node


def surviving_ops(program: Program, framework: Framework) -> frozenset[str]:
    """The recorded ops of one repeated forward whose saved tensors a backward of the
    program's (first) root does not free, following burn's graph bookkeeping (burn-autodiff
    0.22.1, runtime/graph.rs and memory_management.rs):

    * a require-grad leaf starts in a graph of its own; an op's node joins the graphs of its
      inputs (merging them) or starts a fresh one;
    * a backward runs on the root's graph: it frees every node there that no live tensor
      holds, and forgets which graph the leaves it reached belong to; afterwards graphs that
      hold no live node are dropped whole, while a graph still holding a live leaf's node is
      kept with everything in it;
    * so after the warm-up's backward, the leaves the root reaches start no graph, and a
      repeated forward's ops land in fresh graphs (dropped at the next backward) unless they
      touch another program leaf, whose old graph survives every backward except one run on
      that very graph (when the root's node landed there too).

    Empty without a backward."""
    forward, root = forward_part(program)
    if root is None:
        return frozenset()
    states = predict(forward).of(framework).states
    live = [leaf.id for leaf in forward.leaves() if _recorded(states.get(leaf.id))]
    warm = _Graphs()
    _assign_graphs(forward, states, {leaf: f"leaf:{leaf}" for leaf in live}, warm)
    reached = states[root].sources
    repeat = _Graphs()
    mapped = {leaf: f"old:{warm.find(f'leaf:{leaf}')}" for leaf in live if leaf not in reached}
    repeat.old.update(mapped.values())
    node = _assign_graphs(forward, states, mapped, repeat)
    root_graph = repeat.find(node[root]) if root in node else None
    return frozenset(
        st.id
        for st in forward.statements
        if isinstance(st, OpCall)
        and st.id in node
        and repeat.is_old(node[st.id])
        and repeat.find(node[st.id]) != root_graph
    )


@dataclass(frozen=True)
class ForwardMemory:
    framework: Framework
    saved_bytes: int  # saved for backward per forward
    retained_bytes: int  # of those, still held after the iteration (until the next backward)
    surviving_bytes: int  # of the retained, what a backward of the program's root leaves held
    rules: tuple[str, ...]  # memory rules that changed the base prediction


def predict_forward_memory(
    program: Program, framework: Framework, *, keep: bool, rules: Sequence[MemoryRule] | None = None
) -> ForwardMemory:
    """What one repetition of `program`'s forward leaves resident in `framework`."""
    saved = saved_storage(program, framework)
    saved_bytes = _bytes_of(program, saved)
    # base (PyTorch): saved tensors die with the output; kept outputs keep them (and a backward
    # of another root frees nothing of theirs)
    retained, surviving = (saved_bytes, saved_bytes) if keep else (0, 0)
    fired: list[str] = []
    for rule in MEMORY_RULES if rules is None else rules:
        if rule is GRAPH_RETAINED and rule.framework == framework and saved_bytes > 0 and not keep:
            # burn: the graph outlives the output, until a backward frees it
            retained = saved_bytes
            alive = surviving_ops(program, framework)
            surviving = _bytes_of(program, (v for v, ops in saved.items() if ops & alive))
            fired.append(rule.name)
    return ForwardMemory(framework, saved_bytes, retained, surviving, tuple(fired))


@dataclass(frozen=True)
class Expectation:
    verdict: Verdict
    threshold_mib: float  # grows / keeps-growing: at least this; flat / no-further-growth: under
    rules: tuple[str, ...] = ()

    def holds(self, growth_mib: float, previous_mib: float | None) -> bool:
        """`previous_mib`: the highest growth of the rows before this one."""
        if self.verdict == "grows":
            return growth_mib >= self.threshold_mib
        if self.verdict == "flat":
            return growth_mib < self.threshold_mib
        if self.verdict == "no-further-growth":
            return growth_mib - (previous_mib or 0.0) < self.threshold_mib
        if self.verdict == "keeps-growing":
            return growth_mib - (previous_mib or 0.0) >= self.threshold_mib
        return True

    def describe(self) -> str:
        text = {
            "grows": f"grows (>= {self.threshold_mib:.1f})",
            "flat": f"flat (< {self.threshold_mib:.1f})",
            "no-further-growth": f"no further growth (< peak +{self.threshold_mib:.1f})",
            "keeps-growing": f"keeps growing (>= peak +{self.threshold_mib:.1f})",
            "unchecked": "- (backward frees graphs)",
        }[self.verdict]
        return text + (f" [{', '.join(self.rules)}]" if self.rules else "")


def _grows_mib(retained_bytes: int, iters: int) -> float:
    return GROWS_FRACTION * retained_bytes * iters / MIB


def distinguishable(fm: ForwardMemory, iters: int) -> bool:
    """Whether every growth `fm` predicts shows at least `FLAT_SLACK_MIB` in `iters` forwards
    at the `GROWS_FRACTION` threshold (else "grows" and "flat" cannot be told apart)."""
    return all(b == 0 or _grows_mib(b, iters) >= FLAT_SLACK_MIB for b in (fm.retained_bytes, fm.surviving_bytes))


def expectations(fm: ForwardMemory, iters: int, *, then_backward: bool) -> tuple[Expectation, ...]:
    """One expectation per row of a repeated-forward run (see `row_labels`): after `iters`
    forwards; with `then_backward`, after one more forward and its backward (not checked:
    whether RSS drops depends on the allocator returning pages), and after `iters` more
    forwards, which retain again but only what the backward freed, so they stay under the
    earlier peak unless some graph survived the backward (then they grow past it)."""
    if not distinguishable(fm, iters):
        raise ValueError(
            f"{iters} forwards cannot tell growth from noise in {fm.framework}: half the predicted "
            f"growth ({_grows_mib(fm.retained_bytes, iters):.1f} MiB, after a backward "
            f"{_grows_mib(fm.surviving_bytes, iters):.1f} MiB) is under the flat slack ({FLAT_SLACK_MIB} MiB)"
        )
    first = (
        Expectation("grows", _grows_mib(fm.retained_bytes, iters), fm.rules)
        if fm.retained_bytes
        else Expectation("flat", FLAT_SLACK_MIB, fm.rules)
    )
    if not then_backward:
        return (first,)
    last = (
        Expectation("keeps-growing", _grows_mib(fm.surviving_bytes, iters), fm.rules)
        if fm.surviving_bytes
        else Expectation("no-further-growth", FLAT_SLACK_MIB, fm.rules)
    )
    return (first, Expectation("unchecked", 0.0), last)


def predict_growth(
    framework: str,
    mode: str,
    *,
    n: int = SEED_N,
    iters: int = SEED_ITERS,
    rules: Sequence[MemoryRule] | None = None,
) -> tuple[Expectation, ...]:
    """One expectation per row the seed mode reports (see `row_labels`)."""
    m = find_mode(framework, mode)
    program = forward_program(m.cut, n, backward=m.then_backward)
    fm = predict_forward_memory(program, m.framework, keep=m.keep, rules=rules)
    return expectations(fm, iters, then_backward=m.then_backward)


# ---------------------------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Row:
    framework: Framework
    mode: str
    label: str
    seed_mib: float | None  # the seed's figure (measured at n=1024, iters=20)
    growth_mib: float
    expectation: Expectation
    ok: bool


def torch_child(mode: str, n: int, iters: int) -> dict[str, Any]:
    """The PyTorch experiment; run it in a fresh process (a forked child of the server, or
    `--torch-mode`)."""
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


def _child_env(fixed_malloc: bool) -> dict[str, str]:
    env = dict(os.environ)
    for key in ALLOCATOR_ENV:
        env.pop(key, None)
    if fixed_malloc:
        env.update(ALLOCATOR_ENV)
    return env


Measured = list[tuple[str, float]]  # (row label, RSS growth in MiB)


def _rows_of(report: dict[str, Any]) -> Measured:
    return [(r["label"], float(r["rss_growth_mib"])) for r in report["rows"]]


class TorchServer:
    """A PyTorch fork server: `python -m difftest.memory.experiment --torch-server`, started with the
    children's allocator environment, imports torch once; for each request it forks a child
    that runs one measurement and exits. Every measurement thus runs in a fresh process (its
    own heap, no graphs, no tensors: the server never runs a torch op), without paying the
    seconds of `import torch` each time. One JSON request per line on stdin, one JSON answer
    per line on stdout."""

    def __init__(self, *, fixed_malloc: bool = True) -> None:
        package_root = str(Path(__file__).resolve().parent.parent)
        env = _child_env(fixed_malloc)
        env["PYTHONPATH"] = os.pathsep.join(x for x in (package_root, env.get("PYTHONPATH", "")) if x)
        env["OMP_NUM_THREADS"] = "1"
        self.fixed_malloc = fixed_malloc
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "difftest.memory.experiment", "--torch-server"],
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
    """The fork server's loop (`--torch-server`)."""
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
                    out = torch_child(req["mode"], req["n"], req["iters"])
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


def _burn_request(request: dict[str, Any], what: str, *, fixed_malloc: bool, binary: str | None = None) -> Measured:
    return _burn_request_text(json.dumps(request, allow_nan=False), what, fixed_malloc=fixed_malloc, binary=binary)


def _burn_request_text(request: str, what: str, *, fixed_malloc: bool, binary: str | None = None) -> Measured:
    """Sends `request` as the only request of a fresh `difftest-burn --worker` (burn's graph
    state is process-wide, so the process must not have served anything before)."""
    cmd = [binary or find_binary(), "--worker"]
    done = subprocess.run(
        cmd,
        input=request + "\n",
        capture_output=True,
        text=True,
        env=_child_env(fixed_malloc),
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
    return _rows_of(report)


def measure_torch(mode: str, n: int, iters: int, *, fixed_malloc: bool = True) -> Measured:
    """Runs one PyTorch mode in a fresh (forked) process."""
    req = {"kind": "mode", "mode": mode, "n": n, "iters": iters}
    return _rows_of(torch_server(fixed_malloc).request(req, mode))


def measure_burn(mode: str, n: int, iters: int, *, fixed_malloc: bool = True, binary: str | None = None) -> Measured:
    """Runs one burn mode in a fresh `difftest-burn --worker`."""
    request = {"request": "memory", "id": 1, "mode": mode, "n": n, "iters": iters}
    return _burn_request(request, mode, fixed_malloc=fixed_malloc, binary=binary)


def measure(framework: str, mode: str, n: int, iters: int, *, fixed_malloc: bool = True) -> Measured:
    if framework == "torch":
        return measure_torch(mode, n, iters, fixed_malloc=fixed_malloc)
    return measure_burn(mode, n, iters, fixed_malloc=fixed_malloc)


def judge_rows(
    framework: Framework,
    mode: str,
    measured: Sequence[tuple[str, float]],
    expected: Sequence[Expectation],
    labels: Sequence[str],
    seed_mib: Sequence[float] = (),
) -> list[Row]:
    """Each measured row against its expectation (`no-further-growth` and `keeps-growing`
    compare with the highest growth of the rows before)."""
    if [label for label, _ in measured] != list(labels):
        raise RuntimeError(f"{framework}/{mode} reported rows {list(measured)}, expected {list(labels)}")
    rows: list[Row] = []
    peak: float | None = None
    for i, ((label, growth), exp) in enumerate(zip(measured, expected, strict=True)):
        seed = seed_mib[i] if i < len(seed_mib) else None
        rows.append(Row(framework, mode, label, seed, growth, exp, exp.holds(growth, peak)))
        peak = growth if peak is None else max(peak, growth)
    return rows


def check_mode(
    mode: Mode,
    measured: Sequence[tuple[str, float]],
    *,
    n: int,
    iters: int,
    rules: Sequence[MemoryRule] | None = None,
) -> list[Row]:
    expected = predict_growth(mode.framework, mode.name, n=n, iters=iters, rules=rules)
    return judge_rows(mode.framework, mode.name, measured, expected, row_labels(mode, iters), mode.seed_mib)


def run_table(
    n: int = SEED_N,
    iters: int = SEED_ITERS,
    *,
    rules: Sequence[MemoryRule] | None = None,
    fixed_malloc: bool = True,
) -> list[Row]:
    """The seed's table: every mode of both frameworks, each in a fresh process."""
    rows: list[Row] = []
    for mode in SEED_MODES:
        measured = measure(mode.framework, mode.name, n, iters, fixed_malloc=fixed_malloc)
        rows.extend(check_mode(mode, measured, n=n, iters=iters, rules=rules))
    return rows


def format_table(rows: Sequence[Row], n: int, iters: int, *, fixed_malloc: bool = True) -> str:
    saved = saved_bytes_per_forward(forward_program("none", n), "burn")
    malloc = " ".join(f"{k}={v}" for k, v in ALLOCATOR_ENV.items()) if fixed_malloc else "default malloc"
    lines = [
        f"memory: {n}x{n} f32 parameter requiring grad, forward ((p.exp() * p) @ p).sum() x {iters}, "
        f"RSS growth in MiB, one fresh process per mode ({malloc})",
        f"model: {saved / MIB:.1f} MiB saved for backward per recorded forward; "
        f"grows = >= {GROWS_FRACTION:g} x retained bytes, flat = < {FLAT_SLACK_MIB:g} MiB",
        "",
        f"{'framework':<9}  {'mode':<16}  {'row':<18}  {'seed':>7}  {'measured':>8}  {'verdict':<13}  expectation",
    ]
    for r in rows:
        seed = f"{r.seed_mib:+.1f}" if r.seed_mib is not None else "-"
        verdict = "ok" if r.ok else "CONTRADICTED"
        lines.append(
            f"{r.framework:<9}  {r.mode:<16}  {r.label:<18}  {seed:>7}  {r.growth_mib:>+8.1f}  {verdict:<13}  "
            f"{r.expectation.describe()}"
        )
    bad = sum(not r.ok for r in rows)
    summary = f"{len(rows) - bad} of {len(rows)} rows as the model expects"
    lines += ["", summary + (f", {bad} contradicted" if bad else "")]
    if (n, iters) != (SEED_N, SEED_ITERS):
        lines.append(f"(seed figures are for n={SEED_N}, iters={SEED_ITERS})")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- generated checks


@dataclass(frozen=True)
class MemoryCheck:
    """A generated memory check (strategies/memory.py): `program`'s leaves are created once,
    its forward part (the statements before the first backward) runs once with that backward
    as warm-up, then `iters` times with every result dropped; with `then_backward` (and a
    backward in the program), then one forward and its backward, then `iters` more forwards.
    Each framework runs it in a fresh process."""

    program: Program
    iters: int
    then_backward: bool = True
    name: str = ""

    @property
    def backward_phase(self) -> bool:
        return self.then_backward and forward_part(self.program)[1] is not None

    def labels(self) -> tuple[str, ...]:
        return labels(self.iters, self.backward_phase)

    def predict(self, framework: Framework, rules: Sequence[MemoryRule] | None = None) -> ForwardMemory:
        return predict_forward_memory(self.program, framework, keep=False, rules=rules)

    def expectations(
        self, framework: Framework, rules: Sequence[MemoryRule] | None = None
    ) -> tuple[Expectation, ...]:
        """Raises ValueError when the check cannot tell its predicted growth from noise."""
        return expectations(self.predict(framework, rules), self.iters, then_backward=self.backward_phase)

    def describe(self) -> str:
        forward, root = forward_part(self.program)
        shapes = infer_shapes(forward)
        largest = max((shapes[v] for v in forward.value_ids()), key=numel)
        ops = [st.op if isinstance(st, OpCall) else st.kind for st in forward.statements if not isinstance(st, Leaf)]
        saved = ", ".join(f"{fw} {saved_bytes_per_forward(self.program, fw) / MIB:.1f}" for fw in FRAMEWORKS)
        return (
            f"{self.name or 'check'}: {len(self.program)} statements, largest tensor "
            f"{'x'.join(map(str, largest))} ({numel(largest) * F32_BYTES / MIB:.1f} MiB), forward "
            f"[{' '.join(ops)}]{' + backward' if root else ''}, x{self.iters}; saved per forward (MiB): {saved}"
        )


    @functools.cached_property
    def program_json(self) -> str:
        """The program document (megabytes of leaf data: encoded once, sent to both children)."""
        from difftest.program.jsonio import dumps, program_to_dict

        return dumps(program_to_dict(self.program))


FRAMEWORKS: tuple[Framework, ...] = ("torch", "burn")


def measure_program(check: MemoryCheck, framework: Framework, *, fixed_malloc: bool = True) -> Measured:
    """Runs `check` in a fresh process of `framework` (burn: a `memory_program` request)."""
    what = f"program {check.name or '?'}"
    if framework == "burn":
        head = {"request": "memory_program", "id": 1, "iters": check.iters, "then_backward": check.then_backward}
        request = json.dumps(head)[:-1] + ', "program": ' + check.program_json + "}"
        return _burn_request_text(request, what, fixed_malloc=fixed_malloc)
    req = {"kind": "program", "iters": check.iters, "then_backward": check.then_backward}
    return _rows_of(torch_server(fixed_malloc).request(req, what, stdin_doc=check.program_json))


def torch_program_child(doc: dict[str, Any], iters: int, then_backward: bool) -> dict[str, Any]:
    """The PyTorch side of a generated check (run in a forked child of the server); the same
    phases as burn's `memory_program` request. Gradients are dropped after each backward
    (burn's `Gradients` die with the backward's result)."""
    import psutil
    import torch

    from difftest.program.jsonio import decode_floats, program_from_dict

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

    def region(r: Region) -> contextlib.AbstractContextManager[Any]:
        if r == "no_grad":
            return torch.no_grad()
        if r == "inference_mode":
            return torch.inference_mode()
        return contextlib.nullcontext()

    def run_forward() -> dict[str, torch.Tensor]:
        env = dict(leaves)
        for st in forward.statements:
            if isinstance(st, OpCall):
                with region(st.region):
                    env[st.id] = CATALOG[st.op].lower([env[x] for x in st.inputs], st.attrs)
            elif isinstance(st, Cut):
                with region(st.region):
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


def judge_check(
    check: MemoryCheck, measured: dict[Framework, Measured], rules: Sequence[MemoryRule] | None = None
) -> list[Row]:
    """The measured rows of both frameworks against the model's expectations."""
    rows: list[Row] = []
    for fw in FRAMEWORKS:
        rows += judge_rows(fw, check.name or "program", measured[fw], check.expectations(fw, rules), check.labels())
    return rows


def run_check(check: MemoryCheck, *, fixed_malloc: bool = True) -> dict[Framework, Measured]:
    """Measures `check` in both frameworks (refuses first if it cannot tell growth from noise)."""
    for fw in FRAMEWORKS:
        check.expectations(fw)
    return {fw: measure_program(check, fw, fixed_malloc=fixed_malloc) for fw in FRAMEWORKS}


def format_check(check: MemoryCheck, rows: Sequence[Row]) -> str:
    lines = [check.describe()]
    for r in rows:
        verdict = "ok" if r.ok else "CONTRADICTED"
        lines.append(
            f"  {r.framework:<5}  {r.label:<18}  {r.growth_mib:>+8.1f}  {verdict:<12}  {r.expectation.describe()}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- corpus cases


MEMORY_RULES_BY_NAME: dict[str, MemoryRule] = {r.name: r for r in MEMORY_RULES}
EXPERIMENTS = ("seed-table",)


@dataclass(frozen=True)
class TableSize:
    n: int
    iters: int


@dataclass(frozen=True)
class MemoryExperiment:
    """What a memory corpus case measures (`"kind": "memory"`, docs/format.md): the seed's
    table at its own size (`full`, replayed with --run-slow or -m memory) and at a reduced size
    for the default run (`quick`; the thresholds scale with n and iters)."""

    experiment: str
    full: TableSize
    quick: TableSize

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "n": self.full.n,
            "iters": self.full.iters,
            "quick": {"n": self.quick.n, "iters": self.quick.iters},
        }

    @staticmethod
    def from_dict(raw: Any) -> MemoryExperiment:
        """Raises ValueError naming the bad field (or a size the model cannot judge)."""
        if not isinstance(raw, dict):
            raise ValueError('"memory" must be an object')
        if raw.get("experiment") not in EXPERIMENTS:
            raise ValueError(f'"memory.experiment" must be one of {list(EXPERIMENTS)}, got {raw.get("experiment")!r}')

        def size(obj: Any, where: str) -> TableSize:
            if not isinstance(obj, dict):
                raise ValueError(f'"{where}" must be an object with "n" and "iters"')
            for key in ("n", "iters"):
                v = obj.get(key)
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise ValueError(f'"{where}.{key}" must be a positive integer, got {v!r}')
            return TableSize(obj["n"], obj["iters"])

        exp = MemoryExperiment(raw["experiment"], size(raw, "memory"), size(raw.get("quick"), "memory.quick"))
        for t in (exp.full, exp.quick):
            for m in SEED_MODES:
                predict_growth(m.framework, m.name, n=t.n, iters=t.iters)  # refuses sizes it cannot judge
        return exp

    def size(self, full: bool) -> TableSize:
        return self.full if full else self.quick

    def stand_in(self) -> Program:
        """The experiment's forward at n=2, as the case's `program` (what `difftest show` prints
        and `difftest replay` checks for values before judging the table)."""
        return forward_program("none", 2, backward=True)

    def run(self, *, full: bool, rules: Sequence[MemoryRule] | None = None) -> list[Row]:
        t = self.size(full)
        return run_table(t.n, t.iters, rules=rules)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="difftest memory",
        description="Measure RSS growth of repeated forwards without backward in PyTorch and burn "
        "(DESIGN.md golden output 4) and check it against the semantic model.",
    )
    parser.add_argument("--n", type=int, default=SEED_N, help="parameter is n x n (default %(default)s)")
    parser.add_argument("--iters", type=int, default=SEED_ITERS, help="forwards per row (default %(default)s)")
    parser.add_argument(
        "--default-malloc",
        action="store_true",
        help=f"do not fix glibc's mmap threshold in the children ({', '.join(ALLOCATOR_ENV)}); noisier",
    )
    parser.add_argument("--torch-mode", help=argparse.SUPPRESS)  # one PyTorch mode, in this process
    parser.add_argument("--torch-server", action="store_true", help=argparse.SUPPRESS)  # see TorchServer
    args = parser.parse_args(argv)
    if args.n < 1 or args.iters < 1:
        parser.error("--n and --iters must be positive")
    if args.torch_server:
        return serve_torch()
    if args.torch_mode:
        print(json.dumps(torch_child(args.torch_mode, args.n, args.iters)))
        return 0
    try:
        rows = run_table(args.n, args.iters, fixed_malloc=not args.default_malloc)
    except (ValueError, RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"difftest memory: {e}", file=sys.stderr)
        return 2
    print(format_table(rows, args.n, args.iters, fixed_malloc=not args.default_malloc))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
