"""The memory session experiment (docs/semantics.md#golden-memory-session): a training session
(a bias-free `Linear(n, n)`, `((fc(x) - t) ** 2).mean()`, backward, an SGD step with momentum)
keeps the resident set flat in both frameworks, and the seed's drop/keep rows hold within it.

Each mode runs in a fresh process per framework (burn: a `memory_session` request; PyTorch: a
forked `torch_session_child`): `warmup` steps, then `steps` steps with the growth over the base
sampled after each (row `"K steps"`: the largest sample, expected flat: a leak of more than
`FLAT_SLACK_MIB / steps` per step shows), then `iters` forwards without backward, dropped
(`drop`, then one step and `iters` more forwards, like the seed's burn drop mode) or kept
(`keep`). The forward rows are judged by the memory model on `session_program`, the session's
forward written as a program (the weight as a require-grad leaf in burn's `[in, out]` layout:
`x @ w` is what burn's Linear computes), so the rule graph-retained-until-backward decides
burn's drop rows exactly as in the seed's table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from difftest.divergences.knowledge import Framework
from difftest.divergences.memory_rules import MemoryRule
from difftest.memory.model import (
    FLAT_SLACK_MIB,
    FRAMEWORKS,
    GROWS_FRACTION,
    MIB,
    Expectation,
    Measured,
    Row,
    expectations,
    judge_rows,
    predict_forward_memory,
    saved_bytes_per_forward,
)
from difftest.memory.server import ALLOCATOR_ENV, burn_report, rows_of, torch_server
from difftest.program.ir import Backward, Leaf, OpCall, Program

SESSION_MODES: tuple[str, ...] = ("drop", "keep")


@dataclass(frozen=True)
class SessionSize:
    n: int  # the Linear is n -> n
    batch: int  # rows of x and t
    warmup: int  # training steps before the base is read
    steps: int  # training steps sampled
    iters: int  # forwards without backward per forward row

    def to_request(self) -> dict[str, int]:
        return {"n": self.n, "batch": self.batch, "warmup": self.warmup, "steps": self.steps, "iters": self.iters}


SESSION_FULL = SessionSize(n=1024, batch=1024, warmup=5, steps=50, iters=20)
# Small enough to be quick, large enough that the forward rows' "grows" (half of 48 x 1 MiB)
# and "flat" (< 10 MiB) cannot both hold.
SESSION_QUICK = SessionSize(n=256, batch=1024, warmup=5, steps=50, iters=48)


@dataclass(frozen=True)
class SessionMeasured:
    rows: Measured  # (label, RSS growth in MiB) per row
    samples_mib: tuple[float, ...]  # growth after each sampled step


def session_labels(mode: str, size: SessionSize) -> tuple[str, ...]:
    """The rows a session mode reports (both frameworks use these labels)."""
    steps = f"{size.steps} steps"
    if mode == "drop":
        return (steps, f"{size.iters} forwards", "then one step", f"{size.iters} more forwards")
    return (steps, f"{size.iters} forwards")


def session_program(n: int, batch: int) -> Program:
    """The session's forward and backward as a program (what the memory model judges)."""
    return Program((
        Leaf("w", (n, n), (0.0,) * (n * n), "autodiff", True),
        Leaf("x", (batch, n), (0.0,) * (batch * n), "autodiff", False),
        Leaf("t", (batch, n), (0.0,) * (batch * n), "autodiff", False),
        OpCall("y", "matmul", ("x", "w")),
        OpCall("r", "sub", ("y", "t")),
        OpCall("q", "square", ("r",)),
        OpCall("l", "mean", ("q",)),
        Backward("bw", "l"),
    ))  # fmt: skip


def _check_mode(mode: str) -> None:
    if mode not in SESSION_MODES:
        raise ValueError(f"unknown memory session mode {mode!r} (known: {', '.join(SESSION_MODES)})")


def predict_session(
    framework: Framework, mode: str, size: SessionSize, rules: Sequence[MemoryRule] | None = None
) -> tuple[Expectation, ...]:
    """One expectation per row (`session_labels`): the training steps flat, then the forward
    rows as the memory model predicts them for the session's forward. Raises ValueError when
    the forward rows could not tell growth from noise."""
    _check_mode(mode)
    fm = predict_forward_memory(session_program(size.n, size.batch), framework, keep=mode == "keep", rules=rules)
    return (Expectation("flat", FLAT_SLACK_MIB), *expectations(fm, size.iters, then_backward=mode == "drop"))


def measure_session(
    framework: Framework, mode: str, size: SessionSize, *, fixed_malloc: bool = True
) -> SessionMeasured:
    """Runs one session mode in a fresh process of `framework`."""
    _check_mode(mode)
    what = f"session {mode}"
    if framework == "burn":
        request = {"request": "memory_session", "id": 1, "mode": mode, **size.to_request()}
        report = burn_report(json.dumps(request), what, fixed_malloc=fixed_malloc)
    else:
        report = torch_server(fixed_malloc).request({"kind": "session", "mode": mode, **size.to_request()}, what)
    samples = tuple(float(x) for x in report["samples_mib"])
    if len(samples) != size.steps:
        raise RuntimeError(f"{framework} {what} reported {len(samples)} samples, expected {size.steps}")
    return SessionMeasured(rows_of(report), samples)


def judge_session(
    framework: Framework,
    mode: str,
    measured: SessionMeasured,
    size: SessionSize,
    rules: Sequence[MemoryRule] | None = None,
) -> list[Row]:
    return judge_rows(
        framework,
        f"session-{mode}",
        measured.rows,
        predict_session(framework, mode, size, rules),
        session_labels(mode, size),
    )


def run_session_table(
    size: SessionSize = SESSION_FULL,
    *,
    rules: Sequence[MemoryRule] | None = None,
    fixed_malloc: bool = True,
) -> list[Row]:
    """Every session mode of both frameworks, each in a fresh process, judged by the model."""
    for fw in FRAMEWORKS:  # refuse a size the model cannot judge before measuring anything
        for mode in SESSION_MODES:
            predict_session(fw, mode, size, rules)
    rows: list[Row] = []
    for fw in FRAMEWORKS:
        for mode in SESSION_MODES:
            measured = measure_session(fw, mode, size, fixed_malloc=fixed_malloc)
            rows.extend(judge_session(fw, mode, measured, size, rules))
    return rows


def format_session_table(rows: Sequence[Row], size: SessionSize, *, fixed_malloc: bool = True) -> str:
    saved = saved_bytes_per_forward(session_program(size.n, size.batch), "burn")
    malloc = " ".join(f"{k}={v}" for k, v in ALLOCATOR_ENV.items()) if fixed_malloc else "default malloc"
    lines = [
        f"memory session: Linear({size.n}, {size.n}, bias=False) on a {size.batch}x{size.n} batch, "
        f"((fc(x) - t)^2).mean(), backward, SGD step (momentum); {size.warmup} warm-up steps, "
        f"{size.steps} steps sampled (row: the largest growth), then {size.iters} forwards without "
        f"backward; RSS growth in MiB, one fresh process per mode ({malloc})",
        f"model: {saved / MIB:.1f} MiB saved for backward per recorded forward; "
        f"grows = >= {GROWS_FRACTION:g} x retained bytes, flat = < {FLAT_SLACK_MIB:g} MiB",
        "",
        f"{'framework':<9}  {'mode':<13}  {'row':<18}  {'measured':>8}  {'verdict':<13}  expectation",
    ]
    for r in rows:
        verdict = "ok" if r.ok else "CONTRADICTED"
        lines.append(
            f"{r.framework:<9}  {r.mode:<13}  {r.label:<18}  {r.growth_mib:>+8.1f}  {verdict:<13}  "
            f"{r.expectation.describe()}"
        )
    bad = sum(not r.ok for r in rows)
    summary = f"{len(rows) - bad} of {len(rows)} rows as the model expects"
    lines += ["", summary + (f", {bad} contradicted" if bad else "")]
    return "\n".join(lines)
