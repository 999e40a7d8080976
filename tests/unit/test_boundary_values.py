"""Boundary leaf values (strategies/boundary.py): drawn at the declared share, from the edges of
the value space, inside every op's domain, replayable and shrinkable, and off in the profile
"continuous"."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, find, settings

from difftest.ops import domains as dom
from difftest.ops import tensor_ops as tx
from difftest.ops.catalog import CATALOG
from difftest.oracle.pytorch import run as run_torch
from difftest.program.dtypes import FLOAT_DTYPES, round_to
from difftest.program.ir import Leaf, OpCall, Program
from difftest.program.jsonio import program_to_dict
from difftest.strategies import programs
from difftest.strategies.boundary import kink_options, options
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate
from difftest.strategies.tape import TapeChoices

SEEDS = 200


def _leaf_data(progs: list[Program], dtype: str | None = None) -> list[tuple[float, ...]]:
    """The float leaves' data (of the programs in `dtype` only, when given: float16 and bfloat16
    round continuous draws onto few enough values to repeat some); not the index leaves of
    embeddings, whose data are integers."""
    return [s.data for p in progs if dtype in (None, p.dtype) for s in p.statements
            if isinstance(s, Leaf) and not all(float(x).is_integer() for x in s.data)]


def _has_boundary(data: tuple[float, ...]) -> bool:
    """An exact 0 (either sign), a repeated value or a subnormal: none of them occurs in
    continuous draws (strategies/choices.py)."""
    return any(x == 0.0 or 0 < abs(x) < 1e-30 for x in data) or len(set(data)) < len(data)


def _tensor(xs: list[float]) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


def test_a_share_of_leaves_gets_boundary_elements_and_the_continuous_profile_none() -> None:
    leaves = _leaf_data([generate(RandomChoices(k), GenConfig()) for k in range(SEEDS)], "float32")
    share = sum(map(_has_boundary, leaves)) / len(leaves)
    assert 0.06 <= share <= 0.2, share  # p_boundary_leaf 0.15, less the leaves left unchanged
    zeros = [x for d in leaves for x in d if x == 0.0]
    assert any(math.copysign(1.0, x) < 0 for x in zeros) and any(math.copysign(1.0, x) > 0 for x in zeros)
    continuous = _leaf_data([generate(RandomChoices(k), GenConfig.profile("continuous")) for k in range(SEEDS)],
                            "float32")
    assert not any(map(_has_boundary, continuous))


def test_boundary_programs_replay_from_their_seed_and_their_tape() -> None:
    for seed in range(60):
        first = TapeChoices(seed)
        program = generate(first)
        assert program_to_dict(generate(RandomChoices(seed))) == program_to_dict(program)
        assert program_to_dict(generate(TapeChoices(seed + 999, first.tape))) == program_to_dict(program)


def test_hypothesis_shrinks_to_a_one_element_boundary_leaf() -> None:
    """Boundary elements are choices of the sequence: the shrinker finds a minimal program
    whose leaf is exactly -0.0 (a sign of zero no continuous draw makes)."""

    def has_negative_zero(p: Program) -> bool:
        return any(x == 0.0 and math.copysign(1.0, x) < 0 for d in _leaf_data([p]) for x in d)

    # kink leaves off: relu's kink points are 0.0 and -0.0 too, a second path to the property
    # (Hypothesis draws from constants of the modules imported so far, so which local minimum
    # the shrinker reaches depends on the tests run before this one)
    p = find(programs(ops=("relu",), max_statements=2, p_kink_leaf=0.0), has_negative_zero,
             settings=settings(database=None, max_examples=2000, suppress_health_check=list(HealthCheck)))
    data = [x for d in _leaf_data([p]) for x in d]
    assert len(p.statements) <= 3, p
    # one boundary element, -0.0, and no other negative element left by the shrinker
    assert [math.copysign(1.0, x) for x in data].count(-1.0) == 1, data


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", sorted(n for n, s in CATALOG.items() if s.domain.boundary))
def test_domain_edges_are_values_of_the_dtype_inside_the_domain(name: str, dtype: str) -> None:
    """An edge that is no value of the dtype (0.05, 1.2, -0.9) is rounded to one the domain
    still admits, in the dtype and in float32 (the generator's own evaluation)."""
    spec = CATALOG[name]
    d = spec.domain
    for index, declared in enumerate(d.boundary):
        values = options(*d.leaf_range(index), dtype, d, index).values
        for edge in declared:
            got = [v for v in values if abs(v - edge) <= 1e-2 * max(abs(edge), 1.0)]
            assert got, (name, dtype, edge, values)
            for v in got:
                assert round_to(v, dtype) == v
                if index == 0:
                    for x in (v, round_to(v, "float32")):
                        assert d.accepts([_tensor([x])], {}, at_kinks=True), (name, dtype, edge, x)


@pytest.mark.parametrize("domain,at,near,attrs", [
    (dom.KINK_AT_ZERO, [[0.0, 1.0]], [[0.005, 1.0]], {}),
    (dom.CLAMP, [[-0.5, 0.5, 0.0]], [[-0.495, 0.0]], {"min": -0.5, "max": 0.5}),
    (dom.NO_TIES_PAIR, [[1.0, 2.0], [1.0, 3.0]], [[1.0, 2.0], [1.005, 3.0]], {}),
    (dom.UNIQUE_EXTREME, [[2.0, 2.0, 1.0]], [[2.0, 1.995, 1.0]], {}),
    (tx.DISTINCT_ALONG_DIM, [[2.0, 2.0, 1.0]], [[2.0, 1.995, 1.0]], {"dim": 0}),
    (tx.HARD_SIGMOID, [[-3.0, 3.0, 0.0]], [[-2.995, 0.0]], {}),
    (dom.ROUNDING, [[1.0, -2.0, 0.5]], [[1.005, 0.5]], {}),
])
def test_kink_domains_admit_exact_kinks_with_boundary_values_never_near_ones(
        domain: dom.Domain, at: list[list[float]], near: list[list[float]], attrs: dict[str, float]) -> None:
    xs, ys = [_tensor(x) for x in at], [_tensor(y) for y in near]
    assert not domain.accepts(xs, attrs) and domain.accepts(xs, attrs, at_kinks=True)
    assert not domain.accepts(ys, attrs, at_kinks=True)


def test_generated_ops_reach_their_kinks_and_stay_in_their_domains() -> None:
    """Over seeded programs, some relu/abs inputs are exactly 0 and some maximum/minimum inputs
    tie (never with boundary values off); every op input is in its domain, kinks admitted."""
    reached: dict[str, int] = {}
    for profile in ("default", "continuous"):
        at = 0
        for k in range(SEEDS):
            p = generate(RandomChoices(k), GenConfig.profile(profile, ops=("relu", "abs", "maximum", "minimum")))
            values = _values(p)
            for st in p.statements:
                if not isinstance(st, OpCall) or not all(x in values for x in st.inputs):
                    continue
                xs = [values[x] for x in st.inputs]
                assert CATALOG[st.op].domain.accepts(xs, st.attrs, at_kinks=True), (profile, k, st)
                at += not CATALOG[st.op].domain.accepts(xs, st.attrs)
        reached[profile] = at
    assert reached["default"] >= 10 and reached["continuous"] == 0, reached


def _values(p: Program) -> dict[str, torch.Tensor]:
    """Every float value of the program, as the PyTorch executor computes it in float32."""
    obs = run_torch(p)
    return {v.id: torch.tensor(v.value.data, dtype=torch.float32).reshape(v.value.shape) for v in obs.values}


def _float_attrs(progs: list[Program]) -> list[tuple[str, str, float]]:
    """(op, attribute, value) of every float attribute with declared boundary values."""
    return [(s.op, a.name, s.attrs[a.name]) for p in progs for s in p.statements if isinstance(s, OpCall)
            for a in CATALOG[s.op].attrs if a.boundary and isinstance(s.attrs.get(a.name), float)]


def test_float_attributes_snap_to_their_boundary_values_and_the_continuous_profile_never() -> None:
    """powf_scalar's integral exponents (burn's dispatch to powi_scalar) and the scalars' 0 and 1
    are drawn, only as declared, and never in the profile "continuous"."""
    ops = ("powf_scalar", "mul_scalar", "add_scalar", "softplus", "exp")
    seen = _float_attrs([generate(RandomChoices(k), GenConfig(ops=ops)) for k in range(400)])
    on = [(op, name, v) for op, name, v in seen if v in CATALOG[op].attrs[0].boundary]
    assert 0.005 <= len(on) / len(seen) <= 0.1, (len(on), len(seen))
    assert {v for op, _, v in on if op == "powf_scalar"} >= {0.0, 1.0, 2.0}, on
    near = [(op, v) for op, name, v in seen if any(0 < abs(v - b) <= 0.02 for b in CATALOG[op].attrs[0].boundary)]
    assert not near, near  # within the snap of a boundary value yet not on it
    continuous = _float_attrs([generate(RandomChoices(k), GenConfig.profile("continuous", ops=ops))
                               for k in range(400)])
    assert not [v for op, _, v in continuous if v in CATALOG[op].attrs[0].boundary]


# ops whose domain lists kink points for the first input (relu's 0, floor's integers, clamp's
# grid): they get kink leaves; the others' kinks are ties (max, sort, maximum)
POINT_KINKS = sorted(n for n, s in CATALOG.items() if "kink" in s.domain.tags and s.domain.boundary_values(0))


def _first_inputs(p: Program, op: str) -> list[tuple[float, ...]]:
    """The data of the leaves that are the first input of a call of `op`."""
    leaves = {s.id: s for s in p.statements if isinstance(s, Leaf)}
    return [leaves[s.inputs[0]].data for s in p.statements
            if isinstance(s, OpCall) and s.op == op and s.inputs[0] in leaves]


@pytest.mark.parametrize("op", ["abs", "relu", "prelu", "hard_sigmoid", "floor", "round"])
def test_kink_leaves_put_the_ops_first_input_on_its_kink_points(op: str) -> None:
    """With p_kink_leaf 1, an op with kink points takes a fresh first input with elements on
    them (and the other elements continuous); at 0 such inputs are rare."""
    points = set(kink_options("float32", CATALOG[op].domain).values)
    assert points

    def on_points(data: tuple[float, ...]) -> int:
        return sum(1 for x in data if x in points)

    kinked = [d for k in range(40) for d in _first_inputs(generate(RandomChoices(k), GenConfig(
        ops=(op,), dtype="float32", p_kink_leaf=1.0)), op)]
    plain = [d for k in range(40) for d in _first_inputs(generate(RandomChoices(k), GenConfig(
        ops=(op,), dtype="float32", p_kink_leaf=0.0)), op)]
    assert len(kinked) >= 30, len(kinked)
    share = sum(1 for d in kinked if on_points(d)) / len(kinked)
    assert share >= 0.5, share  # KINK_ELEMENT of the elements: most leaves hold one
    assert sum(1 for d in plain if on_points(d)) <= len(plain) // 4
    # the other elements stay continuous: not every element of every kink leaf is a point
    assert any(on_points(d) < len(d) for d in kinked)


def test_ops_whose_kinks_are_ties_draw_no_kink_leaf_choice() -> None:
    """An op whose domain lists no kink point (max: ties) draws no kink-leaf choice, so its
    programs are the same whatever p_kink_leaf is."""
    for k in range(30):
        for ops in (("max", "sort", "maximum"), ("exp", "mul")):
            a = generate(RandomChoices(k), GenConfig(ops=ops, p_kink_leaf=0.0))
            b = generate(RandomChoices(k), GenConfig(ops=ops, p_kink_leaf=0.9))
            assert program_to_dict(a) == program_to_dict(b), (k, ops)


def test_the_continuous_profile_draws_no_kink_leaf() -> None:
    cfg = GenConfig.profile("continuous", ops=("relu", "abs"), p_kink_leaf=1.0)
    data = [x for k in range(40) for d in _leaf_data([generate(RandomChoices(k), cfg)]) for x in d]
    assert data and not any(x == 0.0 for x in data)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", POINT_KINKS)
def test_kink_points_are_values_of_the_dtype_inside_the_domain(name: str, dtype: str) -> None:
    """Every kink point a kink leaf may take is exact in the dtype and in float32, and a tensor
    of it is admitted by the op's domain with kinks admitted (clamp: at a bound on its grid)."""
    d = CATALOG[name].domain
    values = kink_options(dtype, d).values
    assert values
    attrs = {"min": values[0], "max": values[-1]} if d is dom.CLAMP else {}
    for v in values:
        assert round_to(v, dtype) == v and round_to(v, "float32") == v, (name, dtype, v)
        assert d.accepts([_tensor([v])], attrs, at_kinks=True), (name, v)
