"""Abstract per-value autodiff state, one dataclass per framework."""

from __future__ import annotations

import re
from dataclasses import dataclass
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
    # on autodiff with burn's default gradient-checkpointing strategy while the program's
    # autodiff device has another (autodiff() of a tensor off it: checkpointing_rules.py)
    default_strategy: bool = False

    def flags(self) -> dict[str, bool]:
        return {
            "is_autodiff": self.is_autodiff,
            "is_tracked": self.is_tracked,
            "is_require_grad": self.is_require_grad,
        }


@dataclass(frozen=True)
class ModuleState:
    """What the model knows about a module handle (a `module` or `transform` statement).

    The fields follow each framework's own transform semantics: PyTorch's counterparts
    (torch_exec.transform_module: every transform is a deep copy, so `id` names the
    handle's own parameter tensors) and burn's Module methods (burn-core 0.22.1
    `module/base.rs`, `module/param/tensor.rs`, burn-nn `dropout.rs`). Which of these
    differences are observable, and how, is declared by the rules in divergences/rules.py."""

    id: str  # the handle; PyTorch's parameters of this handle are keyed "<id>.<param>"
    kind: str  # "linear" | "dropout"
    p: float = 0.0  # dropout probability
    params: tuple[str, ...] = ()  # parameter names ("weight", "bias")
    requires_grad: bool = True  # PyTorch requires_grad of the parameters; burn's configured
    # trainability (its `is_active`, which no_grad/freeze clear and unfreeze sets)
    training: bool = True  # PyTorch's module.training (valid/freeze: eval(); train/unfreeze: train())
    valid: bool = False  # `valid` since the last `train`: PyTorch applies it under torch.no_grad(),
    # burn's parameters are a snapshot on the plain device
    burn_training: bool = True  # burn's effective training flag: a `train` after `freeze`
    # restores the configured flag, which `freeze` cleared (only `unfreeze` sets it again)
    burn_configured_training: bool = True
    no_grad: bool = False  # Module::no_grad() since the last unfreeze (not freeze)
    burn_origin: str | None = None  # the handle whose transform created burn's current
    # require-grad parameter leaves (burn clones share parameter tensors); None when none
    diverged: bool = False  # its parameter values differ between the frameworks by a declared
    # rule (an optimizer step that read different gradients): what it computes is not comparable
    default_strategy: bool = False  # burn's parameters are on autodiff with burn's default
    # gradient-checkpointing strategy, not the program's (checkpointing_rules.py)

    def key(self, param: str, origin: str | None = None) -> str:
        return f"{origin or self.id}.{param}"


@dataclass(frozen=True)
class Failure:
    """A predicted error at a statement (a burn panic, a PyTorch exception)."""

    kind: str  # "panic" | "exception"
    reason: str
    # a regular expression the observed error's message must match, where the rule knows it
    # (None: any message of that kind at that statement): a different panic there is news
    message: str | None = None

    def matches(self, kind: str, message: str) -> bool:
        """Whether an observed error of `kind` with `message` at the predicted statement is
        this failure."""
        return kind == self.kind and (self.message is None or re.search(self.message, message) is not None)


@dataclass(frozen=True)
class BackwardResult:
    """What a backward does to the graph, in one framework (sessions.py): the graph nodes it
    walks (value ids of recorded op results, aliases resolved), those of them that saved
    tensors, the nodes earlier backwards left unusable, and the nodes it leaves unusable."""

    traversed: frozenset[str]
    saving: frozenset[str]
    consumed_before: frozenset[str]
    consumes: frozenset[str]
    retain_graph: bool = False
    leaves: frozenset[str] = frozenset()  # grad keys of the require-grad leaves it reaches


@dataclass(frozen=True)
class SessionContext:
    """What the session rules see at a `step` or a `grad` statement."""

    # step: per parameter of the module, the backwards whose gradients PyTorch's `.grad` holds
    # (accumulated since the last zero_grad), and the backward the step names if its handle
    # has a gradient for that parameter
    accumulated: tuple[tuple[str, frozenset[str]], ...] = ()
    from_handle: tuple[tuple[str, frozenset[str]], ...] = ()
    # grad: the grad keys an earlier step took out of the handle (burn's GradientsParams::from_module)
    taken: frozenset[str] = EMPTY
    key: str | None = None  # grad: the grad key of the value read


State = Union[TorchState, BurnState]
Result = Union[TorchState, BurnState, Failure, ModuleState, BackwardResult]
