"""Shared test setup: deterministic Hypothesis profiles and one torch thread per process."""

from __future__ import annotations

import os
from typing import Any

import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(1)

_COMMON: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    "print_blob": False,
}
# CI and the default run: derandomized (same examples every run) and no example database.
settings.register_profile("ci", derandomize=True, database=None, max_examples=200, **_COMMON)
# Local exploration: random, remembers failures in .hypothesis/.
settings.register_profile("dev", max_examples=500, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
