"""The Wgpu reduction model (difftest/divergences/wgpu_layouts.py, wgpu_reduce.py) against the
backend itself: for layouts made by permutes, elementwise ops, slices, poolings and conv2d, a
reduction is measured wrong on Wgpu exactly where the `wgpu-reduce-misvectorised-strided-input`
site predicts it (and top-k with k >= 2 exactly where `wgpu-topk-slots-written-out-of-place`'s does,
up to the races the model names).

Marked `backends`: runs with `pytest --run-backends flex,wgpu tests/backends -p no:xdist` (a
build with Wgpu, lavapipe installed: docs/backends.md#wgpu-on-lavapipe); skipped otherwise.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from difftest.divergences.wgpu_layouts import burn_layouts
from difftest.divergences.wgpu_reduce import topk_verdict
from difftest.divergences.wgpu_sites import (
    channels_last_grad_summed,
    misvectorised_view,
    reduce_misvectorised,
    topk_slots_misplaced,
)
from difftest.exec.backends import extra_features, parse_backends
from difftest.exec.burn_builds import BurnSpec, build
from difftest.exec.burn_worker import BurnWorker
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import Program
from difftest.program.statements import Backward, Leaf, OpCall, Statement

pytestmark = pytest.mark.backends

REDUCTIONS = (("sum_dim", True), ("max_dim", True), ("mean", False), ("max", False))


@pytest.fixture(scope="module")
def wgpu(request: pytest.FixtureRequest) -> Iterator[BurnWorker]:
    backends = parse_backends(str(request.config.getoption("--run-backends")))
    if "wgpu" not in backends:
        pytest.skip("needs --run-backends with wgpu (docs/backends.md#wgpu-on-lavapipe)")
    worker = BurnWorker(str(build(BurnSpec(version="0.22.1", backends=extra_features(backends))).binary),
                        backend="wgpu")
    yield worker
    worker.close()


def _leaf(ident: str, shape: Sequence[int], seed: int, dtype: str) -> Leaf:
    n = int(np.prod(shape))
    data = np.random.default_rng(seed).permutation(n) / n - 0.5  # distinct values: a skipped one shows
    return Leaf(ident, tuple(shape), tuple(float(np.asarray(v, dtype=dtype)) for v in data), "plain", False)


def _judge(worker: BurnWorker, prior: list[Statement], source: str, dtype: str = "float32") -> list[str]:
    """Each reduction of `source` (after `prior`): predicted and measured wrong or right, the
    disagreements as lines."""
    shape = burn_layouts(prior, dtype)[source][0]
    reductions: list[OpCall] = []
    for op, along in REDUCTIONS:
        dims = range(len(shape)) if along else [None]
        reductions += [OpCall(f"{op}{'' if d is None else d}", op, (source,), {} if d is None else {"dim": d})
                       for d in dims]
    program = Program(tuple(prior) + tuple(reductions), dtype)
    burn, torch = worker.run(program), run_torch(program, dtype)
    out = []
    for r in reductions:
        b, t = burn.value(r.id), torch.value(r.id)
        assert b is not None and t is not None and b.value is not None and t.value is not None, r.id
        measured = not np.allclose(b.value.data, t.value.data, rtol=1e-5, atol=1e-6)
        predicted = reduce_misvectorised.holds(r, prior, dtype)
        # a whole max or mean reads a wrong set of elements; max shows it only if it lost the largest
        if predicted != measured and not (predicted and r.op == "max"):
            out.append(f"{r.op}{r.attrs} after {[s.id for s in prior]}: predicted {predicted}, measured {measured}")
    return out


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 1, 4, 2), (1, 4, 3, 2), (2, 2, 2, 2), (3, 1, 2, 4)])
def test_reductions_of_permuted_and_elementwise_layouts(wgpu: BurnWorker, shape: tuple[int, ...]) -> None:
    wrong = []
    for k, axes in enumerate(itertools.permutations(range(4))):
        x = _leaf("x", shape, k, "float32")
        p = OpCall("p", "permute", ("x",), {"axes": list(axes)})
        wrong += _judge(wgpu, [x, p], "p")
        if k % 3 == 0:  # an elementwise op keeps the memory order (size-1 axes moved out)
            wrong += _judge(wgpu, [x, p, OpCall("e", "neg", ("p",))], "e")
            wrong += _judge(wgpu, [x, p, OpCall("e", "mul_scalar", ("p",), {"scalar": 2.0})], "e")
    assert not wrong, "\n".join(wrong)


def test_reductions_of_float64_layouts(wgpu: BurnWorker) -> None:
    wrong = []
    for k, axes in enumerate(itertools.permutations(range(4))):
        prior: list[Statement] = [_leaf("x", (2, 3, 4, 2), k, "float64"),
                                  OpCall("p", "permute", ("x",), {"axes": list(axes)})]
        wrong += _judge(wgpu, prior, "p", "float64")
    assert not wrong, "\n".join(wrong)


def test_reductions_after_poolings_convolutions_and_slices(wgpu: BurnWorker) -> None:
    x = _leaf("x", (2, 2, 6, 6), 1, "float32")
    pools: list[list[Statement]] = [
        [OpCall("y", "adaptive_avg_pool2d", ("x",), {"output_size": out})] for out in ([1, 4], [2, 2], [1, 2], [1, 1])
    ]
    cases: list[list[Statement]] = pools + [
        [OpCall("y", "max_pool2d", ("x",), {"kernel": [6, 1], "stride": [6, 2], "padding": [0, 0]})],
        [OpCall("y", "avg_pool2d", ("x",), {"kernel": [2, 2], "stride": [2, 2], "padding": [0, 0],
                                            "count_include_pad": 1})],
        [OpCall("s", "adaptive_avg_pool2d", ("x",), {"output_size": [1, 4]}),
         OpCall("y", "sub_scalar", ("s",), {"scalar": 1.5})],
        [OpCall("s", "permute", ("x",), {"axes": [0, 3, 1, 2]}),
         OpCall("y", "narrow", ("s",), {"dim": 0, "start": 1, "length": 1})],
        [OpCall("s", "permute", ("x",), {"axes": [0, 3, 1, 2]}),
         OpCall("y", "narrow", ("s",), {"dim": 3, "start": 1, "length": 4})],
    ]
    w = _leaf("w", (3, 2, 2, 1), 2, "float32")
    conv = [OpCall("y", "conv2d", ("x", "w"), {"stride": [6, 2], "padding": [0, 1], "dilation": [1, 1], "groups": 1})]
    wrong = [line for prior in cases for line in _judge(wgpu, [x, *prior], "y")]
    wrong += _judge(wgpu, [x, w, *conv], "y")
    assert not wrong, "\n".join(wrong)


def test_topk_of_two_or_more_where_the_emulation_says(wgpu: BurnWorker) -> None:
    wrong = []
    shapes = [(2, 3, 2, 2), (2, 3, 4, 5), (2, 4, 1, 2)]
    for shape, axes in itertools.product(shapes, [(0, 1, 2, 3), (0, 3, 1, 2), (0, 1, 3, 2)]):
        x = _leaf("x", shape, 3, "float32")
        prior: list[Statement] = [x, OpCall("p", "permute", ("x",), {"axes": list(axes)})]
        layout = burn_layouts(prior)["p"]
        for dim, k in itertools.product(range(4), (2, 3)):
            if layout[0][dim] < k:
                continue
            st = OpCall("t", "topk", ("p",), {"dim": dim, "k": k})
            program = Program((*prior, st))
            b, t = wgpu.run(program).value("t"), run_torch(program).value("t")
            assert b is not None and t is not None and b.value is not None and t.value is not None
            measured = not np.allclose(b.value.data, t.value.data, rtol=1e-5, atol=1e-6)
            verdict = topk_verdict(*layout, dim, k)
            predicted = any(site.holds(st, prior, "float32") for site in (topk_slots_misplaced, reduce_misvectorised))
            if verdict != "race" and predicted != measured:
                wrong.append(f"topk {shape} {axes} dim {dim} k {k}: predicted {predicted}, measured {measured}")
    assert not wrong, "\n".join(wrong)


def test_a_channels_last_gradient_summed_by_the_backward_before_it(wgpu: BurnWorker) -> None:
    """x -> sum_dim, mean_dim, softmax or log_softmax -> [add, scatter_nd] -> a 2-d pool or conv2d
    -> times a random w -> backward: x's gradient is wrong exactly where
    `channels_last_grad_summed` holds (the pool's or convolution's backward returns the gradient
    channels-last, the backward before it sums it misvectorised); a random w makes the incoming
    gradient non-uniform, so a misread shows."""
    wrong = []
    cases = itertools.product([(2, 4, 1, 2), (2, 4, 2, 1), (2, 3, 1, 3), (1, 4, 1, 2), (2, 4, 3, 3), (2, 1, 1, 2)],
                              ("sum_dim", "mean_dim", "softmax", "log_softmax"), (1, 2, 3),
                              ("conv2d", "avg_pool2d", "adaptive_avg_pool2d"), ("", "add", "scatter_nd"))
    for out, producer, dim, consumer, between in cases:
        if producer in ("sum_dim", "mean_dim") and out[dim] != 1:
            continue
        shape = tuple(3 if a == dim and producer in ("sum_dim", "mean_dim") else n for a, n in enumerate(out))
        x = _leaf("x", shape, 4, "float32")
        prior: list[Statement] = [Leaf("x", x.shape, x.data, "autodiff", True),
                                  OpCall("m", producer, ("x",), {"dim": dim})]
        source = "m"
        if between == "add":
            prior += [_leaf("u", out, 6, "float32"), OpCall("z", "add", ("m", "u"))]
            source = "z"
        elif between == "scatter_nd":
            prior += [_leaf("u", (1, *out[1:]), 6, "float32"),
                      OpCall("z", "scatter_nd", ("m", "u"), {"indices": {"shape": [1, 1], "data": [0]}})]
            source = "z"
        if consumer == "conv2d":
            prior.append(_leaf("k", (out[1], out[1], 1, 1), 7, "float32"))
            attrs: dict[str, object] = {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 1}
            p = OpCall("p", consumer, (source, "k"), attrs)
        else:
            attrs = ({"output_size": list(out[2:])} if consumer == "adaptive_avg_pool2d"
                     else {"kernel": [1, 1], "stride": [1, 1], "padding": [0, 0], "count_include_pad": 1})
            p = OpCall("p", consumer, (source,), attrs)
        weights = _leaf("w", burn_layouts([*prior, p])["p"][0], 5, "float32")
        program = Program((*prior, p, weights, OpCall("y", "mul", ("p", "w")), OpCall("s", "sum", ("y",)),
                           Backward("bw", "s")))
        burn, torch = wgpu.run(program), run_torch(program)
        gb, gt = burn.backwards[-1].grads["x"], torch.backwards[-1].grads["x"]
        assert gb is not None and gt is not None
        measured = not np.allclose(gb.data, gt.data, rtol=1e-5, atol=1e-6)
        predicted = channels_last_grad_summed.holds(p, prior, "float32")
        if predicted != measured:
            wrong.append(f"{producer}({dim}) -> {between or '-'} -> {consumer} of {list(out)}: "
                         f"predicted {predicted}, measured {measured}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unfold_views_read_wrong_exactly_where_the_vectorisation_model_says(wgpu: BurnWorker, dtype: str) -> None:
    """Every unfold of ranks 1 to 3 with sizes up to 4 and steps 1 to 3 (1,710 views): its value,
    read back and through neg (exp is wrong in float64 on Wgpu anyway), is wrong on Wgpu exactly
    where `wgpu-view-read-in-misaligned-vectors` strikes."""
    statements: list[Statement] = []
    predicted: dict[str, bool] = {}
    for rank in (1, 2, 3):
        for shape in itertools.product(*[range(1, 5)] * rank):
            for dim in range(rank):
                for size in range(1, shape[dim] + 1):
                    for step in (1, 2, 3):
                        k = len(predicted)
                        x = _leaf(f"x{k}", shape, k, dtype)
                        y = OpCall(f"y{k}", "unfold", (x.id,), {"dim": dim, "size": size, "step": step})
                        predicted[y.id] = misvectorised_view.holds(y, [x], dtype)
                        statements += [x, y, OpCall(f"e{k}", "neg", (y.id,))]
    program = Program(tuple(statements), dtype)
    burn, torch = wgpu.run(program), run_torch(program, dtype)
    wrong = []
    for yid, pred in predicted.items():
        for ident in (yid, "e" + yid[1:]):
            b, t = burn.value(ident), torch.value(ident)
            assert b is not None and t is not None and b.value is not None and t.value is not None, ident
            measured = not np.allclose(b.value.data, t.value.data, rtol=1e-5, atol=1e-6)
            if measured != pred:
                wrong.append(f"{ident}: predicted {pred}, measured {measured}")
    assert sum(predicted.values()) >= 10 and not wrong, "\n".join(wrong)


@pytest.mark.parametrize("shape", [(2, 2, 6), (2, 4, 5), (1, 3, 8), (3, 2, 4)])
def test_reductions_and_topk_after_conv1d(wgpu: BurnWorker, shape: tuple[int, ...]) -> None:
    """conv1d returns its channels-last result viewed as NCL (wgpu_layouts.py): each reduction
    and top-k of it is wrong on Wgpu exactly where the records' sites say."""
    x = _leaf("x", shape, 4, "float32")
    wrong: list[str] = []
    for out_channels, kernel, stride in ((2, 1, 1), (4, 2, 1), (3, 1, 2)):
        w = _leaf("w", (out_channels, shape[1], kernel), 5, "float32")
        conv = OpCall("y", "conv1d", ("x", "w"), {"stride": [stride], "padding": [0], "dilation": [1], "groups": 1})
        prior: list[Statement] = [x, w, conv]
        wrong += _judge(wgpu, prior, "y")
        layout = burn_layouts(prior)["y"]
        for dim in range(3):
            if layout[0][dim] < 2:
                continue
            st = OpCall("t", "topk", ("y",), {"dim": dim, "k": 2})
            program = Program((*prior, st))
            b, t = wgpu.run(program).value("t"), run_torch(program).value("t")
            assert b is not None and t is not None and b.value is not None and t.value is not None
            measured = not np.allclose(b.value.data, t.value.data, rtol=1e-5, atol=1e-6)
            predicted = any(site.holds(st, prior, "float32") for site in (topk_slots_misplaced, reduce_misvectorised))
            if topk_verdict(*layout, dim, 2) != "race" and predicted != measured:
                wrong.append(f"topk of conv1d {shape} -> {layout}, dim {dim}: predicted {predicted}, "
                             f"measured {measured}")
    assert not wrong, "\n".join(wrong)
