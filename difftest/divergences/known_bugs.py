"""Known burn bugs, as data: the record of each (its corpus case and links are its evidence)
and what triggers it.

Each record states where the bug strikes (`site`: a predicate on the statement a finding is
localised to, with the statements before it and the dtype it runs in) and what it does there
(`effect`: the mismatch kinds, a panic message pattern, the error's class, the input whose
gradient is wrong, whether it also shows downstream of the site). A finding is a known bug only
when every one of its findings is explained by a record whose site predicate holds at the
finding's localised statement and whose effect matches the error (`explains`,
difftest/findings/triage.py); a new bug in the same op, another input, another dtype or a
different error is news. Signatures only deduplicate new findings; they never make one known.

`backends`: the burn backends the bug shows on (None: every backend). A bug in burn-autodiff or
in a default implementation every backend inherits shows on all of them; one in a backend's own
kernel, or in a burn-backend default that only some backends inherit (the others override the
op), shows on those alone, and a finding on any other backend is news even at the same site
(docs/backends.md). A finding is matched on the backend it was observed on (`Fault.backend`).

`avoid`: the generator does not generate the site (so property runs keep looking for new bugs),
on every backend (a campaign draws the same programs wherever it runs, so the trigger of a record
of some backends keeps its site out of all); None for a bug outside the generator's domains or
one that campaigns just recognise. The bug itself stays covered by its corpus case, whose status
`bug` makes the replay fail loudly once burn fixes it (a strict xfail).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from difftest.divergences.bug_sites import (
    backward_through_swapped_reduction,
    chunk_uneven,
    conv1d_grouped_uncropped,
    div_scalar,
    gelu,
    hard_sigmoid,
    hard_sigmoid_any,
    log_sigmoid,
    pow_zero,
    powf,
    powf_scalar_fractional,
    reduce_after_unit_swap,
    rms_norm_apply,
    sgd_f32_hyperparameter,
    sigmoid_default,
    used_leaf_backward,
)
from difftest.divergences.knowledge import MEASURED_ON, Knowledge, burn_source
from difftest.program.dtypes import EPS
from difftest.program.ir import (
    Program,
    Statement,
)

Trigger = Callable[[Statement, Sequence[Statement]], bool]  # (statement, the statements before it)
F32_ULP = 2.0**-24


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

    def __post_init__(self) -> None:
        if self.backends is not None and (not self.backends or isinstance(self.backends, str)):
            raise ValueError(f"{self.name}: backends must be None (every backend) or a non-empty tuple of names")

    @property
    def name(self) -> str:
        return self.knowledge.name

    def shows_on(self, backend: str) -> bool:
        """Whether the bug is declared to show on the burn backend `backend`."""
        return self.backends is None or backend in self.backends

    def strikes(self, st: Statement, prior: Sequence[Statement], dtype: str) -> bool:
        if self.dtypes is not None and dtype not in self.dtypes:
            return False
        site = self.site or self.triggers
        return site is not None and site(st, prior)


def _bug(name: str, reason: str, evidence: tuple[str, ...], triggers: Trigger | None,
         dtypes: tuple[str, ...] | None = None, *, site: Trigger | None = None,
         effect: Effect | None = None, backward_through: tuple[int, ...] | None = None,
         burn_versions: str = MEASURED_ON, backends: tuple[str, ...] | None = None) -> KnownBug:
    return KnownBug(Knowledge(name, "known-bug", "burn", reason, evidence, burn_versions), triggers, dtypes, site,
                    effect, backward_through, backends)


# ------------------------------------------------------------------ error checks

def within_f32_rounding(f: Fault) -> bool:
    """Every failing element is off by float32 rounding of the computation, no more: at most
    64 float32 ulps of the element's reference, or of the largest reference of the tensor where
    the element cancels to less (a float64 program that rounds through f32 somewhere)."""
    if not f.pairs:
        return False
    scale = max((abs(r) for r, _ in f.pairs if math.isfinite(r)), default=0.0)
    for r, b in f.pairs:
        if not (math.isfinite(r) and math.isfinite(b)):
            return False
        if abs(b - r) > 64 * F32_ULP * max(abs(r), scale * 1e-3):
            return False
    return True


def nan_where_base_is_zero(f: Fault) -> bool:
    """powf's gradient: NaN exactly at elements whose base (input 0) is 0 (d/db = a^b ln a) or,
    for d/da, whose base and exponent are both 0."""
    if not f.pairs or not all(math.isnan(b) and not math.isnan(r) for r, b in f.pairs):
        return False
    if not f.inputs:
        return False
    base = f.inputs[0]
    if len(base) == 1:
        return base[0] == 0.0
    return all(0 <= e < len(base) and base[e] == 0.0 for e in f.elements)


# max over x of |d/dx gelu_tanh(x) - d/dx gelu(x)|: 8.684e-4 at x = 2.0187, measured in float64
# on a grid of step 1e-4 over [-10, 10] (the difference decays to 0 outside it); a one-op program
# seeds the gradient with ones or a cotangent of at most 1.375 (findings/localise.py cotangent),
# so the derivative's error shows at most 1.375 * 8.684e-4 = 1.19e-3 in it
GELU_TANH_GRAD_ERROR = 1.2e-3


def within_gelu_tanh_approximation(f: Fault) -> bool:
    """Every failing element is finite and off by no more than the tanh approximation's derivative
    differs from gelu's exact one (`GELU_TANH_GRAD_ERROR`), plus 8 units of the dtype's rounding
    of the result: a gradient computed as the derivative of gelu's tanh approximation."""
    eps = EPS.get(f.dtype)
    if not f.pairs or eps is None:
        return False
    return all(math.isfinite(r) and math.isfinite(b) and abs(b - r) <= GELU_TANH_GRAD_ERROR + 8 * eps * max(1.0, abs(r))
               for r, b in f.pairs)


def sigmoid_output_in_f32(f: Fault) -> bool:
    """A value as `within_f32_rounding`. A gradient computed from sigmoid's output y rounded to
    f32 (sigmoid's backward y (1 - y), silu's y + x y (1 - y)) carries that rounding times the
    derivative's terms, which are at most 1 + |x| in size however much they cancel (y (1 - y) is
    0.009 at y = 0.99, its error an ulp of y): every failing element is finite and off by at most
    64 float32 ulps of 1.375 (1 + max |x|) (1.375: the largest seed of a one-op program,
    findings/localise.py cotangent), or by `within_f32_rounding`."""
    if within_f32_rounding(f):
        return True
    if f.kind != "grad" or not f.pairs or not f.inputs:
        return False
    xs = [abs(v) for v in f.inputs[0] if math.isfinite(v)]
    bound = 64 * F32_ULP * 1.375 * (1.0 + max(xs, default=0.0))
    return all(math.isfinite(r) and math.isfinite(b) and abs(b - r) <= bound for r, b in f.pairs)


def absolute_rounding_at_one(f: Fault) -> bool:
    """Every failing element is finite and off by at most 4 units of the dtype's epsilon, or of
    the element's reference where that is larger: the error of a result computed as the log of a
    sum `1 + t` rounded to the dtype (no log1p), which is absolute (about eps / 2 however small the
    result; log_sigmoid(x) of float32 x >= 17 rounds to 0) rather than relative to the result."""
    eps = EPS.get(f.dtype)
    if not f.pairs or eps is None:
        return False
    return all(math.isfinite(r) and math.isfinite(b) and abs(b - r) <= 4 * eps * max(1.0, abs(r))
               for r, b in f.pairs)


def untracked(f: Fault) -> bool:
    """A flags mismatch where burn reports the value untracked (not in the recorded graph)."""
    return f.kind != "flags" or f.observed.get("is_tracked") is False


# ops whose burn implementation divides by a scalar (Tensor::div_scalar), whose backward then
# multiplies by an f32 reciprocal: div_scalar itself, var / var_bias / var_mean (burn-tensor's
# stats divide the sum of squares by n or n - 1) and softplus (divides by beta)
BURN_BUGS: tuple[KnownBug, ...] = (
    _bug(
        "powi-zero-untracked",
        "x.powi_scalar(0) on a tracked tensor returns an untracked ones tensor: the dispatch "
        "layer's default float_powi_scalar short-circuits `0 => ones` before burn-autodiff's "
        "tracked PowiScalarZero node, so the gradient through it is missing (None, and "
        "backward of a loss that only depends on it panics) where PyTorch gives zeros.",
        ("corpus/bugs/powi-zero-untracked.json", "docs/semantics.md#upstream",
         burn_source("burn-backend", "src/backend/ops/tensor.rs"), "https://github.com/tracel-ai/burn/pull/5692"),
        pow_zero,
        effect=Effect(("flags", "grad-presence", "outcome"), message=r"backward requires a tracked",
                      error=untracked, downstream=True),
    ),
    _bug(
        "backward-of-used-leaf-panics",
        "backward() of a require-grad leaf that feeds a chain of ops over several leaves panics "
        "with 'graph tape has already been consumed' although nothing was consumed; PyTorch "
        "gives the leaf a gradient of ones. The generator does not avoid it; campaigns reach it "
        "through root probes (difftest/oracle/probe_run.py: a backward of every tracked value) and "
        "recognise it by its site (a backward rooted at a leaf, or a parameter, an earlier op or module "
        "read) and its message.",
        ("corpus/bugs/backward-of-used-leaf-panics.json", "docs/semantics.md#upstream",
         "https://github.com/tracel-ai/burn/pull/5645"),
        None,
        site=used_leaf_backward,
        effect=Effect(("outcome",), message=r"graph tape has already been consumed"),
    ),
    _bug(
        "powf-zero-base-nan-grad",
        "burn's float_powf backward gives d(a**b)/db = a**b * ln(a) * g, NaN at a = 0 (0 * ln 0), "
        "and d/da NaN at a = b = 0; PyTorch masks both (0, the limit as a -> 0+). The forward "
        "value agrees. Outside the generator's pow-base domain (a >= 0.1), so no trigger.",
        ("corpus/bugs/powf-zero-base-nan-grad.json", "docs/semantics.md#upstream",
         burn_source("burn-autodiff", "src/ops/tensor.rs"), "https://github.com/pytorch/pytorch/issues/27134"),
        None,
        site=powf,
        effect=Effect(("grad",), error=nan_where_base_is_zero),
    ),
    _bug(
        "flex-reduce-dim-after-unit-swap-panics",
        "burn's Flex backend panics ('range end index 5 out of range for slice of length 4') on a "
        "reduction along dim 0 (mean_dim, sum_dim) of a [1, 2, 2, 1] tensor whose size-1 dims 0 "
        "and 3 were swapped, on plain and autodiff devices alike; PyTorch reduces. Rare enough "
        "that campaigns only count it (its case's signature is known), so no trigger. Flex's own kernel: "
        "NdArray and Wgpu reduce (the case's backends_tested).",
        ("corpus/bugs/flex-reduce-dim-after-unit-swap-panics.json", burn_source("burn-flex", "src/ops/reduce.rs")),
        None,
        site=reduce_after_unit_swap,
        effect=Effect(("outcome",), message=r"range end index \S+ out of range for slice"),
        backends=("flex",),
    ),
    _bug(
        "flex-sum-dim-backward-after-unit-swap-panics",
        "burn's Flex backend panics ('range end index 7 out of range for slice of length 6') in the "
        "backward of sum_dim(0) of a [1, 2, 3, 1] tensor whose result has its size-1 dims 0 and 3 "
        "swapped; PyTorch gives ones. The same root cause as flex-reduce-dim-after-unit-swap-panics: "
        "SumDim's backward re-reduces the swapped gradient with float_sum_dim, which takes burn-flex "
        "ops/reduce.rs' `dim_stride == 1` branch on the strided layout. Rare: campaigns recognise it by "
        "its site, no trigger.",
        ("corpus/bugs/flex-sum-dim-backward-after-unit-swap-panics.json",
         "corpus/bugs/flex-reduce-dim-after-unit-swap-panics.json", burn_source("burn-flex", "src/ops/reduce.rs")),
        None,
        site=backward_through_swapped_reduction,
        effect=Effect(("outcome",), message=r"range end index \S+ out of range for slice"),
        backends=("flex",),
    ),
    _bug(
        "conv1d-grouped-weight-grad-uncropped",
        "the weight gradient of a grouped conv1d is wrong when the stride does not divide "
        "L + 2 padding - dilation (k - 1) - 1: burn-backend's conv1d_weight_grad_groups slice-assigns "
        "each group's gradient, computed as a conv spanning more than k positions, without cropping "
        "it to the kernel (conv2d_weight_grad_groups crops since tracel-ai/burn#1891). The forward and "
        "the input gradient agree. The generator avoids grouped strided conv1d whose span the stride "
        "does not divide only where the weight is tracked: the forward and the input gradient stay "
        "under test. Shows as a wrong gradient on Flex alone: NdArray inherits the same default but "
        "panics on the uncropped shape ('could not broadcast array'), burn-cubecl (Wgpu) overrides it "
        "(the case's backends_tested).",
        ("corpus/bugs/conv1d-grouped-weight-grad-uncropped.json",
         burn_source("burn-backend", "src/backend/ops/modules/conv.rs"), "https://github.com/tracel-ai/burn/pull/1891"),
        conv1d_grouped_uncropped,
        effect=Effect(("grad",), input=(1,)),
        backward_through=(1,),
        backends=("flex",),
    ),
    _bug(
        "chunk-uneven-pieces-panics",
        "burn's Tensor::chunk(chunks, dim) panics in narrow where the dim's size is not a multiple of "
        "chunks and pieces of ceil(size / chunks) cover it in fewer than chunks pieces (4 in 3: "
        "PyTorch gives [2, 2]); it assumes exactly chunks pieces. The generator avoids those sizes. "
        "Fixed in burn 0.23.0-pre.1, which computes chunk as split(size.div_ceil(chunks)) (its case "
        "passes there: difftest versions).",
        ("corpus/bugs/chunk-uneven-pieces-panics.json", burn_source("burn-tensor", "src/tensor/api/base.rs")),
        chunk_uneven,
        effect=Effect(("outcome",), message=r"narrow"),
        burn_versions=">=0.22.0,<0.23.0-pre.1",
    ),
    _bug(
        "div-scalar-grad-f32-reciprocal",
        "in a float64 program the gradient of x.div_scalar(s) carries float32 rounding: burn-autodiff's "
        "DivScalar backward multiplies by `1.0 / s.elem::<f32>()`, a reciprocal computed in f32 "
        "(d/dx sum(x / 3) = 0.3333333432674408; PyTorch and the float64 reference 0.3333333333333333). "
        "The forward agrees; float32 programs cannot see it, float16 and bfloat16 ones round it away. "
        "Ops burn composes with div_scalar carry it too: var, var_bias, var_mean (burn-tensor "
        "src/tensor/stats/mod.rs: div_scalar(n)) and softplus (div_scalar(beta)); measured in float64 "
        "campaigns, gradient errors of ~1e-8 relative. The generator avoids them in float64 programs "
        "only where a backward can pass through them (a tracked input, in the grad region): their "
        "forward stays under test.",
        ("corpus/bugs/div-scalar-grad-f32-reciprocal.json", burn_source("burn-autodiff", "src/ops/tensor.rs")),
        div_scalar,
        ("float64",),
        effect=Effect(("grad",), error=within_f32_rounding),
        backward_through=(0,),
    ),
    _bug(
        "hard-sigmoid-autodiff-f64-in-f32",
        "hard_sigmoid of a float64 tensor on the autodiff device is computed in float32: burn-autodiff "
        "does not override ActivationOps::hard_sigmoid, and burn-backend's default casts the input to "
        "F32 and the result back (hard_sigmoid(0.1) = 0.5166666507720947; PyTorch 0.5166666666666667). "
        "Flex's own hard_sigmoid (the plain device) computes in f64. The generator avoids exactly that: "
        "hard_sigmoid in the grad region of a float64 program with an input on the autodiff device; "
        "on the plain device (a plain leaf, without_autodiff, a no_grad region) it stays under test.",
        ("corpus/bugs/hard-sigmoid-autodiff-f64-in-f32.json",
         burn_source("burn-backend", "src/backend/ops/activation.rs")),
        hard_sigmoid,
        ("float64",),
        effect=Effect(("value", "grad"), error=within_f32_rounding, downstream=True),
    ),
    _bug(
        "rms-norm-f64-rms-in-f32",
        "RmsNorm of a float64 input computes its root mean square in float32: burn-nn's forward casts "
        "x to DType::F32 before square().mean_dim() + epsilon, sqrt(), and casts the rms back (an upcast "
        "meant for half precision; burn-nn's norm/mod.rs upcasts only F16), so values and gradients carry "
        "float32 rounding. The generator draws no RmsNorm forward in float64 programs; the module, its "
        "transforms and parameter reads stay under test.",
        ("corpus/bugs/rms-norm-f64-rms-in-f32.json", burn_source("burn-nn", "src/modules/norm/rms.rs")),
        rms_norm_apply,
        ("float64",),
        effect=Effect(("value", "grad"), error=within_f32_rounding, downstream=True),
    ),
    _bug(
        "sgd-momentum-f32-in-float64",
        "an SGD step with momentum in a float64 program uses the momentum rounded to f32: burn-optim "
        "converts MomentumConfig's f64 momentum into an f32 field of its Momentum state (and the "
        "weight-decay penalty is an f32 in WeightDecayConfig), so momentum 0.9 acts as 0.899999976. "
        "No trigger: in float64 programs the generator draws momenta that are exact in f32.",
        ("corpus/bugs/sgd-momentum-f32-in-float64.json", burn_source("burn-optim", "src/optim/momentum.rs")),
        None,
        ("float64",),
        site=sgd_f32_hyperparameter,
        effect=Effect(("value",), error=within_f32_rounding, downstream=True),
    ),
)


# burn-backend's default activations, which burn-flex overrides and NdArray (burn-ndarray) and
# Wgpu (burn-cubecl) inherit: bugs of those two backends, measured on both (docs/backends.md)
DEFAULT_ACTIVATION_BACKENDS = ("ndarray", "wgpu")
DEFAULT_ACTIVATIONS = burn_source("burn-backend", "src/backend/ops/activation.rs")
FLEX_ACTIVATIONS = burn_source("burn-flex", "src/ops/activation.rs")

BACKEND_BUGS: tuple[KnownBug, ...] = (
    _bug(
        "ndarray-sigmoid-f64-in-f32",
        "sigmoid of a float64 tensor is computed in float32 on a backend without its own sigmoid: "
        "burn-backend's default ActivationOps::sigmoid casts the input to FloatDType::F32, computes "
        "exp(-log(1 + exp(-x))) and casts back; burn-flex overrides sigmoid (f64 throughout) and "
        "burn-autodiff calls the inner backend's, so NdArray and Wgpu show it on either device, Flex "
        "does not (sigmoid(0.5) = 0.622459352016449; PyTorch 0.6224593312018546). silu (burn-tensor's "
        "x * sigmoid(x)) carries it too, and so do the gradients (sigmoid's backward reads its rounded "
        "output).",
        ("corpus/backends/ndarray-sigmoid-f64-in-f32.json", DEFAULT_ACTIVATIONS, FLEX_ACTIVATIONS),
        None,
        ("float64",),
        site=sigmoid_default,
        effect=Effect(("value", "grad"), error=sigmoid_output_in_f32, downstream=True),
        backends=DEFAULT_ACTIVATION_BACKENDS,
    ),
    _bug(
        "ndarray-hard-sigmoid-f64-in-f32",
        "hard_sigmoid of a float64 tensor is computed in float32 on a backend without its own "
        "hard_sigmoid, on the plain device too: the root of hard-sigmoid-autodiff-f64-in-f32 "
        "(burn-backend's default casts to F32), which on Flex only burn-autodiff inherits (Flex's own "
        "hard_sigmoid computes in f64); NdArray and Wgpu inherit it on either device "
        "(hard_sigmoid(0.1) = 0.5166666507720947 on a plain leaf; PyTorch 0.5166666666666667).",
        ("corpus/backends/ndarray-hard-sigmoid-f64-in-f32.json", "corpus/bugs/hard-sigmoid-autodiff-f64-in-f32.json",
         DEFAULT_ACTIVATIONS, FLEX_ACTIVATIONS),
        None,
        ("float64",),
        site=hard_sigmoid_any,
        effect=Effect(("value", "grad"), error=within_f32_rounding, downstream=True),
        backends=DEFAULT_ACTIVATION_BACKENDS,
    ),
    _bug(
        "ndarray-gelu-grad-tanh-approximation",
        "the gradient of gelu is the derivative of gelu's tanh approximation while the forward is the "
        "exact (erf) gelu on a backend without its own gelu_backward: burn-backend's default "
        "ActivationOps::gelu_backward ('Derivative of the approximate gelu implementation based on "
        "tanh'); burn-flex overrides it with the exact derivative. d/dx gelu(0.5) = 0.8673698 on NdArray "
        "and Wgpu, 0.8674951 in PyTorch and float64: errors up to 8.7e-4 (at x = 2.02), in any dtype. "
        "The forward agrees.",
        ("corpus/backends/ndarray-gelu-grad-tanh-approximation.json", DEFAULT_ACTIVATIONS, FLEX_ACTIVATIONS),
        None,
        site=gelu,
        effect=Effect(("grad",), error=within_gelu_tanh_approximation, downstream=True),
        backends=DEFAULT_ACTIVATION_BACKENDS,
    ),
    _bug(
        "ndarray-log-sigmoid-without-log1p",
        "log_sigmoid loses its relative precision for large x on a backend without its own: "
        "burn-backend's default ActivationOps::log_sigmoid computes -m - log(exp(-m) + exp(-x - m)), "
        "m = max(-x, 0), and log_sigmoid_backward divides by the same rounded sum, so where exp(-|x|) is "
        "small the sum 1 + exp(-|x|) is rounded before the log: value and gradient carry an absolute "
        "error of about eps / 2 however small they are (float32 log_sigmoid(12) = -6.19886e-6 on NdArray "
        "and Wgpu, -6.14419e-6 in PyTorch and float64: 0.9% off; 0 for x >= 17). burn-flex overrides both "
        "with log1p; PyTorch computes it to rounding. In float32 and float64 alike, and in "
        "binary_cross_entropy_with_logits, which burn-nn computes as (1 - t) x - log_sigmoid(x).",
        ("corpus/backends/ndarray-log-sigmoid-without-log1p.json", DEFAULT_ACTIVATIONS, FLEX_ACTIVATIONS,
         burn_source("burn-nn", "src/loss/binary_cross_entropy.rs")),
        None,
        site=log_sigmoid,
        effect=Effect(("value", "grad"), error=absolute_rounding_at_one, downstream=True),
        backends=DEFAULT_ACTIVATION_BACKENDS,
    ),
)

NDARRAY_BUGS: tuple[KnownBug, ...] = (
    _bug(
        "ndarray-powf-scalar-f32-exponent",
        "powf_scalar of a float64 tensor on NdArray raises it to its exponent rounded to float32: "
        "burn-ndarray's float_powf_scalar_impl maps each element through powf_elem(self, value: f32), "
        "whose exponent is an f32 whatever the element type. burn-autodiff's backward computes "
        "x.powf_scalar(e - 1) * e, so an exponent exact in f32 (as the generator draws them: the forward "
        "agrees) still gives a gradient with e - 1 rounded to f32 (d/dx x^e at x = 0.5, e = "
        "-0.06294802576303482: -0.1315107765658442; PyTorch -0.13151077996168192). burn-ndarray's own "
        "kernel: Flex and Wgpu have their own powf_scalar.",
        ("corpus/backends/ndarray-powf-scalar-f32-exponent.json", burn_source("burn-ndarray", "src/element.rs"),
         burn_source("burn-ndarray", "src/ops/tensor.rs")),
        None,
        ("float64",),
        site=powf_scalar_fractional,
        effect=Effect(("value", "grad"), error=within_f32_rounding, downstream=True),
        backends=("ndarray",),
    ),
)

KNOWN_BUGS: tuple[KnownBug, ...] = (*BURN_BUGS, *BACKEND_BUGS, *NDARRAY_BUGS)


def known_bug(st: Statement, prior: Sequence[Statement] = (), dtype: str = "float32",
              tracked: Sequence[bool] | None = None) -> KnownBug | None:
    """The known bug `st` (after `prior`, on inputs of `dtype`: the program's or a cast's) would
    trigger, or None. `tracked`: whether each input of the op is tracked and the op recorded (as
    the generator knows it); a backward-only bug is then avoided only where a backward can pass
    through it (`backward_through`)."""
    for bug in KNOWN_BUGS:
        if bug.dtypes is not None and dtype not in bug.dtypes:
            continue
        if bug.triggers is None or not bug.triggers(st, prior):
            continue
        if bug.backward_through is not None and tracked is not None and not any(
                i < len(tracked) and tracked[i] for i in bug.backward_through):
            continue
        return bug
    return None
