"""Which ops a gradient's path goes through (oracle/kinks.py `path_ops`): the ops a kink may
reach, read by the oracle before it judges an element ill-conditioned."""

from __future__ import annotations

from typing import Any

from difftest.oracle.compare import Mismatch
from difftest.oracle.kinks import path_ops
from difftest.program.jsonio import program_from_dict


def _program(*statements: dict[str, Any], version: int = 1) -> Any:
    weight = {"shape": [4, 2], "data": [-0.8, -0.39, 0.58, -0.36, -0.33, 0.15, 0.36, 0.53]}
    return program_from_dict({"format": "difftest-program", "version": version, "statements": [
        {"id": "m0", "kind": "module", "module": "embedding", "weight": weight},
        {"id": "m1", "kind": "module", "module": "embedding", "weight": weight},
        {"id": "t", "kind": "leaf", "shape": [2, 3], "data": [2.0, 3.0, 3.0, 0.0, 3.0, 0.0],
         "device": "autodiff", "require_grad": False},
        {"id": "x", "kind": "leaf", "shape": [2, 3, 2], "data": [0.1] * 12, "device": "autodiff",
         "require_grad": True},
        *statements,
    ]})


def _ops(program: Any, of: str, backward: str) -> list[str]:
    m = Mismatch("grad", of, None, None, 0.5, 1.0, backward=backward)
    return [st.op for _, st in path_ops(program, m)]


def test_a_parameters_gradient_goes_through_its_modules_forwards() -> None:
    # a tie in minimum(embedding(t), x) splits the embedding weight's gradient differently in
    # the two frameworks: the weight's path must hold minimum (found by a triangulated campaign)
    p = _program(
        {"id": "y", "kind": "apply", "module": "m0", "input": "t"},
        {"id": "p", "kind": "param", "module": "m0", "param": "weight"},
        {"id": "v", "kind": "op", "op": "minimum", "inputs": ["y", "x"]},
        {"id": "e", "kind": "op", "op": "exp", "inputs": ["x"]},
        {"id": "s", "kind": "op", "op": "add", "inputs": ["v", "e"]},
        {"id": "bw", "kind": "backward", "input": "s"},
    )
    assert _ops(p, "p", "bw") == ["minimum", "add"]
    assert _ops(p, "x", "bw") == ["minimum", "exp", "add"]


def test_a_transformed_modules_forward_shares_the_parameter_and_another_module_does_not() -> None:
    p = _program(
        {"id": "mv", "kind": "transform", "transform": "valid", "input": "m0"},
        {"id": "y", "kind": "apply", "module": "mv", "input": "t"},
        {"id": "z", "kind": "apply", "module": "m1", "input": "t"},
        {"id": "p0", "kind": "param", "module": "m0", "param": "weight"},
        {"id": "p1", "kind": "param", "module": "m1", "param": "weight"},
        {"id": "v", "kind": "op", "op": "maximum", "inputs": ["y", "x"]},
        {"id": "w", "kind": "op", "op": "relu", "inputs": ["z"]},
        {"id": "s", "kind": "op", "op": "add", "inputs": ["v", "w"]},
        {"id": "bw", "kind": "backward", "input": "s"},
    )
    assert _ops(p, "p0", "bw") == ["maximum", "add"]
    assert _ops(p, "p1", "bw") == ["relu", "add"]


def test_a_parameters_gradient_goes_through_every_read_of_it() -> None:
    # minimum(p1, p0) of two reads of one weight (through no_grad() and unfreeze(), which share
    # its parameters) is a tie at every element: the path of p0's gradient holds minimum whichever
    # read carries it; another parameter of another module, read the same way, is not on it
    p = _program(
        {"id": "t0", "kind": "transform", "transform": "no_grad", "input": "m0"},
        {"id": "t1", "kind": "transform", "transform": "unfreeze", "input": "m0"},
        {"id": "p0", "kind": "param", "module": "t1", "param": "weight"},
        {"id": "p1", "kind": "param", "module": "t0", "param": "weight"},
        {"id": "q", "kind": "param", "module": "m1", "param": "weight"},
        {"id": "v", "kind": "op", "op": "minimum", "inputs": ["p1", "p0"]},
        {"id": "w", "kind": "op", "op": "exp", "inputs": ["q"]},
        {"id": "s", "kind": "op", "op": "add", "inputs": ["v", "w"]},
        {"id": "bw", "kind": "backward", "input": "s"},
    )
    assert _ops(p, "p0", "bw") == ["minimum", "add"]
    assert _ops(p, "p1", "bw") == ["minimum", "add"]
    assert _ops(p, "q", "bw") == ["exp", "add"]


def test_a_value_placed_from_a_gradient_read_is_that_gradients_element() -> None:
    from difftest.oracle.kinks import _placed_from_read

    p = _program(
        {"id": "y", "kind": "op", "op": "exp", "inputs": ["x"]},
        {"id": "s", "kind": "op", "op": "sum", "inputs": ["y"]},
        {"id": "bw", "kind": "backward", "input": "s"},
        {"id": "g", "kind": "grad", "grads": "bw", "of": "x"},
        {"id": "n", "kind": "op", "op": "narrow", "inputs": ["g"], "attrs": {"dim": 2, "start": 1, "length": 1}},
        {"id": "d", "kind": "cut", "cut": "detach", "input": "n"},
        {"id": "q", "kind": "op", "op": "permute", "inputs": ["d"], "attrs": {"axes": [2, 0, 1]}},
        {"id": "e", "kind": "op", "op": "exp", "inputs": ["g"]},
        version=2,
    )
    by_id = p.by_id()
    # x is [2, 3, 2]: narrow keeps x[:, :, 1], elements 1, 3, 5, 7, 9, 11 of g
    assert [_placed_from_read(p, by_id, "n", k)[1] for k in range(6)] == [1, 3, 5, 7, 9, 11]  # type: ignore[index]
    assert [_placed_from_read(p, by_id, "q", k)[1] for k in range(6)] == [1, 3, 5, 7, 9, 11]  # type: ignore[index]
    assert _placed_from_read(p, by_id, "e", 0) is None  # exp computes, it does not place
    assert _placed_from_read(p, by_id, "g", 0) is None  # the read itself: as_gradient's
