"""pytest plugin for detection-power runs (`-p tests.quality.noshrink`): registers the Hypothesis
profile `quality`, which is the default `ci` profile (tests/conftest.py) without the shrink and
explain phases. The examples are the same as the default run's (derandomized, same count); a
failing example is reported as found instead of being shrunk first, which only costs time here.

Loaded with -p, it is imported before tests/conftest.py, which then loads the profile named by
HYPOTHESIS_PROFILE=quality.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "quality",
    derandomize=True,
    database=None,
    max_examples=200,  # tests set their own
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=False,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
)
