"""The memory differential (DESIGN.md golden output 4, issue 5).

A PyTorch graph dies with its output; burn keeps the saved tensors of every recorded forward in
a process-wide graph until the next `backward()`. This module measures the seed's experiment in
both frameworks, one fresh process per mode, and checks each observation against what the
semantic model predicts:

* `forward_program` writes the experiment's forward as a difftest program (leaf `p`
  requiring grad, the mode's cut, `((p.exp() * p) @ p).sum()`).
* `predict_forward_memory` asks the flag model (`model.predict`, with its own rules such as
  leaf-detach) which ops each framework records, and the op catalog which inputs they save:
  the bytes saved for backward per forward. Base semantics are PyTorch's: saved tensors live
  as long as an output that reaches them. The declared rule `GRAPH_RETAINED` overrides that
  for burn: they live until the next backward, kept output or not.
* `predict_growth` turns that into one expectation per reported row: "grows" (at least half
  the retained bytes), "flat" (under a fixed slack), or, after a backward, "no further growth"
  (allocator pages are reused but not returned, so RSS is compared with the previous row).

`run_table` measures everything; `main` prints it beside the seed's figures and exits 1 when an
observation contradicts its expectation. `python -m difftest.memory --torch-mode M` is the
PyTorch child process; the burn side is a `memory` request to a fresh `difftest-burn --worker`.

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
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .burn_worker import WorkerError, find_binary
from .catalog import CATALOG
from .ir import Cut, Leaf, OpCall, Program, Region, Statement, numel
from .model import predict
from .rules import Framework
from .states import BurnState, State, TorchState
from .validate import infer_shapes

MIB = 1024 * 1024
F32_BYTES = 4
FLAT_SLACK_MIB = 10.0  # "stays flat": growth under this fixed slack (allocator noise)
GROWS_FRACTION = 0.5  # "grows": at least this fraction of the bytes predicted retained
CHILD_TIMEOUT = 600.0
# Large blocks always mmapped (and unmapped when freed): RSS then tracks live tensors.
ALLOCATOR_ENV: dict[str, str] = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}

CutMode = Literal["none", "detach", "without_autodiff", "no_grad"]
Verdict = Literal["grows", "flat", "no-further-growth", "unchecked"]


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


def row_labels(mode: Mode, iters: int) -> tuple[str, ...]:
    if mode.then_backward:
        return (f"{iters} forwards", "then one backward", f"{iters} more forwards")
    return (f"{iters} forwards",)


# ---------------------------------------------------------------------------------- the model


def forward_program(cut: CutMode, n: int) -> Program:
    """The experiment's forward as a program: `((x.exp() * x) @ x).sum()`, `x` the cut of `p`."""
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
    return Program(tuple(statements))


def _recorded(state: State | None) -> bool:
    """Whether the op that produced `state` was recorded in a graph."""
    if isinstance(state, BurnState):
        return state.is_tracked
    if isinstance(state, TorchState):
        return state.has_grad_fn
    return False


def saved_bytes_per_forward(program: Program, framework: Framework) -> int:
    """Bytes a framework saves for backward when it runs `program` once: the values that
    recorded ops save (the catalog's `saves`, plus exp's output, which the product saves here)
    and that the forward itself allocated (op results that are not views; leaves and cuts
    share storage with tensors that exist anyway)."""
    prediction = predict(program).of(framework)
    shapes = infer_shapes(program)
    saved: set[str] = set()
    for st in program.statements:
        if isinstance(st, OpCall) and _recorded(prediction.states.get(st.id)):
            saved.update(st.inputs[i] for i in CATALOG[st.op].saves if i < len(st.inputs))
    allocated = {st.id for st in program.statements if isinstance(st, OpCall) and CATALOG[st.op].view is None}
    return sum(numel(shapes[v]) * F32_BYTES for v in saved & allocated)


@dataclass(frozen=True)
class ForwardMemory:
    framework: Framework
    saved_bytes: int  # saved for backward per forward
    retained_bytes: int  # of those, still held after the iteration (until the next backward)
    rules: tuple[str, ...]  # memory rules that changed the base prediction


def predict_forward_memory(
    program: Program, framework: Framework, *, keep: bool, rules: Sequence[MemoryRule] | None = None
) -> ForwardMemory:
    """What one repetition of `program`'s forward leaves resident in `framework`."""
    saved = saved_bytes_per_forward(program, framework)
    retained = saved if keep else 0  # base (PyTorch): saved tensors die with the output
    fired: list[str] = []
    for rule in MEMORY_RULES if rules is None else rules:
        if rule is GRAPH_RETAINED and rule.framework == framework and saved > 0 and not keep:
            retained = saved  # burn: the graph outlives the output, until the next backward
            fired.append(rule.name)
    return ForwardMemory(framework, saved, retained, tuple(fired))


@dataclass(frozen=True)
class Expectation:
    verdict: Verdict
    threshold_mib: float  # grows: at least this; flat / no-further-growth: under this
    rules: tuple[str, ...] = ()

    def holds(self, growth_mib: float, previous_mib: float | None) -> bool:
        if self.verdict == "grows":
            return growth_mib >= self.threshold_mib
        if self.verdict == "flat":
            return growth_mib < self.threshold_mib
        if self.verdict == "no-further-growth":  # previous_mib: the high-water mark so far
            return growth_mib - (previous_mib or 0.0) < self.threshold_mib
        return True

    def describe(self) -> str:
        text = {
            "grows": f"grows (>= {self.threshold_mib:.1f})",
            "flat": f"flat (< {self.threshold_mib:.1f})",
            "no-further-growth": f"no further growth (< peak +{self.threshold_mib:.1f})",
            "unchecked": "- (backward frees the graphs)",
        }[self.verdict]
        return text + (f" [{', '.join(self.rules)}]" if self.rules else "")


def predict_growth(
    framework: str,
    mode: str,
    *,
    n: int = SEED_N,
    iters: int = SEED_ITERS,
    rules: Sequence[MemoryRule] | None = None,
) -> tuple[Expectation, ...]:
    """One expectation per row the mode reports (see `row_labels`)."""
    m = find_mode(framework, mode)
    fm = predict_forward_memory(forward_program(m.cut, n), m.framework, keep=m.keep, rules=rules)
    grows_mib = GROWS_FRACTION * fm.retained_bytes * iters / MIB
    if fm.retained_bytes and grows_mib < FLAT_SLACK_MIB:
        raise ValueError(
            f"n={n}, iters={iters} cannot tell growth from noise: half the predicted growth "
            f"({grows_mib:.1f} MiB) is under the flat slack ({FLAT_SLACK_MIB} MiB)"
        )
    first = (
        Expectation("grows", grows_mib, fm.rules)
        if fm.retained_bytes
        else Expectation("flat", FLAT_SLACK_MIB, fm.rules)
    )
    if not m.then_backward:
        return (first,)
    # The backward frees every retained graph, so the next forwards retain at most what it
    # freed: RSS must not rise above its earlier peak (whether it drops in between depends on
    # the allocator returning pages, so the backward row itself is not checked).
    return (first, Expectation("unchecked", 0.0), Expectation("no-further-growth", FLAT_SLACK_MIB, fm.rules))


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
    """The PyTorch experiment; run it in a fresh process (`--torch-mode`)."""
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


def _rows_of(report: dict[str, Any]) -> list[tuple[str, float]]:
    return [(r["label"], float(r["rss_growth_mib"])) for r in report["rows"]]


def measure_torch(mode: str, n: int, iters: int, *, fixed_malloc: bool = True) -> list[tuple[str, float]]:
    """Runs one PyTorch mode in a fresh Python process."""
    package_root = str(Path(__file__).resolve().parent.parent)
    env = _child_env(fixed_malloc)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (package_root, env.get("PYTHONPATH", "")) if x)
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "difftest.memory", "--torch-mode", mode, "--n", str(n), "--iters", str(iters)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"torch memory child {mode} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return _rows_of(json.loads(done.stdout.strip().splitlines()[-1]))


def measure_burn(
    mode: str, n: int, iters: int, *, fixed_malloc: bool = True, binary: str | None = None
) -> list[tuple[str, float]]:
    """Runs one burn mode as the only request of a fresh `difftest-burn --worker` (burn's graph
    state is process-wide, so the process must not have served anything before)."""
    request = json.dumps({"request": "memory", "id": 1, "mode": mode, "n": n, "iters": iters})
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
        raise WorkerError(f"difftest-burn memory {mode} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    answer = json.loads(lines[-1])
    if not answer.get("ok"):
        raise WorkerError(f"memory request {mode} failed: {answer.get('error')}")
    report: dict[str, Any] = answer["memory"]
    return _rows_of(report)


def measure(framework: str, mode: str, n: int, iters: int, *, fixed_malloc: bool = True) -> list[tuple[str, float]]:
    if framework == "torch":
        return measure_torch(mode, n, iters, fixed_malloc=fixed_malloc)
    return measure_burn(mode, n, iters, fixed_malloc=fixed_malloc)


def check_mode(
    mode: Mode,
    measured: Sequence[tuple[str, float]],
    *,
    n: int,
    iters: int,
    rules: Sequence[MemoryRule] | None = None,
) -> list[Row]:
    expectations = predict_growth(mode.framework, mode.name, n=n, iters=iters, rules=rules)
    labels = row_labels(mode, iters)
    if [label for label, _ in measured] != list(labels):
        raise RuntimeError(f"{mode.framework}/{mode.name} reported rows {measured}, expected {labels}")
    rows: list[Row] = []
    peak: float | None = None
    for i, ((label, growth), exp) in enumerate(zip(measured, expectations, strict=True)):
        seed = mode.seed_mib[i] if i < len(mode.seed_mib) else None
        rows.append(Row(mode.framework, mode.name, label, seed, growth, exp, exp.holds(growth, peak)))
        peak = growth if peak is None else max(peak, growth)
    return rows


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
    parser.add_argument("--torch-mode", help=argparse.SUPPRESS)  # the PyTorch child process
    args = parser.parse_args(argv)
    if args.n < 1 or args.iters < 1:
        parser.error("--n and --iters must be positive")
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
