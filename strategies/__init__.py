"""The program generator, `difftest.strategies` (its folder is strategies/ at the repository's
root). Its public API is one strategy, `programs(...)`: Hypothesis grows difftest programs from
the op catalog. The rest is internal, importable from its modules but not advertised: the
generator (`generator.generate`), its choice sources (`choices`), its knobs and profiles
(`config.GenConfig`), module fits and sessions; difftest's campaigns and tests import them there."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hypothesis import strategies as st

from difftest.program.ir import Program
from difftest.strategies.choices import HypothesisChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate

__all__ = ["programs"]


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

