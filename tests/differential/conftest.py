"""Fixtures the differential tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from difftest.exec.burn_worker import BurnWorker


@pytest.fixture(scope="module")
def workers() -> Iterator[dict[str, BurnWorker]]:
    """Burn workers a test module starts on demand, by fault spec ("" for the correct build),
    closed after the module's tests."""
    started: dict[str, BurnWorker] = {}
    yield started
    for w in started.values():
        w.close()
