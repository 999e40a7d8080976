"""The memory session experiment: a training session keeps RSS flat in both
frameworks, and the seed's drop/keep rows hold within it.

Default run: the model's predictions and one quick burn drop session (a fraction of a
second). `--run-slow` or `-m memory`: the quick size in both frameworks and both modes, and
the full table (`difftest memory --experiment session`).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from difftest.divergences.knowledge import Framework
from difftest.memory.model import FLAT_SLACK_MIB
from difftest.memory.session import (
    SESSION_FULL,
    SESSION_MODES,
    SESSION_QUICK,
    SessionMeasured,
    SessionSize,
    format_session_table,
    judge_session,
    measure_session,
    predict_session,
    run_session_table,
    session_labels,
)

pytestmark = pytest.mark.memory


def _verdicts(framework: Framework, mode: str, size: SessionSize = SESSION_FULL, **kw: object) -> tuple[str, ...]:
    return tuple(e.verdict for e in predict_session(framework, mode, size, **kw))  # type: ignore[arg-type]


def test_model_predicts_the_session_table() -> None:
    for size in (SESSION_FULL, SESSION_QUICK):
        assert _verdicts("burn", "drop", size) == ("flat", "grows", "unchecked", "no-further-growth")
        assert _verdicts("torch", "drop", size) == ("flat", "flat", "unchecked", "no-further-growth")
        assert _verdicts("burn", "keep", size) == _verdicts("torch", "keep", size) == ("flat", "grows")
        for fw in ("burn", "torch"):
            for mode in SESSION_MODES:
                assert len(predict_session(fw, mode, size)) == len(session_labels(mode, size))
    # only the memory rule makes burn's dropped forwards grow
    assert _verdicts("burn", "drop", rules=()) == _verdicts("torch", "drop")
    # the square saves its batch x n input: half of 20 forwards of 4 MiB
    assert predict_session("burn", "drop", SESSION_FULL)[1].threshold_mib == pytest.approx(40.0)


def test_sizes_the_model_cannot_judge_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot tell growth from noise"):
        predict_session("burn", "drop", SessionSize(n=64, batch=64, warmup=1, steps=5, iters=10))
    with pytest.raises(ValueError, match="unknown memory session mode"):
        predict_session("burn", "detach", SESSION_QUICK)


def test_quick_burn_drop_session() -> None:
    """The cheap check of the default run: burn's training steps stay flat (every sample), its
    dropped forwards grow as the rule says, a step frees them."""
    measured = measure_session("burn", "drop", SESSION_QUICK)
    rows = judge_session("burn", "drop", measured, SESSION_QUICK)
    table = format_session_table(rows, SESSION_QUICK)
    assert len(measured.samples_mib) == SESSION_QUICK.steps
    assert max(measured.samples_mib) < FLAT_SLACK_MIB, measured.samples_mib
    assert all(r.ok for r in rows), table
    # without the rule, the model's expectation of the dropped forwards is contradicted
    assert not all(r.ok for r in judge_session("burn", "drop", measured, SESSION_QUICK, rules=())), table


def test_judging_uses_every_row() -> None:
    size = SESSION_QUICK
    flat = SessionMeasured([(label, 0.0) for label in session_labels("drop", size)], (0.0,) * size.steps)
    rows = judge_session("burn", "drop", flat, size)
    assert [r.ok for r in rows] == [True, False, True, True]  # burn's dropped forwards must grow
    steps_row, forwards_row = session_labels("keep", size)
    leak = SessionMeasured([(steps_row, 2 * FLAT_SLACK_MIB), (forwards_row, 50.0)], ())
    assert [r.ok for r in judge_session("torch", "keep", leak, size)] == [False, True]
    with pytest.raises(RuntimeError, match="reported rows"):
        judge_session("torch", "keep", SessionMeasured([("1 steps", 0.0)], ()), size)


@pytest.fixture(scope="module")
def quick() -> Callable[[Framework, str], SessionMeasured]:
    cache: dict[tuple[Framework, str], SessionMeasured] = {}

    def get(framework: Framework, mode: str) -> SessionMeasured:
        if (framework, mode) not in cache:
            cache[framework, mode] = measure_session(framework, mode, SESSION_QUICK)
        return cache[framework, mode]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "burn"])
@pytest.mark.parametrize("mode", SESSION_MODES)
def test_quick_session(framework: Framework, mode: str, quick: Callable[[Framework, str], SessionMeasured]) -> None:
    measured = quick(framework, mode)
    rows = judge_session(framework, mode, measured, SESSION_QUICK)
    assert max(measured.samples_mib) < FLAT_SLACK_MIB, measured.samples_mib
    assert all(r.ok for r in rows), format_session_table(rows, SESSION_QUICK)


@pytest.mark.slow
def test_session_table() -> None:
    rows = run_session_table()
    table = format_session_table(rows, SESSION_FULL)
    assert all(r.ok for r in rows), table
    got = {(r.framework, r.mode, r.label): r.growth_mib for r in rows}
    assert got["burn", "session-drop", "20 forwards"] > 40, table
    assert got["torch", "session-drop", "20 forwards"] < FLAT_SLACK_MIB, table
    assert got["torch", "session-keep", "20 forwards"] > 40, table
