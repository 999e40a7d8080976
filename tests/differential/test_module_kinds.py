"""Module kinds as data (difftest/program/modules/): every kind is declared on both sides and
built by both, batch_norm's running statistics are compared honestly (burn's declared
conventions, computed on the PyTorch side from their records), and bad module statements are
named."""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
import torch

from difftest.divergences.running_stats import BATCH_NORM_RUNNING_VAR, RunningStatConvention
from difftest.divergences.states import BurnState
from difftest.exec.burn_worker import BurnWorker
from difftest.exec.torch_modules import build_torch_module
from difftest.oracle.check import check
from difftest.oracle.model import predict_burn
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import Apply, Module, ProgramError, Transform
from difftest.program.jsonio import program_from_dict
from difftest.program.modules import MODULE_KINDS, NOISE_CLASSES
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate
from difftest.strategies.module_fits import FITS
from tests.module_programs import BATCH_NORM_FREEZE_TRAIN, BATCH_NORM_TRANSFORMS, BN, MODULE_PROGRAMS

X1 = [1.0, 2.0, 4.0, 8.0, 3.0, -1.0, 0.5, 2.5]
X2 = [0.0, 1.0, -2.0, 3.0, 5.0, 1.5, 2.0, -0.5]


def _doc(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"format": "difftest-program", "version": 2, "statements": list(statements)}


def test_every_kind_is_declared_on_both_sides(burn_worker: BurnWorker) -> None:
    """The registry's kinds, in its order, are the interpreter's (its `module_kinds!` table,
    which an unknown kind's error lists) and the generator's (one fit each); each names a noise
    class the noise model knows."""
    obs = burn_worker.run(_doc({"id": "m", "kind": "module", "module": "no_such_kind"}))
    assert obs.error is not None
    listed = re.search(r"expected one of (.*)$", obs.error.message)
    assert listed is not None, obs.error.message
    assert re.findall(r"`(\w+)`", listed[1]) == list(MODULE_KINDS)
    assert set(FITS) == set(MODULE_KINDS)
    for kind in MODULE_KINDS.values():
        assert kind.noise in NOISE_CLASSES or kind.noise_op is not None, kind.name


@functools.cache
def _examples() -> dict[str, Module]:
    """A statement of each kind from generated programs (the generator draws every kind)."""
    found: dict[str, Module] = {}
    for seed in range(2000):
        for s in generate(RandomChoices(seed), GenConfig(module_weight=4.0, norm_weight=4.0)).statements:
            if isinstance(s, Module):
                found.setdefault(s.module, s)
        if len(found) == len(MODULE_KINDS):
            break
    return found


@pytest.mark.parametrize("name", list(MODULE_KINDS))
def test_the_constructor_builds_the_statements_tensors(name: str) -> None:
    """The kind's PyTorch constructor (the text the reproducer prints) builds a module that
    holds each of the statement's tensors under its name, in the program's dtype."""
    st = _examples().get(name)
    assert st is not None, f"no {name} module in 2000 generated programs"
    for dt in (torch.float32, torch.float64):
        m = build_torch_module(st, dt)
        for tname, t in st.tensors().items():
            held = getattr(m, tname)
            assert held.dtype == dt and tuple(held.shape) == t.shape, (name, tname)
            assert held.detach().reshape(-1).tolist() == pytest.approx(list(t.data)), (name, tname)


@pytest.mark.parametrize("name", sorted(MODULE_PROGRAMS))
def test_module_programs_agree(name: str, burn_worker: BurnWorker) -> None:
    verdict = check(MODULE_PROGRAMS[name], burn_worker)
    assert verdict.ok, verdict.report()


def _two_forwards() -> dict[str, Any]:
    bn = {**BN, "num_features": 2, "momentum": 0.3, **{k: {"shape": [2], "data": v} for k, v in (
        ("weight", [1.0, 1.0]), ("bias", [0.0, 0.0]), ("running_mean", [0.0, 0.0]), ("running_var", [1.0, 1.0]))}}
    leaf = {"kind": "leaf", "shape": [4, 2], "device": "autodiff", "require_grad": False}
    return _doc(bn, {**leaf, "id": "x1", "data": X1}, {**leaf, "id": "x2", "data": X2},
                {"id": "y1", "kind": "apply", "module": "bn", "input": "x1"},
                {"id": "y2", "kind": "apply", "module": "bn", "input": "x2"},
                {"id": "m", "kind": "param", "module": "bn", "param": "running_mean"},
                {"id": "v", "kind": "param", "module": "bn", "param": "running_var"})


def _formula(conv: RunningStatConvention) -> tuple[list[float], list[float]]:
    mean, var = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    for x in (X1, X2):
        mean, var = conv.update(mean, var, torch.tensor(x, dtype=torch.float64).reshape(4, 2), 0.3)
    return mean.tolist(), var.tolist()


def test_running_var_follows_the_declared_record_and_not_pytorchs(burn_worker: BurnWorker) -> None:
    """burn's running statistics after two train forwards are the record's formula (biased
    variance), not PyTorch's (unbiased): the record is what makes them agree, and a burn update
    off that formula would show."""
    program = program_from_dict(_two_forwards())
    obs = burn_worker.run(program)
    m, v = obs.value("m"), obs.value("v")
    assert m is not None and v is not None
    mean, biased = _formula(BATCH_NORM_RUNNING_VAR)
    _, unbiased = _formula(replace(BATCH_NORM_RUNNING_VAR, unbiased_var=True))
    assert m.value.data == pytest.approx(mean, rel=1e-6)
    assert v.value.data == pytest.approx(biased, rel=1e-6)
    assert v.value.data != pytest.approx(unbiased, rel=1e-3)
    assert check(program, burn_worker).ok


def test_running_stat_flags(burn_worker: BurnWorker) -> None:
    """A running-statistic read: no grad in either framework; burn holds it on the device of the
    module's parameters (autodiff; plain after valid())."""
    doc = _two_forwards()
    doc["statements"] += [{"id": "bv", "kind": "transform", "transform": "valid", "input": "bn"},
                          {"id": "vv", "kind": "param", "module": "bv", "param": "running_var"}]
    program = program_from_dict(doc)
    burn, torch_obs = burn_worker.run(program), run_torch(program)
    flags = {i: (burn.value(i), torch_obs.value(i)) for i in ("v", "vv")}
    for ident, (b, t) in flags.items():
        assert b is not None and t is not None
        assert tuple(t.flags.values()) == (False, True, False, False), ident
    assert tuple(flags["v"][0].flags.values()) == (True, False, False)  # type: ignore[union-attr]
    assert tuple(flags["vv"][0].flags.values()) == (False, False, False)  # type: ignore[union-attr]


def test_shared_running_state_lags_like_burns(burn_worker: BurnWorker) -> None:
    """The frozen clone's eval forward (y3) reads the statistics before the last train update's
    pending part (running-state-lags-one-update): both sides agree on it."""
    verdict = check(BATCH_NORM_TRANSFORMS, burn_worker)
    assert verdict.ok, verdict.report()
    y3 = verdict.burn.value("y3")
    assert y3 is not None and verdict.torch.value("y3") is not None


def test_running_statistics_of_an_input_not_comparable_are_not_compared(burn_worker: BurnWorker) -> None:
    """A train forward of a dropout's result (burn's mask is not PyTorch's) updates the running
    statistics from values that differ: reads of them, and an eval forward that normalises with
    them, are not comparable from then on (a sessions campaign, seed 406, program 6,794, read
    the running mean after a batch norm of values an optimizer step with accumulated gradients
    made). A read before that forward is still compared."""
    x = [1.0, 2.0, -1.0, 0.5, 3.0, 2.5, 0.0, -2.0, 4.0, 1.0, -0.5, 1.5]
    program = program_from_dict({"format": "difftest-program", "version": 1, "statements": [
        BN, {"id": "dr", "kind": "module", "module": "dropout", "p": 0.5},
        {"id": "x", "kind": "leaf", "shape": [4, 3], "data": x, "device": "autodiff", "require_grad": False},
        {"id": "before", "kind": "param", "module": "bn", "param": "running_mean"},
        {"id": "d", "kind": "apply", "module": "dr", "input": "x"},
        {"id": "y", "kind": "apply", "module": "bn", "input": "d"},
        {"id": "after", "kind": "param", "module": "bn", "param": "running_mean"},
        {"id": "va", "kind": "transform", "transform": "valid", "input": "bn"},
        {"id": "ye", "kind": "apply", "module": "va", "input": "x"},
    ]})
    verdict = check(program, burn_worker)
    assert verdict.ok, verdict.report()
    for framework in (verdict.prediction.torch, verdict.prediction.burn):
        assert {"d", "y", "after", "ye"} <= framework.nondet and "before" not in framework.nondet


@pytest.mark.parametrize(
    ("statements", "index", "message"),
    [
        ([{**BN, "running_var": None}], 0, "running_var"),
        ([{**BN, "num_features": 2}], 0, "needs [2]"),
        ([{**BN, "momentum": 1.5}], 0, "momentum"),
        ([BN, {"id": "x", "kind": "leaf", "shape": [3], "data": [1, 2, 3], "device": "autodiff",
               "require_grad": False},
          {"id": "y", "kind": "apply", "module": "bn", "input": "x"}], 2, "rank 2, 3, 4"),
        ([BN, {"id": "x", "kind": "leaf", "shape": [2, 2], "data": [1, 2, 3, 4], "device": "autodiff",
               "require_grad": False},
          {"id": "y", "kind": "apply", "module": "bn", "input": "x"}], 2, "dim 1, the channels, must be 3"),
        ([{"id": "fc", "kind": "module", "module": "linear", "weight": {"shape": [1, 1], "data": [1]},
           "bias": None},
          {"id": "r", "kind": "param", "module": "fc", "param": "running_mean"}], 1, "no 'running_mean'"),
        ([BN, {"id": "x", "kind": "leaf", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6], "device": "autodiff",
               "require_grad": True},
          {"id": "y", "kind": "apply", "module": "bn", "input": "x"},
          {"id": "s", "kind": "op", "op": "sum", "inputs": ["y"]},
          {"id": "bw", "kind": "backward", "input": "s"},
          {"id": "o", "kind": "optimizer", "optimizer": "sgd"},
          {"id": "st", "kind": "step", "optimizer": "o", "module": "bn", "grads": "bw", "lr": 0.1}], 6,
         "optimizer steps do not act on"),
        ([{"id": "pr", "kind": "module", "module": "prelu", "weight": {"shape": [2], "data": [0.25, 0.5]}},
          {"id": "x", "kind": "leaf", "shape": [2], "data": [1, -1], "device": "autodiff", "require_grad": False},
          {"id": "y", "kind": "apply", "module": "pr", "input": "x"}], 2, "dim 1, the channels, must be 2"),
    ],
)
def test_bad_module_statements_are_named(statements: list[dict[str, Any]], index: int, message: str) -> None:
    from difftest.ops.validate import check_program

    with pytest.raises(ProgramError) as e:
        check_program(program_from_dict(_doc(*statements)))
    assert e.value.index == index
    assert message in str(e.value)


def test_every_module_kind_is_drawn_about_as_often_as_the_others() -> None:
    """The module draw takes the kind first and then a value it fits (module_draws.module), so
    that a fault in any kind's burn code is met early in a campaign: over the default
    distribution no kind is drawn less than a third as often as the kinds' mean (drawn value
    first, a normalisation was tried only where the value at hand fitted it, and group_norm
    was 0.6% of the modules, conv2d 1%)."""
    seen: Counter[str] = Counter()
    for seed in range(1000):
        seen.update(s.module for s in generate(RandomChoices(seed), GenConfig()).statements if isinstance(s, Module))
    mean = sum(seen.values()) / len(MODULE_KINDS)
    assert not [k for k in MODULE_KINDS if seen[k] < mean / 3], (round(mean), dict(seen))


def test_a_valid_modules_forwards_reach_the_inner_backend() -> None:
    """A valid() module's forward takes, half of the time, its input off the autodiff device
    (module_handles.forward_input), as inference does: only there does burn run the inner
    backend's own module kernels (Flex's fused layer_norm), which a forward of an autodiff
    value never reaches (before, 5% of valid() forwards had such an input)."""
    inner = total = 0
    for seed in range(1000):
        program = generate(RandomChoices(seed), GenConfig())
        by_id = program.by_id()
        states = None
        for s in program.statements:
            if not isinstance(s, Apply):
                continue
            handle = by_id[s.module]
            valid = False
            while isinstance(handle, Transform):
                valid = valid or handle.transform == "valid"
                handle = by_id[handle.input]
            if valid:
                states = states or predict_burn(program).states
                state = states.get(s.input)
                total += 1
                inner += isinstance(state, BurnState) and not state.is_autodiff
    assert total > 25 and inner > 0.3 * total, (inner, total)


def test_generator_builds_the_normalisations() -> None:
    seen: dict[str, int] = {}
    for seed in range(300):
        for s in generate(RandomChoices(seed), GenConfig(norm_weight=4.0)).statements:
            if s.kind == "module":
                seen[s.module] = seen.get(s.module, 0) + 1  # type: ignore[union-attr]
    assert seen.get("batch_norm", 0) > 0 and seen.get("layer_norm", 0) > 0, seen


def test_a_plain_input_takes_burns_inference_path(burn_worker: BurnWorker) -> None:
    """A train-mode batch_norm forward of a plain-device input (and of a without_autodiff value):
    burn normalises with the running statistics and leaves them as they are (record
    batch-norm-trains-on-autodiff-device-only); the PyTorch side follows, so both agree, and the
    statistics read afterwards are the initial ones; an autodiff input still trains."""
    x = [1.0, 2.0, -1.0, 0.5, 3.0, 2.5, 0.0, -2.0, 4.0, 1.0, -0.5, 1.5]
    doc = {"format": "difftest-program", "version": 1, "statements": [
        BN,
        {"id": "p", "kind": "leaf", "shape": [2, 3, 2], "data": x, "device": "plain", "require_grad": False},
        {"id": "yp", "kind": "apply", "module": "bn", "input": "p"},
        {"id": "m0", "kind": "param", "module": "bn", "param": "running_mean"},
        {"id": "a", "kind": "leaf", "shape": [2, 3, 2], "data": x, "device": "autodiff", "require_grad": True},
        {"id": "c", "kind": "cut", "cut": "without_autodiff", "input": "a"},
        {"id": "yc", "kind": "apply", "module": "bn", "input": "c"},
        {"id": "m1", "kind": "param", "module": "bn", "param": "running_mean"},
        {"id": "ya", "kind": "apply", "module": "bn", "input": "a"},
        {"id": "m2", "kind": "param", "module": "bn", "param": "running_mean"},
        {"id": "s", "kind": "op", "op": "sum", "inputs": ["ya"]},
        {"id": "bw", "kind": "backward", "input": "s"}]}
    program = program_from_dict(doc)
    verdict = check(program, burn_worker)
    assert verdict.ok, verdict.report()
    start = BN["running_mean"]["data"]  # type: ignore[index]
    for ident in ("m0", "m1"):
        obs = verdict.burn.value(ident)
        assert obs is not None and obs.value.data == pytest.approx(start), ident
    trained = verdict.burn.value("m2")
    assert trained is not None and trained.value.data != pytest.approx(start)
    # the inference forward normalises with the running statistics
    yp = verdict.torch.value("yp")
    assert yp is not None
    t = torch.tensor(x).reshape(2, 3, 2)
    rm, rv = torch.tensor(start), torch.tensor(BN["running_var"]["data"])  # type: ignore[index]
    w, b = torch.tensor(BN["weight"]["data"]), torch.tensor(BN["bias"]["data"])  # type: ignore[index]
    expected = torch.nn.functional.batch_norm(t, rm, rv, w, b, training=False, eps=1e-5)
    assert yp.value.data == pytest.approx(expected.reshape(-1).tolist(), rel=1e-5)


def test_freeze_survives_train_on_a_batch_norm(burn_worker: BurnWorker) -> None:
    """freeze() then train(): burn keeps the BatchNorm on its inference path (its own training
    flag stays off until unfreeze; record batch-norm-freeze-survives-train), so the statistics read
    afterwards are the initial ones and the input's gradient is weight / sqrt(running_var + eps);
    the PyTorch side follows. unfreeze() trains again."""
    verdict = check(BATCH_NORM_FREEZE_TRAIN, burn_worker)
    assert verdict.ok, verdict.report()
    start = BN["running_mean"]["data"]  # type: ignore[index]
    m0, m1 = verdict.burn.value("m0"), verdict.burn.value("m1")
    assert m0 is not None and m0.value.data == pytest.approx(start)
    assert m1 is not None and m1.value.data != pytest.approx(start)
    grad = verdict.burn.backwards[0].grads["x"]
    assert grad is not None
    w, rv = BN["weight"]["data"], BN["running_var"]["data"]  # type: ignore[index]
    per_channel = [wc / (vc + 1e-5) ** 0.5 for wc, vc in zip(w, rv)]
    assert grad.data == pytest.approx([per_channel[(i // 2) % 3] for i in range(12)], rel=1e-5)


EM = {"id": "em", "kind": "module", "module": "embedding",
      "weight": {"shape": [3, 2], "data": [0.5, -1.0, 0.25, 0.75, 1.0, 0.5]}}


def _indices(data: list[float], rg: bool = False) -> dict[str, Any]:
    return {"id": "i", "kind": "leaf", "shape": [1, len(data)], "data": data, "device": "autodiff",
            "require_grad": rg}


BAD_INDICES = [
    ([EM, _indices([0.0, 1.5])], "element 1 of its input is 1.5"),
    ([EM, _indices([0.0, 3.0])], "indices in [0, 3): element 1"),
    ([EM, _indices([-1.0, 0.0])], "element 0 of its input is -1"),
    ([EM, _indices([0.0, 1.0], rg=True)], "must not require grad"),
    ([EM, _indices([0.0, 1.0]), {"id": "j", "kind": "op", "op": "abs", "inputs": ["i"]}], "must be a leaf"),
]


@pytest.mark.parametrize(("statements", "message"), BAD_INDICES)
def test_an_embeddings_input_must_be_a_leaf_of_indices(statements: list[dict[str, Any]], message: str,
                                                       burn_worker: BurnWorker) -> None:
    """Both sides refuse the forward of an embedding on anything but a leaf of integral indices
    in range that does not require grad, naming the apply statement and the element."""
    from difftest.ops.validate import check_program

    source = statements[-1]["id"]
    doc = _doc(*statements, {"id": "y", "kind": "apply", "module": "em", "input": source})
    index = len(statements)
    with pytest.raises(ProgramError) as e:
        check_program(program_from_dict(doc))
    assert e.value.index == index and message in str(e.value), str(e.value)
    obs = burn_worker.run(doc)
    assert obs.error is not None and obs.error.statement == "y", obs.error
    assert message in obs.error.message, obs.error.message


def test_the_shrinker_keeps_embedding_indices_integral() -> None:
    """Simplifying leaf data (toward 0.5, 1, 2) must not make an embedding's indices invalid:
    every candidate the shrinker keeps passes the program checks."""
    from difftest.findings.shrink import shrink
    from difftest.ops.validate import check_program

    doc = _doc(EM, _indices([0.0, 2.0, 2.0]), {"id": "y", "kind": "apply", "module": "em", "input": "i"},
               {"id": "s", "kind": "op", "op": "sum", "inputs": ["y"]}, {"id": "bw", "kind": "backward", "input": "s"})
    seen: list[Any] = []

    def still_fails(p: Any) -> bool:
        check_program(p)  # raises on an invalid candidate
        seen.append(p)
        return True

    small = shrink(program_from_dict(doc), still_fails)
    check_program(small)
    assert seen, "the shrinker tried no candidate"


def test_the_generator_builds_embeddings_on_leaves_of_indices() -> None:
    """The default generator builds embedding modules, whose forwards take leaves of indices with
    a repeated row (their gradients accumulate) and pass the program checks."""
    from difftest.ops.validate import check_program
    from difftest.program.ir import Apply, Leaf, Module

    forwards = 0
    for seed in range(400):
        p = generate(RandomChoices(seed), GenConfig(module_weight=2.0))
        by_id = p.by_id()
        tables = {s.id for s in p.statements if isinstance(s, Module) and s.module == "embedding"}
        if not tables:
            continue
        check_program(p)
        for s in p.statements:
            x = by_id[s.input] if isinstance(s, Apply) else None
            if isinstance(x, Leaf) and not x.require_grad and all(float(v).is_integer() for v in x.data):
                forwards += 1
    assert forwards > 20, forwards


@pytest.mark.parametrize("module", [
    {"module": "prelu", "weight": {"shape": [1], "data": [0.25]}},
    {"module": "dropout", "p": 0.5},
], ids=["prelu", "dropout"])
def test_an_elementwise_forward_keeps_its_inputs_layout(burn_worker: BurnWorker, module: dict[str, Any]) -> None:
    """PyTorch's prelu and dropout keep a transposed input's layout, so a reshape of their result
    copies, and in an inference_mode region that copy is an inference tensor; the model took
    every module's result as contiguous (a reshape view, a normal tensor) and flagged PyTorch
    (the quality suite's false-alarm campaign, seed 13, program 7420, a prelu)."""
    from difftest.oracle.check import check
    from difftest.program.jsonio import program_from_dict

    p = program_from_dict({"format": "difftest-program", "version": 2, "dtype": "float32", "statements": [
        {"id": "x", "kind": "leaf", "shape": [2, 3], "data": [0.5, -1.0, 1.5, -2.0, 2.5, -0.75],
         "device": "autodiff", "require_grad": True},
        {"id": "t", "kind": "op", "op": "transpose", "inputs": ["x"], "attrs": {}},
        {"id": "m", "kind": "module", **module},
        {"id": "y", "kind": "apply", "module": "m", "input": "t"},
        {"id": "r", "kind": "op", "op": "reshape", "inputs": ["y"], "attrs": {"shape": [6]},
         "region": "inference_mode"},
    ]})
    verdict = check(p, burn_worker)
    assert verdict.ok, verdict.report()


_CL = [0.5 * ((7 * i) % 11) - 2.0 for i in range(2 * 4 * 4 * 3)]  # an [N, H, W, C] leaf, C = 3


def _t4(values: list[float]) -> dict[str, Any]:
    return {"shape": [len(values)], "data": values}


@pytest.mark.parametrize("module,shape", [
    ({"module": "batch_norm", "num_features": 3, "epsilon": 1e-5, "momentum": 0.25,
      "weight": _t4([1.5, -0.5, 0.75]), "bias": _t4([0.25, 1.0, -0.5]),
      "running_mean": _t4([0.1, -0.2, 0.0]), "running_var": _t4([1.0, 0.5, 2.0])}, [2, 3, 4, 4]),
    ({"module": "group_norm", "num_groups": 1, "num_channels": 3, "epsilon": 1e-5,
      "weight": _t4([1.5, -0.5, 0.75]), "bias": _t4([0.25, 1.0, -0.5])}, [2, 3, 4, 4]),
    ({"module": "rms_norm", "d_model": 4, "epsilon": 1e-3, "weight": _t4([1.5, -0.5, 0.75, 1.0])}, [2, 3, 4, 4]),
    ({"module": "conv2d", "stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 1,
      "weight": {"shape": [2, 3, 2, 2], "data": [0.25 * ((5 * i) % 9) - 1.0 for i in range(24)]},
      "bias": _t4([0.5, -0.25])}, [2, 2, 3, 3]),
], ids=["batch_norm", "group_norm", "rms_norm", "conv2d"])
def test_a_channels_last_input_gives_a_channels_last_result(burn_worker: BurnWorker, module: dict[str, Any],
                                                            shape: list[int]) -> None:
    """PyTorch's batch_norm, group_norm, rms_norm and conv2d lay their result out in the memory
    format their 4-d input suggests: an [N, C, H, W] view of an [N, H, W, C] tensor (channels last)
    gives a channels-last result, which a reshape then copies (an inference tensor in an
    inference_mode region); any other layout gives a contiguous one."""
    from difftest.oracle.check import check
    from difftest.program.jsonio import program_from_dict

    n = 1
    for d in shape:
        n *= d
    p = program_from_dict({"format": "difftest-program", "version": 2, "dtype": "float32", "statements": [
        {"id": "x", "kind": "leaf", "shape": [2, 4, 4, 3], "data": _CL, "device": "autodiff", "require_grad": True},
        {"id": "t", "kind": "op", "op": "permute", "inputs": ["x"], "attrs": {"axes": [0, 3, 1, 2]}},
        {"id": "m", "kind": "module", **module},
        {"id": "y", "kind": "apply", "module": "m", "input": "t"},
        {"id": "r", "kind": "op", "op": "reshape", "inputs": ["y"], "attrs": {"shape": [n]},
         "region": "inference_mode"},
    ]})
    verdict = check(p, burn_worker)
    assert verdict.ok, verdict.report()
