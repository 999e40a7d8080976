"""Abstract per-value autodiff state, one dataclass per framework."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Union

EMPTY: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TorchState:
    requires_grad: bool
    is_leaf: bool
    has_grad_fn: bool
    is_inference: bool
    key: str | None = None  # the leaf whose `.grad` this value shows (aliases share it)
    sources: frozenset[str] = EMPTY  # grad keys that reach this value through recorded ops
    strides: tuple[int, ...] = ()  # PyTorch strides (views share storage with their base)

    def flags(self) -> dict[str, bool]:
        return {
            "requires_grad": self.requires_grad,
            "is_leaf": self.is_leaf,
            "has_grad_fn": self.has_grad_fn,
            "is_inference": self.is_inference,
        }


@dataclass(frozen=True)
class BurnState:
    is_autodiff: bool
    is_tracked: bool
    is_require_grad: bool
    key: str | None = None
    sources: frozenset[str] = EMPTY

    def flags(self) -> dict[str, bool]:
        return {
            "is_autodiff": self.is_autodiff,
            "is_tracked": self.is_tracked,
            "is_require_grad": self.is_require_grad,
        }


@dataclass(frozen=True)
class Failure:
    """A predicted error at a statement (a burn panic, a PyTorch exception)."""

    kind: str  # "panic" | "exception"
    reason: str


State = Union[TorchState, BurnState]
Result = Union[TorchState, BurnState, Failure]

PLAIN_BURN = BurnState(False, False, False)
CONST_TORCH = TorchState(False, True, False, False)

__all__ = ["CONST_TORCH", "PLAIN_BURN", "BurnState", "Failure", "Result", "State", "TorchState", "replace"]
