"""Wrong flags at an op burn builds from other ops, traced to the part that decides them.

burn's stack is an unsqueeze of each input and a cat; its result is tracked exactly when the
cat's is. A cat that decides whether its result is tracked from its first input alone is then
wrong in stack too, and each composite of cat was a case of its own, named after the composite.
So a flags finding at an op with a declared composition (ops/compositions.py) runs again as
that op alone on its inputs (each tracked as burn tracked it in the program), then as its parts
on the same inputs. The finding is the part's when

- the op alone shows the same flags wrong (the finding is the op's, not the program's), and
- a part shows wrong flags in the parts' program, and that part alone on its own inputs shows
  them too: its one-op program is the reproducer, the composite is recorded as `inside`.

The signature is then the part's own, as a program calling the part directly gets it
(`flags:burn:cat:flags is_tracked=False`): one fault, one case.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from difftest.findings.composed import ROOT, as_parts
from difftest.findings.error_classes import mismatch_class
from difftest.findings.localisation import Localisation
from difftest.findings.localise import Judged, judge
from difftest.findings.one_op import one_op_program
from difftest.ops.catalog import CATALOG
from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.ir import OpCall

if TYPE_CHECKING:
    from difftest.exec.burn_worker import BurnWorker


def _differ(m: Mismatch) -> tuple[str, ...] | None:
    """The flags a flags finding shows wrong, with their observed values."""
    if not isinstance(m.expected, dict) or not isinstance(m.observed, dict):
        return None
    keys = sorted(k for k in set(m.expected) | set(m.observed) if m.expected.get(k) != m.observed.get(k))
    return tuple(f"{k}={m.observed.get(k)}" for k in keys)


def _flags_at(v: Verdict | None, statements: set[str], shown: tuple[str, ...] | None) -> Mismatch | None:
    """The first flags finding of `v` at one of `statements` showing the flags `shown` wrong."""
    if v is None or shown is None:
        return None
    order = {s.id: k for k, s in enumerate(v.program.statements)}
    found = [f for f in v.findings if f.kind == "flags" and f.statement in statements and _differ(f) == shown]
    return min(found, key=lambda f: order.get(f.statement or "", len(order)), default=None)


def flags_in_parts(verdict: Verdict, worker: BurnWorker, m: Mismatch,
                   memo: Judged | None = None) -> Localisation | None:
    """The localisation of the flags finding `m` to a part of its op (module docstring), or None
    (the finding keeps its op's signature)."""
    st = verdict.program.by_id().get(m.statement or "")
    shown = _differ(m)
    if m.kind != "flags" or not isinstance(st, OpCall) or st.region != "grad" or shown is None:
        return None
    if st.op not in CATALOG or CATALOG[st.op].composed is None:  # an op burn does not build from others
        return None
    built = one_op_program(verdict.program, st, verdict.torch, verdict.burn, as_tracked=True)
    if built is None:
        return None
    alone, _ = built
    if _flags_at(judge(alone, worker, memo), {ROOT}, shown) is None:
        return None
    parts_program = as_parts(alone)
    if parts_program is None:
        return None
    parts = judge(parts_program, worker, memo)
    new = {s.id for s in parts_program.statements} - {s.id for s in alone.statements} | {ROOT}
    at = _flags_at(parts, new, shown)
    if parts is None or at is None:
        return None
    part = parts_program.by_id().get(at.statement or "")
    if not isinstance(part, OpCall):
        return None
    own = one_op_program(parts_program, part, parts.torch, parts.burn, as_tracked=True)
    if own is None:
        return None
    p, _ = own
    v = judge(p, worker, memo)
    f = _flags_at(v, {ROOT}, shown)
    if v is None or f is None:
        return None
    return Localisation(st.id, part.op, "flags", None, p.dtype, mismatch_class(v, f), f.verdict or f.kind,
                        dict(part.attrs), p, v, f, "fails", inside=(st.op,), composed=parts_program, part=part.id)
