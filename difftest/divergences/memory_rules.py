"""Declared divergences about memory (the flag rules are in rules.py).

The memory model (difftest/memory/model.py) applies them: its base semantics are PyTorch's
(saved tensors live as long as an output that reaches them), and a memory rule changes what a
framework keeps resident.
"""

from __future__ import annotations

from dataclasses import dataclass

from difftest.divergences.knowledge import Knowledge, OneFramework, burn_source


@dataclass(frozen=True)
class MemoryRule(OneFramework):
    KIND = "memory"
    knowledge: Knowledge


GRAPH_RETAINED = MemoryRule(Knowledge(
    "graph-retained-until-backward",
    "memory",
    "burn",
    "burn keeps the graph of every recorded forward (with its saved tensors) in a "
    "process-wide structure that only backward() cleans; dropping the output frees nothing. "
    "PyTorch frees a graph with its output. detach() of a require-grad leaf is still a "
    "require-grad leaf in burn, so forwards on it are recorded and retained too.",
    (
        "docs/semantics.md#graph-retained-until-backward",
        "docs/semantics.md#golden-memory",
        "corpus/seed/memory-table.json",
        burn_source("burn-autodiff", "src/runtime/graph.rs"),
        burn_source("burn-autodiff", "src/runtime/memory_management.rs"),
    ),
))
# The memory rules the model applies when a caller passes no `rules` (looked up at call time).
MEMORY_RULES: tuple[MemoryRule, ...] = (GRAPH_RETAINED,)
MEMORY_RULES_BY_NAME: dict[str, MemoryRule] = {r.name: r for r in MEMORY_RULES}
