"""burn against itself at a shared value (difftest/findings/unshared.py `summed_apart`): the
gradient burn gives a leaf read through several paths must be the sum of the gradients it gives
the leaf's copies in the program built as a tree, at a tie too, where the tree is no control
against PyTorch. These run the correct build: its sums hold within rounding, and a shared
gradient moved by a hundredth (as a summation that scales what it already holds moves it) does
not."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.composed import computed_as_parts
from difftest.findings.unshared import composites, expanded, same_root, summed_apart, unshared
from difftest.oracle.check import check
from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.ir import Apply, Leaf, Module, Program
from difftest.program.jsonio import program_from_dict
from difftest.program.observation import BackwardObs, TensorObs


def _program(statements: list[dict[str, Any]], dtype: str = "float32") -> Program:
    return program_from_dict({"format": "difftest-program", "version": 1, "dtype": dtype, "statements": statements})


def _leaf(ident: str, data: list[float], rg: bool = True) -> dict[str, Any]:
    return {"id": ident, "kind": "leaf", "shape": [len(data)], "data": data, "device": "autodiff",
            "require_grad": rg}


def _op(ident: str, op: str, *inputs: str, **attrs: Any) -> dict[str, Any]:
    return {"id": ident, "kind": "op", "op": op, "inputs": list(inputs), **({"attrs": attrs} if attrs else {})}


X = [0.75, -1.25, 2.5, 0.375]
LINEAR = {"id": "m0", "kind": "module", "module": "linear",
          "weight": {"shape": [4, 4], "data": [0.5, -0.25, 0.125, 1.0, -0.75, 0.5, 0.25, -0.5,
                                               1.25, 0.75, -1.0, 0.5, 0.25, -0.125, 0.5, 0.75]},
          "bias": None}
SHARED = {
    # one value read by two ops, summed by add
    "sin-and-exp": ([_leaf("x", X), _op("a", "sin", "x"), _op("b", "exp", "x"), _op("c", "add", "a", "b")], "float32"),
    # a tie: both operands of maximum are the one value (burn's mask gives one of them all of it)
    "maximum-tie": ([_leaf("x", X), _op("c", "maximum", "x", "x")], "float32"),
    # a tie through a path: the second operand equals the first where the mask is off
    "maximum-through-mask": ([_leaf("x", X), _op("f", "mask_fill", "x", value=-3.0,
                                                 mask={"shape": [4], "data": [True, False, False, True]}),
                              _op("c", "maximum", "x", "f")], "float32"),
    # a module's forward on one path, an op on the other
    "linear-and-tanh": ([_leaf("x", X), LINEAR, {"id": "y", "kind": "apply", "module": "m0", "input": "x"},
                         _op("t", "tanh", "x"), _op("c", "mul", "y", "t")], "float32"),
    # a half-precision product of the value with itself
    "square-f16": ([_leaf("x", X), _op("e", "exp", "x"), _op("c", "mul", "e", "e")], "float16"),
}


def _verdict(workers: dict[str, BurnWorker], statements: list[dict[str, Any]], dtype: str) -> Verdict:
    if "" not in workers:
        workers[""] = BurnWorker()
        workers[""].start()
    program = _program([*statements, {"id": "bw", "kind": "backward", "input": "c"}], dtype)
    v = check(program, workers[""])
    assert v.ok, v.findings
    return v


def _all_of_x(v: Verdict) -> Mismatch:
    return Mismatch("grad", "x", 0, "burn", "", "", backward="bw", elements=tuple(range(len(X))))


def _scaled(v: Verdict, factor: float, framework: str = "burn") -> Verdict:
    """`v` with `framework`'s gradient of x times `factor`, as a faulty summation would report it."""
    run = v.burn if framework == "burn" else v.torch
    (bw,) = run.backwards
    g = bw.grads["x"]
    assert g is not None
    grads = {**bw.grads, "x": TensorObs(g.shape, tuple(factor * e for e in g.data), g.dtype)}
    moved = replace(run, backwards=(BackwardObs(bw.id, grads),))
    return replace(v, burn=moved) if framework == "burn" else replace(v, torch=moved)


@pytest.mark.parametrize("name", sorted(SHARED))
def test_burns_sums_hold_and_a_moved_sum_does_not(name: str, workers: dict[str, BurnWorker]) -> None:
    statements, dtype = SHARED[name]
    v = _verdict(workers, statements, dtype)
    m = _all_of_x(v)
    tree = unshared(v.program, m)
    assert tree is not None
    tree_verdict = check(tree, workers[""])
    assert same_root(v, m, tree, tree_verdict)
    assert not summed_apart(v, m, tree, tree_verdict)
    assert summed_apart(_scaled(v, 1.01), m, tree, tree_verdict)
    # two units of the dtype's rounding is a rounding
    eps = {"float32": 2.0**-23, "float16": 2.0**-10}[dtype]
    assert not summed_apart(_scaled(v, 1 + 2 * eps), m, tree, tree_verdict)


def test_a_module_forward_is_computed_once_per_path_and_declared_once(workers: dict[str, BurnWorker]) -> None:
    statements, dtype = SHARED["linear-and-tanh"]
    v = _verdict(workers, [*statements[:3], _op("c", "add", "y", "y")], dtype)
    tree = unshared(v.program, _all_of_x(v))
    assert tree is not None
    assert sum(isinstance(s, Module) for s in tree.statements) == 1
    assert sum(isinstance(s, Apply) for s in tree.statements) == 2


def test_a_tree_of_other_values_is_no_evidence(workers: dict[str, BurnWorker]) -> None:
    """A random op computes other values in the tree: its roots differ, and nothing is claimed."""
    dropout = {"id": "m1", "kind": "module", "module": "dropout", "p": 0.5}
    v = _verdict(workers, [_leaf("x", X), dropout, {"id": "d", "kind": "apply", "module": "m1", "input": "x"},
                           _op("c", "add", "d", "x")], "float32")
    m = _all_of_x(v)
    tree = unshared(v.program, m)
    assert tree is not None
    tree_verdict = check(tree, workers[""])
    assert not summed_apart(_scaled(v, 1.01), m, tree, tree_verdict)


def test_a_composite_reading_its_input_twice_is_built_of_its_parts(workers: dict[str, BurnWorker]) -> None:
    """silu is x * sigmoid(x) in burn: read once by the program, x still receives two
    contributions inside it. Given burn's values, the tree is built of silu's parts, each read of
    x its own copy, and burn's sum over the copies is its gradient of x."""
    v = _verdict(workers, [_leaf("x", X), _op("e", "exp", "x"), _op("c", "silu", "e")], "float32")
    m = _all_of_x(v)
    assert unshared(v.program, m) is None  # nothing read twice by the program
    tree = unshared(v.program, m, {o.id: o.value for o in v.burn.values})
    assert tree is not None
    assert [s.op for s in tree.statements if hasattr(s, "op")] == ["exp", "exp", "sigmoid", "mul"]
    tree_verdict = check(tree, workers[""])
    assert same_root(v, m, tree, tree_verdict)
    # PyTorch computes silu as one op in the program: its rounding of the sum is measured on the
    # program with silu's parts, nothing unshared
    whole = expanded(v.program, m, {o.id: o.value for o in v.burn.values})
    assert whole is not None
    assert [s.op for s in whole.statements if hasattr(s, "op")] == ["exp", "sigmoid", "mul"]
    whole_verdict = check(whole, workers[""])
    assert whole_verdict.ok
    assert not summed_apart(v, m, tree, tree_verdict, whole_verdict)
    assert summed_apart(_scaled(v, 1.01), m, tree, tree_verdict, whole_verdict)


def test_what_pytorchs_own_sums_differ_by_is_rounding_too(workers: dict[str, BurnWorker]) -> None:
    """Where PyTorch's shared gradient lies apart from the sum of its copies' (a program whose
    later ops magnify the summation's rounding), burn may lie TORCH_ROUNDINGS times as far."""
    statements, dtype = SHARED["sin-and-exp"]
    v = _verdict(workers, statements, dtype)
    m = _all_of_x(v)
    tree = unshared(v.program, m)
    assert tree is not None
    tree_verdict = check(tree, workers[""])
    assert not summed_apart(_scaled(_scaled(v, 1.01), 1.001, "torch"), m, tree, tree_verdict)
    assert summed_apart(_scaled(_scaled(v, 1.01), 1.0001, "torch"), m, tree, tree_verdict)


@pytest.mark.parametrize("op,attrs,eps", [("silu", {}, "1e-3"), ("softmax", {"dim": 0}, "1e-4")])
def test_a_composite_counts_as_its_parts_only_where_burn_computes_it_so(
        op: str, attrs: dict[str, Any], eps: str, workers: dict[str, BurnWorker]) -> None:
    """The tree through a composite's parts is burn's own computation only where burn computes
    the composite as those parts (composed.computed_as_parts): the correct build does; an
    injected fault in the composite's derivative, which its parts do not share, does not. Its
    product with ones would hide softmax's (the outputs sum to 1: the gradient is 0), so the
    comparison takes the result times a cotangent that is not constant."""
    v = _verdict(workers, [_leaf("x", X), _op("e", "exp", "x"), _op("c", op, "e", **attrs)], "float32")
    values = {o.id: o.value for o in v.burn.values}
    (composite,) = composites(v.program, _all_of_x(v), values)
    fault = f"grad-scale:{op}:{eps}"
    if fault not in workers:
        workers[fault] = BurnWorker(fault=fault)
        workers[fault].start()
    assert computed_as_parts(v.program, composite, values, lambda q: check(q, workers[""]))
    assert not computed_as_parts(v.program, composite, values, lambda q: check(q, workers[fault]))


def test_a_tree_that_computes_another_root_is_no_evidence(workers: dict[str, BurnWorker]) -> None:
    """A leaf a step changed before the backward enters the tree at its first value: the tree's
    root is then another, and its sums prove nothing (same_root)."""
    statements, dtype = SHARED["sin-and-exp"]
    v = _verdict(workers, statements, dtype)
    m = _all_of_x(v)
    tree = unshared(v.program, m)
    assert tree is not None
    first = next(s for s in tree.statements if isinstance(s, Leaf))
    moved = tree.with_statements(tuple(replace(s, data=tuple(e + 0.5 for e in first.data)) if s is first else s
                                       for s in tree.statements))
    moved_verdict = check(moved, workers[""])
    assert not same_root(v, m, moved, moved_verdict)
    assert not summed_apart(_scaled(v, 1.01), m, moved, moved_verdict)
