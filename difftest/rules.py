"""Declared divergences between burn and PyTorch, as data (JAX `Limitation` style).

The semantic model (`model.py`) first computes a *base* prediction for each framework: what
that framework would report if it followed PyTorch's autograd semantics (for burn, mapped onto
its flags: tracked = requires_grad, require_grad = a leaf that requires grad, and the autodiff
marker carried from the leaves' devices). Each rule below then overrides the base where burn
(or PyTorch) documentedly differs. A rule that fires is recorded per program; a rule whose
prediction the observation contradicts while the base prediction matches is *stale*
(reported like an unexpected pass).

Adding a rule: append a `Rule` to `RULES` with a name, the framework it applies to, the reason,
the DESIGN.md section with the evidence, a predicate and an effect. Tests never special-case a
divergence; they only read what the model predicts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .catalog import CATALOG
from .ir import Cut, Leaf, OpCall, Statement, region_of
from .states import EMPTY, BurnState, Failure, Result, State, TorchState

Framework = Literal["burn", "torch"]


@dataclass(frozen=True)
class Step:
    """What a rule sees: one statement, its inputs' states in this framework, and the state
    computed so far (the base, possibly already changed by earlier rules)."""

    index: int
    statement: Statement
    inputs: tuple[State, ...]
    current: Result


@dataclass(frozen=True)
class Rule:
    name: str
    framework: Framework
    reason: str
    section: str
    applies: Callable[[Step], bool]
    effect: Callable[[Step], Result]

    def __str__(self) -> str:
        return f"{self.name} ({self.framework}, DESIGN.md {self.section})"


def _burn_inputs(step: Step) -> tuple[BurnState, ...]:
    return tuple(s for s in step.inputs if isinstance(s, BurnState))


def _torch_inputs(step: Step) -> tuple[TorchState, ...]:
    return tuple(s for s in step.inputs if isinstance(s, TorchState))


def _is_leaf_detach(step: Step) -> bool:
    st = step.statement
    ins = _burn_inputs(step)
    return isinstance(st, Cut) and st.cut == "detach" and st.region == "grad" and bool(ins) and ins[0].is_require_grad


def _leaf_detach(step: Step) -> Result:
    ident = step.statement.id
    return BurnState(True, True, True, key=ident, sources=frozenset({ident}))


def _in_region(step: Step) -> bool:
    return isinstance(step.statement, (OpCall, Cut)) and region_of(step.statement) != "grad"


def _region_off_autodiff(step: Step) -> Result:
    st = step.statement
    if isinstance(st, Cut) and st.cut == "autodiff":
        return BurnState(True, False, False)  # without_autodiff(input).autodiff()
    return BurnState(False, False, False)


def _is_without_autodiff(step: Step) -> bool:
    st = step.statement
    return isinstance(st, Cut) and st.cut == "without_autodiff"


def _plain_leaf_require_grad(step: Step) -> bool:
    st = step.statement
    return isinstance(st, Leaf) and st.device == "plain" and st.require_grad


def _saves_inference_tensor(step: Step) -> bool:
    st = step.statement
    if not isinstance(st, OpCall) or st.region != "grad":
        return False
    ins = _torch_inputs(step)
    if not any(s.requires_grad for s in ins):
        return False
    saved = CATALOG[st.op].saves
    return any(ins[i].is_inference for i in saved if i < len(ins))


# burn returns its input handle, not a new node, for these no-op calls (found by running:
# `permute` with the identity order, `swap_dims(d, d)`, `powi_scalar(1)`; the last one is
# `1 => lhs` in burn-autodiff's float_powi_scalar). PyTorch always creates a new node.
NOOP_RETURNS_INPUT: dict[str, Callable[[dict[str, Any]], bool]] = {
    "permute": lambda a: list(a["axes"]) == list(range(len(a["axes"]))),
    "swap_dims": lambda a: a["dim1"] == a["dim2"],
    "powi_scalar": lambda a: a["exponent"] == 1,
}


def _is_noop_alias(step: Step) -> bool:
    st = step.statement
    if not isinstance(st, OpCall) or st.region != "grad":
        return False
    pred = NOOP_RETURNS_INPUT.get(st.op)
    return pred is not None and pred(st.attrs)


RULES: tuple[Rule, ...] = (
    Rule(
        "leaf-detach",
        "burn",
        "burn's float_detach keeps require_grad: detach() of a require-grad leaf is a new leaf "
        "(new id) that still requires grad; ops on it are recorded and its gradient lands on the "
        "new handle. PyTorch's detach() never requires grad.",
        "1 (golden output 1; expected divergences: leaf-detach)",
        _is_leaf_detach,
        _leaf_detach,
    ),
    Rule(
        "without-autodiff",
        "burn",
        "without_autodiff() moves a tensor off the autodiff backend (is_autodiff=false); mixed "
        "with autodiff tensors it is a constant. PyTorch has no such state (lowered to detach()).",
        "1 (golden output 1; expected divergences: without-autodiff)",
        _is_without_autodiff,
        lambda step: BurnState(False, False, False),
    ),
    Rule(
        "region-off-autodiff",
        "burn",
        "burn has no no_grad/inference_mode scope: difftest runs a region's statements on "
        "inputs taken without_autodiff(), so its results are off the autodiff device, where "
        "PyTorch's are ordinary (or inference) tensors that do not require grad.",
        "1 (mapping table: no_grad -> without_autodiff, inference_mode -> plain device)",
        _in_region,
        _region_off_autodiff,
    ),
    Rule(
        "plain-leaf-require-grad",
        "burn",
        "require_grad() panics on a tensor without autodiff (a plain-device leaf); PyTorch has "
        "no autodiff device and lets any float leaf require grad.",
        "2 (require_grad panics if autodiff is disabled)",
        _plain_leaf_require_grad,
        lambda step: Failure("panic", "require_grad() on a plain-device leaf"),
    ),
    Rule(
        "inference-tensor-saved",
        "torch",
        "an inference tensor cannot be saved for backward: an op recorded outside "
        "inference_mode that saves an inference-mode input raises in PyTorch, while burn's "
        "plain-device counterpart is just a constant.",
        "1 (inference_mode -> plain device) and issue 4 item 5",
        _saves_inference_tensor,
        lambda step: Failure("exception", "inference tensor saved for backward"),
    ),
)

RULES = (
    *RULES,
    Rule(
        "noop-returns-input",
        "burn",
        "for a no-op call (identity permute, swap_dims(d, d), powi_scalar(1)) burn returns the "
        "input tensor itself: a require-grad leaf stays a require-grad leaf and receives the "
        "gradient directly; PyTorch records a new node (requires_grad, not a leaf).",
        "issue 4 item 3 (found by running; burn-autodiff float_powi_scalar: `1 => lhs`)",
        _is_noop_alias,
        lambda step: step.inputs[0],
    ),
)

RULES_BY_NAME = {r.name: r for r in RULES}
assert len(RULES_BY_NAME) == len(RULES), "duplicate rule name"

_ = EMPTY  # re-exported for rule authors
