"""The model's prediction for a root probe's program (probes.py) from the model's run of the
program itself, rather than a run of its own over the same statements.

A probe's program is the statements before backward i, then that backward rooted elsewhere.
The model predicts statement by statement, each step from the state the earlier ones left, so
its state before backward i of the program is its state at the end of the probe's prefix: the
program's run records that state for each framework before each backward (`BackwardStates`,
hooks of `predict`), and the probe's prediction is that state, the probe's backward stepped on
a copy of it, and the program-wide parts computed as `predict` computes them (the firings of
the statements before i, the gradients the frameworks route differently, the gradient reads that
are not comparable). tests/unit/test_root_probes.py checks it equals `predict` of the probe's
program.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from difftest.divergences.rules import Rule
from difftest.ops.validate import infer_shapes
from difftest.oracle.model import (
    BackwardHook,
    Firing,
    FrameworkPrediction,
    Prediction,
    _backward,
    _gradient_reads_not_comparable,
    _incomparable_grads,
    predict,
)
from difftest.oracle.probes import RootProbe
from difftest.program.ir import Backward, Program


def _snapshot(pred: FrameworkPrediction) -> FrameworkPrediction:
    """A copy of `pred` that neither the rest of its run nor a backward on the copy changes (the
    steps add entries to its dicts and sets, and to the sets in `taken` and `accumulated`)."""
    return replace(pred, states=dict(pred.states), grads=dict(pred.grads), base_states=dict(pred.base_states),
                   modules=dict(pred.modules), as_input=dict(pred.as_input), nondet=set(pred.nondet),
                   roots=dict(pred.roots), paths=dict(pred.paths), consumed=dict(pred.consumed),
                   handle_keys=dict(pred.handle_keys), taken={k: set(v) for k, v in pred.taken.items()},
                   accumulated={k: set(v) for k, v in pred.accumulated.items()},
                   stale_buffers=set(pred.stale_buffers))


@dataclass
class BackwardStates:
    """Each framework's model state before each backward statement its run of the program
    reached (by index), recorded by `hook(framework)` given to `predict`."""

    states: dict[str, dict[int, FrameworkPrediction]] = field(default_factory=lambda: {"burn": {}, "torch": {}})

    def hook(self, framework: str) -> BackwardHook:
        def at_backward(i: int, st: Backward, pred: FrameworkPrediction) -> None:
            self.states[framework][i] = _snapshot(pred)
        return at_backward


def probe_prediction(program: Program, probe: RootProbe, recorded: BackwardStates | None, main: Prediction,
                     rules: Sequence[Rule]) -> Prediction:
    """`predict(probe.program(program), rules)`, from the states `predict(program, rules)`
    (`main`) recorded; by `predict` itself where a framework's run ended before the probe's
    backward (or nothing was recorded)."""
    i = probe.index
    probe_program = probe.program(program)
    if recorded is None or any(i not in recorded.states[fw] for fw in ("burn", "torch")):
        return predict(probe_program, rules)
    shapes = infer_shapes(program)
    bw = Backward(probe.backward, probe.root)
    firings: list[Firing] = []
    preds: dict[str, FrameworkPrediction] = {}
    for fw in ("burn", "torch"):  # as predict runs them, each with its firings before statement i
        pred = _snapshot(recorded.states[fw][i])
        firings += [f for f in main.firings if f.framework == fw and f.index < i]
        failure = _backward(fw, i, bw, probe_program, pred, [r for r in rules if r.framework == fw], firings, shapes)
        if failure is not None:
            pred.failure = (i, bw.id, failure)
        preds[fw] = pred
    burn, torch = preds["burn"], preds["torch"]
    incomparable = _incomparable_grads(burn, torch)
    _gradient_reads_not_comparable(probe_program, burn, torch, incomparable)
    return Prediction(burn, torch, firings, incomparable)
