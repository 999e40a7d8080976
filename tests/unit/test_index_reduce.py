"""The scatter / select_assign / scatter_nd updates other than add write each position at most
once (difftest/ops/index_reduce.py, nd_index.py): their samplers draw distinct positions along
every line (distinct tuples for scatter_nd), their
shape rules refuse a repeat, and the known-bug record of their ties reads which positions a call
writes (bug_sites.written_pairs)."""

from __future__ import annotations

import random

import pytest

from difftest.divergences.bug_sites import written_pairs
from difftest.ops.index_reduce import scatter_distinct, scatter_distinct_rule, select_distinct
from difftest.ops.nd_index import indices_nd_distinct, nd_rows, scatter_nd_distinct_rule
from difftest.program.ir import OpCall, numel
from difftest.program.shapes import ShapeError
from difftest.strategies.choices import RandomChoices


@pytest.mark.parametrize("seed", range(40))
def test_scatter_draws_distinct_positions_along_each_line(seed: int) -> None:
    rng = random.Random(seed)
    shape = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 4)))
    attrs = scatter_distinct(RandomChoices(seed), [shape])
    d, idx = attrs["dim"], attrs["indices"]
    ishape = idx["shape"]
    assert all(ishape[i] == shape[i] for i in range(len(shape)) if i != d)
    values = tuple(ishape)
    assert scatter_distinct_rule([shape, values], attrs) == shape
    # every destination position is written at most once
    dest = [p for p, _ in written_pairs(OpCall("y", "scatter_max", ("x", "v"), attrs), [shape, values])]
    assert len(dest) == len(set(dest)) == len(idx["data"])


def test_a_repeated_position_is_refused() -> None:
    attrs = {"dim": 1, "indices": {"shape": [2, 2], "data": [0, 2, 1, 1]}}
    with pytest.raises(ShapeError, match="repeat a position along dim 1"):
        scatter_distinct_rule([(2, 3), (2, 2)], attrs)
    # the same indices in another layout repeat nothing: line 0 is (0, 2), line 1 (1, 0)
    assert scatter_distinct_rule([(2, 3), (2, 2)], {"dim": 1, "indices": {"shape": [2, 2], "data": [0, 2, 1, 0]}})


def test_select_pairs_follow_the_indices() -> None:
    attrs = select_distinct(RandomChoices(3), [(3, 2)])
    st = OpCall("y", "select_max", ("x", "v"), {"dim": 0, "indices": [2, 0]})
    # values [2, 2]: row 0 lands on row 2, row 1 on row 0
    assert written_pairs(st, [(3, 2), (2, 2)]) == [(4, 0), (5, 1), (0, 2), (1, 3)]
    assert len(set(attrs["indices"])) == len(attrs["indices"])


@pytest.mark.parametrize("seed", range(40))
def test_scatter_nd_draws_distinct_tuples(seed: int) -> None:
    rng = random.Random(seed)
    shape = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 4)))
    attrs = indices_nd_distinct(RandomChoices(seed), [shape])
    n, k = attrs["indices"]["shape"]
    values = (n,) + shape[k:]
    assert scatter_nd_distinct_rule([shape, values], attrs) == shape
    dest = [p for p, _ in written_pairs(OpCall("y", "scatter_nd_max", ("x", "v"), attrs), [shape, values])]
    assert len(dest) == len(set(dest)) == n * numel(shape[k:])
    # the PyTorch side's rows name the same slices
    assert sorted(nd_rows(attrs, [shape, values])["nd_rows"]) == sorted({p // numel(shape[k:]) for p in dest})


def test_scatter_nd_pairs_and_a_repeated_tuple() -> None:
    # x [2, 3, 2], tuples (1, 2) and (0, 0): value row 0 lands on x[1, 2, :], row 1 on x[0, 0, :]
    attrs = {"indices": {"shape": [2, 2], "data": [1, 2, 0, 0]}}
    st = OpCall("y", "scatter_nd_min", ("x", "v"), attrs)
    assert written_pairs(st, [(2, 3, 2), (2, 2)]) == [(10, 0), (11, 1), (0, 2), (1, 3)]
    assert nd_rows(attrs, [(2, 3, 2), (2, 2)]) == {"nd_table": [6, 2], "nd_width": 2, "nd_rows": [5, 0]}
    with pytest.raises(ShapeError, match="repeat a tuple"):
        scatter_nd_distinct_rule([(2, 3, 2), (2, 2)], {"indices": {"shape": [2, 2], "data": [1, 2, 1, 2]}})
