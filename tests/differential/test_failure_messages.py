"""Every failure the model predicts names the message the framework gives for it
(difftest/divergences/messages.py): each pattern matches what burn or PyTorch really says, run
here, and the same observation with another message at the same statement, in the main check
or in a root probe, is news rather than the predicted failure."""

from __future__ import annotations

from dataclasses import replace

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.ops.validate import infer_shapes
from difftest.oracle.check import check
from difftest.oracle.compare import compare
from difftest.oracle.probe_run import disagrees
from difftest.oracle.probes import root_probes
from difftest.program.ir import Apply, InlineTensor, Module, Program
from difftest.program.observation import Observation
from tests.programs import backward, cut, leaf, op, program

OTHER = "index out of bounds: the len is 2 but the index is 3"


def _cases() -> dict[str, tuple[Program, tuple[str, ...]]]:
    """A program per predicted failure, with the frameworks that fail it."""
    x = leaf("x", [1.0, 2.0], True, shape=[1, 2])
    lin = Module("fc", "linear", InlineTensor((2, 2), (0.5, -1.0, 2.0, 0.25)), InlineTensor((2,), (0.25, -0.5)))
    return {
        "backward-untracked": (program(leaf("c", [1.0, 2.0]), op("s", "sum", "c"), backward("s")), ("burn", "torch")),
        "backward-consumed": (program(x, op("y", "exp", "x"), op("s", "sum", "y"), backward("s", "bw0"),
                                      backward("s", "bw1")), ("burn", "torch")),
        "plain-leaf-require-grad": (program(leaf("xp", [1.0, 2.0], True, device="plain", shape=[1, 2]),
                                            op("s", "sum", "xp")), ("burn",)),
        "dropout-p1-panics": (program(x, Module("d", "dropout", p=1.0), Apply("y", "d", "x")), ("burn",)),
        "inference-tensor-saved": (program(x, op("xi", "mul_scalar", "x", region="inference_mode", scalar=2.0), lin,
                                           Apply("y", "fc", "xi")), ("torch",)),
        "checkpointing-strategy-mismatch": (replace(program(x, cut("c", "autodiff", "x", region="no_grad"),
                                                            op("y", "mul", "c", "x"), op("s", "sum", "y"),
                                                            backward("s")), checkpointing="balanced"), ("burn",)),
    }


CASES = _cases()


def _with_message(obs: Observation, message: str) -> Observation:
    assert obs.error is not None
    return replace(obs, error=replace(obs.error, message=message))


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_predicted_failure_names_the_real_message(burn_worker: BurnWorker, name: str) -> None:
    p, failing = CASES[name]
    v = check(p, burn_worker)
    assert v.ok, v.report()
    shapes = infer_shapes(p)
    for fw in failing:
        predicted = v.prediction.of(fw).failure
        obs = v.burn if fw == "burn" else v.torch
        assert predicted is not None and obs.error is not None, (fw, v.report())
        assert predicted[2].message is not None, f"{name}: the {fw} failure names no message"
        assert predicted[2].matches(obs.error.kind, obs.error.message), (predicted, obs.error)
        other = _with_message(obs, OTHER)
        after = compare(p, shapes, v.prediction, other if fw == "torch" else v.torch, other if fw == "burn" else v.burn)
        assert [(m.kind, m.framework) for m in after.mismatches] == [("outcome", fw)], after.report()


def test_a_probe_failing_with_another_message_disagrees(burn_worker: BurnWorker) -> None:
    """A root probe the model predicts fails (a backward through the graph the first backward
    consumed) agrees with burn's tape panic there, not with another panic."""
    x = leaf("x", [1.0, 2.0], True, shape=[1, 2])
    p = program(x, op("y", "exp", "x"), op("s", "sum", "y"), op("t", "mean", "y"), backward("s", "bw0"),
                op("u", "mul_scalar", "x", scalar=2.0), op("w", "sum", "u"), backward("w", "bw1"))
    failing = [pr for pr in root_probes(p) if pr.fails]
    assert failing, root_probes(p)
    probe = failing[0]
    observed = burn_worker.run(probe.program(p))
    assert observed.error is not None and observed.error.index == probe.index, observed.error
    assert not disagrees(probe, observed.error)
    assert disagrees(probe, replace(observed.error, message=OTHER))
