"""A gradient finding reproduced by a known bug's behaviour composed into the reference.

The localiser signs a finding by the first op on its path whose one-op run fails, else by a
suspect. Two non-differentiable points at once can defeat that: a max/min update's tie of two
tracked operands (burn gives each the whole gradient: the known bug
minmax-update-tie-grad-to-both) sends twice PyTorch's cotangent into hard_sigmoid at -3, whose
convention (1/6, PyTorch's 0) turns it into a gradient where PyTorch's is 0. Alone, each op is
within its one-sided limits, so no one-op run fails, and the suspect is hard_sigmoid, which no
record names.

Here the float64 reference is run again with burn's convention at every op at a convention point
and, where a modelled known bug strikes, burn's behaviour there (oracle/burn_conventions.py
BUG_MODELS). When that run gives burn's result at every element the arbiter judged burn-wrong,
within the element's budget, the finding is reproduced: it is that bug's effect, carried through
burn's own conventions, and the record explains it at the statement where the model struck
(`Fault.reproduced`, triage.py). A result the model does not reproduce, a torch-wrong element, or
an element beyond the listed ones leaves the finding as it was: news.
"""

from __future__ import annotations

import math

from difftest.ops import tolerance as tol
from difftest.ops.value_dtypes import dtype_of
from difftest.oracle.burn_conventions import BUG_MODELS, burn_convention_gradient, burn_convention_terms
from difftest.oracle.compare import Mismatch, Verdict
from difftest.oracle.kinks import path_ops
from difftest.program.ir import Leaf

MODELLED = frozenset(m.bug for m in BUG_MODELS.values())


def reproduced(verdict: Verdict, m: Mismatch) -> tuple[tuple[str, str], ...]:
    """(known bug, statement) of each modelled bug struck on the gradient's path, when the float64
    reference with burn's conventions and those bugs' behaviour composed gives burn's result at
    every element of `m` judged burn-wrong; () otherwise (and for anything but a leaf's gradient
    judged burn-wrong)."""
    program = verdict.program
    if m.kind != "grad" or m.verdict != "burn-wrong" or not isinstance(program.by_id().get(m.statement or ""), Leaf):
        return ()
    counts = m.evidence.get("counts", {})
    listed = [e for e in m.evidence.get("elements", []) if e.get("verdict") == "burn-wrong"]
    if not listed or len(listed) != counts.get("burn-wrong") or counts.get("torch-wrong"):
        return ()  # an element not listed cannot be checked, nor PyTorch's error explained: no reproduction
    on_path = {st.id for _, st in path_ops(program, m, verdict.prediction.torch.modules)}
    dtype = dtype_of(program, m.statement or "")
    struck: dict[str, str] = {}
    for e in listed:
        j, b = int(e["element"]), float(e["burn"])
        alt = burn_convention_gradient(program, m.statement or "", m.backward or "", j, with_bugs=True)
        if alt is None:
            return ()
        rb, used = alt
        bugs = {x: name for x, name in used.items() if name in MODELLED and x in on_path}
        if not bugs or not math.isfinite(rb):
            return ()
        terms = burn_convention_terms(program, m.statement or "", m.backward or "", j)
        if not abs(b - rb) <= max(float(e["budget"]), tol.budget(0.0, rb, terms, dtype)):
            return ()
        struck.update(bugs)
    return tuple(sorted((name, x) for x, name in struck.items()))
