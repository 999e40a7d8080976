"""nn modules (Linear, Dropout and the module transforms): docs/semantics.md#golden-linear, the IR and
its validation, the model's module rules and nondeterminism, and the reproducers."""

from __future__ import annotations

import contextlib
import io
import runpy
from pathlib import Path
from typing import Any

import pytest

from difftest.divergences.rules import MODULE_RULES, RULES_BY_NAME
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import load_case
from difftest.findings.reproducers import torch_script
from difftest.ops.validate import check_program
from difftest.oracle.check import check
from difftest.oracle.compare import compare
from difftest.oracle.model import predict
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import Apply, InlineTensor, Module, Param, Program, ProgramError, Transform
from difftest.program.jsonio import program_from_dict, program_from_json, program_to_json
from difftest.program.observation import Observation, TensorObs, ValueObs
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate
from tests.programs import backward, cut, leaf, op, program

LINEAR_TABLE = Path(__file__).resolve().parents[2] / "corpus" / "seed" / "linear-table.json"


def _flags(obs: Observation, ident: str) -> tuple[bool, ...]:
    v = obs.value(ident)
    assert v is not None, f"{ident} missing from {obs.framework} observation"
    return tuple(v.flags.values())


def linear(ident: str = "fc", weight: tuple[float, ...] = (0.5, -1.0, 2.0, 0.25), out_in: tuple[int, int] = (2, 2),
           bias: tuple[float, ...] | None = (0.25, -0.5)) -> Module:
    b = InlineTensor((out_in[0],), bias) if bias is not None else None
    return Module(ident, "linear", InlineTensor(out_in, weight), b)


def dropout(ident: str, p: float) -> Module:
    return Module(ident, "dropout", p=p)


# ---------------------------------------------------------------- golden output 3

def test_golden_3_burn_flags(burn_worker: BurnWorker) -> None:
    obs = burn_worker.run(load_case(LINEAR_TABLE).program)
    assert obs.error is None, obs.error
    # is_autodiff, is_tracked, is_require_grad — the seed's Linear table, line for line
    assert _flags(obs, "fc_x") == (True, True, False)
    assert _flags(obs, "fc_valid_weight") == (False, False, False)
    assert _flags(obs, "valid_fc_x_without_autodiff") == (False, False, False)
    assert _flags(obs, "valid_fc_x") == (True, False, False)
    assert _flags(obs, "fc_valid_train_weight") == (True, True, True)


def test_golden_3_torch_flags() -> None:
    obs = run_torch(load_case(LINEAR_TABLE).program)
    assert obs.error is None, obs.error
    # requires_grad, is_leaf, has_grad_fn, is_inference
    assert _flags(obs, "fc_x") == (True, False, True, False)
    assert _flags(obs, "fc_valid_weight") == (True, True, False, False)  # eval() keeps requires_grad
    assert _flags(obs, "valid_fc_x_without_autodiff") == (False, True, False, False)  # under no_grad
    assert _flags(obs, "valid_fc_x") == (False, True, False, False)
    assert _flags(obs, "fc_valid_train_weight") == (True, True, False, False)


def test_golden_3_weights_and_gradients_agree(burn_worker: BurnWorker) -> None:
    case = load_case(LINEAR_TABLE)
    verdict = check(case.program, burn_worker)
    assert verdict.ok, verdict.report()
    assert "valid-with-autodiff-input" in verdict.prediction.rules_fired
    for ident in ("fc_weight", "fc_valid_weight", "fc_valid_train_weight"):
        t, b = verdict.torch.value(ident), verdict.burn.value(ident)
        assert t is not None and b is not None
        assert t.value == b.value == TensorObs((2, 2), (0.5, -1.0, 2.0, 0.25)), ident  # [out, in]
    for obs in (verdict.torch, verdict.burn):
        fc_x = obs.value("fc_x")
        assert fc_x is not None and fc_x.value.data == (-1.25, 2.0), obs.framework  # x W^T + b
        grads = obs.backwards[0].grads
        # d sum(x W^T + b) / dW[o][i] = x[i], in the [out, in] layout
        assert grads["fc_weight"] == TensorObs((2, 2), (1.0, 2.0, 1.0, 2.0)), obs.framework
        assert grads["fc_valid_weight"] is None and grads["fc_valid_train_weight"] is None, obs.framework


# ---------------------------------------------------------------- IR, JSON, validation

def doc(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"format": "difftest-program", "version": 1, "statements": list(statements)}


FC = {"id": "fc", "kind": "module", "module": "linear",
      "weight": {"shape": [2, 3], "data": [1, 2, 3, 4, 5, "NaN"]}, "bias": None}
X = {"id": "x", "kind": "leaf", "shape": [1, 3], "data": [1, 2, 3], "device": "autodiff", "require_grad": False}


def test_module_statements_round_trip() -> None:
    p = program_from_dict(doc(
        FC, {"id": "dr", "kind": "module", "module": "dropout", "p": 0.5}, X,
        {"id": "fv", "kind": "transform", "transform": "valid", "input": "fc"},
        {"id": "y", "kind": "apply", "module": "fv", "input": "x"},
        {"id": "z", "kind": "apply", "module": "dr", "input": "y"},
        {"id": "w", "kind": "param", "module": "fc", "param": "weight"},
    ))
    assert program_to_json(program_from_json(program_to_json(p))) == program_to_json(p)  # NaN != NaN
    assert p.value_ids() == ["x", "y", "z", "w"]  # module handles are not values
    assert check_program(p) == {"x": (1, 3), "y": (1, 2), "z": (1, 2), "w": (2, 3)}
    assert run_torch(p).error is None


@pytest.mark.parametrize(
    ("statements", "index", "ident", "message"),
    [
        ([FC, X, {"id": "y", "kind": "apply", "module": "x", "input": "x"}], 2, "y", "not a module"),
        ([FC, {"id": "y", "kind": "apply", "module": "fc", "input": "fc"}], 1, "y", "not a value"),
        ([FC, {"id": "s", "kind": "op", "op": "neg", "inputs": ["fc"]}], 1, "s", "not a value"),
        ([FC, {"id": "b", "kind": "param", "module": "fc", "param": "bias"}], 1, "b", "without a bias"),
        ([{"id": "d", "kind": "module", "module": "dropout", "p": 0.5},
          {"id": "w", "kind": "param", "module": "d", "param": "weight"}], 1, "w", "no parameters"),
        ([{"id": "t", "kind": "transform", "transform": "valid", "input": "fc"}, FC], 0, "t", "later or unknown"),
        ([{"id": "d", "kind": "module", "module": "dropout", "p": 1.5}], 0, "d", "maximum"),
        ([{**FC, "bias": {"shape": [3], "data": [0, 0, 0]}}], 0, "fc", "needs [2]"),
        ([{**FC, "weight": {"shape": [2, 3], "data": [1, 2]}}], 0, "fc", "needs 6"),
    ],
)
def test_invalid_module_programs_name_the_statement(
    statements: list[dict[str, Any]], index: int, ident: str, message: str
) -> None:
    with pytest.raises(ProgramError) as e:
        program_from_dict(doc(*statements))
    assert (e.value.index, e.value.statement) == (index, ident)
    assert message in str(e.value)


def test_apply_shape_mismatch_names_the_statement() -> None:
    p = program_from_dict(doc(FC, {**X, "shape": [3, 1]}, {"id": "y", "kind": "apply", "module": "fc", "input": "x"}))
    with pytest.raises(ProgramError) as e:
        check_program(p)
    assert (e.value.index, e.value.statement) == (2, "y")
    assert "last dim must be 3" in str(e.value)


# ---------------------------------------------------------------- model: rules and nondeterminism

def _chain(m: Module, *transforms: str) -> list[Module | Transform]:
    out: list[Module | Transform] = [m]
    for k, t in enumerate(transforms):
        out.append(Transform(f"t{k}", t, out[-1].id))  # type: ignore[arg-type]
    return out


def _last(chain: list[Module | Transform]) -> str:
    return chain[-1].id


# One small program per module rule, each checked against both frameworks.
def _rule_programs() -> dict[str, Program]:
    x = leaf("x", [1.0, 2.0], True, shape=[1, 2])
    lin = _chain(linear(), "valid")
    shared = _chain(linear(), "train")
    ng = _chain(linear(), "no_grad", "train")
    ft = _chain(dropout("d", 0.5), "freeze", "train")
    plain = leaf("xp", [1.0, 2.0], device="plain", shape=[1, 2])
    return {
        "dropout-p1-panics": program(x, dropout("d", 1.0), Apply("y", "d", "x")),
        "valid-off-autodiff": program(x, *lin, Param("w", _last(lin), "weight"), Apply("y", _last(lin), "x")),
        "valid-with-autodiff-input": program(x, *lin, Apply("y", _last(lin), "x"), op("s", "sum", "y"), backward("s")),
        "module-no-grad": program(x, *ng, Param("w", _last(ng), "weight"), Apply("y", _last(ng), "x"),
                                  op("s", "sum", "y"), backward("s")),
        "clone-shares-params": program(x, *shared, Param("w0", "fc", "weight"), Apply("y", _last(shared), "x"),
                                       op("s", "sum", "y"), backward("s")),
        "freeze-survives-train": program(x, *ft, Apply("y", _last(ft), "x"), op("s", "sum", "y"), backward("s")),
        "dropout-off-autodiff-identity": program(plain, dropout("d", 0.5), Apply("y", "d", "xp")),
    }


RULE_PROGRAMS = _rule_programs()


def test_every_module_rule_has_a_program() -> None:
    assert set(RULE_PROGRAMS) == {r.name for r in MODULE_RULES}


@pytest.mark.parametrize("name", list(RULE_PROGRAMS))
def test_module_rule_fires_and_explains_burn(name: str, burn_worker: BurnWorker) -> None:
    verdict = check(RULE_PROGRAMS[name], burn_worker)
    assert verdict.ok, verdict.report()
    assert name in verdict.prediction.rules_fired
    assert RULES_BY_NAME[name].framework == "burn"


def test_shared_params_get_the_gradient_in_burn_only(burn_worker: BurnWorker) -> None:
    verdict = check(RULE_PROGRAMS["clone-shares-params"], burn_worker)
    assert verdict.burn.backwards[0].grads["w0"] is not None  # the same leaf as t0's weight
    assert verdict.torch.backwards[0].grads["w0"] is None  # a deep copy's weight got it


def test_shared_parameter_gradients_are_sums_in_burn(burn_worker: BurnWorker) -> None:
    # t0 = fc.unfreeze() shares fc's bias in burn: t0(b) with b = fc.bias differentiates through
    # the bias twice (w + 1), PyTorch's deep copy only through the input (w)
    p = program(linear(weight=(-0.5,), out_in=(1, 1), bias=(0.75,)), Transform("t0", "unfreeze", "fc"),
                Param("b", "fc", "bias"), Apply("y", "t0", "b"), backward("y"))
    assert predict(p).incomparable_grads == {"bw": {"b"}}
    verdict = check(p, burn_worker)
    assert verdict.ok, verdict.report()
    assert verdict.torch.backwards[0].grads["b"] == TensorObs((1,), (-0.5,))
    assert verdict.burn.backwards[0].grads["b"] == TensorObs((1,), (0.5,))


def test_valid_forward_of_a_tracked_input_routes_an_extra_gradient(burn_worker: BurnWorker) -> None:
    # burn records fv(x) through x (valid-with-autodiff-input), PyTorch's no_grad forward does not:
    # both give x a gradient (through the second term), with different values
    p = program(leaf("x", [1.0, 2.0], True, shape=[1, 2]), linear(), Transform("fv", "valid", "fc"),
                Apply("y", "fv", "x"), op("s1", "sum", "y"), op("m", "mul_scalar", "x", scalar=2.0),
                op("s2", "sum", "m"), op("s", "add", "s1", "s2"), backward("s"))
    assert predict(p).incomparable_grads == {"bw": {"x"}}
    verdict = check(p, burn_worker)
    assert verdict.ok, verdict.report()
    assert verdict.torch.backwards[0].grads["x"] == TensorObs((1, 2), (2.0, 2.0))
    assert verdict.burn.backwards[0].grads["x"] == TensorObs((1, 2), (4.5, 1.25))  # + column sums of W


def test_dropout_in_training_is_nondeterministic_not_a_finding(burn_worker: BurnWorker) -> None:
    p = program(leaf("x", [1.0, 2.0, 3.0, 4.0], True), dropout("d", 0.5), Apply("y", "d", "x"),
                op("e", "exp", "y"), op("s", "sum", "e"), op("k", "neg", "x"), backward("s"))
    pred = predict(p)
    assert pred.nondet == {"y", "e", "s"}
    verdict = check(p, burn_worker)
    assert verdict.ok, verdict.report()
    # the masks differ (burn's RNG is not PyTorch's), flags and gradient presence still agree
    assert verdict.burn.value("y") != verdict.torch.value("y")
    assert verdict.burn.backwards[0].grads["x"] is not None and verdict.torch.backwards[0].grads["x"] is not None


def test_nondeterministic_values_are_skipped_but_deterministic_ones_compared() -> None:
    p = program(leaf("x", [1.0, 2.0], True), dropout("d", 0.5), Apply("y", "d", "x"), op("k", "neg", "x"),
                op("s", "sum", "y"), backward("s"))
    shapes = check_program(p)
    pred = predict(p)
    t = run_torch(p)

    def tamper(obs: Observation, ident: str) -> Observation:
        vals = tuple(ValueObs(v.id, TensorObs(v.value.shape, tuple(x + 100.0 for x in v.value.data)), v.flags)
                     if v.id == ident else v for v in obs.values)
        return Observation("burn", vals, obs.backwards, obs.error)

    burnish = Observation("burn", tuple(
        ValueObs(v.id, v.value, pred.burn.states[v.id].flags()) for v in t.values), (), None)
    assert not [m for m in compare(p, shapes, pred, t, tamper(burnish, "y")).mismatches if m.kind == "value"]
    assert [m.statement for m in compare(p, shapes, pred, t, tamper(burnish, "k")).mismatches
            if m.kind == "value"] == ["k"]


def test_linear_on_an_inference_tensor_raises_in_pytorch(burn_worker: BurnWorker) -> None:
    p = program(leaf("x", [1.0, 2.0], True, shape=[1, 2]), op("xi", "mul_scalar", "x", region="inference_mode",
                                                              scalar=2.0),
                linear(), Apply("y", "fc", "xi"))
    verdict = check(p, burn_worker)
    assert verdict.ok, verdict.report()
    assert "inference-tensor-saved" in verdict.prediction.rules_fired
    assert verdict.torch.error is not None and verdict.burn.error is None


@pytest.mark.parametrize(("shape", "axes", "raises"), [
    ([2, 3, 2], [0, 1, 2], True),  # contiguous: flattening is a view
    ([2, 3, 2], [1, 0, 2], False),  # the leading dims do not merge: flattening copies
    ([1, 3, 2], [1, 0, 2], True),  # permuted, but only around a size-1 dim: a view
    ([2], [0], True),  # rank 1 (and 2) inputs are saved as they are
])
def test_linear_saves_an_inference_input_unless_flattening_copies(
    shape: list[int], axes: list[int], raises: bool, burn_worker: BurnWorker
) -> None:
    # nn.Linear flattens an input of rank >= 3 to [-1, in]; the tensor saved for the weight's
    # gradient is the input (PyTorch raises for an inference tensor) unless that flattening copies
    n = 1
    for d in shape:
        n *= d
    p = program(leaf("x", [1.0] * n, True, shape=shape),
                op("x2", "mul_scalar", "x", scalar=2.0, region="inference_mode"),  # an inference tensor
                op("xi", "permute", "x2", axes=axes, region="inference_mode"),
                linear(), Apply("y", "fc", "xi"))
    verdict = check(p, burn_worker)
    assert verdict.ok, verdict.report()
    assert (verdict.torch.error is not None) == raises
    assert ("inference-tensor-saved" in verdict.prediction.rules_fired) == raises


def test_weight_param_is_read_transposed_by_later_statements(burn_worker: BurnWorker) -> None:
    # burn's parameter is [in, out]; as an input it is its transpose, a tracked node: a detach of
    # it is not a leaf-detach, and an op on it reaches the parameter's gradient
    p = program(leaf("x", [1.0, 2.0], shape=[1, 2]), linear(out_in=(3, 2), weight=(1, 2, 3, 4, 5, 6), bias=None),
                Param("w", "fc", "weight"), cut("d", "detach", "w"), op("m", "mul_scalar", "w", scalar=3.0),
                op("s", "sum", "m"), backward("s"))
    verdict = check(p, burn_worker)
    assert verdict.ok, verdict.report()
    assert _flags(verdict.burn, "d") == (True, False, False)
    for obs in (verdict.torch, verdict.burn):
        assert obs.backwards[0].grads["w"] == TensorObs((3, 2), (3.0,) * 6), obs.framework


def test_a_call_returning_the_transposed_weight_is_that_uses_node(burn_worker: BurnWorker) -> None:
    """An identity permute returns its input as is (`permute-identity-returns-input`); of the
    transposed weight it returns that use's transpose node, which a backward rooted there
    consumes, so a later backward through it panics in burn (as a campaign of seed 402 found)
    and the model must predict it. A backward rooted at the weight read itself consumes only
    its own use: a later read is a fresh node."""
    head = (linear(out_in=(2, 2), weight=(1, 2, 3, 4), bias=None), Param("w", "fc", "weight"))
    tail = (leaf("x", [0.5, -1.0], shape=[1, 2], rg=True), op("a", "select_assign", "v", "x", dim=0, indices=[1]),
            op("s", "sum", "a"), backward("s", "bw2"))
    via_permute = program(*head, op("v", "permute", "w", axes=[0, 1]), backward("v", "bw1"), *tail)
    verdict = check(via_permute, burn_worker)
    assert verdict.ok, verdict.report()
    assert verdict.burn.error is not None and "already been consumed" in verdict.burn.error.message
    assert verdict.torch.error is None
    read_again = program(*head, backward("w", "bw1"), op("v", "mul_scalar", "w", scalar=1.0), *tail)
    verdict = check(read_again, burn_worker)
    assert verdict.ok and verdict.burn.error is None, verdict.report()


# ---------------------------------------------------------------- generation and reproducers

def test_generator_builds_modules_and_transforms() -> None:
    events: dict[str, int] = {}
    for seed in range(400):
        c = RandomChoices(seed)
        generate(c)
        for k, n in c.events.items():
            events[k] = events.get(k, 0) + n
    for k in ("module:linear", "module:dropout", "apply", "param", *(f"transform:{t}" for t in
              ("valid", "train", "no_grad", "freeze", "unfreeze"))):
        assert events.get(k, 0) > 0, (k, events)


def _module_programs(n: int) -> list[Program]:
    cfg = GenConfig(module_weight=6.0)
    out: list[Program] = []
    seed = 0
    while len(out) < n:
        p = generate(RandomChoices(9000 + seed), cfg)
        seed += 1
        if any(isinstance(s, Module) for s in p.statements):
            out.append(p)
    return out


def test_torch_script_replays_module_programs(tmp_path: Path) -> None:
    """The emitted PyTorch script (copy_module instead of copy.deepcopy) prints exactly what
    run_torch observes; the burn side is covered by tests/differential/test_reproducers.py."""
    from tests.differential.test_reproducers import assert_matches, parse

    for k, p in enumerate(_module_programs(12)):
        path = tmp_path / f"m{k}.py"
        path.write_text(torch_script(p))
        buf = io.StringIO()
        code: object = 0
        with contextlib.redirect_stdout(buf):
            try:
                runpy.run_path(str(path), run_name="__main__")
            except SystemExit as e:
                code = e.code
        obs = run_torch(p)
        assert code == (0 if obs.error is None else 1), buf.getvalue()
        assert_matches(parse(buf.getvalue(), "torch"), obs)
