"""The memory differential (issue 5): repeated forwards without backward, measured in fresh
processes and checked against the model's graph-retained-until-backward rule."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from difftest.memory import (
    GRAPH_RETAINED,
    SEED_MODES,
    MemoryRule,
    check_mode,
    find_mode,
    format_table,
    forward_program,
    measure,
    predict_growth,
    run_table,
    saved_bytes_per_forward,
)

pytestmark = pytest.mark.memory

# Small enough to be quick, large enough that "grows" (half of 48 x 0.5 MiB = 12 MiB) and
# "flat" (< 10 MiB) cannot both hold: predict_growth refuses sizes where they could.
QUICK_N = 256
QUICK_ITERS = 48

Measured = list[tuple[str, float]]


@pytest.fixture(scope="module")
def measured() -> Callable[[str, str], Measured]:
    """Measures a mode once per test module, each in its own fresh process."""
    cache: dict[tuple[str, str], Measured] = {}

    def get(framework: str, mode: str) -> Measured:
        if (framework, mode) not in cache:
            cache[framework, mode] = measure(framework, mode, QUICK_N, QUICK_ITERS)
        return cache[framework, mode]

    return get


@pytest.mark.parametrize(
    ("framework", "mode", "first"),
    [
        ("burn", "drop", "grows"),
        ("burn", "without-autodiff", "flat"),
        ("torch", "drop", "flat"),
        ("torch", "keep", "grows"),
    ],
)
def test_quick_mode_matches_model(
    framework: str, mode: str, first: str, measured: Callable[[str, str], Measured]
) -> None:
    m = find_mode(framework, mode)
    rows = check_mode(m, measured(framework, mode), n=QUICK_N, iters=QUICK_ITERS)
    assert rows[0].expectation.verdict == first
    assert all(r.ok for r in rows), format_table(rows, QUICK_N, QUICK_ITERS)


def test_without_the_rule_burn_drop_contradicts_the_model(measured: Callable[[str, str], Measured]) -> None:
    rows = check_mode(find_mode("burn", "drop"), measured("burn", "drop"), n=QUICK_N, iters=QUICK_ITERS, rules=())
    assert rows[0].expectation.verdict == "flat"  # PyTorch semantics: the graph dies with the output
    assert not rows[0].ok, format_table(rows, QUICK_N, QUICK_ITERS)


def test_model_saved_bytes_come_from_the_flag_model() -> None:
    n = 64
    both = 2 * n * n * 4  # exp's output and the product
    assert saved_bytes_per_forward(forward_program("none", n), "torch") == both
    assert saved_bytes_per_forward(forward_program("none", n), "burn") == both
    # leaf-detach: p.detach() is still a require-grad leaf in burn, so its forward is recorded
    assert saved_bytes_per_forward(forward_program("detach", n), "burn") == both
    assert saved_bytes_per_forward(forward_program("detach", n), "torch") == 0
    assert saved_bytes_per_forward(forward_program("without_autodiff", n), "burn") == 0
    assert saved_bytes_per_forward(forward_program("no_grad", n), "torch") == 0


def test_model_predicts_the_seed_table() -> None:
    def verdicts(rules: tuple[MemoryRule, ...] | None) -> dict[str, tuple[str, ...]]:
        return {
            f"{m.framework}/{m.name}": tuple(e.verdict for e in predict_growth(m.framework, m.name, rules=rules))
            for m in SEED_MODES
        }

    with_rule = verdicts(None)  # the model's rules
    assert verdicts((GRAPH_RETAINED,)) == with_rule
    assert with_rule == {
        "torch/drop": ("flat",),
        "torch/keep": ("grows",),
        "torch/detach-keep": ("flat",),
        "torch/nograd-keep": ("flat",),
        "burn/drop": ("grows", "unchecked", "no-further-growth"),
        "burn/keep": ("grows",),
        "burn/without-autodiff": ("flat",),
        "burn/detach": ("grows",),
    }
    without = verdicts(())
    changed = sorted(k for k in with_rule if with_rule[k] != without[k])
    assert changed == ["burn/detach", "burn/drop"]
    assert predict_growth("burn", "drop")[0].threshold_mib == pytest.approx(80.0)  # half of 20 x 8 MiB


def test_too_small_an_experiment_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot tell growth from noise"):
        predict_growth("torch", "keep", n=256, iters=10)


@pytest.mark.slow
def test_seed_table() -> None:
    rows = run_table()
    table = format_table(rows, 1024, 20)
    assert all(r.ok for r in rows), table
    got = {(r.framework, r.mode, r.label): r.growth_mib for r in rows}
    assert got["burn", "drop", "20 forwards"] > 100, table
    assert got["burn", "detach", "20 forwards"] > 100, table
    assert got["burn", "without-autodiff", "20 forwards"] < 10, table
    assert got["torch", "drop", "20 forwards"] < 10, table
    peak = max(got["burn", "drop", "20 forwards"], got["burn", "drop", "then one backward"])
    assert got["burn", "drop", "20 more forwards"] - peak < 10, table
