"""The op catalog: agreement with difftest-burn, coverage by the strategy, and its data."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from difftest.burn_worker import BurnWorker
from difftest.catalog import CATALOG, OPS, VARIADIC
from strategies import RandomChoices, generate


def test_burn_reports_the_same_ops(burn_worker: BurnWorker) -> None:
    burn = {o["name"]: o["arity"] for o in burn_worker.ops()}
    python = {op.name: op.arity for op in OPS}
    assert burn == python


def test_every_op_is_generated() -> None:
    counts: Counter[str] = Counter()
    for seed in range(1500):
        c = RandomChoices(seed)
        generate(c)
        counts.update({k[3:]: n for k, n in c.events.items() if k.startswith("op:")})
    missing = sorted(set(CATALOG) - set(counts))
    assert not missing, f"never generated: {missing}; counts: {dict(counts)}"


@pytest.mark.parametrize("name", [op.name for op in OPS if op.arity == 2])
def test_saved_inputs_match_pytorch(name: str) -> None:
    """`saves` is data the inference-tensor rule relies on: check it against PyTorch."""
    spec = CATALOG[name]
    shape = (2, 2)
    attrs = {"mask": {"shape": [2, 2], "data": [True, False, False, True]}} if name == "mask_where" else {}
    for i in range(2):
        with torch.inference_mode():
            inf = torch.full(shape, 1.5)
        normal = torch.full(shape, 0.75, requires_grad=True)
        args = [normal, normal]
        args[i] = inf
        try:
            spec.lower(args, attrs)
            raised = False
        except RuntimeError as e:
            assert "Inference tensors cannot be saved" in str(e)
            raised = True
        assert raised == (i in spec.saves), f"{name}: input {i} saved={raised}, catalog says {spec.saves}"


def test_arity_is_declared() -> None:
    for op in OPS:
        assert op.arity in (1, 2, VARIADIC)
