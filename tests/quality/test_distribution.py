"""The default strategy's distribution: what detection power rests on.

Run with `python -m pytest -m quality tests/quality/test_distribution.py -s`. Over 2,000
seeded programs (the campaign's source) and the property's derandomized Hypothesis examples it
measures and prints: the share of programs that end in a backward of a tracked root reached
through at least two recorded ops (tracked in both frameworks, by the semantic model), each
catalog op's share of the op statements, and how continuous the leaf values are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings

from difftest.divergences.states import BurnState, TorchState
from difftest.ops.catalog import CATALOG
from difftest.oracle.model import predict
from difftest.program.ir import Backward, Leaf, OpCall, Program, value_inputs
from difftest.strategies import programs
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate
from tests.differential.test_property import EXAMPLES

PROGRAMS = 2000
HYPOTHESIS_EXAMPLES = EXAMPLES  # the property's


@dataclass
class Figures:
    programs: int
    statements: float
    ops: float
    backward: float
    tracked_root: float
    deep_root: float  # tracked root reached through >= 2 recorded ops
    op_min: tuple[str, float]
    op_max: tuple[str, float]
    never: list[str]
    distinct_leaf_values: float
    zero_leaf_values: float

    def show(self, label: str) -> str:
        return (
            f"{label}: {self.programs} programs, {self.statements:.1f} statements and {self.ops:.2f} ops each; "
            f"backward {self.backward:.1%}, of a tracked root {self.tracked_root:.1%}, "
            f"through >= 2 ops {self.deep_root:.1%}; op share min {self.op_min[0]} {self.op_min[1]:.2%} "
            f"max {self.op_max[0]} {self.op_max[1]:.2%} (uniform {1 / len(CATALOG):.2%}), never drawn "
            f"{len(self.never)}; leaf values distinct {self.distinct_leaf_values:.1%}, zero {self.zero_leaf_values:.2%}"
        )


def _recorded_ops_behind(program: Program, root: str) -> int:
    by_id = {s.id: s for s in program.statements if not isinstance(s, Backward)}
    seen: set[str] = set()
    stack = [root]
    n = 0
    while stack:
        x = stack.pop()
        if x in seen or x not in by_id:
            continue
        seen.add(x)
        st = by_id[x]
        if isinstance(st, OpCall) and st.region == "grad":
            n += 1
        stack.extend(value_inputs(st))
    return n


def figures(progs: Iterable[Program]) -> Figures:
    progs = list(progs)
    ops: Counter[str] = Counter()
    statements = backward = tracked = deep = 0
    values: list[float] = []
    for p in progs:
        statements += len(p.statements)
        for s in p.statements:
            if isinstance(s, OpCall):
                ops[s.op] += 1
            elif isinstance(s, Leaf):
                values.extend(s.data)
        bw = [s for s in p.statements if isinstance(s, Backward)]
        if not bw:
            continue
        backward += 1
        pred = predict(p)
        if pred.torch.failure or pred.burn.failure:
            continue
        ts, bs = pred.torch.states.get(bw[0].input), pred.burn.states.get(bw[0].input)
        if not (isinstance(ts, TorchState) and isinstance(bs, BurnState)):
            continue
        if not (ts.requires_grad and ts.has_grad_fn and bs.is_tracked):
            continue
        tracked += 1
        deep += _recorded_ops_behind(p, bw[0].input) >= 2
    total = max(sum(ops.values()), 1)
    share = {name: ops.get(name, 0) / total for name in CATALOG}
    lo, hi = min(share, key=share.__getitem__), max(share, key=share.__getitem__)
    n = len(progs)
    distinct = Counter(values)
    return Figures(
        n,
        statements / n,
        sum(ops.values()) / n,
        backward / n,
        tracked / n,
        deep / n,
        (lo, share[lo]),
        (hi, share[hi]),
        [k for k, v in share.items() if v == 0],
        len(distinct) / max(len(values), 1),
        distinct.get(0.0, 0) / max(len(values), 1),
    )


@pytest.mark.quality
def test_seeded_programs_reach_a_tracked_root_through_several_ops_and_every_op_evenly() -> None:
    f = figures(generate(RandomChoices(k), GenConfig()) for k in range(PROGRAMS))
    print("\n" + f.show("RandomChoices"))
    assert f.deep_root >= 0.70, f.show("RandomChoices")
    assert not f.never and f.op_max[1] <= 2.0 * f.op_min[1], f.show("RandomChoices")
    assert f.distinct_leaf_values >= 0.95 and f.zero_leaf_values < 0.01, f.show("RandomChoices")


@pytest.mark.quality
def test_hypothesis_examples_of_the_property() -> None:
    """The same generator under Hypothesis: its first examples are small by design and its
    engine repeats and zero parts of examples, so the bar is lower; printed for the record."""
    progs: list[Program] = []

    @settings(
        max_examples=HYPOTHESIS_EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(programs())
    def collect(p: Program) -> None:
        progs.append(p)

    collect()
    f = figures(progs)
    print("\n" + f.show("Hypothesis"))
    assert f.deep_root >= 0.30, f.show("Hypothesis")
    assert len(f.never) <= 2, f.show("Hypothesis")
    assert f.zero_leaf_values < 0.05, f.show("Hypothesis")
