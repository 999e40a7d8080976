"""Programs of the quality suite's no-false-alarm campaigns (tests/quality/test_sensitivity.py,
`test_no_false_alarm_in_20000_programs`) that difftest still reports as new findings on the
correct build, at the catalog of 2026-12-06 (the seeds' programs changed with the catalog).
Each is saved as it was generated. Each test says what the program shows and what is missing,
and is a strict xfail: it fails the day the gap closes, so the marker goes with the fix.
What each one is, and why it was left open: docs/measurements.md#open-after-the-seventh-stop."""

from __future__ import annotations

import pytest

from difftest.exec.burn_worker import BurnWorker
from tests.differential.triaging import saved_program, triaged

REASON = "an open gap of the no-false-alarm campaigns: docs/measurements.md#open-after-the-seventh-stop"


def _explained(workers: dict[str, BurnWorker], name: str) -> str | None:
    t = triaged(workers, saved_program(name), None)
    return t.known.name if t.known is not None else None


@pytest.mark.xfail(strict=True, reason=REASON)
def test_a_float16_log_sigmoid_gradient_that_burn_flushes_to_zero_is_localised(
        workers: dict[str, BurnWorker]) -> None:
    """Seed 12, program 13,183 (float16): log_sigmoid of values near 8, whose gradient burn gives
    as exactly 0 where PyTorch (computing in float32) gives 2.5e-4: a float16 precision loss in
    burn's log_sigmoid backward, or a budget this dtype needs. It is signed graph@embedding
    instead of by the op that loses it."""
    t = triaged(workers, saved_program("open-f16-log-sigmoid-grad-underflow.json"), None)
    assert t.localisation is not None and t.localisation.where == "log_sigmoid", t.describe()
