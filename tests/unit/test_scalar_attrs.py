"""A scalar operand is drawn with either sign. burn's scalar ops take any finite scalar, and a
backward can be right for one sign only (a derivative written with the divisor's magnitude, a
branch on the scalar's sign): a sampler that draws one sign leaves the other untested, and a
fault there is never found (div_scalar's divisor was drawn from [0.25, 4] until a patched burn
that drops the divisor's sign in its backward went unseen in 3,000 programs)."""

from __future__ import annotations

import pytest

from difftest.ops.catalog import OPS
from difftest.ops.spec import OpSpec
from difftest.strategies.choices import RandomChoices

SCALAR_OPS = [s for s in OPS if s.family == "scalar"]
DRAWS = 300


@pytest.mark.parametrize("spec", SCALAR_OPS, ids=lambda s: s.name)
def test_a_scalar_operand_is_drawn_with_either_sign(spec: OpSpec) -> None:
    assert spec.draw_attrs is not None
    (name,) = (a.name for a in spec.attrs)
    values = []
    for k in range(DRAWS):
        attrs = spec.draw_attrs(RandomChoices(k), [(3,)])
        assert attrs is not None
        values.append(attrs[name])
    assert min(values) < 0 < max(values), (spec.name, min(values), max(values))


def test_a_divisor_stays_away_from_zero() -> None:
    (spec,) = (s for s in OPS if s.name == "div_scalar")
    assert spec.draw_attrs is not None
    divisors = [spec.draw_attrs(RandomChoices(k), [(3,)])["scalar"] for k in range(DRAWS)]  # type: ignore[index]
    assert min(abs(d) for d in divisors) >= 0.25
