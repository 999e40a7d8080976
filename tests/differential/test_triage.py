"""Triage (difftest/findings/triage.py, localise.py): a finding is named by the op whose own
computation is wrong, and a known bug is recognised by its record's site and effect, never by a
signature: a new bug beside a known one is news.

Faults are compiled into difftest-burn and switched on per worker (DIFFTEST_BURN_FAULT,
rust/src/fault.rs); each test builds the program a neighbour of a known bug would show in.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import cast

import pytest

from difftest.campaign.loop import program_seed
from difftest.divergences.known_bugs import KNOWN_BUGS, known_bug
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import load_case
from difftest.findings.cotangents import cotangents
from difftest.findings.explaining import explains
from difftest.findings.localise import localise
from difftest.findings.triage import shown_fault, triage
from difftest.ops.value_dtypes import value_dtypes
from difftest.oracle.check import check
from difftest.program.ir import Grad, Module, OpCall, Program
from difftest.program.jsonio import program_from_dict
from difftest.program.observation import Observation
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate
from tests.differential.triaging import triaged as _triage
from tests.programs import Replay, backward, cut, leaf, op

BUGS = Path(__file__).resolve().parents[2] / "corpus" / "bugs"


def _chain(dtype: str = "float32") -> Program:
    # the wrong derivative (exp's) sits in the middle of the path: the leaf is read by sin
    return Program((
        leaf("x", [0.3, -0.7, 1.1], rg=True), op("a", "sin", "x"), op("b", "exp", "a"), op("c", "tanh", "b"),
        op("s", "sum", "c"), backward("s"),
    ), dtype)


def test_a_wrong_derivative_is_named_by_its_op_not_by_the_leafs_reader(workers: dict[str, BurnWorker]) -> None:
    t = _triage(workers, _chain(), "grad-scale:exp:1e-3")
    assert t.known is None
    assert t.localisation is not None and t.localisation.where == "exp" and t.localisation.statement == "b"
    assert t.localisation.input == (0,) and t.localisation.error == "small"
    assert t.signature.startswith("burn-wrong:-:exp:grad:wrong ")
    # its minimal reproducer is the op alone on the inputs PyTorch recorded
    assert t.localisation.program is not None
    assert [s.kind for s in t.localisation.program.statements] == ["leaf", "op", "backward"]


def test_the_same_fault_in_float64_has_the_same_signature(workers: dict[str, BurnWorker]) -> None:
    t32 = _triage(workers, _chain(), "grad-scale:exp:1e-3")
    t64 = _triage(workers, _chain("float64"), "grad-scale:exp:1e-3")
    assert t32.signature == t64.signature and t64.localisation is not None
    assert t64.localisation.dtype == "float64"


def test_a_value_fault_is_localised_to_the_op_that_computes_it(workers: dict[str, BurnWorker]) -> None:
    t = _triage(workers, _chain(), "value-scale:exp:1e-3")
    assert t.localisation is not None and t.localisation.where == "exp" and t.localisation.kind == "value"


def test_error_classes_are_coarse() -> None:
    from difftest.findings.error_classes import error_class

    assert error_class([(1.0, float("nan"))]) == "nan"
    assert error_class([(1.0, -1.0), (2.0, -2.1)]) == "sign"
    assert error_class([(1.0, -1.0), (2.0, 2.5)]) == "large"  # a sign flip at some elements only
    assert error_class([(1.0, 0.0)]) == "zero"
    assert error_class([(1.0, 1.001), (2.0, 2.002), (4.0, 4.004)]) == "small"
    assert error_class([(1 / 3, 0.3333333432674408)]) == "rounding"


def test_an_error_of_roundings_size_is_a_precision_loss_only_in_float64() -> None:
    """A localised fault whose error is below 3e-6 relative signs as `rounding` where the op
    computes in float64 (a computation through f32, another bug than a wrong formula), and as
    the wrong number it is in float32: an injected epsilon added after rms_norm's square root
    was `rounding` or `small` by the input's scale, four cases for one bug, before."""
    from difftest.findings.localisation import Localisation
    from difftest.findings.triage import localised_signature

    def sig(dtype: str, error: str, kind: str = "grad") -> str:
        return localised_signature(Localisation("y", "apply:rms_norm", kind, (0,), dtype, error, "burn-wrong"), None)

    assert sig("float32", "rounding") == sig("float32", "small") == sig("float32", "large")
    assert sig("float32", "rounding").startswith("burn-wrong:-:apply:rms_norm:grad:wrong ")
    assert sig("float64", "rounding").startswith("burn-wrong:-:apply:rms_norm:grad:rounding ")
    assert sig("float64", "rounding") != sig("float64", "small")
    assert sig("float32", "nan").startswith("burn-wrong:-:apply:rms_norm:grad:nan ")


@pytest.mark.parametrize("path", sorted(BUGS.glob("*.json")), ids=lambda p: p.stem)
def test_every_bug_case_is_explained_by_its_own_record(workers: dict[str, BurnWorker], path: Path) -> None:
    case = load_case(path)
    if case.not_here() is not None:  # a PyTorch kernel of some CPUs: corpus/README.md#host
        pytest.skip(f"{path.name} {case.not_here()}: corpus/README.md#host")
    t = _triage(workers, case.program, None)
    assert t.known is not None, t.describe()
    assert t.known.name == path.stem, t.describe()


# Neighbours of known bugs: a different bug in the same op, dtype or message family is news.
NEIGHBOURS = [
    pytest.param(Program((
        leaf("a", [0.5, 1.0], rg=True), leaf("b", [2.0, 0.5], rg=True), op("y", "powf", "a", "b"),
        op("s", "sum", "y"), backward("s"),
    )), "grad-scale:powf:1e-3", id="powf-f32-grad-1e-3 (powf-zero-base-nan-grad)"),
    pytest.param(Program((
        leaf("x", [1.0, 2.0], rg=True), op("y", "div_scalar", "x", scalar=3.0), op("s", "sum", "y"),
        backward("s"),
    )), "grad-scale:div_scalar:1e-3", id="div_scalar-f32-grad-1e-3 (div-scalar-grad-f32-reciprocal)"),
    pytest.param(Program((
        leaf("x", [1.0, 2.0], rg=True), op("y", "div_scalar", "x", scalar=3.0), op("s", "sum", "y"),
        backward("s"),
    ), "float64"), "grad-scale:div_scalar:1e-3", id="div_scalar-f64-grad-1e-3 (div-scalar-grad-f32-reciprocal)"),
    # below the generic 64 units of f32 rounding (3.8e-6), which explained them: the record's model
    # of its bug (bug_records.f32_reciprocal, hard_sigmoid_in_f32) tells the bug's error from another
    pytest.param(Program((
        leaf("x", [1.0, 2.0], rg=True), op("y", "div_scalar", "x", scalar=3.0), op("s", "sum", "y"),
        backward("s"),
    ), "float64"), "grad-scale:div_scalar:1e-7", id="div_scalar-f64-grad-1e-7 (div-scalar-grad-f32-reciprocal)"),
    pytest.param(Program((
        leaf("x", [0.1, -0.4, 0.9, 2.5], rg=True), op("y", "hard_sigmoid", "x"), op("s", "sum", "y"),
    ), "float64"), "value-scale:hard_sigmoid:1e-6",
        id="hard_sigmoid-f64-autodiff-value-1e-6 (hard-sigmoid-autodiff-f64-in-f32)"),
    pytest.param(Program((
        leaf("x", [0.1, -0.4, 0.9, 1.3, -2.0, 0.25], rg=True, shape=[1, 1, 6]),
        leaf("w", [0.5, -0.25, 0.75], rg=True, shape=[1, 1, 3]),
        op("y", "conv1d", "x", "w", stride=[1], padding=[0], dilation=[1], groups=1),
        op("s", "sum", "y"), backward("s"),
    )), "grad-drop-input:conv1d:0", id="conv1d-ungrouped-input-grad (conv1d-grouped-weight-grad-uncropped)"),
    pytest.param(Program((
        leaf("x", [0.1, -0.4, 0.9], rg=True), op("y", "hard_sigmoid", "x"), op("s", "sum", "y"), backward("s"),
    ), "float64"), "grad-scale:hard_sigmoid:1e-3", id="hard_sigmoid-f64-slope (hard-sigmoid-autodiff-f64-in-f32)"),
    pytest.param(Program((
        leaf("x", [0.1, -0.4, 0.9], device="plain"), op("y", "hard_sigmoid", "x"),
    ), "float64"), "value-scale:hard_sigmoid:1e-6",
        id="hard_sigmoid-f64-off-autodiff (hard-sigmoid-autodiff-f64-in-f32)"),
    pytest.param(Program((
        leaf("x", [1.5, -2.0], rg=True), op("y", "exp", "x"), op("s", "sum", "y"), backward("s"),
    )), "grad-drop:exp", id="exp-untracked (powi-zero-untracked)"),
]


@pytest.mark.parametrize(("program", "fault"), NEIGHBOURS)
def test_a_new_bug_beside_a_known_one_is_reported_as_new(workers: dict[str, BurnWorker], program: Program,
                                                         fault: str) -> None:
    t = _triage(workers, program, fault)
    assert t.known is None, f"{fault} was taken for the known bug {t.known.name if t.known else ''}"


PANICS = [
    pytest.param(Program((
        leaf("x", [0.5, 1.0], rg=True), op("y", "exp", "x"), op("s", "sum", "y"), backward("s"),
    )), "Cannot run backward: graph tape has already been consumed at NodeId(3)",
        id="tape-consumed-at-an-op-root (backward-of-used-leaf-panics)"),
    pytest.param(Program((
        leaf("x", [0.5, 1.0, 1.5, 2.0], rg=True, shape=[2, 2]), op("y", "sum_dim", "x", dim=0),
        op("s", "sum", "y"), backward("s"),
    )), "range end index 7 out of range for slice of length 6",
        id="index-out-of-range-in-a-backward-without-a-unit-swap (flex-sum-dim-backward-after-unit-swap-panics)"),
    pytest.param(Program((
        leaf("x", [0.5, 2.0], rg=True), op("bw", "powf_scalar", "x", exponent=2.0**62),
    )), "called `Option::unwrap()` on a `None` value",
        id="unwrap-at-an-exponent-within-i64 (powf-scalar-huge-exponent-panics)"),
    pytest.param(Program((
        leaf("x", [0.5, 2.0], rg=True), op("bw", "mul_scalar", "x", scalar=math.inf),
    )), "called `Option::unwrap()` on a `None` value",
        id="unwrap-at-another-op (powf-scalar-huge-exponent-panics)"),
]


@pytest.mark.parametrize("exponent", [math.inf, -math.inf, 1e19, 2.0**63, -(2.0**64)])
def test_an_exponent_beyond_i64_is_the_powf_scalar_panic(exponent: float) -> None:
    """The record's site is every exponent burn's Scalar::try_as_integer unwraps to no i64."""
    from difftest.divergences.known_bugs import Fault
    from difftest.findings.explaining import known_bug_of

    program = Program((leaf("x", [0.5, 2.0], rg=True), op("bw", "powf_scalar", "x", exponent=exponent)))
    fault = Fault("outcome", "bw", program, program.dtype, "burn", "called `Option::unwrap()` on a `None` value")
    known = known_bug_of([fault], KNOWN_BUGS)
    assert known is not None and known.name == "powf-scalar-huge-exponent-panics"


@pytest.mark.parametrize(("program", "message"), PANICS)
def test_a_known_panic_message_elsewhere_is_news(program: Program, message: str) -> None:
    """A panic with a known bug's message at a statement where its site does not hold."""
    from difftest.divergences.known_bugs import KNOWN_BUGS, Fault
    from difftest.findings.explaining import known_bug_of

    fault = Fault("outcome", "bw", program, program.dtype, "burn", message)
    assert known_bug_of([fault], KNOWN_BUGS) is None


def test_a_finding_named_by_its_hash_gets_a_rust_test_name() -> None:
    """A saved finding's name is a hex digest, often starting with a digit: `difftest show` must
    still emit its Rust reproducer (it raised on such names)."""
    from difftest.findings.reproducers import rust_test, test_name

    assert test_name("720e723710f99bc2") == "case_720e723710f99bc2"
    assert test_name("powi-zero-untracked") == "powi_zero_untracked"
    program = Program((leaf("x", [0.5], rg=True), op("y", "exp", "x"), backward("y")))
    assert "fn case_720e723710f99bc2()" in rust_test(program, test_name("720e723710f99bc2"))


def test_comparisons_the_oracle_skips_are_counted_by_reason(workers: dict[str, BurnWorker]) -> None:
    """burn's detach of a require-grad leaf is a new leaf that gets a gradient PyTorch has no
    counterpart for (rule leaf-detach): that gradient is not compared, and the verdict says so."""
    from tests.programs import cut

    p = Program((leaf("x", [0.5, 1.0], rg=True), cut("c", "detach", "x"), op("y", "exp", "c"),
                 op("z", "mul", "y", "x"), op("s", "sum", "z"), backward("s")))
    if "" not in workers:
        workers[""] = BurnWorker()
        workers[""].start()
    v = check(p, workers[""])
    assert v.ok, v.report()
    assert v.skipped["gradient: burn holds it, PyTorch not"] >= 1, v.skipped


def test_a_gradient_read_through_another_read_of_the_parameter_is_localised(
        workers: dict[str, BurnWorker]) -> None:
    """burn's param reads are the parameter itself: the gradient observed at one read (p0) comes
    through another (p1) that the backward reaches. The path runs through every read of the
    parameter, so the float64 div_scalar bug is named and recognised (a 20,000-program campaign,
    seed 301, found it as `graph` before)."""
    program = program_from_dict({
        "format": "difftest-program", "version": 1, "dtype": "float64", "statements": [
            {"id": "m0", "kind": "module", "module": "linear",
             "weight": {"shape": [1, 2], "data": [-0.9144913554191589, -0.39574575424194336]},
             "bias": {"shape": [1], "data": [-0.669297993183136]}},
            {"id": "p0", "kind": "param", "module": "m0", "param": "weight"},
            {"id": "p1", "kind": "param", "module": "m0", "param": "weight"},
            {"id": "v6", "kind": "op", "op": "div_scalar", "inputs": ["p1"], "attrs": {"scalar": 1.3543710708618164}},
            {"id": "bw", "kind": "backward", "input": "v6"}]})
    t = _triage(workers, program, None)
    assert t.localisation is not None and t.localisation.where == "div_scalar", t.describe()
    assert t.known is not None and t.known.name == "div-scalar-grad-f32-reciprocal", t.describe()


EXACT = ("hard-sigmoid-autodiff-f64-in-f32", "rms-norm-f64-rms-in-f32")


def test_float64_programs_avoid_exactly_the_known_triggers() -> None:
    """The generator avoids a known bug's exact trigger, not its neighbourhood: float64 programs
    hold hard_sigmoid off burn's autodiff device (flex's own computes in f64) and RmsNorm modules
    without forwards (their parameter reads and transforms), never the triggering statement
    (with no share of the triggers kept: GenConfig.p_known_site 0)."""
    plain_hard_sigmoid = rms_modules = 0
    for k in range(600):
        p = generate(RandomChoices(program_seed(8, k)), GenConfig.profile("float64", p_known_site=0.0))
        dtypes = value_dtypes(p)
        for i, st in enumerate(p.statements):
            # an op's inputs' dtype (a cast before it may have changed the program's)
            dtype = dtypes.get(st.inputs[0], p.dtype) if isinstance(st, OpCall) and st.inputs else p.dtype
            bug = known_bug(st, p.statements[:i], dtype)
            assert bug is None or bug.name not in EXACT, (k, st, bug.name)
            plain_hard_sigmoid += isinstance(st, OpCall) and st.op == "hard_sigmoid"
            rms_modules += isinstance(st, Module) and st.module == "rms_norm"
    assert plain_hard_sigmoid and rms_modules, (plain_hard_sigmoid, rms_modules)


def test_the_localiser_seeds_an_op_with_the_cotangent_pytorch_propagated() -> None:
    """In sum(mul_scalar(exp(x), 3)) the gradient reaching exp's result is 3 everywhere, and 1
    at the scaled result; a later backward of another graph gets its own, not the first's."""
    p = Program((leaf("x", [0.5, -1.0], rg=True), op("y", "exp", "x"), op("z", "mul_scalar", "y", scalar=3.0),
                 op("s", "sum", "z"), backward("s", "bw1"), op("q", "square", "x"), op("t", "mul_scalar", "q",
                 scalar=2.0), op("u", "sum", "t"), backward("u", "bw2")))
    first = cotangents(p, "bw1")
    assert first["y"] == ((2,), (3.0, 3.0)) and first["z"] == ((2,), (1.0, 1.0)), first
    second = cotangents(p, "bw2")
    assert set(second) == {"q", "t", "u"} and second["q"] == ((2,), (2.0, 2.0)), second
    assert cotangents(p, "nope") == {}


def test_an_op_that_loses_an_input_is_one_case_however_it_shows(workers: dict[str, BurnWorker]) -> None:
    """add dropping its first operand shows as a missing gradient, as wrong flags (its result
    untracked), or as a later backward that runs where an earlier one should have consumed the
    graph: all three are signed as add's missing gradient."""
    fault = "grad-drop-input:add:0"
    missing = _triage(workers, Program((
        leaf("x", [0.5, 1.0], rg=True), leaf("w", [2.0, 3.0], rg=True), op("y", "add", "x", "w"),
        op("s", "sum", "y"), backward("s"))), fault)
    untracked = _triage(workers, Program((
        leaf("x", [0.5, 1.0], rg=True), op("e", "exp", "x"), leaf("w", [2.0, 3.0]), op("y", "add", "e", "w"))),
        fault)
    runs = _triage(workers, Program((
        leaf("x", [0.5, 1.0], rg=True), op("e", "exp", "x"), op("y", "add", "e", "x"), op("s", "sum", "y"),
        backward("s", "bw"), backward("e", "bw1"))), fault)
    assert missing.signature.startswith("grad-presence:burn:add:"), missing.signature
    assert untracked.signature == missing.signature == runs.signature, (untracked.signature, runs.signature)


def test_a_wrong_forward_is_one_case_however_the_data_show_it(workers: dict[str, BurnWorker]) -> None:
    """A wrong broadcasting rule in add shows as a panic, a wrong shape or wrong values,
    depending on the operands' shapes: one signature, the op's forward."""
    fault = "promote-trailing:add"
    panic = _triage(workers, Program((leaf("x", [0.5] * 6, shape=[2, 3]), leaf("y", [1.0, 2.0, 3.0]),
                                      op("z", "add", "x", "y"))), fault)
    shape = _triage(workers, Program((leaf("x", [0.5, 1.5, 2.5], shape=[1, 3]), leaf("y", [1.0, 2.0, 3.0]),
                                      op("z", "add", "x", "y"))), fault)
    values = _triage(workers, Program((leaf("x", [0.5 * i for i in range(9)], shape=[3, 3]),
                                       leaf("y", [1.0, 2.0, 3.0]), op("z", "add", "x", "y"))), fault)
    assert panic.signature.startswith("burn-wrong:-:add:forward"), panic.signature
    assert panic.signature == shape.signature == values.signature, (shape.signature, values.signature)


def test_a_regions_flags_are_one_case_whichever_op_shows_them(workers: dict[str, BurnWorker]) -> None:
    fault = "flag-after:no_grad"
    sigs = {_triage(workers, Program((leaf("x", [0.5, 1.0], rg=True), op("y", name, "x", region="no_grad"))),
                    fault).signature for name in ("exp", "neg", "sin")}
    assert len(sigs) == 1 and next(iter(sigs)).startswith("flags:burn:region:no_grad:is_tracked"), sigs


def test_an_op_reading_one_value_twice_is_one_case_however_it_shows(workers: dict[str, BurnWorker]) -> None:
    """prelu dropping its first operand's gradient: with its own leaf it has no gradient; as
    prelu(x, x) the leaf's gradient is the weight's share alone (zero where x > 0, wrong where
    x < 0). The op is run alone with a leaf per operand, so all three are its missing gradient."""
    fault = "grad-drop-input:prelu:0"
    own = _triage(workers, Program((leaf("x", [1.5, -0.5], rg=True), leaf("w", [0.25], rg=True),
                                    op("y", "prelu", "x", "w"), op("s", "sum", "y"), backward("s"))), fault)
    sigs = {own.signature}
    for data in ([1.5], [-1.25]):
        t = _triage(workers, Program((leaf("x", data, rg=True), op("y", "prelu", "x", "x"), backward("y"))), fault)
        assert t.localisation is not None and t.localisation.input == (0,), t.describe()
        sigs.add(t.signature)
    assert len(sigs) == 1 and own.signature.startswith("grad-presence:burn:prelu:"), sigs


def test_a_wrong_derivatives_size_is_the_datas_not_the_signatures(workers: dict[str, BurnWorker]) -> None:
    """maximum's derivative scaled by 1.001 is a small error where the op runs alone and a
    large one at a tie (where only a suspect is named): one signature, a wrong gradient."""
    fault = "grad-scale:maximum:1e-3"
    apart = _triage(workers, Program((leaf("x", [0.5, -1.0, 2.0], rg=True), leaf("w", [0.25, 0.5, 1.0], rg=True),
                                      op("y", "maximum", "x", "w"), op("s", "sum", "y"), backward("s"))), fault)
    tie = _triage(workers, Program((leaf("x", [0.5, 0.5], rg=True), op("a", "neg", "x"), op("b", "neg", "x"),
                                    op("y", "maximum", "a", "b"), op("s", "sum", "y"), backward("s"))), fault)
    assert apart.signature.startswith("burn-wrong:-:maximum:grad:wrong "), apart.describe()
    assert tie.signature == apart.signature, (tie.describe(), apart.describe())


def test_a_cut_off_the_autodiff_device_is_one_case_whatever_its_input_required(
        workers: dict[str, BurnWorker]) -> None:
    """A without_autodiff cut left on the autodiff device: its is_autodiff is wrong, and its
    is_require_grad and is_tracked with it where the input required grad; one signature."""
    fault = "flag-without-autodiff"
    sigs = {_triage(workers, Program((leaf("x", [0.5, 1.0], rg=rg), cut("c", "without_autodiff", "x"))),
                    fault).signature for rg in (True, False)}
    assert len(sigs) == 1 and next(iter(sigs)).startswith("flags:burn:cut:without_autodiff:is_autodiff #"), sigs


@pytest.mark.parametrize("after,explained", [("log_sigmoid", True), ("neg", False)])
def test_a_value_computed_from_a_gradient_read_is_also_read_as_its_own_ops(
        workers: dict[str, BurnWorker], after: str, explained: bool) -> None:
    """A float64 value computed on Wgpu from a gradient read by an op the float64 record names
    (log_sigmoid) is that record's effect, whatever the gradient's reading says; after an op it
    does not name (neg), a wrong value stays news (a Wgpu campaign's program, seed 301)."""
    program = Program((leaf("x", [0.5, -1.25], rg=True), op("s", "sum", "x"), backward("s"),
                       Grad("g", "bw", "x"), op("v", after, "g")), "float64")
    if "" not in workers:
        workers[""] = BurnWorker()
        workers[""].start()
    doc = workers[""].run(program).to_dict()
    for value in doc["values"]:
        if value["id"] == "v":
            value["data"] = [30.5, 7.4e-315]  # lavapipe's float64 transcendentals
    verdict = check(program, cast(BurnWorker, Replay(Observation.from_dict(doc, "burn"), "wgpu")))
    at_v = next(m for m in verdict.findings if m.statement == "v")
    bug = next(b for b in KNOWN_BUGS if b.name == "wgpu-f64-transcendentals-wrong")
    assert explains(bug, shown_fault(verdict, at_v, "wgpu")) is explained
    assert not explains(bug, shown_fault(verdict, at_v, "flex"))


class _TinyTanh:
    """The flex worker, as a backend whose var of equal values is a rounding above 0 (as Wgpu's
    var of an expanded tensor is) and whose tanh of a tiny nonzero input is 3e-8 off (as lavapipe's): tanh's own
    error shows on burn's inputs only (of PyTorch's exact 0 it is right)."""

    backend = "flex"

    def __init__(self, worker: BurnWorker) -> None:
        self.worker = worker
        self.observation: Observation | None = None

    def burn_version(self) -> str:
        return self.worker.burn_version()

    def submit(self, program: Program) -> _TinyTanh:
        doc = self.worker.run(program).to_dict()
        table = program.by_id()
        data = {v["id"]: v["data"] for v in doc["values"]}
        for v in doc["values"]:
            st = table.get(v["id"])
            if isinstance(st, OpCall) and st.op == "var":
                v["data"] = [3.5e-15 for _ in v["data"]]
            if isinstance(st, OpCall) and st.op == "tanh":
                x = data[st.inputs[0]] if st.inputs[0] not in table or not isinstance(
                    table[st.inputs[0]], OpCall) else [3.5e-15] * len(v["data"])
                v["data"] = [y + 3e-8 if 0 < abs(a) < 1e-6 else y for a, y in zip(x, v["data"], strict=True)]
        self.observation = Observation.from_dict(doc, "burn")
        return self

    def result(self) -> Observation:
        assert self.observation is not None
        return self.observation


def test_an_op_wrong_only_on_the_inputs_burn_computed_is_named(workers: dict[str, BurnWorker]) -> None:
    """var of equal values is 0 in PyTorch and 3.5e-15 in burn (rounding, dismissed), and burn's
    tanh of it is 3e-8: tanh is right on PyTorch's 0 and wrong on burn's input. The localiser
    runs each op on burn's inputs too, so tanh is named, not var as a suspect."""
    if "" not in workers:
        workers[""] = BurnWorker()
        workers[""].start()
    program = Program((leaf("x", [0.5] * 3, shape=[1, 3]), op("v", "var", "x", dim=1), op("y", "tanh", "v")))
    w = cast(BurnWorker, _TinyTanh(workers[""]))
    verdict = check(program, w)
    assert [m.statement for m in verdict.findings] == ["y"], verdict.findings
    t = triage(verdict, w)
    assert t.localisation is not None and t.localisation.where == "tanh", t.describe()
    assert t.localisation.confidence == "fails" and t.signature.startswith("burn-wrong:-:tanh:forward"), t.describe()


def test_the_gradient_of_an_autodiff_cut_of_a_leaf_is_localised_through_the_leaf(
        workers: dict[str, BurnWorker]) -> None:
    """autodiff(x) of a leaf already on the autodiff device is x: both frameworks give it x's
    gradient though the backward never reads it, so its wrong gradient is exp's, as x's is."""
    fault = "grad-scale:exp:1e-3"
    if fault not in workers:
        workers[fault] = BurnWorker(fault=fault)
        workers[fault].start()
    program = Program((leaf("x", [0.5, -1.0], rg=True), op("e", "exp", "x"), op("s", "sum", "e"),
                       cut("c", "autodiff", "x"), backward("s")))
    verdict = check(program, workers[fault])
    at_cut = next(m for m in verdict.findings if m.kind == "grad" and m.statement == "c")
    loc = localise(verdict, workers[fault], at_cut, same_kind=True)
    assert loc is not None and loc.where == "exp" and loc.confidence == "fails", loc


def test_news_beside_a_known_bug_is_signed_by_the_finding_that_shows_first(workers: dict[str, BurnWorker]) -> None:
    """A float64 program whose first finding is a known bug (div_scalar's f32 reciprocal), then a
    detach that returns a value which does not require grad (`detach-like-torch`): its flags are
    wrong, and the backward through it panics where burn's would run. Both are news; the verdict
    is signed by the detach that shows first, as it is without the known bug, not by the
    backward that follows from it (which findings list first)."""
    program = Program((
        leaf("x", [1.0, 2.0], rg=True), op("y", "div_scalar", "x", scalar=3.0), op("s", "sum", "y"), backward("s"),
        leaf("x2", [0.5, 1.5], rg=True), cut("d", "detach", "x2"), op("g", "mul_scalar", "d", scalar=2.0),
        op("t", "sum", "g"), backward("t", "bw2"),
    ), "float64")
    with_known = _triage(workers, program, "detach-like-torch")
    alone = _triage(workers, Program(program.statements[4:], "float64"), "detach-like-torch")
    assert with_known.known is None
    assert with_known.signature == alone.signature, (with_known.signature, alone.signature)
    assert with_known.signature.startswith("flags:burn:cut:detach:"), with_known.signature


def test_news_whose_op_first_shows_a_known_bug_is_signed_by_its_own_kind(workers: dict[str, BurnWorker]) -> None:
    """A float64 RmsNorm shows the known bug rms-norm-f64-rms-in-f32 in its value; a wrong
    derivative of the forward (injected) is news. The one-op program of the forward fails with
    the known value first: the news is signed by its gradient, not by the known bug's value."""
    from difftest.program.ir import Apply, Backward, InlineTensor, Leaf, Module

    m = Module("m", "rms_norm", weight=InlineTensor((3,), (1.0, 0.5, 2.0)), attrs={"d_model": 3, "epsilon": 1e-3})
    p = Program((m, Leaf("x", (2, 3), (0.3, -0.7, 1.1, 0.9, 2.3, -1.4), "autodiff", True),
                 Apply("y", "m", "x"), OpCall("s", "sum", ("y",)), Backward("bw", "s")), "float64")
    t = _triage(workers, p, "grad-scale:rms_norm:1e-3")
    assert t.known is None
    assert t.signature.startswith("burn-wrong:-:apply:rms_norm:grad:wrong "), t.describe()
