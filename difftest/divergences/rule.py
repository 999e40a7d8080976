"""The rule type of the flag model: a declared divergence, where it applies and what it
predicts (rules.py and session_rules.py hold the rules)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from difftest.divergences.knowledge import Framework, Knowledge, OneFramework
from difftest.divergences.states import BurnState, ModuleState, Result, SessionContext, State
from difftest.program.ir import Shape, Statement


@dataclass(frozen=True)
class Step:
    """What a rule sees: one statement, its inputs' states in this framework, and the state
    computed so far (the base, possibly already changed by earlier rules)."""

    index: int
    statement: Statement
    inputs: tuple[State, ...]
    current: Result
    module: ModuleState | None = None  # the module handle an apply/param/transform reads
    input_shapes: tuple[Shape, ...] = ()  # shapes of `inputs`
    session: SessionContext | None = None  # step / grad statements (session_rules.py)
    input_dtypes: tuple[str, ...] = ()  # dtypes of `inputs` (ops/value_dtypes.py)
    checkpointing: str = "disabled"  # the program's gradient-checkpointing strategy


@dataclass(frozen=True)
class Rule(OneFramework):
    """A divergence the flag model applies: its record, the statement kinds it can apply to
    (`on`: the model asks `applies` of no other kind; the declared kinds keep the model from
    asking every rule of every statement), where it applies, what it predicts."""

    KIND = "divergence"
    knowledge: Knowledge
    on: tuple[type[Statement], ...]
    applies: Callable[[Step], bool]
    effect: Callable[[Step], Result]


def divergence(name: str, framework: Framework, reason: str, *evidence: str) -> Knowledge:
    return Knowledge(name, "divergence", framework, reason, evidence)


def burn_inputs(step: Step) -> tuple[BurnState, ...]:
    """The step's input states, in burn's run."""
    return tuple(s for s in step.inputs if isinstance(s, BurnState))


def returns_input(step: Step) -> Result:
    """The effect of a call that returns its (first) input itself."""
    return step.inputs[0]
