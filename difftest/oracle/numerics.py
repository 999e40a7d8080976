"""Numeric arbitration: when burn and PyTorch disagree on elements of a value or a gradient, a
float64 PyTorch run and the measured rounding noise of each element decide who is wrong.

Every element that failed the screen (tolerance.py) is judged on its own, against the float64
reference `r` and the budget from its own measured noise `D` (noise.py):

* both float32 results within budget -> `agreement` (float32 noise; a dismissal, with evidence);
  the budget grows with the measured noise, so a mismatch whose every element is within it at
  zero noise (a gradient's terms often allow it) is agreement without the noise runs, and the
  noise runs are made one at a time, until every element is agreement or all are made (the
  noise in the evidence is the largest deviation of the runs made);
* only burn outside -> `burn-wrong`; only PyTorch outside -> `torch-wrong`;
* both outside: the one more than SLACK times farther is wrong; comparable -> `agreement`
  (the computation is noisier than the model measured; a dismissal, with evidence);
* non-finite: burn non-finite where PyTorch and float64 are finite -> `burn-wrong`, the reverse
  `torch-wrong`;
* `ill-conditioned` only for an element that a kink reaches: an op on its path has an input at or
  near a kink of its own (its domain in the catalog is tagged "kink" and rejects the float64
  input), *and* a one-sided finite-difference check of this very element sees the kink (its
  left and right differences disagree), *and* both results lie between the one-sided limits
  (a subgradient, a side of a jump). An element the kink does not reach, or a result outside
  what either side gives, is judged like any other (kinks.py). In a coarse dtype a framework's
  own input of such an op can sit at or across the kink while the float64 input keeps its gap:
  a result that is the float64 program recomputed from its own framework's inputs there (and
  the other's, or the reference) is `ill-conditioned` too (kink_inputs.py).
* equal non-finite results (which pass the screen) are checked against float64 too: the same
  non-finite result or a float64 result beyond the dtype's range -> `agreement`; a finite
  float64 result within the range -> `ill-conditioned` (an intermediate value overflows in
  both): counted dismissals, never silent (judge_nonfinite).

For a gradient of a leaf judged wrong, a float64 central difference of L = sum(root) with respect
to that very element runs as evidence. It differentiates what autodiff differentiates: every value
that does not carry the leaf's gradient key in the model's prediction (values behind detach,
without_autodiff, no_grad / inference_mode regions, valid() modules) is held constant at its
unperturbed value. When it agrees with burn and not with the float64 run (which shares
PyTorch's gradient formulas), the verdict is `torch-wrong`; it never turns a wrong gradient into
agreement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from difftest.ops import tolerance as tol
from difftest.ops.value_dtypes import dtype_of
from difftest.oracle import kink_inputs as ki
from difftest.oracle.agreed_points import agreed_point
from difftest.oracle.compare import Mismatch, Verdict, equal_nonfinite
from difftest.oracle.finite_diff import finite_difference
from difftest.oracle.kinks import at_kink, near_kink
from difftest.oracle.noise import feeds_on_read, magnitude_run, noisy_runs
from difftest.oracle.pytorch import run as run_torch
from difftest.program.dtypes import MAX
from difftest.program.ir import Grad, Program
from difftest.program.observation import Observation, TensorObs

SLACK = 4.0
SEVERITY = {"burn-wrong": 3, "torch-wrong": 2, "ill-conditioned": 1, "agreement": 0}
MAX_LISTED = 16  # elements listed in a mismatch's evidence
UNMEASURED = ("none: every element is within its budget at zero noise, which the measured noise could only "
              "widen (noise and budget are those of zero noise)")


def _tensor(obs: Observation | None, m: Mismatch) -> TensorObs | None:
    if obs is None:
        return None
    if m.kind == "value":
        v = obs.value(m.statement or "")
        return v.value if v else None
    return obs.grad(m.backward, m.statement or "")


@dataclass(frozen=True)
class Judgement:
    element: int
    verdict: str
    reason: str
    torch: float
    burn: float
    float64: float
    noise: float
    budget: float
    terms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"element": self.element, "verdict": self.verdict, "reason": self.reason, "torch": self.torch,
                "burn": self.burn, "float64": self.float64, "noise": self.noise, "terms": self.terms,
                "budget": self.budget}


def _same(x: float, r: float, budget: float) -> bool:
    if not math.isfinite(r):
        return x == r or (math.isnan(x) and math.isnan(r))
    return math.isfinite(x) and abs(x - r) <= budget


def judge(t: float, b: float, r: float, noise: float, kink: str | None = None,
          terms: float = 0.0, dtype: str = "float32") -> tuple[str, str]:
    """The verdict and its reason for one element: torch and burn results (in the program's
    `dtype`), the float64 reference, the measured noise of this element, whether a kink is on
    its path, and (for a gradient) the magnitude of the terms it sums."""
    budget = tol.budget(noise, r, terms, dtype)
    b_ok, t_ok = _same(b, r, budget), _same(t, r, budget)
    if b_ok and t_ok:
        return "agreement", f"both within the measured {dtype} noise of the float64 result"
    if kink is not None:
        return "ill-conditioned", kink
    if t_ok:
        if not math.isfinite(b):
            return "burn-wrong", "burn is not finite where PyTorch and float64 are"
        return "burn-wrong", "burn is outside the noise budget, PyTorch within it"
    if b_ok:
        if not math.isfinite(t):
            return "torch-wrong", "PyTorch is not finite where burn and float64 are"
        return "torch-wrong", "PyTorch is outside the noise budget, burn within it"
    if not (math.isfinite(b) and math.isfinite(t)):
        if not math.isfinite(b) and math.isfinite(r):
            return "burn-wrong", "burn is not finite where float64 is"
        return "torch-wrong", "PyTorch is not finite (or differs from a non-finite float64 result)"
    eb, et = abs(b - r), abs(t - r)
    if eb > SLACK * et + budget:
        return "burn-wrong", "both outside the noise budget, burn far more"
    if et > SLACK * eb + budget:
        return "torch-wrong", "both outside the noise budget, PyTorch far more"
    return "agreement", "both off the float64 result by comparable amounts (noisier than measured)"


def judge_nonfinite(x: float, r: float, dtype: str) -> tuple[str, str]:
    """Both frameworks gave the same non-finite `x`; the float64 result `r` says whether that
    is the computation's own result or an intermediate overflow of `dtype` in both."""
    if not math.isfinite(r):
        same = x == r or (math.isnan(x) and math.isnan(r))
        return "agreement", f"both {x}, " + ("as float64" if same else f"float64 {r}")
    if abs(r) > MAX[dtype]:
        return "agreement", f"both {x}: the float64 result is beyond the {dtype} range"
    return ("ill-conditioned", f"both {x} where float64 is finite and within the {dtype} range: "
            f"an intermediate value overflows {dtype} in both")


@dataclass
class TorchRuns:
    """The float64 PyTorch runs arbitration makes of one program (the reference, the noise runs,
    the magnitude run), each made once, on first use: a program judged on several burn backends
    (check.check_on) shares them, as it shares its PyTorch run. Each run depends on the program
    alone (the noise runs are seeded by it), so sharing changes no verdict."""

    program: Program
    # PyTorch's run of the program in its own dtype (the check's; the same for every backend),
    # whose exact ties at tie-convention ops the noise runs keep (noise.tie_references)
    observed: Observation | None = None
    _reference: Observation | None = None
    _noisy: list[Observation] = field(default_factory=list)
    _noisy_upto: int = 0  # the statements the noise runs made so far cover
    _magnitudes: Observation | None = None
    _magnitudes_upto: int = 0

    def reference(self) -> Observation:
        if self._reference is None:
            self._reference = run_torch(self.program, "float64")
        return self._reference

    def noisy(self, count: int, upto: int | None = None) -> list[Observation]:
        """The first `count` noise runs (noisy_runs: run k is the same whichever others are
        made), covering at least the first `upto` statements (None: all of them). A run of a
        prefix gives its statements what a run of the whole program does (noisy_runs), so
        runs made for a shorter prefix are made again only when a longer one is asked for."""
        n = len(self.program) if upto is None else upto
        if n > self._noisy_upto:
            self._noisy, self._noisy_upto = [], n
        if len(self._noisy) < count:
            # the magnitude run gives a gradient read's terms, whose error the noise runs carry
            # into the values computed from it (noise.read_errors)
            fed = feeds_on_read(self.program, self._noisy_upto)
            self._noisy += noisy_runs(self.program, count, len(self._noisy), self.reference(), self.observed,
                                      upto=self._noisy_upto,
                                      magnitudes=self.magnitudes(self._noisy_upto) if fed else None)
        return self._noisy[:count]

    def magnitudes(self, upto: int | None = None) -> Observation:
        """The magnitude run (noise.magnitude_run), covering at least the first `upto` statements."""
        n = len(self.program) if upto is None else upto
        if self._magnitudes is None or n > self._magnitudes_upto:
            self._magnitudes, self._magnitudes_upto = magnitude_run(self.program, n), n
        return self._magnitudes


def arbitrate(verdict: Verdict, numeric: list[Mismatch], runs: TorchRuns | None = None) -> None:
    """Judge every failing element of each numeric mismatch; set each mismatch's verdict (the
    most severe of its elements) and evidence in place. `runs`: the program's float64 runs,
    when other verdicts of the same program share them."""
    program = verdict.program
    runs = runs if runs is not None and runs.program is program else TorchRuns(program)
    if runs.observed is None:
        runs.observed = verdict.torch
    ref = runs.reference()
    verdict.reference = ref
    noisy: list[Observation] = []  # the noise runs made so far (noisy_runs, in order)
    magnitudes: Observation | None = None
    upto = _statements_judged(program, numeric)  # the noise and magnitude runs stop after them
    for k, m in enumerate(numeric):
        rt = _tensor(ref, m)
        tt, bt = _tensor(verdict.torch, m), _tensor(verdict.burn, m)
        if rt is None or tt is None or bt is None or len(rt.data) != len(bt.data):
            numeric[k] = replace(m, verdict="burn-wrong", detail=m.detail + "; no float64 reference",
                                 evidence={"reason": "the float64 run has no such tensor"})
            continue
        elements = m.elements or ((m.element,) if m.element is not None else ())
        dtype = dtype_of(program, m.statement or "")  # the value's own (a gradient: its value's)
        if all(equal_nonfinite(tt.data[j], bt.data[j]) for j in elements):
            # nothing to measure noise for: float64 alone decides (no noise or magnitude runs)
            numeric[k] = _summarise(m, [Judgement(j, *judge_nonfinite(tt.data[j], rt.data[j], dtype), tt.data[j],
                                                  bt.data[j], rt.data[j], 0.0, 0.0) for j in elements], {})
            continue
        mt = None
        # a gradient, or a `grad` read of one (its value is that gradient: the same terms bound it)
        if m.kind == "grad" or isinstance(program.by_id().get(m.statement or ""), Grad):
            if magnitudes is None:
                magnitudes = runs.magnitudes(upto)
            mt = _tensor(magnitudes, m)
            mt = mt if mt is not None and len(mt.data) == len(rt.data) else None
        if agree_without_noise(tt, bt, rt, mt, elements, dtype):
            numeric[k] = _summarise(m, [_unmeasured(j, tt, bt, rt, mt, dtype) for j in elements],
                                    {"noise_runs": UNMEASURED})
            continue
        # the noise runs one at a time, until every element is agreement (more runs could only
        # widen its budget: the same verdicts) or all NOISE_SAMPLES are made
        while True:
            samples = [s for s in (_tensor(o, m) for o in noisy) if s is not None and len(s.data) == len(rt.data)]
            if len(noisy) >= tol.NOISE_SAMPLES or (noisy and _agree(tt, bt, rt, mt, samples, elements, dtype)):
                break
            noisy = runs.noisy(len(noisy) + 1, upto)
        # a noise run that raised measures nothing: say so, never let it pass as zero noise
        failed = [o.error for o in noisy if o.error is not None and _tensor(o, m) is None]
        kink = near_kink(program, ref, m, verdict.prediction.torch.modules)
        agreed = agreed_point(verdict, m) if kink is not None else None
        judged: list[Judgement] = []
        kink_sides: list[dict[str, Any]] = []
        crossed: dict[str, Any] | None = None  # kinks between float64's and a framework's own inputs
        own: dict[str, list[ki.Own]] = {}
        for j in elements:
            r = rt.data[j]
            if equal_nonfinite(tt.data[j], bt.data[j]):
                judged.append(Judgement(j, *judge_nonfinite(tt.data[j], r, dtype), tt.data[j], bt.data[j], r, 0.0, 0.0))
                continue
            devs = [abs(s.data[j] - r) for s in samples if math.isfinite(s.data[j]) and math.isfinite(r)]
            d = max(devs, default=0.0)
            terms = _terms(mt, j)
            kind, reason = judge(tt.data[j], bt.data[j], r, d, None, terms, dtype)
            if agreed is not None and kind in ("burn-wrong", "torch-wrong"):
                reason += f"; {agreed}"  # no subgradient left to choose (agreed_points.py)
            elif kink is not None and kind in ("burn-wrong", "torch-wrong"):
                kind, reason, sides = at_kink(verdict, m, j, tt.data[j], bt.data[j], r,
                                              tol.budget(d, r, terms, dtype), kink, (kind, reason))
                if sides:
                    kink_sides.append({"element": j, **sides})
            if kind in ("burn-wrong", "torch-wrong"):
                if crossed is None:
                    crossed = ki.kinks_on_the_way(verdict, ref, m)
                    own = ki.own_results(verdict, ref, m, crossed, _tensor) if crossed else {}
                mine = {name: o[j] for name, o in own.items() if j < len(o)}
                if crossed and ki.explained(tt.data[j], bt.data[j], r, mine, d, terms, dtype):
                    kind = "ill-conditioned"
                    reason = (f"{ki.describe(program, crossed)}; "
                              "each result is the float64 result from its own framework's inputs there ("
                              + ", ".join(f"{k} {v.value:.6g}, noise {v.noise:.2g}" for k, v in mine.items())
                              + ") or the reference")
            if not samples and failed:
                reason += f" (no noise run measured it: {failed[0].kind}: {failed[0].message[:200]})"
            judged.append(Judgement(j, kind, reason, tt.data[j], bt.data[j], r, d,
                                    tol.budget(d, r, terms, dtype), terms))
        evidence: dict[str, Any] = {}
        if kink_sides:
            evidence["kink"] = {"where": kink, "elements": kink_sides[:MAX_LISTED]}
        if failed:
            evidence["noise_runs_failed"] = (f"{len(failed)} of {len(noisy)}: {failed[0].kind}: "
                                             f"{failed[0].message[:500]}")
        if m.kind == "grad" and any(x.verdict in ("burn-wrong", "torch-wrong") for x in judged):
            judged, fd = _finite_difference_check(verdict, m, judged)
            if fd is not None:
                evidence["finite_difference"] = fd
        numeric[k] = _summarise(m, judged, evidence)


def _statements_judged(program: Program, numeric: list[Mismatch]) -> int:
    """How many of the program's first statements hold every tensor of the `numeric`
    mismatches: the value's statement, or the backward of a gradient (all of them when one is
    not found)."""
    index = {s.id: i for i, s in enumerate(program.statements)}
    last = 0
    for m in numeric:
        ident = m.backward if m.kind == "grad" else m.statement
        if ident not in index:
            return len(program)
        last = max(last, index[ident] + 1)
    return last


def _terms(mt: TensorObs | None, j: int) -> float:
    return abs(mt.data[j]) if mt is not None and math.isfinite(mt.data[j]) else 0.0


def agree_without_noise(tt: TensorObs, bt: TensorObs, rt: TensorObs, mt: TensorObs | None,
                         elements: tuple[int, ...], dtype: str) -> bool:
    """Whether every element is `agreement` before any noise is measured (`_agree` with no
    noise run): both results within the budget of a zero deviation (the reference's ulps, the
    terms' ulps, the floor)."""
    return _agree(tt, bt, rt, mt, [], elements, dtype)


def _agree(tt: TensorObs, bt: TensorObs, rt: TensorObs, mt: TensorObs | None, samples: list[TensorObs],
           elements: tuple[int, ...], dtype: str) -> bool:
    """Whether every element that is not the same non-finite value in both is `agreement`
    with the deviation `samples` (noise runs) measure: both results within its budget. The
    budget only grows with the deviation, and `judge` gives agreement whenever both are within
    it, before any other test, so further noise runs could not change these verdicts."""
    for j in elements:
        t, b, r = tt.data[j], bt.data[j], rt.data[j]
        if equal_nonfinite(t, b):
            continue
        d = max((abs(s.data[j] - r) for s in samples if math.isfinite(s.data[j]) and math.isfinite(r)), default=0.0)
        budget = tol.budget(d, r, _terms(mt, j), dtype)
        if not (_same(t, r, budget) and _same(b, r, budget)):
            return False
    return True


def _unmeasured(j: int, tt: TensorObs, bt: TensorObs, rt: TensorObs, mt: TensorObs | None,
                dtype: str) -> Judgement:
    """The judgement of an element of a mismatch that `agree_without_noise` settled: `judge`'s
    at zero noise (so its reason, which the campaign's dismissal counts are keyed by, is the one
    the measured noise would have given), with noise 0 and the budget without it; the
    mismatch's evidence says no noise was measured (UNMEASURED)."""
    t, b, r = tt.data[j], bt.data[j], rt.data[j]
    if equal_nonfinite(t, b):
        return Judgement(j, *judge_nonfinite(t, r, dtype), t, b, r, 0.0, 0.0)
    terms = _terms(mt, j)
    kind, reason = judge(t, b, r, 0.0, None, terms, dtype)
    assert kind == "agreement", (kind, reason)
    return Judgement(j, kind, reason, t, b, r, 0.0, tol.budget(0.0, r, terms, dtype), terms)


def _summarise(m: Mismatch, judged: list[Judgement], evidence: dict[str, Any]) -> Mismatch:
    if not judged:
        return replace(m, verdict="burn-wrong", evidence={"reason": "no element to judge"})
    worst = max(judged, key=lambda x: (SEVERITY[x.verdict], abs(x.burn - x.float64)
                                       if math.isfinite(x.burn - x.float64) else math.inf))
    counts: dict[str, int] = {}
    for x in judged:
        counts[x.verdict] = counts.get(x.verdict, 0) + 1
    listed = sorted(judged, key=lambda x: -SEVERITY[x.verdict])[:MAX_LISTED]
    evidence = {
        "reason": worst.reason,
        "torch": worst.torch, "burn": worst.burn, "float64": worst.float64,
        "burn_error": abs(worst.burn - worst.float64), "torch_error": abs(worst.torch - worst.float64),
        "noise": worst.noise, "budget": worst.budget,
        "counts": counts, "elements": [x.to_dict() for x in listed],
        **evidence,
    }
    detail = (f"{m.detail}; element {worst.element}: float64 {worst.float64!r}, measured noise "
              f"{worst.noise:.3g}, budget {worst.budget:.3g} ({worst.reason}); "
              + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())))
    return replace(m, verdict=worst.verdict, detail=detail, evidence=evidence, element=worst.element,
                   pair=(worst.torch, worst.burn))


def _finite_difference_check(verdict: Verdict, m: Mismatch,
                             judged: list[Judgement]) -> tuple[list[Judgement], dict[str, Any] | None]:
    wrong = [x for x in judged if x.verdict in ("burn-wrong", "torch-wrong")]
    worst = max(wrong, key=lambda x: abs(x.burn - x.torch) if math.isfinite(x.burn - x.torch) else math.inf)
    fd = finite_difference(verdict, m.statement or "", m.backward or "", worst.element)
    if fd is None:
        return judged, None
    est = fd["estimates"][-1]
    gap = abs(worst.burn - worst.float64)
    fd["burn"], fd["torch"], fd["float64"] = worst.burn, worst.torch, worst.float64
    # the estimate must resolve the gap: a float64 loss of 270 rounds by 6e-14, which over a
    # step of 3e-5 moves an estimate by 2e-9, the whole gap of an f32-rounded gradient of 0.26
    if not fd["smooth"] or not math.isfinite(gap) or gap == 0.0 or fd["rounding"] > 0.1 * gap:
        fd["conclusion"] = "inconclusive"
        return judged, fd
    near_burn = abs(est - worst.burn) <= 0.1 * gap
    near_ref = abs(est - worst.float64) <= 0.1 * gap
    if near_burn and not near_ref:
        fd["conclusion"] = "agrees with burn: PyTorch's gradient formula (shared by its float64 run) is off"
        flipped = [replace(x, verdict="torch-wrong", reason=fd["conclusion"]) if x.verdict == "burn-wrong" else x
                   for x in judged]
        return flipped, fd
    fd["conclusion"] = "agrees with the float64 reference" if near_ref else "agrees with neither"
    return judged, fd


def max_relative_error(verdict: Verdict) -> float:
    """Largest |burn - torch| / max(|burn|, |torch|, 1) over values and gradients, for
    Hypothesis `target()` when hunting for numeric trouble."""
    worst = 0.0

    def pairs(a: TensorObs, b: TensorObs) -> None:
        nonlocal worst
        for x, y in zip(a.data, b.data):
            if math.isfinite(x) and math.isfinite(y):
                worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1.0))

    tvals = {v.id: v.value for v in verdict.torch.values}
    for v in verdict.burn.values:
        if v.id in tvals and tvals[v.id].shape == v.value.shape:
            pairs(tvals[v.id], v.value)
    for tb, bb in zip(verdict.torch.backwards, verdict.burn.backwards):
        for k, g in bb.grads.items():
            t = tb.grads.get(k)
            if g is not None and t is not None and t.shape == g.shape:
                pairs(t, g)
    return worst
