"""The op catalog: agreement with difftest-burn, coverage by the strategy, and its data."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from difftest.exec.burn_worker import BurnWorker
from difftest.ops.catalog import CATALOG, OPS, VARIADIC
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
        for other_has_edge in (True, False):
            with torch.inference_mode():
                inf = torch.full(shape, 1.5)
            base = torch.full(shape, 0.75, requires_grad=True)
            if other_has_edge:
                other = base
            else:  # requires_grad, but a view made under no_grad has no autograd edge
                with torch.no_grad():
                    other = base.view(shape)
            args = [other, other]
            args[i] = inf
            try:
                spec.lower(args, attrs)
                raised = False
            except RuntimeError as e:
                assert "Inference tensors cannot be saved" in str(e)
                raised = True
            expected = i in spec.saves and (other_has_edge or i not in spec.saved_for_other)
            assert raised == expected, (
                f"{name}: input {i} (other input has an edge: {other_has_edge}) saved={raised}; "
                f"catalog: saves={spec.saves} saved_for_other={spec.saved_for_other}"
            )


def test_arity_is_declared() -> None:
    for op in OPS:
        assert op.arity in (1, 2, VARIADIC)
