"""Root probes: the backwards a program could have had.

A program's backward is rooted at one value; it could have been rooted at any other value burn
holds in a graph at that point. A *root probe* is the program cut after its i-th backward, with
that backward rooted at another tracked value (a require-grad leaf, an op result, a module
parameter or output). Whether burn's backward of it succeeds is the model's prediction (the
same `_backward` the model runs on the program itself, from the state it had reached there):
campaigns run every probe of a program on burn in one request, with its gradients, screen the
gradients of the probes that succeeded against PyTorch's, and check the full verdict of a probe
only where burn's outcome differs from the prediction or its gradients fail the screen
(difftest/oracle/probe_run.py).

Probes amplify the outcome and gradient oracles over roots, uniformly: every tracked value
before every backward, nothing chosen by what is known to break.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from difftest.divergences.rules import RULES, Rule
from difftest.divergences.states import BurnState, Failure
from difftest.ops.validate import infer_shapes
from difftest.oracle.model import BackwardHook, Firing, FrameworkPrediction, _backward, _run, walker_of
from difftest.program.ir import Backward, Program


@dataclass(frozen=True)
class RootProbe:
    index: int  # of the program's backward the probe re-roots
    backward: str  # that backward's id (the probe's backward keeps it)
    root: str  # the value the probe's backward is rooted at
    fails: bool  # the model predicts burn's backward of it fails
    # the failure predicted, when it fails (its kind and message pattern: another panic there is news)
    failure: Failure | None = None

    def program(self, program: Program) -> Program:
        """The probe as a program: `program`'s statements before the backward, then it, re-rooted."""
        bw = program.statements[self.index]
        assert isinstance(bw, Backward) and bw.id == self.backward, (self, bw)
        return program.rerooted(self.index, self.root)

    def describe(self) -> str:
        return f"root probe: backward {self.backward!r} rooted at {self.root!r}"


def root_probes(program: Program, rules: Sequence[Rule] = RULES) -> list[RootProbe]:
    """Every root probe of `program` with the model's prediction for burn, in program order
    (the backwards in order; before each, the tracked values in the order they were defined).
    A backward's own root is not a probe; the backwards after a predicted failure are not reached."""
    probes: list[RootProbe] = []
    burn_rules = [r for r in rules if r.framework == "burn"]
    _run("burn", program, infer_shapes(program), burn_rules, [], probe_collector(program, rules, probes))
    return probes


def probe_collector(program: Program, rules: Sequence[Rule], probes: list[RootProbe]) -> BackwardHook:
    """The hook of the model's burn run (`model._run`, `predict(at_burn_backward=...)`) that
    appends `program`'s root probes to `probes` as the run reaches each backward: the probes of
    `root_probes`, from the run the prediction makes anyway. Each probe's backward is stepped
    only as far as its outcome (`_backward(outcome_only=True)`, which leaves the state as it
    found it) with firings of its own, so the run itself is not changed."""
    shapes = infer_shapes(program)
    burn_rules = [r for r in rules if r.framework == "burn"]

    def at_backward(i: int, st: Backward, pred: FrameworkPrediction) -> None:
        walker = walker_of(program, pred, shapes)  # the probes leave the states as they are: one walker
        for ident, state in list(pred.states.items()):
            if ident == st.input or not isinstance(state, BurnState) or not state.is_tracked:
                continue
            scratch: list[Firing] = []
            failure = _backward("burn", i, Backward(st.id, ident), program, pred, burn_rules, scratch, shapes,
                                outcome_only=True, walker=walker)
            probes.append(RootProbe(i, st.id, ident, failure is not None, failure))

    return at_backward

