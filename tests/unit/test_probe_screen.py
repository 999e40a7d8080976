"""The gradient screen of root probes (difftest/oracle/probe_run.py `screen`), without burn: a
probe passes only where the full check's arbitration could only pass it, and anything else is a
suspect that gets the full check."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from difftest.divergences.rules import RULES
from difftest.exec.torch_probes import torch_probe_grads
from difftest.oracle import finite_diff
from difftest.oracle.burn_devices import batch_norm_inference_applies
from difftest.oracle.compare import screen_grads
from difftest.oracle.finite_diff import finite_difference
from difftest.oracle.model import predict
from difftest.oracle.noise import MagnitudeHooks, magnitude_run
from difftest.oracle.probe_run import no_farther, screen
from difftest.oracle.probes import RootProbe, root_probes
from difftest.program.ir import Backward, Leaf, OpCall, Program
from difftest.program.observation import BackwardObs, TensorObs
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate

# x (a - b) computed as x a - x b: the gradient of x at z is a - b = 0.125, a difference of
# terms of magnitude 2000, which float32 may round by a few ulps of 2000 (about 1e-4)
CANCELS = Program((
    Leaf("x", (2,), (0.75, -1.5), "autodiff", True),
    Leaf("a", (2,), (1000.0, 1000.0), "autodiff", False),
    Leaf("b", (2,), (999.875, 999.875), "autodiff", False),
    OpCall("p", "mul", ("x", "a")),
    OpCall("q", "mul", ("x", "b")),
    OpCall("z", "sub", ("p", "q")),
    OpCall("s", "sum", ("z",)),
    Backward("bw", "s"),
))


def _probe_at_z() -> RootProbe:
    return next(p for p in root_probes(CANCELS) if p.root == "z")


def _burn_with_x_grad_moved(by: float) -> tuple[BackwardObs, BackwardObs]:
    """PyTorch's result of the probe rooted at z, and burn's: the same, x's gradient moved by `by`."""
    probe = _probe_at_z()
    torch_result = torch_probe_grads(CANCELS.prefix(probe.index), Backward("bw", "s"), ["z"],
                                     burn_inference=frozenset())[0]
    assert isinstance(torch_result, BackwardObs)
    g = torch_result.grads["x"]
    assert g is not None and g.data == (0.125, 0.125)
    moved = TensorObs(g.shape, (g.data[0] + by, g.data[1]), g.dtype)
    return torch_result, replace(torch_result, grads={**torch_result.grads, "x": moved})


def test_a_gradient_within_its_zero_noise_budget_passes_the_screen_though_farther_than_pytorch() -> None:
    # 2 ulps of 2000 in float32: beyond the screen of 0.125, and farther from float64 than
    # PyTorch's exact 0.125, so only the budget the terms give lets it pass
    torch_result, burn = _burn_with_x_grad_moved(2.4e-4)
    mismatches = screen_grads(CANCELS.prefix(_probe_at_z().index), Backward("bw", "z"), torch_result, burn)
    assert [m.statement for m in mismatches] == ["x"]
    assert not no_farther(mismatches[0], torch_result, burn, torch_result)  # PyTorch is exact here
    assert screen(CANCELS, [(_probe_at_z(), burn)], frozenset(), RULES) == [True]


def test_a_gradient_beyond_its_zero_noise_budget_is_a_suspect() -> None:
    _, burn = _burn_with_x_grad_moved(2.4e-2)  # a hundred times that: the full check decides
    assert screen(CANCELS, [(_probe_at_z(), burn)], frozenset(), RULES) == [False]


def test_finite_differences_of_one_leaf_share_their_runs_and_equal_fresh_ones() -> None:
    # what finite_difference reads of a verdict: the program and the model's prediction
    verdict: Any = SimpleNamespace(program=CANCELS, prediction=predict(CANCELS))
    first = [finite_difference(verdict, "x", "bw", e) for e in (0, 1, 0)]
    fresh = []
    for e in (0, 1, 0):
        finite_diff._last = None  # no shared runs: each difference from scratch
        fresh.append(finite_difference(verdict, "x", "bw", e))
    assert first == fresh and first[0] == first[2] and first[0] is not first[2]
    assert first[0] is not None and abs(first[0]["estimates"][-1] - 0.125) < 1e-6


def test_one_magnitude_run_for_several_roots_gives_each_what_its_probes_run_gives() -> None:
    """The screen's magnitude run of a backward's probes (one forward, the graph retained
    between the roots) gives each probe, bit for bit, the magnitudes of a run of its own program
    (noise.magnitude_run), which the full check's arbitration reads."""
    compared = 0
    for k in range(120):
        program = generate(RandomChoices(4_000_037 + k), GenConfig())
        by_index: dict[int, list[RootProbe]] = {}
        for p in root_probes(program):
            if not p.fails:
                by_index.setdefault(p.index, []).append(p)
        for index, probes in by_index.items():
            bw = program.statements[index]
            assert isinstance(bw, Backward)
            prefix = program.prefix(index)
            shared = torch_probe_grads(prefix, bw, [p.root for p in probes], "float64",
                                       burn_inference=batch_norm_inference_applies(prefix), hooks=MagnitudeHooks())
            for p, got in zip(probes, shared, strict=True):
                own = magnitude_run(p.program(program))
                if own.error is not None:
                    assert not isinstance(got, BackwardObs), (k, p, own.error)
                    continue
                assert isinstance(got, BackwardObs), (k, p, got)
                assert got.grads == own.backwards[-1].grads, (k, p)
                compared += 1
    assert compared > 200
