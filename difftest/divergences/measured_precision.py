"""A backend's measured precision at some ops, as data a known-bug record's error check reads.

Some burn backends compute an op less accurately than PyTorch, by design of the code they run
(Wgpu on lavapipe: the Vulkan driver's GLSL.std.450 functions, which Vulkan lets err by many ulps;
cubecl's own polynomial erf). The float32 noise budget of the oracle is PyTorch's, so such an op
shows as burn-wrong. A precision record declares the backend's error as it was measured:
`benchmarks/backend_precision.py --write difftest/divergences/precision-<table>.json` runs each
op over a dense grid of its domain on that backend and writes, per op, for the value and the gradient, burn's largest
absolute error in each binade of the float64 reference. A finding at such an op is explained
only when every failing element's error is within `MARGIN` times the largest error measured in
the element's binade or the two next to it: an error of the size measured is the backend's
precision; a larger one (a wrong derivative, a scaled result) is news.

Downstream of such an op (a finding matched where the program shows it, past the ops triage
localises), the op's error has travelled through others: every failing element is then within
MARGIN times the op's worst measured error, as a relative error of results of at least
2^RELATIVE_FROM (of the element's reference, of the terms that may cancel in it, or of 1e-3 of the
tensor's largest where it cancels to less) plus its worst absolute error below that. Looser than at the op, as a
downstream match must be, and still a bound: a wrong kernel downstream is news.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from difftest.divergences.bug_records import ErrorCheck, Fault, fault_terms
from difftest.program.statements import Backward, OpCall, ancestors

DATA = Path(__file__).parent
RELATIVE_FROM = -3  # binades from 2^-3 up: results large enough for their error to be relative
MARGIN = 2.0  # times the measured error: the grid samples each binade, it does not exhaust it
ZERO_BINADE = -1000  # the binade the table files a zero reference under


@dataclass(frozen=True)
class PrecisionTable:
    """burn's largest absolute error per op, part ("value", "grad") and binade k of the float64
    reference (|r| in [2^k, 2^(k+1)))."""

    name: str
    backend: str
    dtype: str
    errors: Mapping[str, Mapping[str, Mapping[int, float]]]

    def bound(self, op: str, part: str, reference: float) -> float | None:
        """The error allowed at an element whose reference is `reference`: MARGIN times the
        largest measured in its binade and the two next to it; None where none was measured."""
        table = self.errors.get(op, {}).get(part)
        if table is None or not math.isfinite(reference):
            return None
        if reference == 0:
            near = [table.get(ZERO_BINADE)]
        else:
            k = math.floor(math.log2(abs(reference)))
            near = [table.get(k - 1), table.get(k), table.get(k + 1)]
        measured = [e for e in near if e is not None]
        return MARGIN * max(measured) if measured else None

    def worst(self, op: str, part: str) -> tuple[float, float]:
        """(worst relative error over results of at least 2^RELATIVE_FROM, worst absolute error
        below), measured at `op`'s `part`; (0, 0) where nothing was measured."""
        table = self.errors.get(op, {}).get(part, {})
        relative = max((e / 2.0**k for k, e in table.items() if k >= RELATIVE_FROM), default=0.0)
        absolute = max((e for k, e in table.items() if k < RELATIVE_FROM), default=0.0)
        return relative, absolute


@cache
def load_table(name: str) -> PrecisionTable:
    """The table `precision-<name>.json` beside this module (benchmarks/backend_precision.py --write)."""
    path = DATA / f"precision-{name}.json"
    try:
        doc = json.loads(path.read_text())
        errors = {op: {part: {int(k): float(e) for k, e in bins.items()} for part, bins in parts.items()}
                  for op, parts in doc["ops"].items()}
        return PrecisionTable(name, str(doc["backend"]), str(doc["dtype"]), errors)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"precision table {path}: {e}") from e


def _within(bound: float | None, reference: float, observed: float) -> bool:
    return bound is not None and math.isfinite(observed) and abs(observed - reference) <= bound


def within_measured(table_name: str, parts: Mapping[str, tuple[str, ...]]) -> ErrorCheck:
    """An error check for a record over the ops of `parts` (op -> the parts declared: "value",
    "grad"): at such an op, of a declared part, every failing element within the table's bound;
    downstream of such ops, within their worst measured errors (see the module doc)."""

    def check(f: Fault) -> bool:
        table = load_table(table_name)
        by_id = f.program.by_id()
        st = by_id.get(f.site or "")
        if st is None or not f.pairs:
            return False
        if isinstance(st, OpCall) and f.kind in parts.get(st.op, ()) and all(
                _within(table.bound(st.op, f.kind, r), r, b) for r, b in f.pairs):
            return True
        # downstream: the ops of `parts` the site's value (a backward: its root) is computed from
        root = st.input if isinstance(st, Backward) else st.id
        upstream = {s.op for x in ancestors(by_id, root) - {st.id}
                    if isinstance(s := by_id[x], OpCall) and s.op in parts}
        if not upstream:
            return False
        worst = [table.worst(op, part) for op in upstream for part in parts[op]]
        relative = MARGIN * max(w[0] for w in worst)
        absolute = MARGIN * max(w[1] for w in worst)
        scale = max((abs(r) for r, _ in f.pairs if math.isfinite(r)), default=0.0)
        return all(_within(relative * max(abs(r), t, scale * 1e-3) + absolute, r, b)
                   for (r, b), t in zip(f.pairs, fault_terms(f), strict=True))

    check.__doc__ = (f"every failing element within {MARGIN:g}x burn's error measured at the op, or "
                     f"downstream within its worst (precision-{table_name}.json; ops {', '.join(sorted(parts))})")
    return check
