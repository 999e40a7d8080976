"""Shape rules of the nn ops (difftest/ops/nn_shapes.py): PyTorch's output sizes, and clear errors
naming what does not fit."""

from __future__ import annotations

import re
from typing import Any

import pytest

from difftest.ops.catalog import CATALOG
from difftest.program.shapes import ShapeError

CONV = {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 1}


def shape(op: str, shapes: list[tuple[int, ...]], **attrs: Any) -> tuple[int, ...]:
    return CATALOG[op].shape(shapes, attrs)


def test_output_sizes() -> None:
    # (5 + 2 - 2 * 1 - 1) // 1 + 1 = 5 and (6 - 2 - 1) // 2 + 1 = 2
    assert shape("conv2d", [(2, 4, 5, 6), (4, 2, 2, 3), (4,)],
                 stride=[1, 2], padding=[1, 0], dilation=[2, 1], groups=2) == (2, 4, 5, 2)
    assert shape("conv1d", [(1, 3, 7), (2, 3, 3)], stride=[2], padding=[1], dilation=[1], groups=1) == (1, 2, 4)
    # (3 - 1) * 2 - 2 + 1 * (3 - 1) + 1 + 1 = 6; (3 - 1) * 1 - 0 + 2 * (2 - 1) + 1 + 1 = 6
    assert shape("conv_transpose2d", [(1, 4, 3, 3), (4, 1, 3, 2), (2,)], stride=[2, 1], padding=[1, 0],
                 dilation=[1, 2], groups=2, padding_out=[1, 1]) == (1, 2, 6, 6)
    assert shape("max_pool2d", [(2, 3, 5, 4)], kernel=[3, 2], stride=[2, 1], padding=[1, 1]) == (2, 3, 3, 5)
    assert shape("avg_pool2d", [(1, 1, 4, 4)], kernel=[2, 2], stride=[2, 2], padding=[0, 0],
                 count_include_pad=0) == (1, 1, 2, 2)
    assert shape("adaptive_avg_pool2d", [(1, 2, 5, 3)], output_size=[3, 2]) == (1, 2, 3, 2)
    assert shape("interpolate_bilinear", [(1, 2, 3, 4)], output_size=[5, 6], align_corners=1) == (1, 2, 5, 6)
    assert shape("embedding", [(4, 3)], indices={"shape": [2, 3], "data": [0, 1, 1, 3, 3, 0]}) == (2, 3, 3)


@pytest.mark.parametrize(("op", "shapes", "attrs", "message"), [
    ("conv2d", [(1, 3, 4, 4), (2, 1, 1, 1)], {**CONV, "groups": 2}, "divisible by groups"),
    ("conv2d", [(1, 2, 4, 4), (2, 2, 5, 1)], CONV, "spatial size < 1"),
    ("conv2d", [(1, 2, 4, 4), (2, 2, 1, 1), (3,)], CONV, "bias [3] must be [2]"),
    ("conv2d", [(1, 2, 4, 4)], CONV, "an optional bias, got 1 inputs"),
    ("conv2d", [(1, 2, 4, 4), (2, 2, 1, 1)], {**CONV, "stride": [1]}, "needs 2 value(s)"),
    ("conv2d", [(1, 2, 4, 4), (2, 2, 1, 1)], {**CONV, "stride": [0, 1]}, "must be >= 1"),
    ("conv2d", [(2, 4, 4), (2, 2, 1, 1)], CONV, "rank-4 first input"),
    ("conv_transpose2d", [(1, 2, 3, 3), (2, 1, 2, 2)], {**CONV, "padding_out": [1, 0]},
     "smaller than stride or dilation"),
    ("max_pool2d", [(1, 1, 4, 4)], {"kernel": [2, 2], "stride": [1, 1], "padding": [2, 0]}, "at most half"),
    ("avg_pool2d", [(1, 1, 4, 4)], {"kernel": [2, 2], "stride": [1, 1], "padding": [0, 0], "count_include_pad": 2},
     "must be 0 or 1"),
    ("embedding", [(3, 2)], {"indices": {"shape": [1, 2], "data": [0, 3]}}, "out of range for 3 embeddings"),
    ("embedding", [(3, 2)], {"indices": {"shape": [2], "data": [0, 1]}}, "indices must have rank 2"),
])
def test_rejections_name_the_problem(op: str, shapes: list[tuple[int, ...]], attrs: dict[str, Any],
                                     message: str) -> None:
    with pytest.raises(ShapeError, match=re.escape(message)):
        CATALOG[op].shape(shapes, attrs)
