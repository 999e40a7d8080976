"""A wrong derivative in a module's forward is one finding named by the module, wherever the
program shows it: at the input's gradient, at a parameter's gradient only, behind an embedding's
indices, or after an optimizer step that consumed the wrong gradients (difftest/findings/
localise.py, one_op.py). Each program is a case a fault campaign saved apart before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.triage import Triage, triage
from difftest.oracle.check import check
from difftest.program.ir import Program
from difftest.program.jsonio import program_from_dict

DATA = Path(__file__).parent / "data"


def _verdict_and_triage(workers: dict[str, BurnWorker], program: Program, fault: str) -> Triage:
    for key in (fault, ""):
        if key not in workers:
            workers[key] = BurnWorker(fault=key or None)
            workers[key].start()
    assert check(program, workers[""]).ok, "the program passes on the correct build"
    verdict = check(program, workers[fault])
    assert not verdict.ok, f"the fault {fault} does not show in this program"
    return triage(verdict, workers[fault])


def _program(statements: list[dict[str, Any]], version: int = 1, dtype: str = "float32") -> Program:
    return program_from_dict({"format": "difftest-program", "version": version, "dtype": dtype,
                              "statements": statements})


def _leaf(ident: str, shape: list[int], data: list[float], rg: bool) -> dict[str, Any]:
    return {"id": ident, "kind": "leaf", "shape": shape, "data": data, "device": "autodiff", "require_grad": rg}


def test_a_wrong_derivative_seen_at_a_parameter_only_is_named_by_the_module(
        workers: dict[str, BurnWorker]) -> None:
    """layer_norm over two elements gives +-1 for any input, so its input's gradient vanishes
    and a wrong derivative shows in its parameters' gradients only."""
    program = _program([
        _leaf("x0", [2], [-2.3589062690734863, 2.0415210723876953], True),
        {"id": "m1", "kind": "module", "module": "layer_norm", "d_model": 2, "epsilon": 1e-05,
         "weight": {"shape": [2], "data": [1.126114845275879, 1.2206543684005737]},
         "bias": {"shape": [2], "data": [-0.01823330856859684, 0.42130592465400696]}},
        {"id": "p0", "kind": "param", "module": "m1", "param": "bias"},
        {"id": "y2", "kind": "apply", "module": "m1", "input": "x0"},
        {"id": "bw", "kind": "backward", "input": "y2"}])
    t = _verdict_and_triage(workers, program, "grad-scale:layer_norm:0.1")
    loc = t.localisation
    assert loc is not None and loc.where == "apply:layer_norm" and loc.statement == "y2", t.describe()
    assert "bias" in loc.params and t.signature.startswith("burn-wrong:-:apply:layer_norm:grad:wrong "), t.describe()


def test_an_embeddings_wrong_derivative_is_named_by_the_module(workers: dict[str, BurnWorker]) -> None:
    """The forward reads its input as indices: its one-op program keeps them a leaf that does
    not require grad, and observes the table's gradient. burn's Embedding forward is the
    embedding op on its table (the module kind's composition), and the fault (which targets both
    the op and the module kind) is the op's: named by it, inside the module, at the table."""
    program = _program([
        {"id": "m0", "kind": "module", "module": "embedding",
         "weight": {"shape": [2, 4], "data": [-0.45, 0.0086, -0.043, 0.011, -0.061, 0.32, 0.51, 0.32]}},
        _leaf("x3", [1, 4], [1.0, 1.0, 0.0, 1.0], False),
        {"id": "y1", "kind": "apply", "module": "m0", "input": "x3"},
        {"id": "p0", "kind": "param", "module": "m0", "param": "weight"},
        {"id": "v2", "kind": "op", "op": "split", "inputs": ["y1"], "attrs": {"split_size": 1, "dim": 0, "part": 0}},
        {"id": "bw", "kind": "backward", "input": "v2"}])
    t = _verdict_and_triage(workers, program, "grad-scale:embedding:0.1")
    loc = t.localisation
    assert loc is not None and loc.where == "embedding" and loc.inside == ("apply:embedding",), t.describe()
    assert loc.input == (0,)  # the table, the op's input 0


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_wrong_step_from_a_wrong_gradient_is_named_by_the_gradients_op(
        workers: dict[str, BurnWorker], dtype: str) -> None:
    """A training step consumed the linear's wrong gradient: the weight read after it is wrong
    (and, in float16, the next backward's gradient of it); the finding is the linear's, as one
    seen at its gradient directly is, not the step's."""
    statements: list[dict[str, Any]] = [
        _leaf("x2", [2, 1], [0.5, 0.5], False), _leaf("x3", [2, 2], [0.5, 0.5, 0.5, 0.5], False),
        {"id": "m0", "kind": "module", "module": "linear",
         "weight": {"shape": [2, 1], "data": [0.96142578125, -0.2215576171875]},
         "bias": {"shape": [2], "data": [0.8017578125, 0.25927734375]}},
        {"id": "o0", "kind": "optimizer", "optimizer": "sgd", "momentum": 0.0, "dampening": 0.0, "nesterov": False,
         "weight_decay": 0.0},
        {"id": "y0", "kind": "apply", "module": "m0", "input": "x2"},
        {"id": "v0", "kind": "op", "op": "sub", "inputs": ["y0", "x3"]},
        {"id": "v1", "kind": "op", "op": "square", "inputs": ["v0"]},
        {"id": "v2", "kind": "op", "op": "mean", "inputs": ["v1"]},
        {"id": "bw", "kind": "backward", "input": "v2"},
        {"id": "m1", "kind": "step", "optimizer": "o0", "module": "m0", "grads": "bw", "lr": 0.125},
        {"id": "p0", "kind": "param", "module": "m1", "param": "weight"},
        {"id": "y1", "kind": "apply", "module": "m1", "input": "x2"},
        {"id": "bw1", "kind": "backward", "input": "y1"}]
    t = _verdict_and_triage(workers, _program(statements, 2, dtype), "grad-scale:linear:0.05")
    loc = t.localisation
    assert loc is not None and loc.where == "apply:linear" and loc.statement == "y0", t.describe()
    assert t.signature.startswith("burn-wrong:-:apply:linear:grad:wrong "), t.describe()


def test_a_step_wrong_on_right_gradients_is_the_steps(workers: dict[str, BurnWorker]) -> None:
    """The gradients the step consumed are right (burn's SGD momentum in float64 is rounded to
    f32, a known bug): the finding stays the step's."""
    statements: list[dict[str, Any]] = [
        _leaf("x2", [2, 1], [0.5, 0.25], False),
        {"id": "m0", "kind": "module", "module": "linear", "weight": {"shape": [2, 1], "data": [0.3, -0.7]},
         "bias": {"shape": [2], "data": [0.1, 0.2]}},
        {"id": "o0", "kind": "optimizer", "optimizer": "sgd", "momentum": 0.1, "dampening": 0.0, "nesterov": False,
         "weight_decay": 0.0},
        {"id": "y0", "kind": "apply", "module": "m0", "input": "x2"},
        {"id": "v2", "kind": "op", "op": "sum", "inputs": ["y0"]},
        {"id": "bw", "kind": "backward", "input": "v2"},
        {"id": "m1", "kind": "step", "optimizer": "o0", "module": "m0", "grads": "bw", "lr": 0.1},
        {"id": "y1", "kind": "apply", "module": "m1", "input": "x2"},
        {"id": "v3", "kind": "op", "op": "sum", "inputs": ["y1"]},
        {"id": "bw1", "kind": "backward", "input": "v3"},
        {"id": "m2", "kind": "step", "optimizer": "o0", "module": "m1", "grads": "bw1", "lr": 0.1},
        {"id": "p0", "kind": "param", "module": "m2", "param": "weight"}]
    program = _program(statements, 2, "float64")
    if "" not in workers:
        workers[""] = BurnWorker()
        workers[""].start()
    verdict = check(program, workers[""])
    assert not verdict.ok, "the known SGD momentum bug shows"
    t = triage(verdict, workers[""])
    assert t.localisation is not None and t.localisation.where == "step", t.describe()
    assert t.known is not None and t.known.name == "sgd-momentum-f32-in-float64", t.describe()


def test_a_step_from_a_gradient_within_its_budget_is_named_by_the_op_that_fails_alone(
        workers: dict[str, BurnWorker]) -> None:
    """A float16 campaign program: the linear's bias gradient, 5% off, is within the float16
    budget at the gradient, and the step moves the bias outside the budget of its value. The
    linear alone fails on the inputs PyTorch recorded for it, so the finding is the linear's."""
    program = program_from_dict(json.loads((DATA / "linear-step-float16.json").read_text()))
    t = _verdict_and_triage(workers, program, "grad-scale:linear:0.05")
    loc = t.localisation
    assert loc is not None and loc.where == "apply:linear" and loc.confidence == "fails", t.describe()


def test_a_program_that_reads_parameters_under_the_one_op_names_still_observes_them(
        workers: dict[str, BurnWorker]) -> None:
    """The localiser's own programs read a module's parameters as `param_<name>` (the consumed
    gradients before a step, a saved case's one-op program). The one-op program of the module's
    forward built from such a program must read them too: with an input that does not require
    grad, the parameters' gradients are all that shows the fault (before, the reads were left
    out because the program already had those names, and the finding went to the graph)."""
    program = _program([
        {"id": "m0", "kind": "module", "module": "linear",
         "weight": {"shape": [1, 4], "data": [0.27893033623695374, 0.4785475730895996, 0.3004850745201111,
                                              0.8587983846664429]},
         "bias": {"shape": [1], "data": [-0.8489776253700256]}},
        _leaf("a0", [3, 4], [0.5] * 12, False),
        {"id": "y", "kind": "apply", "module": "m0", "input": "a0"},
        {"id": "param_weight", "kind": "param", "module": "m0", "param": "weight"},
        {"id": "param_bias", "kind": "param", "module": "m0", "param": "bias"},
        {"id": "bw", "kind": "backward", "input": "y"},
    ])
    t = _verdict_and_triage(workers, program, "grad-scale:linear:0.01")
    assert t.localisation is not None and t.localisation.where == "apply:linear", t
    assert t.localisation.program is not None
    reads = {s.id for s in t.localisation.program.statements if s.kind == "param"}
    assert reads == {"param_weight", "param_bias"}
