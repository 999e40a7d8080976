"""The semantic model against real PyTorch, and the rules as removable data."""

from __future__ import annotations

from pathlib import Path

from difftest.divergences.knowledge import Knowledge
from difftest.divergences.rules import RULES, Rule
from difftest.divergences.states import BurnState
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import load_case
from difftest.oracle.check import check
from difftest.oracle.model import predict
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import Cut
from difftest.strategies.choices import RandomChoices
from difftest.strategies.generator import generate

SEED = Path(__file__).resolve().parents[2] / "corpus" / "seed"


def test_model_predicts_pytorch_exactly_on_random_programs() -> None:
    """Flags, failures and gradient presence of 400 seeded programs, without burn."""
    for seed in range(400):
        p = generate(RandomChoices(seed))
        pred = predict(p).torch
        obs = run_torch(p)
        for v in obs.values:
            assert pred.states[v.id].flags() == v.flags, (seed, v.id)
        want = pred.failure[0] if pred.failure else None
        assert (obs.error.index if obs.error else None) == want, seed
        for bw in obs.backwards:
            got = {k: g is not None for k, g in bw.grads.items()}
            assert got == pred.grads[bw.id], seed


def test_removing_leaf_detach_fails_the_seed(burn_worker: BurnWorker) -> None:
    program = load_case(SEED / "flags-of-w.json").program
    assert check(program, burn_worker).ok
    without = [r for r in RULES if r.name != "leaf-detach"]
    verdict = check(program, burn_worker, rules=without)
    assert not verdict.ok
    bad = verdict.findings[0]
    assert bad.kind == "flags" and bad.statement == "w_detach" and bad.framework == "burn"
    assert "w_detach = detach(w)" in verdict.report()


def test_a_rule_burn_no_longer_follows_is_reported_stale(burn_worker: BurnWorker) -> None:
    bogus = Rule(
        Knowledge("bogus-detach-tracks", "divergence", "burn", "pretend detach of an intermediate stays tracked",
                  ("tests/differential/test_model.py",)),
        (Cut,),
        lambda s: s.statement.id == "w2_detach",
        lambda s: BurnState(True, True, False),
    )
    program = load_case(SEED / "flags-of-w.json").program
    verdict = check(program, burn_worker, rules=[*RULES, bogus])
    assert [m.kind for m in verdict.findings] == ["stale-rule"]
    assert "bogus-detach-tracks" in verdict.findings[0].detail


def test_rules_are_declared_with_reasons() -> None:
    names = [r.name for r in RULES]
    assert {"leaf-detach", "without-autodiff"} <= set(names)
    for r in RULES:
        assert r.knowledge.reason and r.knowledge.evidence and r.framework in ("burn", "torch")
