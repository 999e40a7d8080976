"""Generated memory checks (drawn by strategies/memory.py): any program's forward part
repeated, dropping every result, and optionally one backward and as many forwards again,
measured in both frameworks (fresh processes) and judged against the memory model.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass

from difftest.divergences.knowledge import Framework
from difftest.divergences.memory_rules import MemoryRule
from difftest.memory.model import (
    F32_BYTES,
    FRAMEWORKS,
    MIB,
    Expectation,
    ForwardMemory,
    Measured,
    Row,
    expectations,
    forward_part,
    judge_rows,
    labels,
    predict_forward_memory,
    saved_bytes_per_forward,
)
from difftest.memory.server import burn_request, rows_of, torch_server
from difftest.ops.validate import infer_shapes
from difftest.program.ir import Leaf, OpCall, Program, numel
from difftest.program.jsonio import dumps, program_to_dict


@dataclass(frozen=True)
class MemoryCheck:
    """A generated memory check (strategies/memory.py): `program`'s leaves are created once,
    its forward part (the statements before the first backward) runs once with that backward
    as warm-up, then `iters` times with every result dropped; with `then_backward` (and a
    backward in the program), then one forward and its backward, then `iters` more forwards.
    Each framework runs it in a fresh process."""

    program: Program
    iters: int
    then_backward: bool = True
    name: str = ""

    @property
    def backward_phase(self) -> bool:
        return self.then_backward and forward_part(self.program)[1] is not None

    def labels(self) -> tuple[str, ...]:
        return labels(self.iters, self.backward_phase)

    def predict(self, framework: Framework, rules: Sequence[MemoryRule] | None = None) -> ForwardMemory:
        return predict_forward_memory(self.program, framework, keep=False, rules=rules)

    def expectations(
        self, framework: Framework, rules: Sequence[MemoryRule] | None = None
    ) -> tuple[Expectation, ...]:
        """Raises ValueError when the check cannot tell its predicted growth from noise."""
        return expectations(self.predict(framework, rules), self.iters, then_backward=self.backward_phase)

    def describe(self) -> str:
        forward, root = forward_part(self.program)
        shapes = infer_shapes(forward)
        largest = max((shapes[v] for v in forward.value_ids()), key=numel)
        ops = [st.op if isinstance(st, OpCall) else st.kind for st in forward.statements if not isinstance(st, Leaf)]
        saved = ", ".join(f"{fw} {saved_bytes_per_forward(self.program, fw) / MIB:.1f}" for fw in FRAMEWORKS)
        return (
            f"{self.name or 'check'}: {len(self.program)} statements, largest tensor "
            f"{'x'.join(map(str, largest))} ({numel(largest) * F32_BYTES / MIB:.1f} MiB), forward "
            f"[{' '.join(ops)}]{' + backward' if root else ''}, x{self.iters}; saved per forward (MiB): {saved}"
        )

    @functools.cached_property
    def program_json(self) -> str:
        """The program document (megabytes of leaf data: encoded once, sent to both children)."""

        return dumps(program_to_dict(self.program))


def measure_program(check: MemoryCheck, framework: Framework, *, fixed_malloc: bool = True) -> Measured:
    """Runs `check` in a fresh process of `framework` (burn: a `memory_program` request)."""
    what = f"program {check.name or '?'}"
    if framework == "burn":
        head = {"request": "memory_program", "id": 1, "iters": check.iters, "then_backward": check.then_backward}
        request = json.dumps(head)[:-1] + ', "program": ' + check.program_json + "}"
        return burn_request(request, what, fixed_malloc=fixed_malloc)
    req = {"kind": "program", "iters": check.iters, "then_backward": check.then_backward}
    return rows_of(torch_server(fixed_malloc).request(req, what, stdin_doc=check.program_json))


def judge_check(
    check: MemoryCheck, measured: dict[Framework, Measured], rules: Sequence[MemoryRule] | None = None
) -> list[Row]:
    """The measured rows of both frameworks against the model's expectations."""
    rows: list[Row] = []
    for fw in FRAMEWORKS:
        rows += judge_rows(fw, check.name or "program", measured[fw], check.expectations(fw, rules), check.labels())
    return rows


def run_check(check: MemoryCheck, *, fixed_malloc: bool = True) -> dict[Framework, Measured]:
    """Measures `check` in both frameworks (refuses first if it cannot tell growth from noise)."""
    for fw in FRAMEWORKS:
        check.expectations(fw)
    return {fw: measure_program(check, fw, fixed_malloc=fixed_malloc) for fw in FRAMEWORKS}


def format_check(check: MemoryCheck, rows: Sequence[Row]) -> str:
    lines = [check.describe()]
    for r in rows:
        verdict = "ok" if r.ok else "CONTRADICTED"
        lines.append(
            f"  {r.framework:<5}  {r.label:<18}  {r.growth_mib:>+8.1f}  {verdict:<12}  {r.expectation.describe()}"
        )
    return "\n".join(lines)
