"""The memory differential: repeated forwards without backward, measured in fresh
processes and checked against the model's graph-retained-until-backward rule.

Default run: the model-only tests, four seed modes and two generated checks at small sizes
(plus the corpus case corpus/seed/memory-table.json at its quick size). `--run-slow` or
`-m memory`: also the seed table at full size, twelve larger generated checks and the
calibration of the strategy's ops against burn.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from difftest.divergences.memory_rules import GRAPH_RETAINED, MemoryRule
from difftest.findings.corpus import Case, CorpusError, judge_memory, load_case
from difftest.memory.checks import MemoryCheck, format_check, judge_check, measure_program, run_check
from difftest.memory.model import (
    FLAT_SLACK_MIB,
    MIB,
    Expectation,
    Row,
    predict_forward_memory,
    saved_bytes_per_forward,
    surviving_ops,
)
from difftest.memory.table import (
    SEED_MODES,
    check_mode,
    find_mode,
    format_table,
    forward_program,
    measure,
    predict_growth,
    run_table,
)
from difftest.program.ir import Leaf, OpCall, Program
from difftest.pytest_plugin import memory_full
from difftest.strategies.memory import PLAIN_OPS, QUICK, SAVING_OPS, MemoryGenConfig, memory_checks
from tests.programs import backward, cut, leaf, op, program

pytestmark = pytest.mark.memory
ROOT = Path(__file__).resolve().parents[2]

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


# ------------------------------------------------------------------- the model, by hand


def _sq(ident: str, n: int = 4, rg: bool = True) -> Leaf:
    return leaf(ident, [0.5] * (n * n), rg=rg, shape=[n, n])


def test_saved_inputs_only_for_the_other_inputs_gradient() -> None:
    # mul(a, c) with c a constant: only c (a leaf: no new storage) is saved, in both frameworks
    prog = program(_sq("p"), _sq("c", rg=False), op("a", "add_scalar", "p", scalar=1.0), op("b", "mul", "a", "c"))
    assert saved_bytes_per_forward(prog, "burn") == saved_bytes_per_forward(prog, "torch") == 0
    # mul(a, d) with d = a.detach(): d is saved, and it is a's storage
    prog = program(_sq("p"), op("a", "add_scalar", "p", scalar=1.0), cut("d", "detach", "a"), op("b", "mul", "a", "d"))
    assert saved_bytes_per_forward(prog, "burn") == saved_bytes_per_forward(prog, "torch") == 4 * 4 * 4


def test_a_saved_view_keeps_its_base() -> None:
    prog = program(_sq("p"), op("a", "add_scalar", "p", scalar=1.0), op("t", "transpose", "a"), op("b", "sin", "t"))
    assert saved_bytes_per_forward(prog, "burn") == 4 * 4 * 4


def _branches(second: Any) -> Program:
    """p -> a -> sin -> sum -> backward, plus a side branch sin(second + 1)."""
    return program(
        _sq("p"), _sq("q"), *second,
        op("a", "add_scalar", "p", scalar=1.0), op("b", "sin", "a"),
        op("e", "add_scalar", second[-1].id if second else "q", scalar=1.0), op("f", "sin", "e"),
        op("s", "sum", "b"), backward("s"),
    )  # fmt: skip


def test_a_backward_frees_the_graphs_no_live_leaf_holds() -> None:
    # a branch on another program leaf is a separate graph, alive as long as q is
    assert surviving_ops(_branches(()), "burn") == {"e", "f"}
    fm = predict_forward_memory(_branches(()), "burn", keep=False)
    assert (fm.retained_bytes, fm.surviving_bytes) == (2 * 64, 64)
    # also when it reads the root's leaf: after the warm-up the backward's leaves start no graph
    assert surviving_ops(_branches((op("x", "add", "p", "q"),)), "burn") == {"x", "e", "f"}
    # a branch on the root's leaf only lands in a fresh graph, dropped at the backward
    assert surviving_ops(_branches((op("x", "mul_scalar", "p", scalar=2.0),)), "burn") == set()
    # a branch on burn's detach of a leaf (a fresh require-grad leaf) dies with its forward
    assert surviving_ops(_branches((cut("pd", "detach", "q"),)), "burn") == set()
    # a root whose graph merged with q's old graph: the backward runs there and frees it all
    joined = program(
        _sq("p"), _sq("q"), op("a", "add_scalar", "p", scalar=1.0), op("b", "sin", "a"), op("c", "mul", "a", "q"),
        op("s", "sum", "b"), backward("s"),
    )  # fmt: skip
    assert surviving_ops(joined, "burn") == set()
    # a root reaching q too: both leaves start no graph after the warm-up
    both = program(
        _sq("p"), _sq("q"), op("a", "add", "p", "q"), op("b", "sin", "a"), op("e", "add_scalar", "q", scalar=1.0),
        op("f", "sin", "e"), op("s", "sum", "b"), backward("s"),
    )  # fmt: skip
    assert surviving_ops(both, "burn") == set()
    # no backward, nothing to free
    assert surviving_ops(Program(_branches(()).statements[:-1]), "burn") == set()


def test_expectations_after_a_backward() -> None:
    def verdicts(prog: Program, rules: tuple[MemoryRule, ...] | None = None) -> list[str]:
        return [e.verdict for e in MemoryCheck(prog, 10**7).expectations("burn", rules)]

    assert verdicts(_branches(())) == ["grows", "unchecked", "keeps-growing"]
    assert verdicts(_branches((cut("pd", "detach", "q"),))) == ["grows", "unchecked", "no-further-growth"]
    assert verdicts(_branches(()), ()) == ["flat", "unchecked", "no-further-growth"]


def test_a_check_too_small_to_measure_is_refused() -> None:
    prog = program(_sq("p", 64), op("a", "add_scalar", "p", scalar=1.0), op("b", "sin", "a"))
    with pytest.raises(ValueError, match="cannot tell growth from noise"):
        MemoryCheck(prog, 8).expectations("burn")
    MemoryCheck(prog, 8).expectations("torch")  # PyTorch predicts flat: nothing to tell apart
    MemoryCheck(prog, 8).expectations("burn", rules=())


# ------------------------------------------------------------------- generated checks

QUICK_CHECKS = memory_checks(126, 2, QUICK)
FULL_CHECKS = memory_checks(2, 12, MemoryGenConfig())


def _ids(checks: list[MemoryCheck]) -> list[str]:
    return [c.name for c in checks]


def test_generated_checks_are_measurable() -> None:
    allowed = {*SAVING_OPS, *PLAIN_OPS, "sum"}
    for check in QUICK_CHECKS + FULL_CHECKS + memory_checks(7, 20):
        forward = check.program.statements
        assert {st.op for st in forward if isinstance(st, OpCall)} <= allowed, check.describe()
        assert all(st.shape[0] >= 512 for st in forward if isinstance(st, Leaf)), check.describe()
        for fw in ("torch", "burn"):
            check.expectations(fw)  # raises if growth could not be told from noise
            check.expectations(fw, rules=())


def test_generated_sets_cover_the_cases() -> None:
    def kind(check: MemoryCheck) -> tuple[str, ...]:
        return tuple(e.verdict for e in check.expectations("burn")) + (
            "torch-saves" if check.predict("torch").saved_bytes else "torch-saves-nothing",
        )

    quick = {kind(c) for c in QUICK_CHECKS}
    assert ("grows", "torch-saves-nothing") in quick  # burn's detach of a leaf is recorded
    assert ("grows", "unchecked", "keeps-growing", "torch-saves") in quick  # a graph survives the backward
    full = {kind(c) for c in FULL_CHECKS}
    assert ("flat", "torch-saves-nothing") in full
    assert ("grows", "unchecked", "keeps-growing", "torch-saves") in full  # a graph survives the backward
    assert ("grows", "unchecked", "no-further-growth", "torch-saves") in full
    assert any(c.iters <= 10 for c in FULL_CHECKS) and any(c.iters >= 40 for c in FULL_CHECKS)


def _check_generated(check: MemoryCheck) -> None:
    measured = run_check(check)
    rows = judge_check(check, measured)
    report = format_check(check, rows)
    assert all(r.ok for r in rows), report
    if check.predict("burn").rules:
        # the rule shaped burn's expectation: without it the measurement contradicts the model
        assert not all(r.ok for r in judge_check(check, measured, rules=())), report


@pytest.mark.parametrize("check", QUICK_CHECKS, ids=_ids(QUICK_CHECKS))
def test_generated_quick(check: MemoryCheck) -> None:
    _check_generated(check)


@pytest.mark.slow
@pytest.mark.parametrize("check", FULL_CHECKS, ids=_ids(FULL_CHECKS))
def test_generated_full(check: MemoryCheck) -> None:
    _check_generated(check)


# Ops that PyTorch differentiates from their output, which burn recomputes from the input it
# saves instead: the catalog's `saves` (inputs PyTorch saves) is empty, yet burn retains a tensor.
OUTPUT_SAVING_OPS = ("exp", "sqrt", "tanh", "sigmoid", "relu")


@pytest.mark.slow
def test_catalog_saves_match_burn() -> None:
    """The strategy's ops: burn retains exactly the bytes the catalog's `saves` predict (one op
    on fresh n x n intermediates, 24 forwards); the excluded ops retain what it does not."""
    n, iters = 512, 24
    lines, bad = [], []
    for name in (*SAVING_OPS, *PLAIN_OPS, *OUTPUT_SAVING_OPS):
        spec_inputs = ("a", "b") if name in ("mul", "matmul", "add", "sub") else ("a",)
        attrs = {"scalar": 0.5} if name.endswith("_scalar") else {}
        prog = Program((
            Leaf("p", (n, n), (0.75,) * (n * n), "autodiff", True),
            OpCall("a", "add_scalar", ("p",), {"scalar": 1.0}),
            OpCall("b", "mul_scalar", ("p",), {"scalar": 0.5}),
            OpCall("y", name, spec_inputs, attrs),
            OpCall("s", "sum", ("y",)),
        ))  # fmt: skip
        predicted = saved_bytes_per_forward(prog, "burn") * iters / MIB
        [(_, growth)] = measure_program(MemoryCheck(prog, iters, then_backward=False), "burn")
        agrees = abs(growth - predicted) < FLAT_SLACK_MIB
        lines.append(f"{name:<12} predicted {predicted:6.1f}  burn {growth:+6.1f}")
        if agrees == (name in OUTPUT_SAVING_OPS):
            bad.append(name)
    assert not bad, "\n".join(lines)


# ------------------------------------------------------------------- the corpus case

SEED_CASE = ROOT / "corpus" / "seed" / "memory-table.json"


def test_memory_case_loads() -> None:
    case = load_case(SEED_CASE)
    assert case.memory is not None and case.expected_rule() == GRAPH_RETAINED.name
    assert (case.memory.full.n, case.memory.full.iters) == (1024, 20)
    assert case.program == forward_program("none", 2, backward=True)  # the stand-in


def test_memory_case_validation(tmp_path: Path) -> None:
    doc = json.loads(SEED_CASE.read_text())
    path = tmp_path / "m.json"

    def load(**changes: Any) -> Case:
        path.write_text(json.dumps({**doc, **changes}))
        return load_case(path)

    with pytest.raises(CorpusError, match=r"names no declared rule for a memory case.*leaf-detach is a flag rule"):
        load(status="divergence:leaf-detach")
    with pytest.raises(CorpusError, match="cannot tell growth from noise"):
        load(memory={**doc["memory"], "quick": {"n": 64, "iters": 4}})
    with pytest.raises(CorpusError, match="must be a positive integer"):
        load(memory={**doc["memory"], "n": 0})
    with pytest.raises(CorpusError, match="no \"program\""):
        load(program={})
    # a program case cannot claim a memory rule
    prog_doc = json.loads((ROOT / "corpus" / "seed" / "flags-of-w.json").read_text())
    path.write_text(json.dumps({**prog_doc, "status": f"divergence:{GRAPH_RETAINED.name}"}))
    with pytest.raises(CorpusError, match=r"names no declared rule for a program case.*is a memory rule"):
        load_case(path)


def test_judge_memory() -> None:
    case = load_case(SEED_CASE)
    grows = Expectation("grows", 12.0, (GRAPH_RETAINED.name,))
    row = Row("burn", "drop", "48 forwards", None, 24.0, grows, True)
    assert judge_memory(case, [row], full=False).ok
    contradicted = Row("burn", "drop", "48 forwards", None, 0.0, grows, False)
    assert not judge_memory(case, [contradicted], full=False).ok
    plain = Row("torch", "drop", "48 forwards", None, 0.0, Expectation("flat", 10.0), True)
    outcome = judge_memory(case, [plain], full=False)
    assert not outcome.ok and "was not applied" in outcome.message


class _Config:
    def __init__(self, run_slow: bool, markexpr: str) -> None:
        self.options = {"--run-slow": run_slow, "markexpr": markexpr}

    def getoption(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)


@pytest.mark.parametrize(
    ("run_slow", "markexpr", "full"),
    [(False, "", False), (False, "not quality", False), (True, "not quality", True), (False, "memory", True),
     (False, "memory and not quality", True), (False, "not memory", False), (False, "slow or memory", True)],
)  # fmt: skip
def test_memory_full_selection(run_slow: bool, markexpr: str, full: bool) -> None:
    assert memory_full(_Config(run_slow, markexpr)) is full  # type: ignore[arg-type]
