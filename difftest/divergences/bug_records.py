"""The known-bug record type (known_bugs.py holds the records): what a finding says as a record
reads it (`Fault`), what a bug does at its site (`Effect`), the record (`KnownBug`), and the
float32-rounding check several records share."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from difftest.divergences.host import HostCondition
from difftest.divergences.knowledge import MEASURED_ON, Knowledge, Side
from difftest.program.dtypes import to_f32
from difftest.program.ir import Program, Statement

Trigger = Callable[[Statement, Sequence[Statement]], bool]  # (statement, the statements before it)
F32_ULP = 2.0**-24


@dataclass(frozen=True)
class DtypeSite:
    """A site that depends on the dtype the statement runs in (a kernel whose vector width is
    counted in bytes): `holds(statement, prior, dtype)`. Called as a plain Trigger, it holds
    where it holds in any of `dtypes`."""

    holds: Callable[[Statement, Sequence[Statement], str], bool]
    dtypes: tuple[str, ...]

    def __call__(self, st: Statement, prior: Sequence[Statement]) -> bool:
        return any(self.holds(st, prior, d) for d in self.dtypes)


@dataclass(frozen=True)
class Fault:
    """What one finding says, as a known-bug record reads it: its mismatch `kind`, the statement
    it is localised to (`site`, in `program`), the dtype the site runs in, and the error: the
    outcome message, or (reference, observed) pairs at the failing elements with the inputs whose
    gradient is wrong and the site's input data (the one-op program's leaves, by input position),
    and the burn backend it was observed on."""

    kind: str
    site: str | None
    program: Program
    dtype: str
    framework: str | None = None
    message: str = ""
    input: tuple[int, ...] | None = None  # the inputs whose gradient is wrong
    pairs: tuple[tuple[float, float], ...] = ()
    elements: tuple[int, ...] = ()
    inputs: tuple[tuple[float, ...], ...] = ()
    observed: dict[str, object] = field(default_factory=dict, hash=False)  # flags mismatches: observed flags
    backend: str = "flex"  # the burn backend the finding was observed on (exec/backends.py names)
    # where the finding is matched as the program shows it: the size of the terms that may cancel at
    # each failing element (the arbiter's magnitude run), aligned with `pairs`; empty elsewhere
    terms: tuple[float, ...] = ()
    # another reading of the same finding, explained if this one is not: a value computed from a
    # gradient read is that backward's gradient as shown, or the value of the ops after the read
    alternative: Fault | None = field(default=None, compare=False, hash=False)
    # the arbiter's verdict on a value or gradient finding (burn-wrong, torch-wrong); "" for the
    # other kinds. A torch-wrong finding is PyTorch's bug: only a record of PyTorch's explains it
    verdict: str = ""
    # at a composite's own site (its one-op program): whether burn computes it as its declared
    # parts and PyTorch's run of them agrees (findings/composed.py as_composed); None elsewhere
    as_composed: bool | None = None
    # (known bug, statement): modelled bugs whose behaviour, composed with burn's conventions into
    # the float64 reference, gives burn's result at every failing element (findings/reproduced.py)
    reproduced: tuple[tuple[str, str], ...] = ()


ErrorCheck = Callable[[Fault], bool]


@dataclass(frozen=True)
class Effect:
    """What a known bug does at its site: the mismatch kinds it causes, a regular expression its
    outcome message matches, the input whose gradient it makes wrong, a check of the error
    (`error`), and whether it shows downstream of the site too (a value computed from it, a
    backward whose root depends on it)."""

    kinds: tuple[str, ...]
    message: str | None = None
    input: tuple[int, ...] | None = None
    error: ErrorCheck | None = None
    downstream: bool = False


@dataclass(frozen=True)
class KnownBug:
    knowledge: Knowledge
    # the generator does not draw statements this holds for (None: it does not avoid the bug)
    triggers: Trigger | None
    dtypes: tuple[str, ...] | None = None  # the dtypes it shows in, of the site's inputs (None: every dtype)
    site: Trigger | None = None  # where it strikes; None: `triggers`
    effect: Effect | None = None  # what it does there; None: never matched (it cannot explain a finding)
    # a backward-only bug: the generator avoids the site only where one of these inputs is
    # tracked and the op is recorded (elsewhere no backward passes through it, so the op stays
    # under test); None: wherever the trigger holds
    backward_through: tuple[int, ...] | None = None
    # the burn backends it shows on (None: every backend): where `explains` may match it
    backends: tuple[str, ...] | None = None
    # the machines it shows on (None: every machine), for a kernel picked by the CPU's features
    host: HostCondition | None = None

    def __post_init__(self) -> None:
        if self.backends is not None and (not self.backends or isinstance(self.backends, str)):
            raise ValueError(f"{self.name}: backends must be None (every backend) or a non-empty tuple of names")

    @property
    def name(self) -> str:
        return self.knowledge.name

    @property
    def framework(self) -> Side:
        """Whose bug it is: burn's, or PyTorch's (a record of PyTorch's explains only findings
        the arbiter judged torch-wrong; a record of burn's never explains those)."""
        return self.knowledge.framework

    def shows_on(self, backend: str) -> bool:
        """Whether the bug is declared to show on the burn backend `backend`."""
        return self.backends is None or backend in self.backends

    def shows_here(self) -> bool:
        """Whether the bug can show on this machine (its `host` condition holds)."""
        return self.host is None or self.host.holds()

    def strikes(self, st: Statement, prior: Sequence[Statement], dtype: str) -> bool:
        if self.dtypes is not None and dtype not in self.dtypes:
            return False
        site = self.site or self.triggers
        if isinstance(site, DtypeSite):
            return site.holds(st, prior, dtype)
        return site is not None and site(st, prior)


def bug_record(name: str, reason: str, evidence: tuple[str, ...], triggers: Trigger | None,
         dtypes: tuple[str, ...] | None = None, *, site: Trigger | None = None,
         effect: Effect | None = None, backward_through: tuple[int, ...] | None = None,
         burn_versions: str = MEASURED_ON, backends: tuple[str, ...] | None = None,
         framework: Side = "burn", host: HostCondition | None = None) -> KnownBug:
    return KnownBug(Knowledge(name, "known-bug", framework, reason, evidence, burn_versions), triggers, dtypes, site,
                    effect, backward_through, backends, host)



def within_f32_rounding(f: Fault) -> bool:
    """Every failing element is off by float32 rounding of the computation, no more: at most
    64 float32 ulps of the element's reference, of the terms that may cancel in it where the
    program shows the finding (`Fault.terms`: a gradient of 0.01 summed from terms of 24 carries
    their rounding), or of the largest reference of the tensor where the element cancels to less
    (a float64 program that rounds through f32 somewhere)."""
    if not f.pairs:
        return False
    scale = max((abs(r) for r, _ in f.pairs if math.isfinite(r)), default=0.0)
    for (r, b), t in zip(f.pairs, fault_terms(f), strict=True):
        if not (math.isfinite(r) and math.isfinite(b)):
            return False
        if abs(b - r) > 64 * F32_ULP * max(abs(r), t, scale * 1e-3):
            return False
    return True


def within_f32_rounding_of_its_tensor(f: Fault) -> bool:
    """Every failing element is off by at most 64 float32 ulps of the largest reference among
    them, or of its terms where known: an error made upstream in f32 (an optimizer step's
    parameters) carried into values computed from them, where it is an absolute error that a
    difference of such values (a loss's `y - target` near 0) does not shrink, and at the step
    itself an error of the size of what the update cancels (`Fault.terms`: the parameter before
    it, error_classes.step_terms)."""
    if not f.pairs:
        return False
    scale = max((abs(r) for r, _ in f.pairs if math.isfinite(r)), default=0.0)
    return all(math.isfinite(r) and math.isfinite(b) and abs(b - r) <= 64 * F32_ULP * max(abs(r), scale, t)
               for (r, b), t in zip(f.pairs, fault_terms(f), strict=True))


def fault_terms(f: Fault) -> tuple[float, ...]:
    """The size of the terms at each failing element: `Fault.terms` where they are known and
    finite, else 0 (the element's reference and the tensor's scale bound it alone)."""
    if len(f.terms) == len(f.pairs) and all(math.isfinite(t) for t in f.terms):
        return f.terms
    return tuple(0.0 for _ in f.pairs)


def hard_sigmoid_in_f32(f: Fault) -> bool:
    """A value at hard_sigmoid itself (its one-op program's input known) is what burn-backend's
    default computes from it: clamp(f32(x) * f32(1/6) + 0.5, 0, 1) in float32, each step rounded,
    cast back; to 2 units of 2^-24 (the result is at most 1: an FMA or another order of the two
    steps stays within that). A second fault of the forward, however small, is not within that.
    A gradient, or a value seen downstream of the site, `within_f32_rounding`, or off by an error
    that is absolute whatever x (at most 4 units of f32 rounding of 1: |x| < 3 where the result
    is not clamped), scaled by what the ops after it multiply it with, which the largest
    reference (or terms) among the failing elements stands for (a gradient read of
    mul(hard_sigmoid(x), w) is the result itself; hard_sigmoid(-2.98138) = 0.0031036, 2e-8 off).
    At hard_sigmoid's own one-op program, where its composition applies, the finding is this bug
    exactly when burn computes it as the declared float32 parts (`Fault.as_composed`)."""
    if not f.pairs:
        return False
    st = f.program.by_id().get(f.site or "")
    if getattr(st, "op", None) == "hard_sigmoid" and f.as_composed is not None:
        # at hard_sigmoid itself, where its composition applies: exactly burn-backend's default,
        # the declared parts in float32 (burn computes it as they do, PyTorch's run of them agrees)
        return f.as_composed
    if f.kind == "value" and getattr(st, "op", None) == "hard_sigmoid" and f.inputs:
        xs = f.inputs[0]
        if f.elements and len(f.elements) == len(f.pairs) and max(f.elements) < len(xs):
            return all(math.isfinite(b) and abs(b - _hard_sigmoid_f32(xs[e])) <= 2 * F32_ULP
                       for e, (_, b) in zip(f.elements, f.pairs, strict=True))
        # which input each failing element is, unknown: an absolute error of at most 4 units of
        # f32 rounding of the sum's terms, 0.5 + max |x| / 6
        bound = 4 * F32_ULP * (0.5 + max((abs(v) for v in xs if math.isfinite(v)), default=0.0) / 6)
        if within_f32_rounding(f) or all(math.isfinite(r) and math.isfinite(b) and abs(b - r) <= bound
                                         for r, b in f.pairs):
            return True
    if within_f32_rounding(f):
        return True
    scale = max((abs(r) for r, _ in f.pairs if math.isfinite(r)), default=0.0)
    return all(math.isfinite(r) and math.isfinite(b) and abs(b - r) <= 4 * F32_ULP * max(scale, t)
               for (r, b), t in zip(f.pairs, fault_terms(f), strict=True))


def _hard_sigmoid_f32(x: float) -> float:
    """burn-backend's default hard_sigmoid(x, 1/6, 1/2), computed as it does: in float32."""
    if math.isnan(x):
        return x
    if abs(x) > 3.0e38:  # beyond float32's range: the cast saturates to an infinity, clamped
        return 0.0 if x < 0 else 1.0
    y = to_f32(to_f32(to_f32(x) * to_f32(1.0 / 6.0)) + 0.5)  # each product and sum correctly rounded
    return min(max(y, 0.0), 1.0)


F64_ULP = 2.0**-53


def f32_reciprocal(f: Fault) -> bool:
    """At a div_scalar itself (its one-op program: the leaf's gradient is the cotangent over s),
    burn multiplies the cotangent by 1 / s computed in f32 (burn-autodiff's DivScalar backward):
    every element is the reference times s * f32(1 / f32(s)), to the f64 rounding of the two
    products (a few units of 2^-53). A second fault of div_scalar's gradient, however small, is
    not within that. Elsewhere (var, softplus: ops burn composes with a div_scalar among others;
    a gradient downstream of the site, which sums other paths) `within_f32_rounding`."""
    st = f.program.by_id().get(f.site or "")
    if f.kind != "grad" or not f.pairs or getattr(st, "op", None) != "div_scalar":
        return within_f32_rounding(f)
    s = float(st.attrs["scalar"])  # type: ignore[union-attr]
    try:
        factor = s * to_f32(1.0 / to_f32(s))  # f64 division then rounding: f32 division, correctly rounded
    except (ValueError, ZeroDivisionError):  # beyond float32's range: no f32 reciprocal to model
        return within_f32_rounding(f)
    return all(math.isfinite(r) and math.isfinite(b) and abs(b - r * factor) <= 8 * F64_ULP * abs(r)
               for r, b in f.pairs)

