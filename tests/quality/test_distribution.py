"""The default strategy's distribution: what detection power rests on.

Run with `python -m pytest -m quality tests/quality/test_distribution.py -s`. Over 2,000
seeded programs (the campaign's source) and the property's derandomized Hypothesis examples it
measures and prints: the share of programs whose first backward is of a tracked root reached
through at least two recorded ops (tracked in both frameworks, by the semantic model), each
catalog op's share of the ops the generator drew, how continuous the drawn leaf values are, and
the share of leaves with boundary values.

Since sessions (strategies/sessions.py), three figures measure what the generator decides rather
than everything a program holds:

* the first backward's root is judged even when the model predicts a failure *after* it: a
  session's later backward of a consumed graph or of a used leaf fails on purpose, which says
  nothing of the first backward (a failure at or before it still excludes the program);
* op shares count the ops drawn from the catalog (the generator's `op:` notes), not a training
  loop's fixed loss (sub, square, mean or sum), which is no draw of an op;
* distinctness and zeros are those of the value drawer's output (`floats()`), before a float16 or
  bfloat16 program rounds it onto fewer values and before boundary values (strategies/boundary.py)
  replace some elements on purpose; the boundary values have their own figure, the share of
  float32 leaves holding one (an exact 0, a tie or a subnormal, which no continuous draw makes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings

from difftest.divergences.states import BurnState, TorchState
from difftest.ops.catalog import CATALOG
from difftest.oracle.model import Prediction, predict
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
    boundary_leaves: float = 0.0
    fit_min: tuple[str, float] = ("", 1.0)  # the op placed least often of the times it was drawn

    def show(self, label: str) -> str:
        return (
            f"{label}: {self.programs} programs, {self.statements:.1f} statements and {self.ops:.2f} ops each; "
            f"backward {self.backward:.1%}, of a tracked root {self.tracked_root:.1%}, "
            f"through >= 2 ops {self.deep_root:.1%}; op share min {self.op_min[0]} {self.op_min[1]:.2%} "
            f"max {self.op_max[0]} {self.op_max[1]:.2%} (uniform {1 / len(CATALOG):.2%}), placed when drawn min "
            f"{self.fit_min[0]} {self.fit_min[1]:.1%}, never drawn "
            f"{len(self.never)}; leaf values distinct {self.distinct_leaf_values:.1%}, "
            f"zero {self.zero_leaf_values:.2%}; leaves with boundary values {self.boundary_leaves:.1%}"
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


class RecordingChoices(RandomChoices):
    """The campaign's choice source, keeping what its value drawer returned and the ops drawn."""

    def __init__(self, seed: int, drawn: list[float]) -> None:
        super().__init__(seed)
        self.drawn = drawn

    def floats(self, n: int, lo: float, hi: float) -> list[float]:
        xs = super().floats(n, lo, hi)
        self.drawn.extend(xs)
        return xs


def _failed_by(pred: Prediction, index: int) -> bool:
    """The model predicts a failure in either framework at or before statement `index`."""
    return any(f is not None and f[0] <= index for f in (pred.torch.failure, pred.burn.failure))


def _has_boundary(data: tuple[float, ...]) -> bool:
    return any(x == 0.0 or 0 < abs(x) < 1e-30 for x in data) or len(set(data)) < len(data)


def figures(progs: Iterable[Program], drawn_ops: Counter[str] | None = None,
            drawn_values: list[float] | None = None, missed_ops: Counter[str] | None = None) -> Figures:
    """The figures of `progs`; op shares from `drawn_ops` (the ops drawn from the catalog and
    placed), fit rates from it and `missed_ops` (drawn and given up), and distinctness from
    `drawn_values` (the value drawer's output) when given, else from the programs' op
    statements and leaves."""
    progs = list(progs)
    ops: Counter[str] = Counter()
    statements = backward = tracked = deep = 0
    values: list[float] = []
    float32_leaves: list[tuple[float, ...]] = []
    for p in progs:
        statements += len(p.statements)
        for s in p.statements:
            if isinstance(s, OpCall):
                ops[s.op] += 1
            elif isinstance(s, Leaf) and not all(float(x).is_integer() for x in s.data):  # not indices
                values.extend(s.data)
                if p.dtype == "float32":
                    float32_leaves.append(s.data)
        bw = [(i, s) for i, s in enumerate(p.statements) if isinstance(s, Backward)]
        if not bw:
            continue
        backward += 1
        index, first = bw[0]
        pred = predict(p)
        if _failed_by(pred, index):
            continue
        ts, bs = pred.torch.states.get(first.input), pred.burn.states.get(first.input)
        if not (isinstance(ts, TorchState) and isinstance(bs, BurnState)):
            continue
        if not (ts.requires_grad and ts.has_grad_fn and bs.is_tracked):
            continue
        tracked += 1
        deep += _recorded_ops_behind(p, first.input) >= 2
    ops = drawn_ops if drawn_ops is not None else ops
    values = drawn_values if drawn_values is not None else values
    total = max(sum(ops.values()), 1)
    share = {name: ops.get(name, 0) / total for name in CATALOG}
    lo, hi = min(share, key=share.__getitem__), max(share, key=share.__getitem__)
    n = len(progs)
    distinct = Counter(values)
    missed = missed_ops or Counter()
    fit = {name: ops[name] / (ops[name] + missed[name]) for name in CATALOG if ops[name] + missed[name]}
    worst = min(fit, key=fit.__getitem__, default="")
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
        sum(map(_has_boundary, float32_leaves)) / max(len(float32_leaves), 1),
        (worst, fit.get(worst, 1.0)),
    )


def seeded(cfg: GenConfig) -> Figures:
    """The figures of the campaign's first PROGRAMS programs under `cfg`."""
    drawn_values: list[float] = []
    drawn_ops: Counter[str] = Counter()
    missed_ops: Counter[str] = Counter()
    progs = []
    for k in range(PROGRAMS):
        c = RecordingChoices(k, drawn_values)
        progs.append(generate(c, cfg))
        drawn_ops.update({e[3:]: n for e, n in c.events.items() if e.startswith("op:")})
        missed_ops.update({e[8:]: n for e, n in c.events.items() if e.startswith("op-miss:")})
    return figures(progs, drawn_ops, drawn_values, missed_ops)


@pytest.mark.quality
def test_seeded_programs_reach_a_tracked_root_through_several_ops_and_every_op_evenly() -> None:
    cfg = GenConfig()
    f = seeded(cfg)
    print("\n" + f.show("RandomChoices"))
    assert f.deep_root >= 0.70, f.show("RandomChoices")
    # An op drawn is placed, whatever its domain, rank or attributes need (the generator's
    # attempts: existing values, then fresh leaves and shapes); its share then varies only with
    # how often the uniform draw picked it (about +-25% at 2,000 programs: some 100 draws an op).
    assert f.fit_min[1] >= 0.90, f.show("RandomChoices")
    uniform = 1 / len(CATALOG)
    assert not f.never and f.op_min[1] >= 0.5 * uniform and f.op_max[1] <= 1.5 * uniform, f.show("RandomChoices")
    assert f.distinct_leaf_values >= 0.95 and f.zero_leaf_values < 0.01, f.show("RandomChoices")
    # boundary leaves: the declared share, less the leaves none of whose elements was replaced
    assert 0.5 * cfg.p_boundary_leaf <= f.boundary_leaves <= 1.2 * cfg.p_boundary_leaf, f.show("RandomChoices")


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
