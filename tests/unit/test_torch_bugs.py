"""Known PyTorch bugs (difftest/divergences/torch_bugs.py): a record of PyTorch's explains only
torch-wrong findings, a record of burn's never one, and a record with a `host` only on machines
with its CPU flags (`DIFFTEST_CPU_FLAGS` stands in for this machine's). The corpus case of a
host-dependent bug is skipped elsewhere, and its `host` field is checked when it loads.
No built interpreter: faults are built from the case's program."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from difftest.divergences.host import CPU_FLAGS_ENV, HostCondition, cpu_has
from difftest.divergences.known_bugs import KNOWN_BUGS, Fault
from difftest.divergences.torch_bugs import TORCH_BUGS, conv_transpose2d_bias_uncovered
from difftest.findings.corpus import Case, CorpusError, judge, load_case
from difftest.findings.explaining import explains, known_bug_of
from difftest.program.jsonio import program_from_dict

ROOT = Path(__file__).resolve().parents[2]
NAME = "torch-bf16-conv-transpose2d-amx-drops-bias"
CASE = ROOT / "corpus" / "bugs" / f"{NAME}.json"
BUG = next(b for b in KNOWN_BUGS if b.name == NAME)


@pytest.fixture
def amx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPU_FLAGS_ENV, "avx512f,amx_tile,amx_bf16")


@pytest.fixture
def no_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPU_FLAGS_ENV, "avx512f,avx512_bf16")


def _program(stride: int = 2, kernel: tuple[int, int] = (2, 1), bias: bool = True, dtype: str = "bfloat16",
             after: str | None = "exp") -> Fault:
    statements = [
        {"id": "x", "kind": "leaf", "shape": [1, 2, 2, 2], "data": [0.5, -1.0, 1.5, 2.0, 0.25, -0.75, 1.25, -1.5],
         "device": "autodiff", "require_grad": False},
        {"id": "w", "kind": "leaf", "shape": [2, 1, *kernel], "data": [0.5] * (2 * kernel[0] * kernel[1]),
         "device": "autodiff", "require_grad": False},
        {"id": "b", "kind": "leaf", "shape": [1], "data": [-2.5], "device": "autodiff", "require_grad": False},
        {"id": "y", "kind": "op", "op": "conv_transpose2d", "inputs": ["x", "w", "b"] if bias else ["x", "w"],
         "attrs": {"stride": [stride, stride], "padding": [0, 0], "dilation": [1, 1], "groups": 1,
                   "padding_out": [0, 0]}},
    ]
    if after is not None:
        statements.append({"id": "z", "kind": "op", "op": after, "inputs": ["y"]})
    program = program_from_dict({"format": "difftest-program", "version": 1, "dtype": dtype,
                                 "statements": statements})
    site = "z" if after is not None else "y"
    return Fault("value", site, program, dtype, None, "", pairs=((0.082, 1.0),), elements=(1,),
                 verdict="torch-wrong")


def test_every_pytorch_record_is_a_known_bug_of_pytorchs() -> None:
    assert TORCH_BUGS and all(b in KNOWN_BUGS and b.framework == "torch" for b in TORCH_BUGS)
    assert all(b.framework == "burn" for b in KNOWN_BUGS if b not in TORCH_BUGS)


@pytest.mark.usefixtures("amx")
def test_the_record_explains_a_torch_wrong_finding_downstream_of_its_site() -> None:
    fault = _program()
    assert explains(BUG, fault)
    assert known_bug_of([fault]) is BUG


@pytest.mark.usefixtures("amx")
def test_the_record_is_what_pytorch_does_not_what_burn_does() -> None:
    # the same finding blamed on burn (burn-wrong), or not judged numerically: news
    assert known_bug_of([replace(_program(), verdict="burn-wrong")]) is None
    assert known_bug_of([replace(_program(), verdict="")]) is None


@pytest.mark.usefixtures("amx")
def test_the_records_site_is_a_biased_bfloat16_conv_transpose2d_with_uncovered_positions() -> None:
    assert not explains(BUG, _program(dtype="float32"))
    assert not explains(BUG, _program(bias=False))
    assert not explains(BUG, _program(stride=1))  # every position reached
    assert not explains(BUG, _program(kernel=(2, 2)))  # a 2x2 kernel at stride 2 reaches every position
    assert explains(BUG, _program(stride=3, kernel=(2, 2)))


@pytest.mark.usefixtures("amx")
def test_at_the_conv_itself_pytorch_must_give_exactly_zero_where_float64_does_not() -> None:
    at_site = _program(after=None)
    assert explains(BUG, replace(at_site, pairs=((-2.5, 0.0), (-2.5, 0.0))))
    assert not explains(BUG, replace(at_site, pairs=((-2.5, 0.0), (-2.5, -1.0))))  # not the bias left out
    assert not explains(BUG, replace(at_site, pairs=((0.0, 0.0),)))


@pytest.mark.usefixtures("no_amx")
def test_the_record_explains_nothing_on_a_cpu_without_amx() -> None:
    assert not BUG.shows_here()
    assert known_bug_of([_program()]) is None


def test_burn_records_never_explain_a_torch_wrong_finding(amx: None) -> None:
    # the one-op faults the burn records' own tests build, blamed on PyTorch instead
    program = program_from_dict({"format": "difftest-program", "version": 1, "dtype": "float64", "statements": [
        {"id": "x", "kind": "leaf", "shape": [2], "data": [1.0, 2.0], "device": "autodiff", "require_grad": True},
        {"id": "y", "kind": "op", "op": "div_scalar", "inputs": ["x"], "attrs": {"scalar": 3.0}},
    ]})
    burn = Fault("grad", "y", program, "float64", None, "", input=(0,),
                 pairs=((1 / 3, 0.3333333432674408),), elements=(0,), verdict="burn-wrong")
    assert known_bug_of([burn]) is not None
    assert known_bug_of([replace(burn, verdict="torch-wrong")]) is None


def test_the_site_predicate_reads_the_shapes_before_the_statement() -> None:
    program = _program(after=None).program
    y = program.statements[-1]
    assert conv_transpose2d_bias_uncovered(y, program.statements[:-1])
    assert not conv_transpose2d_bias_uncovered(y, ())  # shapes unknown: no claim


def test_host_conditions_read_the_cpu_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPU_FLAGS_ENV, "a, b")
    assert cpu_has("a", "b").holds() and not cpu_has("a", "c").holds()
    assert cpu_has("a", "c").missing() == ("c",)
    assert HostCondition.from_dict({"cpu_flags": ["amx_bf16"]}) == cpu_has("amx_bf16")
    bad: object
    for bad in ({}, {"cpu_flags": []}, {"cpu_flags": "amx_bf16"}, {"cpu_flags": [""]}, ["amx_bf16"]):
        with pytest.raises(ValueError, match="cpu_flags"):
            HostCondition.from_dict(bad)


def test_a_case_with_a_malformed_host_is_a_clear_error(tmp_path: Path) -> None:
    doc = json.loads(CASE.read_text())
    doc["host"] = {"cpu_flag": "amx_bf16"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(CorpusError, match=r"bad\.json: host must be"):
        load_case(bad)


def test_the_case_is_skipped_on_a_machine_without_its_cpu_flags(no_amx: None) -> None:
    case = load_case(CASE)
    assert case.host == cpu_has("amx_bf16")
    why = case.not_here()
    assert why is not None and "amx_bf16" in why
    outcome = judge(case, None)  # type: ignore[arg-type]  # not run: the host decides first
    assert outcome.ok and outcome.verdict_kind == "skipped" and "amx_bf16" in outcome.message


def test_a_case_without_a_host_is_replayed_everywhere(no_amx: None) -> None:
    case = load_case(ROOT / "corpus" / "bugs" / "chunk-uneven-pieces-panics.json")
    assert case.host is None and case.not_here() is None
    assert isinstance(case, Case)


def test_the_backend_matrix_skips_the_case_and_records_nothing(no_amx: None, tmp_path: Path) -> None:
    from difftest.findings.backends import case_cell, record_backends_tested

    case = load_case(CASE)
    cell = case_cell(case, "flex", None)  # type: ignore[arg-type]  # not run: the host decides first
    assert cell.outcome == "skipped" and cell.ok and "amx_bf16" in cell.detail
    copy = tmp_path / CASE.name
    copy.write_text(CASE.read_text())
    assert not record_backends_tested(copy, [cell], "0.22.1")
    assert copy.read_text() == CASE.read_text()


def test_the_case_names_pytorch_not_a_burn_layer() -> None:
    from difftest.findings.backends import recorded_where, where

    case = load_case(CASE)
    assert case.blames_torch
    assert recorded_where(case) is not None and recorded_where(case).startswith("PyTorch's")  # type: ignore[union-attr]
    assert where({"flex": True, "ndarray": True}).startswith("shows on every backend tested")
    assert not load_case(ROOT / "corpus" / "bugs" / "chunk-uneven-pieces-panics.json").blames_torch


UNINIT = next(b for b in KNOWN_BUGS if b.name == "torch-bf16-conv-weight-grad-uninitialised")


def _conv1d_weight_fault(pairs: tuple[tuple[float, float], ...], *, dtype: str = "bfloat16", length: int = 1,
                         padding: int = 1, verdict: str = "torch-wrong") -> Fault:
    """The quality suite's seed-12 program 18590 in small: a bfloat16 conv1d of a length-1 input,
    kernel 3, padding 1: taps 0 and 2 meet only padding, so their weight gradient is exactly 0."""
    program = program_from_dict({"format": "difftest-program", "version": 1, "dtype": dtype, "statements": [
        {"id": "x", "kind": "leaf", "shape": [1, 2, length], "data": [0.5, -1.0] * length, "device": "autodiff",
         "require_grad": True},
        {"id": "w", "kind": "leaf", "shape": [1, 2, 3], "data": [0.5, 0.25, -0.5, 1.0, 0.75, -0.25],
         "device": "autodiff", "require_grad": True},
        {"id": "y", "kind": "op", "op": "conv1d", "inputs": ["x", "w"],
         "attrs": {"stride": [2], "padding": [padding], "dilation": [1], "groups": 1}},
    ]})
    return Fault("grad", "y", program, dtype, None, "", input=(1,), pairs=pairs, elements=(0,), verdict=verdict)


def test_uninitialised_weight_taps_are_pytorchs_known_bug_where_float64_gives_zero() -> None:
    assert known_bug_of([_conv1d_weight_fault(((0.0, float("nan")),))]) is UNINIT
    assert known_bug_of([_conv1d_weight_fault(((0.0, 2.3e-9), (0.0, 1e25)))]) is UNINIT


def test_uninitialised_weight_taps_neighbours_are_news() -> None:
    # a wrong nonzero weight gradient, a burn-side zero-tap error, another dtype, no untouched tap
    assert known_bug_of([_conv1d_weight_fault(((0.5, 0.51),))]) is None
    assert known_bug_of([_conv1d_weight_fault(((0.0, 1.0),), verdict="burn-wrong")]) is None
    assert known_bug_of([_conv1d_weight_fault(((0.0, float("nan")),), dtype="float32")]) is None
    # length 3, no padding: the one output reads every tap from the input
    assert known_bug_of([_conv1d_weight_fault(((0.0, float("nan")),), length=3, padding=0)]) is None
    assert known_bug_of([replace(_conv1d_weight_fault(((0.0, float("nan")),)), input=(0,))]) is None


def test_replay_counts_a_host_dependent_case_as_skipped(no_amx: None, capsys: pytest.CaptureFixture[str]) -> None:
    # skipped before any run: no worker answers for it, and it is neither passed nor failed
    from difftest.cli import main

    assert main(["replay", str(CASE)]) == 0
    out = capsys.readouterr().out
    assert "skipped: needs a CPU with amx_bf16" in out and "0 passed, 0 failed, 1 skipped" in out


@pytest.mark.parametrize("op", ["conv1d", "conv_transpose1d", "conv2d", "conv_transpose2d"])
def test_the_site_predicates_agree_with_pytorchs_own_float64_result(op: str) -> None:
    """The two sites compute which taps and output positions meet only padding from the
    shapes; PyTorch in float64 on all-ones data says it directly (a tap that reads only padding
    gets a weight gradient of exactly 0; an output position no tap reaches holds the bias
    alone). Every small configuration of one spatial dim, the other dims of size 1."""
    import itertools

    import torch

    from difftest.divergences.torch_bugs import conv_weight_tap_untouched
    from tests.programs import leaf
    from tests.programs import op as op_st

    fn = getattr(torch.nn.functional, op)
    rank = 2 if op.endswith("2d") else 1
    transposed = "transpose" in op
    checked = 0
    for size, k, stride, pad, dil, pad_out in itertools.product((1, 2, 3), (1, 2, 3), (1, 2, 3), (0, 1, 2),
                                                                (1, 2), (0, 1)):
        if pad_out and (not transposed or pad_out >= max(stride, dil)):
            continue
        def spatial(n: int, rest: int = 1) -> list[int]:
            return [n] + [rest] * (rank - 1)  # the first spatial dim varies, any other is the identity's

        attrs: dict[str, Any] = {"stride": spatial(stride), "padding": spatial(pad, 0), "dilation": spatial(dil),
                                 "groups": 1}
        if transposed:
            attrs["padding_out"] = spatial(pad_out, 0)
        x = torch.ones([1, 1, *spatial(size)], dtype=torch.float64)
        w = torch.ones([1, 1, *spatial(k)], dtype=torch.float64, requires_grad=True)
        b = torch.full([1], 7.0, dtype=torch.float64)
        extra = {"output_padding": attrs["padding_out"]} if transposed else {}
        try:
            y = fn(x, w, b, stride=attrs["stride"], padding=attrs["padding"], dilation=attrs["dilation"], **extra)
        except RuntimeError:  # no valid output for these sizes: not a program the generator makes
            continue
        y.sum().backward()
        assert w.grad is not None
        prior = [leaf("x", x.flatten().tolist(), shape=list(x.shape)),
                 leaf("w", w.detach().flatten().tolist(), shape=list(w.shape)), leaf("b", [7.0])]
        st = op_st("y", op, "x", "w", "b", **attrs)
        assert conv_weight_tap_untouched(st, prior) == bool((w.grad == 0).any()), (op, size, k, stride, pad, dil)
        if op == "conv_transpose2d":
            assert conv_transpose2d_bias_uncovered(st, prior) == bool((y == 7.0).any()), (size, k, stride, pad, dil)
        checked += 1
    assert checked > 100


MISH = next(b for b in KNOWN_BUGS if b.name == "torch-mish-grad-sigmoid-overflow")


def _mish_fault(x: list[float], elements: tuple[int, ...], dtype: str = "float64",
                verdict: str = "torch-wrong") -> Fault:
    program = program_from_dict({"format": "difftest-program", "version": 2, "dtype": dtype, "statements": [
        {"id": "a0", "kind": "leaf", "shape": [len(x)], "data": x, "device": "autodiff", "require_grad": True},
        {"id": "y", "kind": "op", "op": "mish", "inputs": ["a0"]},
        {"id": "bw", "kind": "backward", "input": "y"}]})
    return Fault("grad", "y", program, dtype, None, "", (0,), tuple((-1e-306, 1e-309) for _ in elements),
                 elements, (tuple(x),), verdict=verdict)


def test_pytorchs_mish_gradient_is_known_wrong_only_past_exps_overflow() -> None:
    """Past -709.78 in float64 PyTorch's sigmoid(x) = 1 / (1 + exp(-x)) is 0 (tests/unit: the
    record's claim; the corpus case shows it on PyTorch itself). A wrong mish gradient at an
    element short of that threshold, in float32, or judged burn-wrong is news."""
    assert explains(MISH, _mish_fault([-711.0, -720.0], (0, 1)))
    assert not explains(MISH, _mish_fault([-711.0, -700.0], (0, 1)))  # -700: exp(700) is finite
    assert explains(MISH, _mish_fault([-711.0, -700.0], (0,)))
    assert not explains(MISH, _mish_fault([-711.0], (0,), dtype="float32"))
    assert not explains(MISH, _mish_fault([-711.0], (0,), verdict="burn-wrong"))


def test_the_mish_records_threshold_is_where_pytorch_loses_the_term() -> None:
    import torch

    from difftest.divergences.torch_bugs import EXP_OVERFLOW

    limit = EXP_OVERFLOW["float64"]
    x = torch.tensor([-limit + 0.01, -limit - 0.01], dtype=torch.float64, requires_grad=True)
    torch.nn.functional.mish(x).backward(torch.ones(2, dtype=torch.float64))  # type: ignore[no-untyped-call]
    assert x.grad is not None
    short, past = x.grad.tolist()
    assert short < 0 < past  # the x sigmoid(x) term, negative, present just short of it and lost past it


def _shown_weight_fault(uses: int) -> Fault:
    """The campaign finding of a bfloat16 known-sites campaign (seed 31, program 4495) in small:
    PyTorch's weight gradient of conv1d, reached through a permute, NaN at an untouched tap. The
    op alone gives 0 there (the garbage is whatever the allocator held), so the finding is not
    localised: it is matched as the program shows it. `uses`: 2 reads w twice."""
    from difftest.findings.triage import shown_fault
    from difftest.oracle.compare import Mismatch, Verdict
    from difftest.oracle.model import predict
    from difftest.program.observation import BackwardObs, Observation, TensorObs

    statements: list[dict[str, Any]] = [
        {"id": "x", "kind": "leaf", "shape": [1, 2, 1], "data": [0.5, -1.0], "device": "autodiff",
         "require_grad": True},
        {"id": "w", "kind": "leaf", "shape": [1, 2, 3], "data": [0.5, 0.25, -0.5, 1.0, 0.75, -0.25],
         "device": "autodiff", "require_grad": True},
        {"id": "y", "kind": "op", "op": "conv1d", "inputs": ["x", "w"],
         "attrs": {"stride": [2], "padding": [1], "dilation": [1], "groups": 1}},
        {"id": "p", "kind": "op", "op": "permute", "inputs": ["y"], "attrs": {"axes": [2, 1, 0]}},
    ]
    if uses == 2:
        statements += [{"id": "q", "kind": "op", "op": "sum", "inputs": ["w"]},
                       {"id": "r", "kind": "op", "op": "add", "inputs": ["p", "q"]}]
    statements.append({"id": "bw", "kind": "backward", "input": statements[-1]["id"]})
    program = program_from_dict({"format": "difftest-program", "version": 1, "dtype": "bfloat16",
                                 "statements": statements})
    ref = TensorObs((1, 2, 3), (0.0, 0.5, 0.0, 0.0, -1.0, 0.0))
    seen = TensorObs((1, 2, 3), (float("nan"), 0.5, 0.0, 0.0, -1.0, 0.0))

    def obs(framework: str, g: TensorObs) -> Observation:
        return Observation(framework, (), (BackwardObs("bw", {"w": g}),))

    verdict = Verdict(program, predict(program), obs("torch", seen), obs("burn", ref), reference=obs("torch64", ref))
    m = Mismatch("grad", "w", 1, None, "nan", 0.0, verdict="torch-wrong", element=0, backward="bw", elements=(0,))
    return shown_fault(verdict, m)


def test_a_leafs_gradient_through_one_op_is_that_ops_input_gradient_as_shown() -> None:
    shown = _shown_weight_fault(1)
    assert shown.site == "bw" and shown.alternative is not None
    assert (shown.alternative.site, shown.alternative.input) == ("y", (1,))
    assert known_bug_of([shown]) is UNINIT
    # read twice on the way to the root, the leaf's gradient is no one op's: no such reading
    twice = _shown_weight_fault(2)
    assert twice.alternative is None and known_bug_of([twice]) is None
