"""Detection power: the default strategy must find each injected interpreter fault.

Run with `python -m pytest -m quality tests/quality -s` (not part of the default run). Each
fault is a deliberate bug compiled into difftest-burn and switched on by DIFFTEST_BURN_FAULT
(docs/format.md); the table printed at the end lists programs-to-detection per fault.
"""

from __future__ import annotations

import pytest

from difftest.burn_worker import BurnWorker
from difftest.campaign import run_campaign

BUDGET = 2000  # programs; the acceptance bar of issue 6

FAULTS = [
    ("grad-scale:mul:1e-3", "gradient of mul off by 1e-3 (relative)"),
    ("grad-scale:exp:1e-3", "gradient of exp off by 1e-3 (relative)"),
    ("grad-scale:matmul:1e-3", "gradient of matmul off by 1e-3 (relative)"),
    ("grad-sign:tanh", "gradient of tanh with the wrong sign"),
    ("grad-drop:sum", "no gradient through sum"),
    ("flag-without-autodiff", "without_autodiff stays on the autodiff device"),
    ("detach-like-torch", "detach of a require-grad leaf behaves like PyTorch's"),
    ("lowering:tanh=sigmoid", "tanh computed as sigmoid"),
]
RESULTS: dict[str, tuple[int | None, float]] = {}


@pytest.mark.quality
@pytest.mark.parametrize("fault,what", FAULTS, ids=[f for f, _ in FAULTS])
def test_fault_is_found(fault: str, what: str) -> None:
    worker = BurnWorker(fault=fault)
    worker.start()
    try:
        assert worker.version().get("fault") == fault
        stats = run_campaign(worker, seed=1, programs=BUDGET, stop_at_first=True)
    finally:
        worker.close()
    RESULTS[fault] = (stats.first_finding, stats.seconds)
    print(f"\n{fault:<26} {what:<52} found after {stats.first_finding} programs ({stats.seconds:.1f}s)")
    assert stats.first_finding is not None, f"{fault} not found within {BUDGET} programs"
    kind = stats.findings[0].kind
    assert kind not in ("agreement", "ill-conditioned"), kind


@pytest.mark.quality
def test_no_false_alarms_on_the_correct_build() -> None:
    """The flake check: the default strategy on the correct build finds nothing."""
    worker = BurnWorker()
    worker.start()
    try:
        stats = run_campaign(worker, seed=7, programs=3000)
    finally:
        worker.close()
    print(f"\n{stats.programs} programs in {stats.seconds:.0f}s: {dict(stats.verdicts)}")
    assert not stats.findings, stats.findings[0].report()
