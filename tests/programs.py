"""Small hand-made programs for tests (built with the IR, not strings)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from difftest.program.ir import Backward, Cut, Leaf, OpCall, Program
from difftest.program.observation import Observation


def leaf(i: str, data: Sequence[float], rg: bool = False, device: str = "autodiff",
         shape: Sequence[int] | None = None) -> Leaf:
    return Leaf(i, tuple(shape or [len(data)]), tuple(data), device, rg)  # type: ignore[arg-type]


def op(i: str, name: str, *inputs: str, region: str = "grad", **attrs: Any) -> OpCall:
    return OpCall(i, name, tuple(inputs), dict(attrs), region)  # type: ignore[arg-type]


def cut(i: str, kind: str, x: str, region: str = "grad") -> Cut:
    return Cut(i, kind, x, region)  # type: ignore[arg-type]


def backward(x: str, i: str = "bw") -> Backward:
    return Backward(i, x)


def program(*statements: Any) -> Program:
    return Program(tuple(statements))


class Replay:
    """A burn worker stand-in that answers every program with one given observation, as a
    worker on `backend` would (a case's recorded one, or one edited by a test)."""

    def __init__(self, observation: Observation, backend: str | None) -> None:
        self.observation = observation
        self.backend = backend

    def burn_version(self) -> str:
        return "0.22.1"

    def submit(self, program: Program) -> Replay:
        return self

    def result(self) -> Observation:
        return self.observation
