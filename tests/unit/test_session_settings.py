"""The SGD settings the generator draws for a training loop (difftest/strategies/sessions.py):
each hyperparameter burn-optim reads is drawn, so a fault in its use is reachable (a dampening
fault in burn-optim's momentum showed in no program while dampening was always 0), and only in
combinations both frameworks accept."""

from __future__ import annotations

from collections import Counter

from difftest.campaign.loop import program_at
from difftest.program.statements import Optimizer
from difftest.strategies.sessions import DAMPENINGS, MOMENTA, MOMENTA_F32_EXACT, WEIGHT_DECAYS


def _optimizers(n: int, seed: int = 5) -> list[Optimizer]:
    return [s for k in range(n) for s in program_at(seed, k, profile="sessions").statements
            if isinstance(s, Optimizer)]


def test_every_setting_is_drawn_in_combinations_pytorch_accepts() -> None:
    opts = _optimizers(600)
    assert {o.dampening for o in opts} == set(DAMPENINGS)
    assert {o.weight_decay for o in opts} == set(WEIGHT_DECAYS)
    assert {o.momentum for o in opts} <= set(MOMENTA) | set(MOMENTA_F32_EXACT)
    assert any(o.nesterov for o in opts)
    combos = Counter((o.momentum > 0, o.dampening > 0, o.nesterov) for o in opts)
    assert combos[(True, True, False)] > 0
    # PyTorch (and burn's config) refuse nesterov with dampening, and dampening means nothing
    # without momentum
    assert not any(o.nesterov and o.dampening for o in opts)
    assert not any(o.dampening and not o.momentum for o in opts)


def test_dampenings_are_exact_in_float32() -> None:
    import numpy as np

    for d in DAMPENINGS:
        assert float(np.float32(d)) == d and float(np.float32(1.0 - d)) == 1.0 - d
