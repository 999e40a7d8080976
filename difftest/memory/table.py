"""The seed's memory table (docs/semantics.md#golden-memory): `((p.exp() * p) @ p).sum()` on an
n x n parameter, 20 times after a warm-up forward+backward, per mode (`SEED_MODES`), each in a
fresh process. `run_table` measures every mode and checks each row against the model;
`difftest memory` prints it beside the reference figures and exits 1 when a row contradicts
its expectation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from difftest.divergences.knowledge import Framework
from difftest.divergences.memory_rules import MemoryRule
from difftest.memory.model import (
    FLAT_SLACK_MIB,
    GROWS_FRACTION,
    MIB,
    Expectation,
    Measured,
    Row,
    expectations,
    judge_rows,
    labels,
    predict_forward_memory,
    saved_bytes_per_forward,
)
from difftest.memory.server import ALLOCATOR_ENV, burn_request, rows_of, torch_server
from difftest.program.ir import Backward, Cut, Leaf, OpCall, Program, Region, Statement

CutMode = Literal["none", "detach", "without_autodiff", "no_grad"]


@dataclass(frozen=True)
class Mode:
    """One mode of the seed's experiment, described by what it does to the forward."""

    framework: Framework
    name: str
    cut: CutMode  # what the forward's input is: p itself, a cut of p, or p inside no_grad
    keep: bool  # outputs are kept alive (a list) instead of dropped
    then_backward: bool = False  # then one backward of a fresh forward, then the forwards again
    seed_mib: tuple[float, ...] = ()  # the reference figures (docs/semantics.md), one per row


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
# the largest table difftest-burn's `memory` request measures (MAX_N, MAX_ITERS of
# rust/src/memory.rs): `difftest memory` refuses larger before PyTorch measures anything
MAX_N = 8192
MAX_ITERS = 10_000


def find_mode(framework: str, name: str) -> Mode:
    for m in SEED_MODES:
        if m.framework == framework and m.name == name:
            return m
    known = ", ".join(f"{m.framework}/{m.name}" for m in SEED_MODES)
    raise ValueError(f"unknown memory mode {framework}/{name} (known: {known})")


def row_labels(mode: Mode, iters: int) -> tuple[str, ...]:
    return labels(iters, mode.then_backward)


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


def measure_torch(mode: str, n: int, iters: int, *, fixed_malloc: bool = True) -> Measured:
    """Runs one PyTorch mode in a fresh (forked) process."""
    req = {"kind": "mode", "mode": mode, "n": n, "iters": iters}
    return rows_of(torch_server(fixed_malloc).request(req, mode))


def measure_burn(mode: str, n: int, iters: int, *, fixed_malloc: bool = True) -> Measured:
    """Runs one burn mode in a fresh `difftest-burn --worker`."""
    request = {"request": "memory", "id": 1, "mode": mode, "n": n, "iters": iters}
    return burn_request(json.dumps(request, allow_nan=False), mode, fixed_malloc=fixed_malloc)


def measure(framework: str, mode: str, n: int, iters: int, *, fixed_malloc: bool = True) -> Measured:
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
