"""One bug, one finding: a single wrong derivative saves exactly one case in a campaign (one per
place the fault is injected), named after the faulty op (difftest/findings/triage.py localises
each finding to the op whose own computation is wrong), and every fault of the detection suite
(tests/quality/test_detection.py) saves at most two (two manifestations of one fault, such as a
missing gradient and a wrong one). Run with
`python -m pytest -m quality tests/quality/test_one_case_per_fault.py -s -p no:xdist` (about half
a minute a fault on 2 cores); the table of cases per fault is written to
`.difftest/cases-per-fault.md`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from difftest.campaign.parallel import FuzzOptions, fuzz
from difftest.ops.catalog import CATALOG
from difftest.program.modules import MODULE_KINDS
from tests.quality.test_detection import FAULTS

pytestmark = pytest.mark.quality

FAULT_OPS = ["exp", "sigmoid", "softmax", "tanh", "matmul", "conv2d"]


@pytest.mark.parametrize("op", FAULT_OPS)
def test_a_1e4_gradient_fault_saves_exactly_one_case_naming_its_op(op: str, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    opts = FuzzOptions(seed=0, programs=2000, jobs=2, corpus=corpus, fault=f"grad-scale:{op}:1e-4",
                       inflight_dir=tmp_path / "inflight", live=False, progress_every=60.0)
    summary = fuzz(opts, Console(file=open("/dev/null", "w")))
    saved = [json.loads(Path(p).read_text()) for p in summary.saved]
    # each row with its first program (program_at(0, first) replays it) and the case saved for it,
    # kept outside the test's temporary directory so a failure's evidence survives the run
    keep = Path(".difftest/quality-cases") / f"grad-scale-{op}"
    keep.mkdir(parents=True, exist_ok=True)
    for p in summary.saved:
        (keep / Path(p).name).write_text(Path(p).read_text())
    rows = [(f.signature, f.count, f.first) for f in summary.unexplained()]
    print(f"\ngrad-scale:{op}:1e-4: {len(saved)} case(s) saved (copies in {keep}); unexplained rows "
          f"(signature, count, first program) {rows}")
    # the fault scales the op and, for a name that is also a module kind (conv2d), the module's
    # forward (rust/src/fault.rs): one case per place it was injected, each named by it
    sites = {op} | ({f"apply:{op}"} if op in MODULE_KINDS else set())
    named = [c["triage"]["localisation"]["where"] for c in saved]
    assert len(named) == len(set(named)) and set(named) <= sites and op in named, rows


@pytest.mark.parametrize("op", ["sigmoid", "tanh"])
def test_a_1e3_derivative_fault_in_the_saturated_tail_is_found(op: str, tmp_path: Path) -> None:
    """An elementwise op's declared gradient terms enter its budget once, not multiplied by the
    noise factor (ops/tolerance.py): a derivative wrong by 1e-3 (ten times less than the
    2,000-program acceptance asks for) only where |x| > 3, where the terms of 1 - y used to
    allow ~100 times the real error, is found and named. The budget is sized by measurement: a
    program shows the fault only where the op's tracked input reaches the tail and a gradient
    path leaves it (not through a round, not in a float16 program, whose rounding is that size),
    and it shows in 3 of seed 0's first 4,000 programs (first at program 2,524; seeds 1 and
    2: 8 and 4 times in 2,000, first at 188 and 279)."""
    corpus = tmp_path / "corpus"
    opts = FuzzOptions(seed=0, programs=4000, jobs=2, corpus=corpus, fault=f"grad-scale-tail:{op}:1e-3:3",
                       inflight_dir=tmp_path / "inflight", live=False, progress_every=60.0)
    summary = fuzz(opts, Console(file=open("/dev/null", "w")))
    saved = [json.loads(Path(p).read_text()) for p in summary.saved]
    named = [c["triage"]["localisation"]["where"] for c in saved]
    firsts = sorted(f.first for f in summary.unexplained() if f.first is not None)
    print(f"\ngrad-scale-tail:{op}:1e-3:3: {len(saved)} case(s) saved, named {named}; "
          f"first failing program {firsts[:1]}")
    assert op in named, named


def test_a_fault_every_broadcasting_op_shares_saves_one_case_naming_the_mechanism(tmp_path: Path) -> None:
    """The reduction of a broadcast operand's gradient off by 1e-3 shows in add, mul, matmul,
    atan2, ... alike; each op is right with its inputs expanded first (localise.py), so the
    campaign saves one case, signed `broadcast`, not one per op (eleven before)."""
    opts = FuzzOptions(seed=5, programs=2000, jobs=2, corpus=tmp_path / "corpus", fault="broadcast-grad-scale:1e-3",
                       inflight_dir=tmp_path / "inflight", live=False, progress_every=60.0)
    summary = fuzz(opts, Console(file=open("/dev/null", "w")))
    saved = [json.loads(Path(p).read_text()) for p in summary.saved]
    signatures = [c["triage"]["signature"] for c in saved]
    print(f"\nbroadcast-grad-scale:1e-3: {len(saved)} case(s) saved: {signatures}")
    assert len(saved) == 1 and signatures[0].startswith("burn-wrong:-:broadcast:grad:wrong "), signatures
    assert saved[0]["triage"]["localisation"]["mechanism"] == "broadcast"


DATA = Path(__file__).parent / "data"


def _patched_campaign(patch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile: str = "default",
                      programs: int = 3000, timeout: float = 60.0, ops: tuple[str, ...] | None = None) -> list[str]:
    """The signatures of the cases a campaign of `programs` (seed 5, of `profile`) saves
    against burn 0.22.1 with `patch` applied (built once and cached, as `--burn patch:FILE`
    does), in tmp_path/corpus."""
    from difftest.exec.burn_builds import BurnSpec, build_with_status

    binary = build_with_status(BurnSpec.parse(f"patch:{DATA / patch}")).binary
    monkeypatch.setenv("DIFFTEST_BURN", str(binary))
    opts = FuzzOptions(seed=5, programs=programs, jobs=2, corpus=tmp_path / "corpus", profile=profile,
                       inflight_dir=tmp_path / "inflight", live=False, progress_every=60.0, timeout=timeout, ops=ops)
    summary = fuzz(opts, Console(file=open("/dev/null", "w")))
    signatures = sorted(json.loads(Path(p).read_text())["triage"]["signature"].split(" #")[0] for p in summary.saved)
    print(f"\n{patch}: {len(signatures)} case(s) saved: {signatures}")
    return signatures


def _changed_lines(patch: Path) -> set[tuple[str, int]]:
    """(crate/path, line) of each line the patch adds, in the patched file's numbering."""
    out: set[tuple[str, int]] = set()
    where, line = "", 0
    for text in patch.read_text().splitlines():
        if text.startswith("+++ b/"):
            where = text[len("+++ b/"):].removeprefix("crates/")
        elif text.startswith("@@"):
            line = int(text.split("+")[1].split(",")[0].split(" ")[0])
        elif where and text.startswith("+"):
            out.add((where, line))
            line += 1
        elif where and text.startswith(" "):
            line += 1
    return out


def _places(patch: str, tmp_path: Path) -> list[dict[str, Any]]:
    """`difftest suspects` on the campaign's cases, on the coverage build of the patched burn
    (built once and cached, about 6 minutes): its groups. Every case is placed, and each
    group's place lies within a few lines of a line the patch changed."""
    from difftest.cli.main import main

    out = tmp_path / "suspects.json"
    assert main(["suspects", str(tmp_path / "corpus"), "--burn", f"patch:{DATA / patch}", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["unplaced"] == [] and doc["not_failing"] == [], doc
    changed = _changed_lines(DATA / patch)
    for g in doc["groups"]:
        near = [s for s in g["site"] for (f, ln) in changed
                if f == f"{s['crate']}/{s['path']}" and abs(s["line"] - ln) <= 5]
        assert near, (g["findings"], g["site"], sorted(changed))
    print(f"{patch}: {sum(len(g['findings']) for g in doc['groups'])} case(s) in {len(doc['groups'])} place(s)")
    return list(doc["groups"])


def test_a_broadcast_fault_in_burn_is_one_case_beside_the_ops_own(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn: broadcast_shape takes the mean over the first of several broadcast dims,
    and sqrt's backward divides by 2.004. Every op that broadcasts shows the first (11 op cases
    before the localiser tried the op with its inputs expanded); burn-nn's modules and prelu,
    whose broadcast is inside burn, stay their own (6)."""
    signatures = _patched_campaign("broadcast-mean-and-sqrt.patch", tmp_path, monkeypatch)
    assert signatures.count("burn-wrong:-:broadcast:grad:wrong") == 1
    assert "burn-wrong:-:sqrt:grad:wrong" in signatures
    ops = [s for s in signatures if s.split(":")[2] not in ("apply", "prelu", "broadcast", "sqrt")]
    assert not ops, ops
    # the spectrum of the findings and a passing sample, on the coverage build of the same
    # burn: two places, broadcast_shape's and sqrt's backward, each holding the module cases
    # whose forwards go through it
    places = _places("broadcast-mean-and-sqrt.patch", tmp_path)
    assert sorted(str(p["node"]) for p in places) == ["None", "tensor::Sqrt"]  # broadcast_shape is a helper


def test_one_ops_own_broadcast_fault_is_one_case_naming_the_op(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn whose float_sub scales its right operand's gradient by 1.002 only when the
    shapes differ. The op is right with its inputs expanded, as under a shared broadcast fault,
    but add broadcasting the same input is right too (findings/broadcast.py, the witness): the
    case names sub (before the witness it was signed `broadcast`, pointing at burn's shared
    helper, which is right)."""
    signatures = _patched_campaign("sub-broadcast-rhs-scaled.patch", tmp_path, monkeypatch)
    assert signatures == ["burn-wrong:-:broadcast:sub:grad:wrong"], signatures


def test_a_fault_in_a_reshape_burn_builds_modules_and_broadcasts_from_is_one_case(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn whose reshape backward is 1.001 off where the rank changes. burn's Linear is
    a reshape, a matmul and an add (its weight and bias given leading dims), difftest-burn
    promotes a lower-rank operand with a reshape before an op broadcasts it, and a step consumes
    Linear's gradients: 6 cases before (reshape, broadcast, apply:linear and three steps, one of
    them float64), 1 now (findings/broadcast.py `promotion`, the Linear composition, a one-op
    program that reads the parameters its program read under the same names)."""
    signatures = _patched_campaign("reshape-rank-change-scaled.patch", tmp_path, monkeypatch)
    assert signatures == ["burn-wrong:-:reshape:grad:wrong"], signatures


def test_a_fault_in_a_matmul_linear_is_built_from_is_one_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn whose matmul gives its left operand a gradient 1.002 too large: matmul's
    own case and Linear's before the Linear composition, matmul's alone now."""
    signatures = _patched_campaign("matmul-lhs-scaled.patch", tmp_path, monkeypatch)
    assert signatures == ["burn-wrong:-:matmul:grad:wrong"], signatures


def test_a_fault_in_a_kernel_backwards_share_is_one_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn-flex whose float32 index add assigns: select_assign's forward is wrong at
    repeated indices, and so are the gradients burn computes with that kernel (select's, the
    embedding op's and the Embedding module's table). Four cases before the catalog declared
    those backward kernels (ops/backward_kernels.py), one now, the forward op's."""
    signatures = _patched_campaign("select-add-assigns-f32.patch", tmp_path, monkeypatch)
    assert signatures == ["burn-wrong:-:select_assign:forward"], signatures


def test_a_fault_in_burns_gradient_accumulation_is_one_case_where_no_op_hides_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn whose Gradients::register scales the contribution it already holds by 1.01:
    every value read twice shows it (59 cases before, each a graph@<op> or the op of an aliased
    read). The ops burn composes from a value read twice inside it (square is x * x, silu
    x * sigmoid(x), softmax, the losses, the norms' forwards) are run as their parts
    (findings/composed.py): 11 cases. The ten left were ties (scatter_max, select_min,
    maximum), where two tied leaves prove nothing against PyTorch, graphs through module
    forwards or through a composite, which no tree was built through, and a float64 batch_norm
    suspect named before the graph was tried. burn against itself settles all of them
    (unshared.summed_apart): its gradient of a value read twice is not the sum of the gradients
    it gives the value's copies in the tree (module forwards once per path, composites as their
    parts), at a tie too: 1 case. In float16 a composite's parts pass within their own budgets
    where the composite fails or only deviates; they are localised by their deviation and by
    the same sum: 10 cases of 1,500 float16 programs before (silu, mish, prelu, leaky_relu,
    maximum, minimum), 2 now: accumulate and a softmax whose gradient is 0 in exact arithmetic
    (a deviation counts where it exceeds the parts' coarsest rounding of the result, and 0 gives
    it no scale)."""
    half = _patched_campaign("accumulate-scales-earlier.patch", tmp_path / "f16", monkeypatch, "float16", 1500)
    assert "burn-wrong:-:accumulate:grad:wrong" in half
    assert len(half) <= 2, half
    signatures = _patched_campaign("accumulate-scales-earlier.patch", tmp_path, monkeypatch)
    assert signatures == ["burn-wrong:-:accumulate:grad:wrong"], signatures
    # the spectrum agrees: one place, Gradients::register
    assert len(_places("accumulate-scales-earlier.patch", tmp_path)) == 1


def test_a_fault_in_an_op_burn_builds_others_from_is_one_place(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn whose float_mul backward scales its right operand's gradient by 1.003. The
    localiser names mul for mul's own programs; square (x * x), silu, var, the losses and the
    norms burn builds from mul were each a case of their own (17 at this seed; 6, the module
    forwards', once the ops' compositions were declared) until composites ran as their parts
    (findings/composed.py). Every run executes the patched line, and the spectrum puts every
    case there."""
    signatures = _patched_campaign("mul-rhs-scaled.patch", tmp_path, monkeypatch)
    assert "burn-wrong:-:mul:grad:wrong" in signatures
    others = [s for s in signatures if s != "burn-wrong:-:mul:grad:wrong"]
    assert not others, others
    (place,) = _places("mul-rhs-scaled.patch", tmp_path)
    assert place["node"] == "tensor::Mul"


def test_a_fault_in_a_recomputed_output_is_one_case_naming_the_op(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn whose retro-forward of sin computes cos: wrong only under balanced gradient
    checkpointing, where a backward that reads sin's output gets it recomputed. No program of sin
    alone shows it (sin's backward reads its input), so each op that read sin's output was a
    `graph@<op>` case of its own (6 at this seed: log1p, sinh, atan2, square, tanh, hypot). The
    recompute experiment (recompute.py) gives one case, named after sin, its reproducer
    sin then y * y on a checkpointed device."""
    signatures = _patched_campaign("retro-sin-recomputes-cos.patch", tmp_path, monkeypatch)
    assert signatures == ["burn-wrong:-:recompute:sin:grad:wrong"], signatures
    (case,) = [json.loads(p.read_text()) for p in (tmp_path / "corpus" / "findings").glob("*.json")]
    assert case["program"]["gradient_checkpointing"] == "balanced"  # it needs checkpointing
    ops = [s.get("op") for s in case["triage"]["localisation"]["program"]["statements"]]
    assert ops == [None, "sin", "mul", None], ops


def test_a_backward_wrong_beside_constant_inputs_is_one_case_naming_the_op(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn whose cat backward slices the output gradient by its tracked inputs alone:
    an input after a constant gets another's slice. The one-op experiments track every input,
    where it is right, so it was two `graph@<op>` cases named after the ops that read the cat
    (sinh, var_bias at this seed); the experiment with the program's constants (localise.py)
    gives one case named after cat, whose reproducer keeps the constant. burn's stack is a cat of
    its unsqueezed inputs (burn-tensor's Tensor::stack), so a stack beside a constant is the same
    fault in an op burn builds from cat, named after itself as square is after mul (the programs of
    this seed reach one since the scatter updates joined the catalog)."""
    signatures = _patched_campaign("cat-offsets-skip-constants.patch", tmp_path, monkeypatch)
    assert "burn-wrong:-:cat:grad:wrong" in signatures and set(signatures) <= {
        "burn-wrong:-:cat:grad:wrong", "burn-wrong:-:stack:grad:wrong"}, signatures
    cases = [json.loads(p.read_text()) for p in (tmp_path / "corpus" / "findings").glob("*.json")]
    (case,) = [c for c in cases if c["triage"]["signature"].startswith("burn-wrong:-:cat:")]
    leaves = [s for s in case["triage"]["localisation"]["program"]["statements"] if s["kind"] == "leaf"]
    assert any(not s["require_grad"] for s in leaves[:-1]), leaves  # a constant input (the last leaf: the cotangent)


def test_a_detach_that_keeps_the_graph_is_one_flags_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn whose detach of a value two or more ops from its leaves returns it as it
    is: the result stays tracked and gradients flow through. Hundreds of programs show it; one
    case is saved, a flags finding named after the detach."""
    signatures = _patched_campaign("detach-deep-keeps-graph.patch", tmp_path, monkeypatch)
    assert signatures == ["flags:burn:cut:detach:is_tracked"], signatures


def test_a_fault_in_a_kernel_only_inference_reaches_is_one_case(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn-flex whose fused float64 layer_norm divides the sum of squares by n - 1:
    burn runs that kernel only for a valid() module given a value off the autodiff device (as
    inference does; autodiff composes layer_norm from ops), which drawn programs reached in 5% of
    valid() forwards, with layer_norm 1.6% of the modules: no case in 3,000 float64 programs.
    With the kinds drawn evenly and half of valid() forwards taking their input off autodiff, one
    case names the module's forward."""
    signatures = _patched_campaign("layer-norm-f64-unbiased.patch", tmp_path, monkeypatch, profile="float64")
    assert signatures == ["burn-wrong:-:apply:layer_norm:forward"], signatures


def test_a_formula_fault_of_roundings_size_is_one_signature_per_aspect(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn-nn whose RmsNorm adds epsilon after the square root: an error of 1e-6 to
    1e-5 of the result by the input's scale, which signed `rounding` or not by the data in
    float32 programs (four cases; a shrunk program crossing the line changed signature). In
    float32 an error that size is no precision loss. In float64 an error of rounding's size is
    what a precision loss makes, but this one grows on inputs scaled down, which rounding does
    not (forward_behind.sized); and a composite's gradient whose float64 forward is wrong is that
    forward's (forward_behind.forward_behind). Three aspects (`forward`, `grad:wrong`,
    `value:rounding`) before those, one case now. The known bug rms-norm-f64-rms-in-f32 explains
    only its own (known_bugs.rms_in_f32)."""
    signatures = _patched_campaign("rms-eps-outside.patch", tmp_path, monkeypatch)
    assert signatures == ["burn-wrong:-:apply:rms_norm:forward"], signatures


def test_a_fault_in_a_hyperparameter_the_generator_draws_is_one_step_case(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn-optim whose momentum damps by 1 + dampening: invisible while the
    generator drew dampening 0 for every optimizer; now one case, the optimizer step's."""
    signatures = _patched_campaign("dampening-sign.patch", tmp_path, monkeypatch, profile="sessions")
    assert signatures == ["burn-wrong:-:step:forward"], signatures


TABLE = Path(".difftest/cases-per-fault.md")
ROWS: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _table() -> Iterator[None]:
    yield
    if ROWS:
        TABLE.parent.mkdir(parents=True, exist_ok=True)
        TABLE.write_text("| fault | cases saved | localised as | first failing program |\n|---|---|---|---|\n"
                         + "\n".join(ROWS) + "\n")
        print(f"\n{TABLE}:\n" + TABLE.read_text())


# programs a detection fault's campaign runs: about nine per catalog op, as the 1,000 it was set
# at with 113 ops; at a fixed 1,000 the catalog's growth to 144 thinned each op's draws until
# wrong-dim:log_softmax (shown only along a dim of size > 1 with another of the same extent)
# first showed at program 1,007 of seed 0
PROGRAMS_PER_OP = 9


@pytest.mark.parametrize("fault,what", FAULTS, ids=[f for f, _ in FAULTS])
def test_each_detection_fault_saves_at_most_two_cases(fault: str, what: str, tmp_path: Path) -> None:
    opts = FuzzOptions(seed=0, programs=PROGRAMS_PER_OP * len(CATALOG), jobs=2, corpus=tmp_path / "corpus",
                       fault=fault,
                       inflight_dir=tmp_path / "inflight", live=False, progress_every=600.0)
    summary = fuzz(opts, Console(file=open("/dev/null", "w")))
    saved = [json.loads(Path(p).read_text()) for p in summary.saved]
    names = sorted(f"`{c['triage']['signature']}`" for c in saved)
    firsts = sorted(f.first for f in summary.unexplained() if f.first is not None)
    ROWS.append(f"| `{fault}` | {len(saved)} | {', '.join(names) or '-'} | {firsts[0] if firsts else '-'} |")
    assert saved, f"{fault} ({what}) saved nothing in {opts.programs} programs"
    assert len(saved) <= 2, names


def test_a_composites_wrong_flags_are_its_parts_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn whose cat decides whether its result is tracked from its first input alone:
    cat's flags are wrong, and so are stack's, which burn builds as unsqueezes and a cat. Two
    cases (cat, stack) before flags findings at a composite were run as its parts
    (findings/flags_parts.py), cat's alone now."""
    signatures = _patched_campaign("cat-tracked-from-first-input.patch", tmp_path, monkeypatch)
    assert signatures == ["flags:burn:cat:flags is_tracked=False"], signatures


def test_a_new_fault_in_an_op_with_a_known_bug_is_its_own_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn whose div_scalar backward drops a negative divisor's sign. div_scalar's
    known bug (its reciprocal in f32, float64 only) must not explain it: one new case, and no
    case at all before the generator drew negative divisors."""
    signatures = _patched_campaign("div-scalar-divisor-sign-lost.patch", tmp_path, monkeypatch)
    assert signatures == ["burn-wrong:-:div_scalar:grad:wrong"], signatures


def test_a_composites_misplaced_epsilon_is_one_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn whose default layer_norm adds epsilon after the square root. Three cases
    before forward_behind.py: the float32 forward, a float32 gradient whose forward stayed within
    its budget, and a float64 forward off by a rounding's size; one now, the module's forward."""
    signatures = _patched_campaign("layer-norm-eps-after-sqrt.patch", tmp_path, monkeypatch)
    assert signatures == ["burn-wrong:-:apply:layer_norm:forward"], signatures


def test_a_hang_in_a_kernel_several_ops_share_is_one_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn-flex whose cumulative kernel never returns for a dim of size 3 in a rank-3
    tensor. cumsum, cumprod, cummin and cummax all reach it: four cases, one per op, while a hang
    was signed by the op it starts at; one now, by the burn function the hung worker's stack is
    stopped in (exec/stacks.py). The campaign waits 10 s for an answer (the README's advice for
    a branch that hangs): its programs run in milliseconds."""
    signatures = _patched_campaign("cumulative-kernel-hangs.patch", tmp_path, monkeypatch, timeout=10.0)
    assert signatures == ["timeout:burn:burn_flex::ops::cumulative::cumulative_op:timeout no answer within Ns"], \
        signatures


def test_a_crash_in_a_kernel_several_ops_share_is_one_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn-flex whose cumulative kernel aborts the process for a dim of size 3 in a
    rank-3 tensor. A crashed worker is gone, so a crash was signed by the op a bisection of the
    program finds it at: one case per op that reaches the kernel. The request it died on now runs
    again under gdb (exec/stacks.py crashed_in): one case, by the burn function it crashed in."""
    signatures = _patched_campaign("cumulative-kernel-aborts.patch", tmp_path, monkeypatch)
    assert signatures == ["crash:burn:burn_flex::ops::cumulative::cumulative_op:crash exit -6"], signatures


def test_a_changed_convention_at_an_agreed_kink_is_one_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched burn whose abs'(0) is 1: a subgradient still, which the kink check accepted, so
    campaigns saved nothing (tests/differential/test_conventions.py alone failed). Both frameworks
    declare abs'(0) = 0: with every run's input exactly at the point, the float64 reference is the
    answer (oracle/agreed_points.py). The campaign is the one a maintainer who changed abs runs
    (`difftest fuzz --ops abs`): over the whole catalog, 2% of the leaves abs reads hold an exact
    0 (boundary leaves), and 3,000 programs of seed 5 hold one such leaf that requires grad."""
    signatures = _patched_campaign("abs-at-zero-grad-one.patch", tmp_path, monkeypatch, programs=1000, ops=("abs",))
    assert signatures == ["burn-wrong:-:abs:grad:wrong"], signatures


@pytest.mark.parametrize("fault,op", [("kink-grad:abs:1", "abs"), ("kink-grad:relu:1", "relu"),
                                      ("kink-grad:prelu:0.5", "prelu")])
def test_a_changed_convention_at_a_kink_is_one_case_of_a_kinks_campaign(fault: str, op: str, tmp_path: Path) -> None:
    """The interpreter's `kink-grad` fault changes the op's derivative at an input of exactly 0
    (abs'(0) = 1, relu'(0) = 1: a mask x >= 0 for x > 0). A whole-catalog campaign of 3,000
    programs (seed 5) saved nothing for abs'(0) = 1: the inputs at abs's 0 were there by structure,
    with no gradient through them. The profile "kinks" puts a quarter of these ops' calls on a
    fresh input with elements at the kink (strategies/boundary.py): one case, named after the op."""
    opts = FuzzOptions(seed=5, programs=3000, jobs=2, corpus=tmp_path / "corpus", profile="kinks", fault=fault,
                       inflight_dir=tmp_path / "inflight", live=False, progress_every=60.0)
    summary = fuzz(opts, Console(file=open("/dev/null", "w")))
    signatures = sorted(json.loads(Path(p).read_text())["triage"]["signature"].split(" #")[0] for p in summary.saved)
    assert signatures == [f"burn-wrong:-:{op}:grad:wrong"], signatures
