"""One bug, one finding: a single wrong derivative saves exactly one case in a campaign (one per
place the fault is injected), named after the faulty op (difftest/findings/triage.py localises
each finding to the op whose own computation is wrong). Run with
`python -m pytest -m quality tests/quality/test_one_case_per_fault.py -s` (about half a minute a
fault on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from difftest.campaign.parallel import FuzzOptions, fuzz
from difftest.program.modules import MODULE_KINDS

pytestmark = pytest.mark.quality

FAULT_OPS = ["exp", "sigmoid", "softmax", "tanh", "matmul", "conv2d"]


@pytest.mark.parametrize("op", FAULT_OPS)
def test_a_1e4_gradient_fault_saves_exactly_one_case_naming_its_op(op: str, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    opts = FuzzOptions(seed=0, programs=2000, jobs=2, corpus=corpus, fault=f"grad-scale:{op}:1e-4",
                       inflight_dir=tmp_path / "inflight", live=False, progress_every=60.0)
    summary = fuzz(opts, Console(file=open("/dev/null", "w")))
    saved = [json.loads(Path(p).read_text()) for p in summary.saved]
    rows = [(f.signature, f.count) for f in summary.unexplained()]
    print(f"\ngrad-scale:{op}:1e-4: {len(saved)} case(s) saved; unexplained rows {rows}")
    # the fault scales the op and, for a name that is also a module kind (conv2d), the module's
    # forward (rust/src/fault.rs): one case per place it was injected, each named by it
    sites = {op} | ({f"apply:{op}"} if op in MODULE_KINDS else set())
    named = [c["triage"]["localisation"]["where"] for c in saved]
    assert len(named) == len(set(named)) and set(named) <= sites and op in named, rows
