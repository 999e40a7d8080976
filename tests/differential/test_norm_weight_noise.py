"""A normalisation's weight gradient carries its statistics' rounding coherently.

The weight's gradient is the sum over a group of the cotangent times the normalised values. A
mean rounded by a few ulps shifts every normalised value of the group alike, so that sum carries
n times the shift; with a constant cotangent (a backward of the output itself) the exact sum is
0 and burn's float32 one is that rounding alone. The noise runs recompute the normalised values
from perturbed inputs, which still sum to exactly 0: they measured nothing there (7.7e-14 against
burn's 1.2e-4, a false alarm of the localiser's module program under a patched burn whose
mask_fill backward was wrong: the patch was elsewhere, the module program failed on the correct
build too). The statistics' shared rounding now reaches the weight's gradient as it reaches the
input's (oracle/shared_noise.py), and a wrong weight gradient is still found where it is not a
cancelling sum."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from difftest.exec.burn_worker import BurnWorker
from difftest.oracle.check import check
from difftest.program.jsonio import program_from_dict

DATA = Path(__file__).parent / "data" / "batch-norm-weight-grad-cancelling-sum.json"


def _cancelling() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DATA.read_text())
    return doc


def _seeded(doc: dict[str, Any]) -> dict[str, Any]:
    """The same module and input, the output times a fixed non-constant cotangent and summed:
    the weight's gradient is no longer a cancelling sum."""
    out = copy.deepcopy(doc)
    statements = out["statements"]
    at = next(i for i, s in enumerate(statements) if s["kind"] == "apply")
    shape = next(s["shape"] for s in statements if s["id"] == statements[at]["input"])
    n = 1
    for d in shape:
        n *= d
    cot = {"id": "c", "kind": "leaf", "shape": shape, "data": [((7 * k) % 11 - 5) / 5 for k in range(n)],
           "device": "autodiff", "require_grad": False}
    statements.insert(at + 1, cot)
    statements[-1:] = [{"id": "yc", "kind": "op", "op": "mul", "inputs": [statements[at]["id"], "c"]},
                       {"id": "s", "kind": "op", "op": "sum", "inputs": ["yc"]},
                       {"id": "bw", "kind": "backward", "input": "s"}]
    return out


def test_a_batch_norms_cancelling_weight_gradient_is_rounding(workers: dict[str, BurnWorker]) -> None:
    if "" not in workers:
        workers[""] = BurnWorker()
        workers[""].start()
    verdict = check(program_from_dict(_cancelling()), workers[""])
    assert verdict.ok, verdict.report()


def test_a_wrong_weight_gradient_is_still_found(workers: dict[str, BurnWorker]) -> None:
    program = program_from_dict(_seeded(_cancelling()))
    for fault in ("", "grad-scale:batch_norm:2e-3"):
        if fault not in workers:
            workers[fault] = BurnWorker(fault=fault or None)
            workers[fault].start()
    assert check(program, workers[""]).ok, "the seeded program passes on the correct build"
    verdict = check(program, workers["grad-scale:batch_norm:2e-3"])
    assert not verdict.ok
    wrong = {m.statement for m in verdict.mismatches if m.verdict == "burn-wrong"}
    assert "param_weight" in wrong, verdict.report()
