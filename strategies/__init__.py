"""Hypothesis strategies that grow difftest programs from the op catalog."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hypothesis import strategies as st

from difftest.program.ir import Program
from difftest.strategies.choices import HypothesisChoices, RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate

__all__ = ["GenConfig", "HypothesisChoices", "RandomChoices", "generate", "programs", "random_programs"]


def programs(
    *,
    ops: Iterable[str] | None = None,
    weights: Mapping[str, float] | None = None,
    max_statements: int = 10,
    **options: Any,
) -> st.SearchStrategy[Program]:
    """Programs drawn from the op catalog, valid by construction; they shrink by deleting
    statements. `ops` restricts the catalog, `weights` biases it; other keyword options are
    the fields of `GenConfig`."""
    cfg = GenConfig(
        ops=tuple(ops) if ops is not None else None,
        weights=dict(weights or {}),
        max_statements=max_statements,
        **options,
    )
    cfg.op_specs()  # fail fast on unknown ops

    @st.composite
    def _programs(draw: st.DrawFn) -> Program:
        return generate(HypothesisChoices(draw), cfg)

    return _programs()


def random_programs(seed: int, cfg: GenConfig | None = None) -> Iterable[Program]:
    """An endless stream of programs from a seeded PRNG (for campaigns)."""
    k = 0
    while True:
        yield generate(RandomChoices(seed * 1_000_003 + k), cfg)
        k += 1
