"""A finding computed from a gradient read whose gradient a known bug explains is that bug's
consequence when the program, with the read replaced by the value burn read, no longer shows it
(difftest/findings/consequences.py); a second fault downstream still shows and is news."""

from __future__ import annotations

import json
from pathlib import Path

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.consequences import with_reads_as_leaves
from difftest.findings.triage import triage
from difftest.oracle.check import check
from difftest.program.ir import Leaf
from difftest.program.jsonio import program_from_dict

# a sessions campaign's program (seed 7, program 2077, reduced): a grouped strided conv1d whose
# weight gradient burn gets wrong (conv1d-grouped-weight-grad-uncropped), read as g0, divided by
# a leaf x8, a backward of that, and x8's gradient read as g2
PROGRAM = program_from_dict(json.loads(
    (Path(__file__).parent / "data" / "conv1d-grouped-weight-grad-read-downstream.json").read_text()))


def test_values_from_a_known_wrong_gradient_read_are_the_known_bug(burn_worker: BurnWorker) -> None:
    v = check(PROGRAM, burn_worker)
    assert {(f.kind, f.statement) for f in v.findings} >= {("grad", "x1"), ("value", "v9"), ("value", "g2")}
    t = triage(v, burn_worker)
    assert t.known is not None and t.known.name == "conv1d-grouped-weight-grad-uncropped", t.describe()
    variant = with_reads_as_leaves(v, {"g0"})
    assert variant is not None and isinstance(variant.by_id()["g0"], Leaf)
    # on burn's read value both sides agree downstream: what is left is the known bug itself
    assert [(f.kind, f.statement) for f in check(variant, burn_worker).findings] == [("grad", "x1")]


def test_a_second_fault_downstream_is_news() -> None:
    """div's gradient scaled by 1.01 in the interpreter: g2 is wrong on burn's read values too."""
    with BurnWorker(fault="grad-scale:div:1e-2") as w:
        t = triage(check(PROGRAM, w), w)
    assert t.known is None and t.key.startswith("burn-wrong:-:div:grad"), t.describe()
