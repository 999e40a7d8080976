"""Declared divergences of burn's gradient checkpointing (docs/semantics.md#checkpointing).

A program may run on an autodiff device with burn's balanced gradient-checkpointing strategy
(`gradient_checkpointing: "balanced"`, docs/format.md). Values and gradients must not depend on
the strategy, so nothing of the comparison changes; what does is the strategy a tensor carries.
burn's `Tensor::autodiff()` puts a tensor that is off autodiff back on it with burn's *default*
strategy (its documentation says so), not with its device's, and so does `train()` of a
`valid()` snapshot for the module's parameters; and an operation whose autodiff
inputs carry different strategies panics by design (burn-dispatch asserts it, and its own tests
expect the panic). PyTorch has no strategy, so it runs such a program through.

The model tracks the strategy as `BurnState.default_strategy` (results take their autodiff
inputs' strategy: oracle/base_states.py); these rules set it and predict the panic.
"""

from __future__ import annotations

from dataclasses import replace

from difftest.divergences.knowledge import burn_source
from difftest.divergences.messages import BURN_STRATEGY_MISMATCH
from difftest.divergences.rule import Rule, Step, burn_inputs, divergence
from difftest.divergences.states import BurnState, Failure, ModuleState, Result
from difftest.program.ir import Apply, Cut, OpCall, Transform, region_of

# burn-dispatch's assertion message (a different panic at the same op is not this divergence)
MISMATCH_MESSAGE = BURN_STRATEGY_MISMATCH
_AUTODIFF_API = burn_source("burn-tensor", "src/tensor/api/autodiff.rs")
_DISPATCH = burn_source("burn-dispatch", "src/backend.rs")


def _autodiff_onto_default(step: Step) -> bool:
    """autodiff() of a tensor off autodiff (or taken off it by its region) in a program whose
    autodiff device is checkpointed."""
    st = step.statement
    if step.checkpointing == "disabled" or not isinstance(st, Cut) or st.cut != "autodiff":
        return False
    ins = burn_inputs(step)
    return bool(ins) and (not ins[0].is_autodiff or region_of(st) != "grad")


def _train_onto_default(step: Step) -> bool:
    """train() of a valid() snapshot (its parameters off autodiff) in a checkpointed program:
    burn puts the parameters back on autodiff as autodiff() does."""
    st, m = step.statement, step.module
    return (step.checkpointing != "disabled" and isinstance(st, Transform) and st.transform == "train"
            and m is not None and m.valid and bool(m.params))


def _on_default(step: Step) -> Result:
    cur = step.current
    assert isinstance(cur, (BurnState, ModuleState)), cur
    return replace(cur, default_strategy=True)


def _strategies(step: Step) -> set[bool]:
    """The strategies (default or the program's) of the autodiff tensors the statement combines:
    its inputs, and for a module forward its parameters (on the program's strategy, or on the
    default one since a train() of a valid() snapshot)."""
    st = step.statement
    if step.checkpointing == "disabled" or region_of(st) != "grad":
        return set()
    out = {s.default_strategy for s in burn_inputs(step) if s.is_autodiff}
    m = step.module
    if isinstance(st, Apply) and m is not None and m.params and not m.valid:
        out.add(m.default_strategy)
    return out


CHECKPOINTING_RULES: tuple[Rule, ...] = (
    Rule(
        divergence(
            "autodiff-default-strategy",
            "burn",
            "autodiff() of a tensor off autodiff associates it with burn's default "
            "gradient-checkpointing strategy (disabled), not with the strategy of the program's "
            "autodiff device ('using the default gradient-checkpointing strategy', its "
            "documentation). No flag shows it; the strategy-mismatch panic does. PyTorch has no strategy.",
            "docs/semantics.md#checkpointing",
            _AUTODIFF_API,
        ),
        (Cut,),
        _autodiff_onto_default,
        _on_default,
    ),
    Rule(
        divergence(
            "train-default-strategy",
            "burn",
            "train() of a valid() snapshot puts its parameters back on autodiff with burn's default "
            "gradient-checkpointing strategy, as autodiff() does, not with the strategy the "
            "module was built on. No flag shows it; the strategy-mismatch panic does.",
            "docs/semantics.md#checkpointing",
            burn_source("burn-core", "src/module/base.rs"),
        ),
        (Transform,),
        _train_onto_default,
        _on_default,
    ),
    Rule(
        divergence(
            "checkpointing-strategy-mismatch",
            "burn",
            "an operation on autodiff tensors of different gradient-checkpointing strategies "
            "panics ('Gradient checkpointing strategy mismatch ... Tensors in the same operation "
            "must share a strategy'; burn-dispatch's tests expect it). PyTorch computes it.",
            "docs/semantics.md#checkpointing",
            "corpus/seed/checkpointing-strategy-mismatch.json",
            _DISPATCH,
        ),
        (OpCall, Apply),
        lambda step: len(_strategies(step)) > 1,
        lambda step: Failure("panic", "gradient checkpointing strategy mismatch", MISMATCH_MESSAGE),
    ),
)
