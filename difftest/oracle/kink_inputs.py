"""A kink between an op's float64 input and a framework's own input of it.

The catalog's domains keep every op's input off its kinks and jumps by KINK_GAP, measured on
the generator's float32 values; kinks.py judges elements whose float64 input is within that gap.
In a coarser dtype the rounding of the ops before can be as large as the gap (a bfloat16 ulp at
4.5 is 0.03): a framework's own input of `round` may then sit at 4.5 or across it while the
float64 input is 4.53, and the two frameworks land on different sides of the jump with inputs
that each agree with float64 within their noise. The one-sided differences around the float64
point see no kink there, so that check alone would call the side a framework took wrong.

This module finds such ops on an element's path (a kink-tagged op whose domain rejects one
framework's own input, or a point between the float64 input and it), and recomputes the
float64 program with that framework's own inputs at those ops (moved by a constant, so
gradients still flow through them). A result is then explained when it is the float64 result
from its own inputs; a result that is neither that nor the reference stays a finding (a wrong
`round` of an input exactly at 4.5 is wrong against round(4.5) in float64 too).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from difftest.ops import tolerance as tol
from difftest.ops.catalog import CATALOG
from difftest.ops.domains import KINK_GAP
from difftest.oracle.compare import Mismatch, Verdict
from difftest.oracle.kinks import input_values, path_ops
from difftest.oracle.pytorch import run
from difftest.oracle.sites import OpSite, SiteHooks
from difftest.program.ir import OpCall, Program
from difftest.program.observation import Observation, TensorObs

MAX_POINTS = 64  # points checked between the float64 input and a framework's own input

Sites = dict[str, list[torch.Tensor]]  # statement id -> a framework's own inputs, float64


def _across(predicate: Callable[[Sequence[torch.Tensor], dict[str, Any]], bool], ref: list[torch.Tensor],
            own: list[torch.Tensor], attrs: dict[str, Any]) -> bool:
    """The domain rejects the framework's own input or a point on the way to it from the float64
    input (points at most KINK_GAP apart: a kink crossed is within the gap of one of them)."""
    if any(a.shape != b.shape for a, b in zip(ref, own)):
        return False
    span = max((float((b - a).abs().max()) for a, b in zip(ref, own) if a.numel()), default=0.0)
    if not span > 0.0:
        return False  # the same input: kinks.py judges that one
    if not math.isfinite(span):
        return False  # a non-finite own input (a wrong value upstream, already its own finding) crosses no kink
    n = min(MAX_POINTS, math.ceil(span / KINK_GAP) + 1)
    for k in range(n, -1, -1):  # the framework's own input first
        t = k / n
        if not predicate([a + t * (b - a) for a, b in zip(ref, own)], attrs):
            return True
    return False


def kinks_on_the_way(verdict: Verdict, ref: Observation, m: Mismatch) -> dict[str, Sites]:
    """Per framework ("torch", "burn"), the kink-tagged ops on the element's path whose domain
    rejects that framework's own input, or a point between the float64 input and it: their
    statement ids and that framework's inputs there. Empty when there is none."""
    out: dict[str, Sites] = {}
    for _, st in path_ops(verdict.program, m, verdict.prediction.torch.modules):
        spec = CATALOG.get(st.op)
        if spec is None or "kink" not in spec.domain.tags:
            continue
        base = input_values(ref, st)
        if base is None:
            continue
        for name, obs in (("torch", verdict.torch), ("burn", verdict.burn)):
            own = input_values(obs, st)
            if own is not None and _across(spec.domain.predicate, base, own, st.attrs):
                out.setdefault(name, {})[st.id] = own
    return out


class OwnInputs(SiteHooks):
    """Hooks of a float64 run whose ops at the given statements take a framework's own inputs
    (each input moved by a constant: its gradient still flows)."""

    def __init__(self, sites: Sites) -> None:
        self.sites = sites

    def on_site(self, site: OpSite, inputs: Sequence[torch.Tensor],
                compute: Callable[[Sequence[torch.Tensor]], torch.Tensor]) -> torch.Tensor:
        own = self.sites.get(site.id)
        if own is None or len(own) != len(inputs) or any(o.shape != x.shape for o, x in zip(own, inputs)):
            return compute(inputs)
        return compute([x + (o.to(x.dtype) - x.detach()) for o, x in zip(own, inputs)])


def from_own_inputs(program: Program, sites: Sites) -> Observation | None:
    """The program in float64 with a framework's own inputs at `sites` (None: the run failed)."""
    try:
        return run(program, "float64", hooks=OwnInputs(sites))
    except Exception:  # a failed recomputation explains nothing: the element stays judged
        return None


def describe(program: Program, sites: dict[str, Sites]) -> str:
    """The ops whose inputs the frameworks took across a kink, for a reason."""
    by_id = program.by_id()
    index = {st.id: i for i, st in enumerate(program.statements)}
    parts = []
    for name, found in sites.items():
        for ident in found:
            st = by_id[ident]
            if isinstance(st, OpCall):
                parts.append(f"{st.op} at statement {index[ident]} ({ident}): {name}'s own input lies at or "
                             "across its kink from the float64 input")
    return "; ".join(parts)


def explained(t: float, b: float, r: float, own: dict[str, float], noise: float, terms: float, dtype: str) -> bool:
    """Each result is the float64 reference, or the float64 result from its own framework's
    inputs at the kinks (`own`, per framework), within the element's budget (its measured
    `noise` and `terms`) at that value; and at least one needed its own inputs."""
    def near(x: float, y: float) -> bool:
        return math.isfinite(x) and math.isfinite(y) and abs(x - y) <= tol.budget(noise, y, terms, dtype)

    torch_own, burn_own = own.get("torch", math.nan), own.get("burn", math.nan)
    torch_ok = near(t, r) or near(t, torch_own)
    burn_ok = near(b, r) or near(b, burn_own)
    return torch_ok and burn_ok and not (near(t, r) and near(b, r))


def own_results(verdict: Verdict, m: Mismatch, sites: dict[str, Sites],
                tensor: Callable[[Observation | None, Mismatch], TensorObs | None]) -> dict[str, TensorObs]:
    """Per framework with sites, the element tensor of `m` in the float64 run from its own
    inputs (frameworks whose run failed or lacks the tensor are left out)."""
    out = {}
    for name, found in sites.items():
        got = tensor(from_own_inputs(verdict.program, found), m)
        if got is not None:
            out[name] = got
    return out
