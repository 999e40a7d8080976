"""The reference outputs of docs/semantics.md#golden-flags and #golden-side-branch, reproduced by
running the seed corpus programs."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import load_case
from difftest.oracle.check import check
from difftest.oracle.pytorch import run as run_torch
from difftest.program.observation import Observation

SEED_DIR = Path(__file__).resolve().parents[2] / "corpus" / "seed"


def _flags(obs: Observation, ident: str) -> tuple[bool, ...]:
    v = obs.value(ident)
    assert v is not None, f"{ident} missing from {obs.framework} observation"
    return tuple(v.flags.values())


def test_burn_flags_table(burn_worker: BurnWorker) -> None:
    obs = burn_worker.run(load_case(SEED_DIR / "flags-of-w.json").program)
    # is_autodiff, is_tracked, is_require_grad — the seed's burn table, line for line
    assert _flags(obs, "w") == (True, True, True)
    assert _flags(obs, "w_detach") == (True, True, True)
    assert _flags(obs, "w2_detach") == (True, False, False)
    assert _flags(obs, "w_without_autodiff") == (False, False, False)
    assert _flags(obs, "w_inner") == (False, False, False)


def test_torch_flags_of_the_same_program() -> None:
    obs = run_torch(load_case(SEED_DIR / "flags-of-w.json").program)
    assert obs.value("w_detach").flags["requires_grad"] is False  # type: ignore[union-attr]
    assert obs.value("w2_detach").flags["requires_grad"] is False  # type: ignore[union-attr]


def test_torch_modes() -> None:
    obs = run_torch(load_case(SEED_DIR / "pytorch-modes.json").program)
    a, b, d = (obs.value(x).flags for x in ("a", "b", "d"))  # type: ignore[union-attr]
    assert a["requires_grad"] is False and a["has_grad_fn"] is False  # no_grad: grad_fn=None
    assert b["requires_grad"] is False and b["is_inference"] is True  # inference_mode
    assert d["requires_grad"] is False  # w.detach()


@pytest.mark.parametrize("name", ["side-branch-detach", "side-branch-no-grad"])
def test_side_branch_gets_no_gradient(burn_worker: BurnWorker, name: str) -> None:
    program = load_case(SEED_DIR / f"{name}.json").program
    verdict = check(program, burn_worker)
    assert verdict.ok, verdict.report()
    for obs in (verdict.torch, verdict.burn):
        grad = obs.backwards[0].grads["x"]
        assert grad is not None and grad.data == (3.0, 4.0), obs.framework
