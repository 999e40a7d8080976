"""A fresh first input an op declares (`OpSpec.first_input`: ops/sampling.py) fits the op: its
rank is the declared one and the op's attribute sampler places the op on it (a variance along a
dim of at least 2 elements, a cross product along a dim of 3, a squeeze of a dim of 1). An op
that a random shape rarely fits and that declares none is placed in fewer of its draws
(tests/quality/test_distribution.py measures that share)."""

from __future__ import annotations

import pytest

from difftest.ops.catalog import OPS
from difftest.ops.spec import OpSpec
from difftest.strategies.choices import RandomChoices

DRAWS = 200

# variadic ops (the convolutions) draw their weight's shape with their attributes: their samplers
# need more than the first input, and their placement is the distribution test's to measure
DECLARED = [s for s in OPS if s.first_input is not None and s.arity >= 1]


@pytest.mark.parametrize("spec", DECLARED, ids=lambda s: s.name)
def test_a_declared_first_input_fits_its_op(spec: OpSpec) -> None:
    assert spec.first_input is not None
    for k in range(DRAWS):
        c = RandomChoices(k)
        shape = spec.first_input.draw(c)
        assert spec.first_input.rank in (None, len(shape)), (k, shape)
        assert len(shape) >= spec.min_rank, (k, shape)
        if spec.draw_attrs is not None:
            assert spec.draw_attrs(c, [shape] * spec.arity) is not None, (k, shape)


def test_the_variances_declare_one() -> None:
    assert {"var", "var_bias", "var_mean"} <= {s.name for s in DECLARED}
