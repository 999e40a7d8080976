"""burn's module functions against PyTorch on hand-picked attribute combinations: the conventions
where the two could differ (avg_pool2d's count_include_pad, interpolate's align_corners and its
nearest index rule on ratios that are not integers, conv_transpose2d's padding_out) were measured
to agree, and these programs keep checking that they still do; plus the shapes the generator
reaches only now and then (grouped and dilated convolutions without a bias, embedding rows
picked several times)."""

from __future__ import annotations

from typing import Any

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.oracle.check import check
from difftest.program.ir import Backward, Leaf, OpCall, Program, numel


def _data(shape: tuple[int, ...], seed: int) -> tuple[float, ...]:
    # distinct values in [-2, 2], no ties (max pooling) and no pattern a wrong index could match
    n = numel(shape)
    return tuple(round(((i * 37 + seed * 11) % 97) / 97 * 4 - 2 + i * 1e-3, 4) for i in range(n))


def _program(op: str, shapes: list[tuple[int, ...]], attrs: dict[str, Any]) -> Program:
    leaves = [Leaf(f"x{i}", s, _data(s, i), "autodiff", True) for i, s in enumerate(shapes)]
    y = OpCall("y", op, tuple(leaf.id for leaf in leaves), attrs)
    # a non-uniform incoming gradient: y * y summed
    sq = OpCall("q", "mul", ("y", "y"))
    return Program((*leaves, y, sq, OpCall("s", "sum", ("q",)), Backward("bw", "s")))


def _conv(stride: list[int], padding: list[int], dilation: list[int], groups: int) -> dict[str, Any]:
    return {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}


CASES: dict[str, tuple[str, list[tuple[int, ...]], dict[str, Any]]] = {
    "conv2d-groups-dilation-no-bias": ("conv2d", [(2, 4, 5, 6), (4, 2, 2, 3)], _conv([1, 2], [1, 0], [2, 1], 2)),
    "conv2d-depthwise-bias": ("conv2d", [(1, 3, 4, 4), (3, 1, 3, 3), (3,)], _conv([2, 2], [1, 1], [1, 1], 3)),
    "conv1d-padded-bias": ("conv1d", [(2, 3, 5), (2, 3, 2), (2,)], _conv([2], [1], [1], 1)),
    "conv_transpose2d-padding-out": ("conv_transpose2d", [(1, 4, 3, 3), (4, 1, 3, 2), (2,)],
                                     {**_conv([2, 1], [1, 0], [1, 2], 2), "padding_out": [1, 1]}),
    "max_pool2d-padded-overlapping": ("max_pool2d", [(1, 2, 5, 4)],
                                      {"kernel": [3, 2], "stride": [1, 1], "padding": [1, 1]}),
    **{f"avg_pool2d-count-include-pad-{c}": ("avg_pool2d", [(1, 2, 4, 5)],
                                             {"kernel": [3, 2], "stride": [2, 1], "padding": [1, 1],
                                              "count_include_pad": c}) for c in (0, 1)},
    "adaptive_avg_pool2d-uneven": ("adaptive_avg_pool2d", [(1, 2, 5, 3)], {"output_size": [3, 2]}),
    "interpolate_nearest-down-5-to-3": ("interpolate_nearest", [(1, 1, 5, 5)], {"output_size": [3, 2]}),
    "interpolate_nearest-up-2-to-5": ("interpolate_nearest", [(1, 2, 2, 3)], {"output_size": [5, 4]}),
    **{f"interpolate_bilinear-{d}-align-corners-{a}": ("interpolate_bilinear", [(1, 2, 3, 4)],
                                                      {"output_size": size, "align_corners": a})
       for a in (0, 1) for d, size in (("up", [5, 6]), ("down", [2, 3]))},
    "embedding-repeated-rows": ("embedding", [(4, 3)],
                                {"indices": {"shape": [2, 3], "data": [1, 3, 1, 1, 0, 3]}}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_nn_op_agrees(name: str, burn_worker: BurnWorker) -> None:
    op, shapes, attrs = CASES[name]
    verdict = check(_program(op, shapes, attrs), burn_worker)
    assert verdict.ok, verdict.report()
    grads = verdict.burn.backwards[0].grads
    assert all(grads[f"x{i}"] is not None for i in range(len(shapes))), f"{name}: a leaf got no gradient"


def test_embedding_gradient_accumulates(burn_worker: BurnWorker) -> None:
    """A row picked three times gets three contributions (the comparison above checks it too;
    this pins it without PyTorch: d sum(emb) / d row = the number of times the row is picked)."""
    table = Leaf("w", (3, 2), (0.5, -1.0, 2.0, 0.25, 1.5, -0.75), "autodiff", True)
    emb = OpCall("e", "embedding", ("w",), {"indices": {"shape": [1, 4], "data": [2, 0, 2, 2]}})
    program = Program((table, emb, OpCall("s", "sum", ("e",)), Backward("bw", "s")))
    grads = burn_worker.submit(program).result().backwards[0].grads["w"]
    assert grads is not None
    assert grads.data == (1.0, 1.0, 0.0, 0.0, 3.0, 3.0)
