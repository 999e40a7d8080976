"""A kink between an op's float64 input and a framework's own input of it.

The catalog's domains keep every op's input off its kinks and jumps by KINK_GAP, measured on
the generator's float32 values; kinks.py judges elements whose float64 input is within that gap.
In a coarser dtype the rounding of the ops before can be as large as the gap (a bfloat16 ulp at
4.5 is 0.03): a framework's own input of `round` may then sit at 4.5 or across it while the
float64 input is 4.53, and the two frameworks land on different sides of the jump with inputs
that each agree with float64 within their noise. The one-sided differences around the float64
point see no kink there, so that check alone would call the side a framework took wrong.

The same holds for ties: erf saturates to 1.0 in bfloat16 well before float64, so `max` of
such values has a tie in both frameworks' own inputs that the float64 inputs lack, and each
framework splits the gradient by its own convention at the tie (PyTorch evenly, burn to one
element).

This module finds such ops on an element's path (a kink-tagged op whose domain rejects one
framework's own input, or a point between the float64 input and it), and recomputes the
float64 program with that framework's own inputs at those ops (moved by a constant, so
gradients still flow through them), burn's with burn's declared convention at every op its
own inputs put exactly at a convention point (burn_conventions.py). Each recomputation is also
made with the noise runs' rounding noise (noise.py, the ties of the own inputs kept), which
measures the budget of a result against it: the ops before the kink rounded in the program's
dtype too. A result is then explained when it is the float64 result from its own inputs
within that budget; a result that is neither that nor the reference stays a finding (a wrong
`round` of an input exactly at 4.5 is wrong against round(4.5) in float64 too).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from difftest.ops import tolerance as tol
from difftest.ops.catalog import CATALOG
from difftest.ops.domains import KINK_GAP
from difftest.ops.value_dtypes import value_dtypes
from difftest.oracle.burn_conventions import on_burns_side
from difftest.oracle.compare import Mismatch, Verdict
from difftest.oracle.kinks import domain_attrs, input_values, path_ops
from difftest.oracle.noise import NoiseHooks, program_seed, tie_references
from difftest.oracle.pytorch import run
from difftest.oracle.sites import OpSite
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
    dtypes = value_dtypes(verdict.program)
    for _, st in path_ops(verdict.program, m, verdict.prediction.torch.modules):
        spec = CATALOG.get(st.op)
        if spec is None or "kink" not in spec.domain.tags:
            continue
        base = input_values(ref, st)
        if base is None:
            continue
        for name, obs in (("torch", verdict.torch), ("burn", verdict.burn)):
            own = input_values(obs, st)
            if own is not None and _across(spec.domain.predicate, base, own,
                                           domain_attrs(st, dtypes, verdict.program.dtype)):
                out.setdefault(name, {})[st.id] = own
    return out


class OwnInputs(NoiseHooks):
    """Hooks of a float64 run whose ops at the given statements take a framework's own inputs
    (each input moved by a constant: its gradient still flows). `burn`: burn's convention at
    every op whose inputs (own or float64) sit exactly at a convention point. `seed`: with the
    noise runs' rounding noise, drawn from it, the ties among the own inputs and those of
    `ties` (noise.tie_references) kept; None: no noise."""

    def __init__(self, sites: Sites, *, burn: bool = False, seed: int | None = None,
                 ties: dict[str, list[torch.Tensor]] | None = None) -> None:
        own_ties = {ident: [torch.stack([x, x], dim=-1) for x in xs] for ident, xs in sites.items()}
        super().__init__(0 if seed is None else seed, {**(ties or {}), **own_ties})
        self.sites, self.burn, self.noisy = sites, burn, seed is not None

    def _moved(self, ident: str, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        own = self.sites.get(ident)
        if own is None or len(own) != len(inputs) or any(o.shape != x.shape for o, x in zip(own, inputs)):
            return list(inputs)
        return [x + (o.to(x.dtype) - x.detach()) for o, x in zip(own, inputs)]

    def on_site(self, site: OpSite, inputs: Sequence[torch.Tensor],
                compute: Callable[[Sequence[torch.Tensor]], torch.Tensor]) -> torch.Tensor:
        moved = self._moved(site.id, inputs)
        return super().on_site(site, moved, compute) if self.noisy else compute(moved)

    def uniform_draws(self) -> Callable[[torch.Size], torch.Tensor] | None:
        return super().uniform_draws() if self.noisy else None

    def op(self, st: OpCall, inputs: Sequence[torch.Tensor], attrs: dict[str, Any],
           dtypes: dict[str, str], native: str) -> torch.Tensor:
        if self.burn:
            out = on_burns_side(st, self._moved(st.id, inputs), attrs)
            if out is not None:  # exact there: no rounding noise of its own
                return out
        return super().op(st, inputs, attrs, dtypes, native)


def from_own_inputs(program: Program, sites: Sites, *, burn: bool = False, seed: int | None = None,
                    ties: dict[str, list[torch.Tensor]] | None = None) -> Observation | None:
    """The program in float64 with a framework's own inputs at `sites` (OwnInputs: `burn`'s
    conventions, `seed`'s noise); None: the run failed."""
    try:
        return run(program, "float64", hooks=OwnInputs(sites, burn=burn, seed=seed, ties=ties))
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


@dataclass(frozen=True)
class Own:
    """A framework's element in the float64 run from its own inputs, and the noise measured
    around it (the largest deviation of the noisy runs from it)."""

    value: float
    noise: float


def explained(t: float, b: float, r: float, own: dict[str, Own], noise: float, terms: float, dtype: str) -> bool:
    """Each result is the float64 reference, within the element's budget (its measured `noise`
    and `terms`), or the float64 result from its own framework's inputs at the kinks (`own`, per
    framework) within the budget of the noise measured there; and at least one needed its own
    inputs."""
    def near(x: float, y: float, d: float) -> bool:
        return math.isfinite(x) and math.isfinite(y) and abs(x - y) <= tol.budget(d, y, terms, dtype)

    def near_own(x: float, name: str) -> bool:
        o = own.get(name)
        return o is not None and near(x, o.value, max(noise, o.noise))

    torch_ok = near(t, r, noise) or near_own(t, "torch")
    burn_ok = near(b, r, noise) or near_own(b, "burn")
    return torch_ok and burn_ok and not (near(t, r, noise) and near(b, r, noise))


def own_results(verdict: Verdict, ref: Observation, m: Mismatch, sites: dict[str, Sites],
                tensor: Callable[[Observation | None, Mismatch], TensorObs | None]) -> dict[str, list[Own]]:
    """Per framework with sites, per element of `m`'s tensor, its value in the float64 run from
    that framework's own inputs (burn's with burn's conventions) and the noise measured around
    it by as many noisy runs as arbitration makes (frameworks whose run failed or lacks the
    tensor are left out)."""
    program = verdict.program
    ties = tie_references(program, ref, verdict.torch)
    seed = program_seed(program)
    out = {}
    for name, found in sites.items():
        burn = name == "burn"
        got = tensor(from_own_inputs(program, found, burn=burn), m)
        if got is None:
            continue
        noise = [0.0] * len(got.data)
        for k in range(tol.NOISE_SAMPLES):
            s = tensor(from_own_inputs(program, found, burn=burn, seed=seed + k, ties=ties), m)
            if s is None or len(s.data) != len(got.data):
                continue
            noise = [max(d, abs(x - y)) if math.isfinite(x) and math.isfinite(y) else d
                     for d, x, y in zip(noise, s.data, got.data)]
        out[name] = [Own(v, d) for v, d in zip(got.data, noise)]
    return out
