"""The memory corpus case type: what a `"kind": "memory"` case measures (the seed's table,
corpus/seed/memory-table.json)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from difftest.divergences.memory_rules import MemoryRule
from difftest.memory.model import Row
from difftest.memory.table import SEED_MODES, forward_program, predict_growth, run_table
from difftest.program.ir import Program

EXPERIMENTS = ("seed-table",)
# the largest sizes a case may ask for: the experiment's n x n matrices (4096: 64 MiB in float32,
# four times the seed table's) and its iterations (each a forward, and a backward for some modes)
SIZE_LIMITS = {"n": 4096, "iters": 1000}


@dataclass(frozen=True)
class TableSize:
    n: int
    iters: int


@dataclass(frozen=True)
class MemoryExperiment:
    """What a memory corpus case measures (`"kind": "memory"`, docs/format.md): the seed's
    table at its own size (`full`, replayed with --run-slow or -m memory) and at a reduced size
    for the default run (`quick`; the thresholds scale with n and iters)."""

    experiment: str
    full: TableSize
    quick: TableSize

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "n": self.full.n,
            "iters": self.full.iters,
            "quick": {"n": self.quick.n, "iters": self.quick.iters},
        }

    @staticmethod
    def from_dict(raw: Any) -> MemoryExperiment:
        """Raises ValueError naming the bad field (or a size the model cannot judge)."""
        if not isinstance(raw, dict):
            raise ValueError('"memory" must be an object')
        if raw.get("experiment") not in EXPERIMENTS:
            raise ValueError(f'"memory.experiment" must be one of {list(EXPERIMENTS)}, got {raw.get("experiment")!r}')

        def size(obj: Any, where: str) -> TableSize:
            if not isinstance(obj, dict):
                raise ValueError(f'"{where}" must be an object with "n" and "iters"')
            for key in ("n", "iters"):
                v = obj.get(key)
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise ValueError(f'"{where}.{key}" must be a positive integer, got {v!r}')
                if v > SIZE_LIMITS[key]:
                    raise ValueError(f'"{where}.{key}" is {v}; the limit is {SIZE_LIMITS[key]}')
            return TableSize(obj["n"], obj["iters"])

        exp = MemoryExperiment(raw["experiment"], size(raw, "memory"), size(raw.get("quick"), "memory.quick"))
        for t in (exp.full, exp.quick):
            for m in SEED_MODES:
                predict_growth(m.framework, m.name, n=t.n, iters=t.iters)  # refuses sizes it cannot judge
        return exp

    def size(self, full: bool) -> TableSize:
        return self.full if full else self.quick

    def stand_in(self) -> Program:
        """The experiment's forward at n=2, as the case's `program` (what `difftest show` prints
        and `difftest replay` checks for values before judging the table)."""
        return forward_program("none", 2, backward=True)

    def run(self, *, full: bool, rules: Sequence[MemoryRule] | None = None) -> list[Row]:
        t = self.size(full)
        return run_table(t.n, t.iters, rules=rules)
