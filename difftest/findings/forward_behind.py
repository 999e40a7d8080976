"""Two questions about a localised finding whose numbers are off, each answered by running it.

**Is a float64 error of float32 rounding's size float32 rounding?** A float64 result off by a
relative 1e-7 to 3e-6 (`error_classes.ROUNDING`) is what burn computing through f32 gives: a
precision bug of its own, signed by that class. A wrong formula can be that small on some data
too: an epsilon added after a square root instead of before is eps / sigma of the result, a
rounding's size where sigma is large. Rounding is relative and stays that size on any input;
such a formula error does not. So the one-op program runs again with its differentiable inputs
scaled down (`SCALES`): where burn's result there is off by more than rounding can be, the
finding is a wrong number (`sized`).

**Is a composite's wrong gradient its forward's?** burn differentiates an op it builds from
other ops (a declared composition: layer_norm, the losses, ...) through those ops, so a fault
in how it combines them changes its forward and its gradient alike. Where the float32 forward
stays within its budget, only the gradient fails there, and the one fault made two cases: the
forward's and the gradient's. So a composite's failing gradient whose one-op program, run in
float64, shows the forward wrong by more than rounding (after `sized`) is localised as that
forward (`forward_behind`): signed `forward`, the float64 program its reproducer. Only for
composites: an op with a backward of its own may be wrong in both, two bugs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from difftest.findings.composed import ROOT
from difftest.findings.error_classes import WRONG_NUMBER, mismatch_class
from difftest.findings.localisation import Localisation
from difftest.ops.catalog import CATALOG
from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.ir import Apply, Leaf, Module, OpCall, Program, Transform
from difftest.program.modules import module_kind

Judge = Callable[[Program], "Verdict | None"]

SCALES = (2.0**-6, 2.0**-12)  # exact in every dtype: a scaled input is the same numbers' exponent moved


def _scaled(p: Program, k: float) -> Program:
    """`p` with each leaf that requires grad (the op's differentiable inputs) times `k`."""
    return p.with_statements(tuple(
        replace(s, data=tuple(x * k for x in s.data)) if isinstance(s, Leaf) and s.require_grad else s
        for s in p.statements))


def _same(v: Verdict | None, m: Mismatch) -> Mismatch | None:
    """`v`'s burn-wrong finding of `m`'s kind at `m`'s statement."""
    if v is None:
        return None
    return next((f for f in v.findings if f.kind == m.kind and f.statement == m.statement
                 and f.verdict == "burn-wrong"), None)


def sized(found: Localisation, judge: Judge) -> Localisation:
    """`found`, where it is a float64 error of rounding's size that scaled inputs show larger, with
    the class they show (module docstring); else `found` unchanged."""
    if (found.dtype != "float64" or found.error != "rounding" or found.verdict != "burn-wrong"
            or found.program is None or found.mismatch is None or found.kind not in ("value", "grad")):
        return found
    for k in SCALES:
        v = judge(_scaled(found.program, k))
        f = _same(v, found.mismatch)
        if v is not None and f is not None and (cls := mismatch_class(v, f)) in WRONG_NUMBER:
            return replace(found, error=cls)
    return found


def _composite(p: Program) -> bool:
    """Whether the one-op program's op (statement `y`) is one burn builds from others."""
    table = p.by_id()
    st = table.get(ROOT)
    if isinstance(st, OpCall):
        return st.op in CATALOG and CATALOG[st.op].composed is not None
    handle = table.get(st.module) if isinstance(st, Apply) else None
    while isinstance(handle, Transform):
        handle = table.get(handle.input)
    return isinstance(handle, Module) and module_kind(handle.module).composed is not None


def forward_behind(found: Localisation, judge: Judge) -> Localisation:
    """`found`, a composite's wrong gradient, localised as its forward where the float64 forward
    is wrong by more than rounding (module docstring); else `found` unchanged."""
    if (found.kind != "grad" or found.dtype == "float64" or found.confidence != "fails" or found.inside
            or found.mechanism is not None or found.program is None or not _composite(found.program)):
        return found
    q = replace(found.program, dtype="float64")
    v = judge(q)
    f = next((x for x in v.findings if x.kind == "value" and x.statement == ROOT
              and x.verdict == "burn-wrong"), None) if v is not None else None
    if v is None or f is None:
        return found
    forward = sized(replace(found, kind="value", input=None, dtype="float64", error=mismatch_class(v, f),
                            verdict="burn-wrong", program=q, one_op=v, mismatch=f, params=()), judge)
    return forward if forward.error in WRONG_NUMBER else found
