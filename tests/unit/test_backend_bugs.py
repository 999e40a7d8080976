"""Known bugs per burn backend (difftest/divergences/known_bugs.py `backends`): a record matches a
finding only on the backends it is declared for, triage reads the backend its worker runs on,
and the records agree with the backends each bug case was measured on (`backends_tested`).
No built interpreter: faults are built from the corpus cases' recorded observations."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from difftest.divergences.known_bugs import KNOWN_BUGS, Fault, KnownBug
from difftest.exec.backends import BACKENDS
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import load_case
from difftest.findings.explaining import explains, known_bug_of
from difftest.findings.localisation import Localisation
from difftest.findings.triage import fault_of, shown_fault, triage
from difftest.oracle.check import check
from difftest.program.ir import Backward, Leaf, OpCall, Program
from difftest.program.jsonio import program_from_dict, program_to_dict
from difftest.program.observation import Observation
from tests.programs import Replay

ROOT = Path(__file__).resolve().parents[2]
BY_NAME = {b.name: b for b in KNOWN_BUGS}


def _case_path(bug: KnownBug) -> Path:
    return ROOT / next(ref for ref in bug.knowledge.evidence if ref.startswith("corpus/"))


def _recorded_fault(bug: KnownBug, backend: str, path: Path | None = None) -> Fault:
    """The bug's case (or its case at `path`) as a fault: its first recorded mismatch, localised
    to its op, on `backend`."""
    case = load_case(path or _case_path(bug))
    m = case.record["verdict"]["mismatches"][0]
    if m["kind"] == "outcome":  # a panic: at the statement that panicked, with its message
        return Fault("outcome", m["statement"], case.program, case.program.dtype, "burn", m["detail"], backend=backend)
    ops = [s.id for s in case.program.statements if isinstance(s, OpCall)]
    # a one-op case: at its op; a longer one: where the program shows it (a value: its statement;
    # a gradient: its backward), as triage matches a finding past the ops it localises
    site = ops[0] if len(ops) == 1 else m["statement"] if m["kind"] == "value" else m["backward"]
    pair = tuple(float(x) for x in m["pair"])
    return Fault(m["kind"], site, case.program, case.program.dtype, None, m["detail"],
                 pairs=((pair[0], pair[1]),), elements=tuple(m["elements"]), backend=backend)


OTHER_BACKENDS_BUGS = [b for b in KNOWN_BUGS if b.backends is not None and "flex" not in b.backends]


@pytest.mark.parametrize("bug", OTHER_BACKENDS_BUGS, ids=[b.name for b in OTHER_BACKENDS_BUGS])
def test_a_backend_bug_is_known_on_its_backends_and_news_on_flex(bug: KnownBug) -> None:
    assert bug.backends is not None and "flex" not in bug.backends
    for backend in bug.backends:
        assert explains(bug, _recorded_fault(bug, backend)), backend
    on_flex = _recorded_fault(bug, "flex")
    assert not explains(bug, on_flex)
    assert known_bug_of([on_flex]) is None  # and no other record explains it there


CASES_OF_BACKEND_BUGS = [(b, ref) for b in OTHER_BACKENDS_BUGS for ref in b.knowledge.evidence
                         if ref.startswith("corpus/backends/")]


@pytest.mark.parametrize(("bug", "ref"), CASES_OF_BACKEND_BUGS, ids=[r for _, r in CASES_OF_BACKEND_BUGS])
def test_every_case_of_a_backend_bug_is_that_bug_on_its_backends(bug: KnownBug, ref: str) -> None:
    """A record with several cases (one root, several programs) explains each of them."""
    assert bug.backends is not None
    for backend in bug.backends:
        assert explains(bug, _recorded_fault(bug, backend, ROOT / ref)), backend


def test_every_record_names_known_backends() -> None:
    for bug in KNOWN_BUGS:
        assert bug.backends is None or (bug.backends and set(bug.backends) <= set(BACKENDS)), bug.name


def test_every_backend_bug_is_in_the_table_of_docs_backends() -> None:
    """docs/backends.md's table of known bugs per backend is written by hand: each record of
    some backends only has a row there, and the row for the rest counts them."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "backends.md").read_text()
    first_cells = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `")]
    missing = [b.name for b in KNOWN_BUGS
               if b.backends is not None and not any(f"`{b.name}`" in cell for cell in first_cells)]
    assert not missing, f"docs/backends.md lacks a row for {missing}"
    shared = sum(1 for b in KNOWN_BUGS if b.backends is None and b.framework == "burn")
    words = {8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen", 14: "fourteen"}
    assert f"| the other {words.get(shared, shared)} | every backend |" in text, shared


def test_a_record_of_no_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="backends"):
        replace(BY_NAME["ndarray-gelu-grad-tanh-approximation"], backends=())


def _fault(kind: str, op: str, pairs: tuple[tuple[float, float], ...], *, backend: str = "ndarray",
           dtype: str = "float32", device: str = "autodiff") -> Fault:
    """A finding of `kind` localised to `op` of a one-op program in `dtype` (its leaf on `device`)."""
    program = program_from_dict({
        "format": "difftest-program", "version": 1, "dtype": dtype,
        "statements": [
            {"id": "x", "kind": "leaf", "shape": [2], "data": [0.5, 2.0], "device": device,
             "require_grad": device == "autodiff"},
            {"id": "y", "kind": "op", "op": op, "inputs": ["x"]},
        ],
    })
    return Fault(kind, "y", program, dtype, None, "", pairs=pairs, elements=(0,), backend=backend)


def _known(fault: Fault) -> str | None:
    bug = known_bug_of([fault])
    return bug.name if bug is not None else None


def test_the_backend_bugs_explain_what_they_do_on_their_backends() -> None:
    gelu_grad = ((0.8674951246561629, 0.8673698306083679),)
    assert _known(_fault("grad", "gelu", gelu_grad)) == "ndarray-gelu-grad-tanh-approximation"
    assert _known(_fault("grad", "gelu", gelu_grad, backend="wgpu", dtype="float64")) is not None
    # log_sigmoid(12): an absolute error of half a float32 ulp of 1
    ls = ((-6.144193477732806e-06, -6.198863957251888e-06),)
    assert _known(_fault("value", "log_sigmoid", ls)) == "ndarray-log-sigmoid-without-log1p"
    hs = ((0.5166666666666667, 0.5166666507720947),)
    plain = _fault("value", "hard_sigmoid", hs, dtype="float64", device="plain")
    assert _known(plain) == "ndarray-hard-sigmoid-f64-in-f32"
    silu = ((0.31122966560092726, 0.311229676008224),)
    assert _known(_fault("value", "silu", silu, dtype="float64")) == "ndarray-sigmoid-f64-in-f32"


def test_a_neighbour_on_the_same_backend_is_news() -> None:
    # gelu's forward, or a gradient error beyond the tanh approximation's, or a NaN gradient
    assert _known(_fault("value", "gelu", ((0.3457312, 0.3458),))) is None
    assert _known(_fault("grad", "gelu", ((0.8674951, 0.86),))) is None
    assert _known(_fault("grad", "gelu", ((0.8674951, float("nan")),))) is None
    # sigmoid in float32 (the record is float64 rounding through f32), or off by more than f32 rounding
    assert _known(_fault("value", "sigmoid", ((0.6224593, 0.6224594),))) is None
    assert _known(_fault("value", "sigmoid", ((0.6224593312018546, 0.6225),), dtype="float64")) is None
    # a log_sigmoid far off: not the rounded sum's error (on Wgpu in float64: its transcendentals)
    far = ((-0.04858735157374206, 42.97512519402983),)
    assert _known(_fault("value", "log_sigmoid", far, dtype="float64")) is None
    on_wgpu = _fault("value", "log_sigmoid", far, backend="wgpu", dtype="float64")
    assert _known(on_wgpu) == "wgpu-f64-transcendentals-wrong"
    assert _known(_fault("value", "log_sigmoid", far, backend="wgpu")) is None  # float32 on Wgpu: news
    # hard_sigmoid of a plain float64 leaf on Flex (Flex's own kernel computes in f64)
    hs = ((0.5166666666666667, 0.5166666507720947),)
    assert _known(_fault("value", "hard_sigmoid", hs, backend="flex", dtype="float64", device="plain")) is None


def test_triage_matches_a_record_on_the_backend_its_worker_runs_on() -> None:
    # a panic at the op: triage signs and matches it without running anything more on the worker
    name = "flex-reduce-dim-after-unit-swap-panics"
    bug = BY_NAME[name]
    case = load_case(_case_path(bug))
    observed = Observation.from_dict(case.record["observations"]["burn"], "burn")
    for backend in (None, *BACKENDS):  # None: the default backend, Flex
        worker: Any = Replay(observed, backend)
        verdict = check(case.program, worker)
        assert not verdict.ok
        t = triage(verdict, worker)
        expected = bug.shows_on(backend or "flex")
        assert (t.known is not None and t.known.name == name) == expected, (backend, t.describe())


WITH_CASES = [b for b in KNOWN_BUGS if any(ref.startswith("corpus/") for ref in b.knowledge.evidence)]


def test_only_pytorchs_uninitialised_memory_has_no_case() -> None:
    # a strict replay cannot insist on garbage: every other record's bug has its corpus case
    assert [b.name for b in KNOWN_BUGS if b not in WITH_CASES] == ["torch-bf16-conv-weight-grad-uninitialised"]


@pytest.mark.parametrize("bug", WITH_CASES, ids=[b.name for b in WITH_CASES])
def test_records_agree_with_the_backends_their_case_was_measured_on(bug: KnownBug) -> None:
    doc = json.loads(_case_path(bug).read_text())
    tested = doc.get("backends_tested") or {}
    assert tested, f"{bug.name}: its case records no backends_tested (difftest versions --backend ... --record)"
    for backend, entry in tested.items():
        if entry["outcome"] == "fails as recorded":
            assert bug.shows_on(backend), f"{bug.name} fails as recorded on {backend}, not declared there"
        elif entry["outcome"] == "passes":
            assert not bug.shows_on(backend), f"{bug.name} passes on {backend}, declared there"


def _downstream_verdict(offset: float) -> Any:
    """The sigmoid case (float64 sigmoid rounded through f32 on NdArray) with z = exp(y) after it,
    burn's z computed from its rounded y (+ `offset`), judged against PyTorch."""
    case = load_case(ROOT / "corpus/backends/ndarray-sigmoid-f64-in-f32.json")
    doc = program_to_dict(case.program)
    doc["statements"].append({"id": "z", "kind": "op", "op": "exp", "inputs": ["y"]})
    program = program_from_dict(doc)
    burn = json.loads(json.dumps(case.record["observations"]["burn"]))
    y = next(v for v in burn["values"] if v["id"] == "y")
    burn["values"].append({**y, "id": "z", "data": [math.exp(v) + offset for v in y["data"]]})
    return check(program, cast(BurnWorker, Replay(Observation.from_dict(burn, "burn"), "ndarray")))


def test_a_finding_past_the_localisation_budget_is_matched_where_the_program_shows_it() -> None:
    verdict = _downstream_verdict(0.0)
    at_z = next(m for m in verdict.findings if m.statement == "z")
    sigmoid = BY_NAME["ndarray-sigmoid-f64-in-f32"]
    # z is computed from the rounded sigmoid: that record's effect downstream, on NdArray only
    assert explains(sigmoid, shown_fault(verdict, at_z, "ndarray"))
    assert not explains(sigmoid, shown_fault(verdict, at_z, "flex"))
    # off by more than the rounding: news
    far = _downstream_verdict(1e-3)
    at_far = next(m for m in far.findings if m.statement == "z")
    assert known_bug_of([shown_fault(far, at_far, "ndarray")]) is None


def test_a_program_with_two_known_bugs_is_known_and_one_unexplained_finding_makes_it_news() -> None:
    hs = _fault("value", "hard_sigmoid", ((0.5166666666666667, 0.5166666507720947),), dtype="float64", device="plain")
    sg = _fault("value", "sigmoid", ((0.6224593312018546, 0.622459352016449),), dtype="float64")
    assert _known(hs) == "ndarray-hard-sigmoid-f64-in-f32" and _known(sg) == "ndarray-sigmoid-f64-in-f32"
    pair = known_bug_of([hs, sg])
    assert pair is not None and pair.name == "ndarray-hard-sigmoid-f64-in-f32"  # the first finding's
    news = _fault("value", "exp", ((1.6487212707001282, 1.7),), dtype="float64")
    assert known_bug_of([hs, sg, news]) is None


def test_sigmoids_gradient_carries_the_rounding_of_its_output() -> None:
    # y (1 - y) at y = 0.99083 from y rounded to f32: 6.4e-8 off a derivative of 0.0091
    near_one = ((0.009085561875885526, 0.009085497381420282),)
    grad = replace(_fault("grad", "sigmoid", near_one, dtype="float64"), inputs=((4.68,),))
    assert _known(grad) == "ndarray-sigmoid-f64-in-f32"
    assert _known(replace(grad, pairs=((0.009085561875885526, 0.0089),))) is None  # 1.9e-4 off: news
    assert _known(replace(grad, inputs=())) is None  # without the op's input, only within_f32_rounding


def test_a_finding_no_single_op_explains_is_matched_where_the_program_shows_it() -> None:
    verdict = _downstream_verdict(0.0)
    at_z = next(m for m in verdict.findings if m.statement == "z")
    graph = Localisation(None, "graph", "value", None, "float64", "rounding", "burn-wrong")
    fault = fault_of(verdict, at_z, graph, "ndarray")
    assert fault.site == "z" and fault.pairs
    assert _known(fault) == "ndarray-sigmoid-f64-in-f32"


def test_hard_sigmoids_f32_error_is_absolute_where_its_sum_cancels() -> None:
    # hard_sigmoid(-2.98138) = -2.98138 / 6 + 0.5 = 0.0031036: float32 rounds the sum at 0.5's
    # scale, 2e-8 off (a LibTorch campaign's finding, program 13562 of seed 301)
    x = (-0.6326762437820435, -2.9813785552978516)
    pairs = ((0.0031035741170247397, 0.0031035542488098145),)
    # the failing element is the second input's: the record computes burn's float32 result from it
    plain = replace(_fault("value", "hard_sigmoid", pairs, dtype="float64", device="plain", backend="tch"),
                    inputs=(x,), elements=(1,))
    assert _known(plain) == "ndarray-hard-sigmoid-f64-in-f32"
    autodiff = replace(plain, program=_fault("value", "hard_sigmoid", pairs, dtype="float64").program,
                       backend="flex")
    assert _known(autodiff) == "hard-sigmoid-autodiff-f64-in-f32"
    assert _known(replace(plain, pairs=((0.0031035741170247397, 0.003103),))) is None  # 5.7e-7 off: news
    assert _known(replace(plain, inputs=())) is None  # without the op's input, only within_f32_rounding
    # which element failed, unknown: 4 units of f32 rounding of 0.5 + max |x| / 6, absolute
    assert _known(replace(plain, elements=())) == "ndarray-hard-sigmoid-f64-in-f32"
    assert _known(replace(plain, elements=(), pairs=((0.0031035741170247397, 0.003103),))) is None


def test_a_gradient_shown_downstream_carries_the_rounding_of_its_terms() -> None:
    # NdArray, float64: sigmoid rounded to f32 upstream of a backward whose gradient of 0.0124 is
    # summed from terms of 31.2 (the arbiter's magnitude run): 2.5e-7 off is f32 rounding of the
    # terms, not of the small result (a campaign's program, seed 301)
    program = Program((
        Leaf("x", (1,), (0.5,), "autodiff", True),
        OpCall("y", "sigmoid", ("x",)),
        OpCall("s", "sum", ("y",)),
        Backward("bw", "s"),
    ), "float64")
    pair = ((0.012388976509984604, 0.012388728560549553),)
    shown = Fault("grad", "bw", program, "float64", None, "", pairs=pair, elements=(0,), backend="ndarray")
    bug = BY_NAME["ndarray-sigmoid-f64-in-f32"]
    assert explains(bug, replace(shown, terms=(31.2,)))
    assert not explains(bug, shown)  # without the terms: 2e-5 relative to 0.0124, past f32 rounding
    assert not explains(bug, replace(shown, pairs=((0.0124, 0.0134),), terms=(31.2,)))  # 1e-3: not rounding
    assert not explains(bug, replace(shown, terms=(31.2,), backend="flex"))


def test_the_float16_divisor_gradient_is_known_only_where_its_square_overflows() -> None:
    """div-divisor-grad-f16-overflow: a zero divisor gradient where b * b overflows float16 is the
    record; the same zero where b * b fits, a nonzero wrong value, or float32 is news."""
    def fault(b: float, observed: float, dtype: str = "float16") -> Fault:
        program = program_from_dict({
            "format": "difftest-program", "version": 1, "dtype": dtype,
            "statements": [{"id": "a", "kind": "leaf", "shape": [1], "data": [100.0], "device": "autodiff",
                            "require_grad": True},
                           {"id": "b", "kind": "leaf", "shape": [1], "data": [b], "device": "autodiff",
                            "require_grad": True},
                           {"id": "y", "kind": "op", "op": "div", "inputs": ["a", "b"]}],
        })
        return Fault("grad", "y", program, dtype, None, "", input=(1,), pairs=((-100.0 / b / b, observed),),
                     elements=(0,), inputs=((100.0,), (b,)))

    assert _known(fault(300.0, -0.0)) == "div-divisor-grad-f16-overflow"
    assert _known(fault(256.0, 0.0)) == "div-divisor-grad-f16-overflow"  # 65536: inf in float16
    assert _known(fault(255.0, 0.0)) is None  # 65025 fits: a zero there is news
    assert _known(fault(300.0, -0.0005)) is None  # wrong, but not the overflow's zero
    assert _known(fault(300.0, -0.0, "float32")) is None


def test_the_float16_softplus_gradient_is_known_only_where_its_backward_quantises() -> None:
    """softplus-f16-grad-underflow: softplus's float16 gradient lost or quantised where burn's
    backward rounds (g / beta) / (1 + exp(beta x)) below 2^-14 is the record; the same error where
    nothing is that small (small beta x, a large cotangent), beyond what the quantisation makes,
    above beta x = 11 (the identity), of the opposite sign, or in another dtype is news."""
    def fault(x: float, g: float, expected: float, observed: float, beta: float = 1.0,
              dtype: str = "float16") -> Fault:
        # the site's one-op program; its cotangent leaf (the second input) as the fault reads it
        program = Program((Leaf("a0", (1,), (x,), "autodiff", True), OpCall("y", "softplus", ("a0",), {"beta": beta}),
                           Backward("bw", "y")), dtype)
        return Fault("grad", "y", program, dtype, None, "", input=(0,), pairs=((expected, observed),),
                     elements=(0,), inputs=((x,), (g,)), verdict="agreement")

    sp = 1.0 / (1.0 + math.exp(-10.0))
    assert _known(fault(10.0, 1e-4, 1e-4 * sp, 0.0)) == "softplus-f16-grad-underflow"  # lost
    assert _known(fault(8.0, 1e-4, 1e-4 / (1 + math.exp(-8.0)), 1.7762184143066406e-04)) is not None  # quantised up
    # seed 12's: beta 0.723 at x = 10.95, the gradient 5.3e-5 reaching it lost
    beta = 0.7229303121566772
    assert _known(fault(10.953125, 5.257e-5, 5.255e-5, 0.0, beta)) == "softplus-f16-grad-underflow"
    assert _known(fault(10.0, 1e-4, 1e-4 * sp, -2e-5)) is None  # the opposite sign: not a rounding
    assert _known(fault(10.0, 1e-4, 1e-4 * sp, 1e-3)) is None  # far beyond the quantisation's size
    assert _known(fault(10.0, 1e-4, 1e-4 * sp, 0.0, 1.2)) is None  # beta x = 12: the identity, exact
    # a gradient scaled by 1.001 or 1.03 (grad-scale:softplus) where beta x is small: nothing quantised
    small = 1.0 / (1.0 + math.exp(-1.0))
    assert _known(fault(1.0, 1.0, small, small * 1.001)) is None
    assert _known(fault(2.0, 1.0, 1 / (1 + math.exp(-2.0)), 1.03 / (1 + math.exp(-2.0)))) is None
    assert _known(fault(10.0, 1.0, sp, sp * 1.03)) is None  # large beta x, a cotangent of 1: 1.03 is not quantisation
    assert _known(fault(10.0, 1e-4, 1e-4 * sp, 0.0, dtype="bfloat16")) is None
    assert _known(fault(10.0, 1e-4, 1e-4 * sp, 0.0, dtype="float32")) is None


def test_wgpu_bfloat16_is_any_op_that_runs_in_bfloat16_on_wgpu() -> None:
    # gather_argmax of [0.5, ...] in a bfloat16 program on Wgpu gave -0.508: the op runs in
    # bfloat16, which Wgpu computes wrong, whether the program is bfloat16 or a cast made it so
    wrong = ((0.5, -0.5078125),)
    assert _known(_fault("value", "abs", wrong, backend="wgpu", dtype="bfloat16")) == "wgpu-bfloat16-wrong"
    assert _known(_fault("grad", "exp", wrong, backend="wgpu", dtype="bfloat16")) == "wgpu-bfloat16-wrong"
    # the same error in another dtype, on another backend, or as a refusal is not this record's
    assert _known(_fault("value", "abs", wrong, backend="wgpu", dtype="float16")) is None
    assert _known(_fault("value", "abs", wrong, backend="flex", dtype="bfloat16")) is None
    assert _known(_fault("outcome", "abs", (), backend="wgpu", dtype="bfloat16")) is None
    # cubecl's matmul checks the dtype and refuses: the same root (no bfloat16 in WGSL), by its message
    refused = ("called `Result::unwrap()` on an `Err` value: Unable to launch matmul because a required feature "
               "is unavailable: Types lhs=Float(BF16), rhs=Float(BF16) and/or output=Float(BF16) not supported.")
    panic = replace(_fault("outcome", "abs", (), backend="wgpu", dtype="bfloat16"), message=refused)
    assert _known(panic) == "wgpu-bfloat16-wrong"
    assert _known(replace(panic, dtype="float32", program=replace(panic.program, dtype="float32"))) is None
    assert _known(replace(panic, message="index out of bounds")) is None


def test_gelus_gradient_error_is_carried_by_the_terms_of_a_gradient_upstream() -> None:
    # NdArray's tanh-approximate gelu derivative, 8.7e-4 per unit of incoming gradient at most,
    # shows in x1's gradient (terms 15 to 24) as 0.0066 to 0.011, and in g0 = grad(x1; bw1) and its
    # detach c4, whose own terms are none: they carry the gradient's
    doc = json.loads((Path(__file__).parent / "data" / "ndarray-gelu-through-a-gradient-read.json").read_text())
    program = program_from_dict(doc["program"])
    verdict = check(program, cast(BurnWorker, Replay(Observation.from_dict(doc["burn"], "burn"), "ndarray")))
    gelu = BY_NAME["ndarray-gelu-grad-tanh-approximation"]
    by_statement = {m.statement: m for m in verdict.findings if m.kind == "value"}
    grad = next(m for m in verdict.findings if m.kind == "grad" and m.statement == "x1" and m.backward == "bw1")
    for m in (grad, by_statement["g0"], by_statement["c4"]):
        f = shown_fault(verdict, m, "ndarray")
        assert f.kind == "grad" and f.site == "bw1" and min(f.terms) > 10, (m.statement, f.terms)
        assert explains(gelu, f), m.statement
        assert not explains(gelu, replace(f, backend="flex"))
        # ten times the error: beyond the approximation's, news
        assert not explains(gelu, replace(f, pairs=tuple((r, r + 10 * (b - r)) for r, b in f.pairs)))


def test_a_selection_of_a_gradient_read_carries_the_gradients_terms() -> None:
    # Wgpu's float32 asin error (2e-4 at 0.7) reaches g0 = grad(x3; bw) through mul: each element
    # of g0 sums three asin values (terms 1.5 to 1.8), so it can be off by 1.3e-4 at -0.037. v3 =
    # cummax(g0) only selects g0's elements, so the largest of g0's terms bounds each of v3's
    doc = json.loads((Path(__file__).parent / "data" / "wgpu-asin-through-cummax-of-a-gradient-read.json").read_text())
    program = program_from_dict(doc["program"])
    verdict = check(program, cast(BurnWorker, Replay(Observation.from_dict(doc["burn"], "burn"), "wgpu")))
    precision = BY_NAME["wgpu-f32-transcendental-precision"]
    cummax = next(m for m in verdict.findings if m.kind == "value" and m.statement == "v3")
    f = shown_fault(verdict, cummax, "wgpu")
    assert f.kind == "grad" and f.site == "bw" and min(f.terms) > 1, f.terms
    assert explains(precision, f)
    # ten times the error: beyond the driver's precision, news
    assert not explains(precision, replace(f, pairs=tuple((r, r + 10 * (b - r)) for r, b in f.pairs)))
    # an op that computes (not only selects) from the read carries no such bound
    computed = replace(program, statements=tuple(replace(s, op="exp") if isinstance(s, OpCall) and s.id == "v3" else s
                                                 for s in program.statements))
    assert not any(shown_fault(replace(verdict, program=computed), cummax, "wgpu").terms)
