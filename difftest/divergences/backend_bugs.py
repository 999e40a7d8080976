"""Known burn bugs of some backends only (their `backends`), with the error checks only they use:
burn-backend defaults that Flex overrides and NdArray, Wgpu or LibTorch inherit, NdArray's and
Wgpu's own kernels (docs/backends.md). known_bugs.py lists them with the others."""

from __future__ import annotations

import math

from difftest.divergences.bug_records import (
    F32_ULP,
    Effect,
    Fault,
    KnownBug,
    bug_record,
    fault_terms,
    hard_sigmoid_in_f32,
    within_f32_rounding,
)
from difftest.divergences.bug_sites import (
    LOG1P_POLYFILL_OPS,
    WGPU_DRIVER_PRECISION,
    WGPU_ERF_POLYNOMIAL,
    conv1d_grouped_uncropped,
    gelu,
    hard_sigmoid_any,
    log_sigmoid,
    nd_indexing,
    op_in,
    powf_scalar_fractional,
    runs_in_bfloat16,
    sigmoid_default,
    wgpu_f64_site,
)
from difftest.divergences.knowledge import burn_source
from difftest.divergences.measured_precision import within_measured
from difftest.program.dtypes import EPS
from difftest.program.statements import OpCall

# max over x of |d/dx gelu_tanh(x) - d/dx gelu(x)|: 8.684e-4 at x = 2.0187, measured in float64
# on a grid of step 1e-4 over [-10, 10] (the difference decays to 0 outside it); a one-op program
# seeds the gradient with ones or a cotangent of at most 1.375 (findings/localise.py cotangent),
# so the derivative's error shows at most 1.375 * 8.684e-4 = 1.19e-3 in it
GELU_TANH_GRAD_ERROR = 1.2e-3


def within_gelu_tanh_approximation(f: Fault) -> bool:
    """Every failing element is finite and off by no more than the tanh approximation's derivative
    differs from gelu's exact one (`GELU_TANH_GRAD_ERROR`, per unit of incoming gradient: at
    gelu's own input, a one-op program's), times the size of the terms the element sums where the
    program shows it further upstream (`Fault.terms`, the magnitude run's: a leaf's gradient
    through several gelu elements and the ops before them carries each one's error, scaled by
    its path), plus 8 units of the dtype's rounding of the result: a gradient computed as the
    derivative of gelu's tanh approximation."""
    eps = EPS.get(f.dtype)
    if not f.pairs or eps is None:
        return False
    return all(math.isfinite(r) and math.isfinite(b)
               and abs(b - r) <= GELU_TANH_GRAD_ERROR * max(1.0, t) + 8 * eps * max(1.0, abs(r))
               for (r, b), t in zip(f.pairs, fault_terms(f), strict=True))


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
    the element's reference or the terms that may cancel in it (where the program shows it) where
    that is larger: the error of a result computed as the log of a sum `1 + t` rounded to the
    dtype (no log1p), which is absolute (about eps / 2 however small the result; log_sigmoid(x) of
    float32 x >= 17 rounds to 0) rather than relative to the result."""
    eps = EPS.get(f.dtype)
    if not f.pairs or eps is None:
        return False
    return all(math.isfinite(r) and math.isfinite(b) and abs(b - r) <= 4 * eps * max(1.0, abs(r), t)
               for (r, b), t in zip(f.pairs, fault_terms(f), strict=True))


def log1p_polyfill_rounding(f: Fault) -> bool:
    """`absolute_rounding_at_one` for a value, at the op or downstream of it, and for a gradient
    downstream of it only: log1p's own derivative, 1 / (1 + x), does not go through the polyfill."""
    st = f.program.by_id().get(f.site or "")
    if f.kind == "grad" and isinstance(st, OpCall) and st.op in LOG1P_POLYFILL_OPS:
        return False
    return absolute_rounding_at_one(f)


# burn-backend's default activations, which burn-flex overrides and NdArray (burn-ndarray) and
# Wgpu (burn-cubecl) inherit: bugs of those two backends, measured on both (docs/backends.md)
DEFAULT_ACTIVATION_BACKENDS = ("ndarray", "wgpu")
DEFAULT_ACTIVATIONS = burn_source("burn-backend", "src/backend/ops/activation.rs")
FLEX_ACTIVATIONS = burn_source("burn-flex", "src/ops/activation.rs")

BACKEND_BUGS: tuple[KnownBug, ...] = (
    bug_record(
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
    bug_record(
        "ndarray-hard-sigmoid-f64-in-f32",
        "hard_sigmoid of a float64 tensor is computed in float32 on a backend without its own "
        "hard_sigmoid, on the plain device too: the root of hard-sigmoid-autodiff-f64-in-f32 "
        "(burn-backend's default casts to F32), which on Flex only burn-autodiff inherits (Flex's own "
        "hard_sigmoid computes in f64); NdArray, Wgpu and LibTorch (burn-tch overrides sigmoid, not "
        "hard_sigmoid) inherit it on either device (hard_sigmoid(0.1) = 0.5166666507720947 on a plain "
        "leaf; PyTorch 0.5166666666666667).",
        ("corpus/backends/ndarray-hard-sigmoid-f64-in-f32.json", "corpus/bugs/hard-sigmoid-autodiff-f64-in-f32.json",
         DEFAULT_ACTIVATIONS, FLEX_ACTIVATIONS),
        None,
        ("float64",),
        site=hard_sigmoid_any,
        effect=Effect(("value", "grad"), error=hard_sigmoid_in_f32, downstream=True),
        backends=(*DEFAULT_ACTIVATION_BACKENDS, "tch"),
    ),
    bug_record(
        "ndarray-gelu-grad-tanh-approximation",
        "the gradient of gelu is the derivative of gelu's tanh approximation while the forward is the "
        "exact (erf) gelu on a backend without its own gelu_backward: burn-backend's default "
        "ActivationOps::gelu_backward ('Derivative of the approximate gelu implementation based on "
        "tanh'); burn-flex overrides it with the exact derivative. d/dx gelu(0.5) = 0.8673698 on NdArray "
        "and Wgpu, 0.8674951 in PyTorch and float64: errors up to 8.7e-4 (at x = 2.02) per unit of "
        "incoming gradient, in any dtype; a gradient further upstream carries them along its paths "
        "(bounded by the magnitude run's terms). The forward agrees.",
        ("corpus/backends/ndarray-gelu-grad-tanh-approximation.json", DEFAULT_ACTIVATIONS, FLEX_ACTIVATIONS),
        None,
        site=gelu,
        effect=Effect(("grad",), error=within_gelu_tanh_approximation, downstream=True),
        backends=DEFAULT_ACTIVATION_BACKENDS,
    ),
    bug_record(
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
    bug_record(
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
    bug_record(
        "ndarray-conv1d-grouped-weight-grad-broadcast-panic",
        "the root of conv1d-grouped-weight-grad-uncropped on NdArray: burn-backend's default "
        "conv1d_weight_grad_groups slice-assigns each group's uncropped gradient, which burn-ndarray's "
        "slice_assign refuses ('could not broadcast array from shape: [1, 2, 2] to: [1, 2, 1]'), so the "
        "backward panics where Flex gives a wrong weight gradient. The generator avoids the site (the "
        "conv1d record's trigger) on every backend.",
        ("corpus/backends/ndarray-conv1d-grouped-weight-grad-broadcast-panic.json",
         "corpus/bugs/conv1d-grouped-weight-grad-uncropped.json",
         burn_source("burn-backend", "src/backend/ops/modules/conv.rs")),
        None,
        site=conv1d_grouped_uncropped,
        effect=Effect(("outcome",), message=r"could not broadcast array", downstream=True),
        backends=("ndarray",),
    ),
    bug_record(
        "ndarray-nd-indexing-panics-on-strided-input",
        "scatter_nd (with any update) and gather_nd on burn's NdArray backend panic on a tensor held in a "
        "layout other "
        "than the contiguous row-major one ('ndarray scatter_nd requires contiguous data'): "
        "burn-ndarray 0.22.1 ops/base.rs reads data, indices and values with as_slice().expect(...), "
        "which a transposed (or otherwise strided) view does not give, where Flex and PyTorch accept "
        "any layout (burn's API sets no such precondition). x [4, 3] transposed, then scatter_nd-added "
        "at [[1, 0], [2, 3], [2, 0]], panics. Found by the backend tier's triangulated campaign "
        "(tests/backends/test_triangulated.py) once the catalog drew the nd ops. A real bug, "
        "reportable upstream.",
        ("corpus/backends/ndarray-nd-indexing-panics-on-strided-input.json",
         burn_source("burn-ndarray", "src/ops/base.rs")),
        None,
        site=nd_indexing,
        effect=Effect(("outcome",), message=r"ndarray (scatter|gather)_nd requires contiguous", downstream=True),
        backends=("ndarray",),
    ),
)

WGPU_BUGS: tuple[KnownBug, ...] = (
    bug_record(
        "wgpu-f64-transcendentals-wrong",
        "burn's Wgpu backend on lavapipe (Mesa's CPU Vulkan driver) returns wrong float64 results for "
        "transcendental functions: exp(0.5) = 8.7e-315, sin(0.5) = 0, cos(1.5) = 1, log(0.7) = 53.4, and so "
        "on for log1p, tan, tanh, sinh, cosh, erf, atan, pow and sqrt's backward, the inverse functions (asin(0.5) "
        "= 0.52339 where it is 0.52360; acos, asinh, acosh, atanh, atan2), what burn composes of them "
        "(gelu, softplus, mish, log_sigmoid, softmax, the cross entropies, the normalisation modules' sqrt), "
        "powi_scalar beyond x^2 (0.5^3 = 0) "
        "and the float64 cast; arithmetic (add, mul, matmul, recip, abs, floor) is right. cubecl-wgpu "
        "registers F64 for every use when the device has SHADER_F64 (src/backend/wgsl.rs), which lavapipe "
        "advertises; the builtins reach SPIR-V as GLSL.std.450 instructions, which the extended instruction "
        "set defines for 16- and 32-bit floats "
        "only. Not measured on a GPU. Any error at those ops in a float64 program on Wgpu is this bug.",
        ("corpus/backends/wgpu-f64-transcendentals-wrong.json",
         "https://docs.rs/crate/cubecl-wgpu/0.11.3/source/src/backend/wgsl.rs",
         "https://registry.khronos.org/SPIR-V/specs/unified1/GLSL.std.450.html"),
        None,
        ("float64",),
        site=wgpu_f64_site,
        effect=Effect(("value", "grad"), downstream=True),
        backends=("wgpu",),
    ),
    bug_record(
        "wgpu-bfloat16-wrong",
        "burn's Wgpu backend on lavapipe computes bfloat16 tensors wrong: a cast of float32 "
        "[0.5, 1, -2, 3.25] to bfloat16 gives [0, 0, 0, 0] (PyTorch and Flex: the same values), and a "
        "bfloat16 program's mul gives 0 where x * x = 0.25. WGSL has no bfloat16 type; burn does not "
        "refuse the dtype on Wgpu (float16 is right). Not measured on a GPU. Any error at an op that "
        "runs in bfloat16 on Wgpu (a cast to it, any op or module forward of a bfloat16 program: "
        "gather_argmax of [0.5, ...] gives -0.508), and downstream of it, is this bug; so is the panic of "
        "the ops cubecl's matmul runs, which do check the dtype (a bfloat16 matmul: 'Unable to launch "
        "matmul because a required feature is unavailable: Types lhs=Float(BF16), rhs=Float(BF16) and/or "
        "output=Float(BF16) not supported').",
        ("corpus/backends/wgpu-bfloat16-wrong.json",),
        None,
        site=runs_in_bfloat16,
        effect=Effect(("value", "grad", "outcome"), message=r"Float\(BF16\).* not supported", downstream=True),
        backends=("wgpu",),
    ),
)


CUBECL_POLYFILLS = "https://docs.rs/crate/cubecl-core/0.11.3/source/src/frontend/polyfills.rs"
VULKAN_PRECISION = "https://registry.khronos.org/vulkan/specs/latest/html/vkspec.html#spirvenv-precision-operation"

# what a backend computes less accurately than PyTorch by the design of the code it runs, declared
# as measured (difftest/divergences/measured_precision.py, benchmarks/backend_precision.py)
WGPU_PRECISION: tuple[KnownBug, ...] = (
    bug_record(
        "wgpu-f32-transcendental-precision",
        "burn's Wgpu backend on lavapipe computes float32 transcendental functions less accurately than "
        "PyTorch: atan(1) = 0.78539485 (55 ulps off; up to 350 ulps at small x), tanh and sinh of a tiny x "
        "off by up to 7e-8 absolute (tanh(1e-30) = 3e-8), exp up to 9 ulps, log up to 2^-23 absolute near 1, "
        "and what burn composes of them (sigmoid, silu, mish, the erf gradient's exp); asin 3,820 ulps "
        "(3.5e-4 at -0.84), acos 1,310, asinh and atanh near 0 5.7e-7 and 1.6e-7 absolute, atan2 as atan "
        "(347 ulps, 3.3e-6 absolute). cubecl-wgpu emits "
        "WGSL's builtins, which reach the driver as GLSL.std.450 instructions; Vulkan's precision table lets "
        "them err by that much and more (atan 4096 ulps; exp 3 + 2|x| ulps; tanh, sinh, cosh inherit "
        "exp's; log 2^-21 absolute in [0.5, 2]). The driver's precision, not burn's code; not measured on a "
        "GPU. Declared as measured: every float32 error at these ops within twice burn's largest error in "
        "its binade on a dense grid of the op's domain (difftest/divergences/precision-wgpu-f32.json).",
        ("corpus/backends/wgpu-f32-transcendental-precision.json", "benchmarks/backend_precision.py",
         VULKAN_PRECISION),
        None,
        ("float32",),
        site=op_in(WGPU_DRIVER_PRECISION),
        effect=Effect(("value", "grad"), error=within_measured("wgpu-f32", WGPU_DRIVER_PRECISION), downstream=True),
        backends=("wgpu",),
    ),
    bug_record(
        "wgpu-erf-polynomial-approximation",
        "erf on burn's Wgpu backend is cubecl's own polynomial (cubecl-core polyfills.rs `erf`, "
        "Abramowitz and Stegun 7.1.26, whose error is 1.5e-7 absolute before float32 rounding): up to "
        "5.5e-7 absolute where PyTorch is within an ulp, so erf(1e-30) = 1.5e-30 + 1.2e-7 and erf(-0.064) is "
        "off by 100 ulps; gelu's value, x (1 + erf(x / sqrt 2)) / 2, carries it. Declared as measured "
        "(difftest/divergences/precision-wgpu-f32.json), as wgpu-f32-transcendental-precision.",
        ("corpus/backends/wgpu-erf-polynomial-approximation.json", CUBECL_POLYFILLS,
         "benchmarks/backend_precision.py"),
        None,
        ("float32",),
        site=op_in(WGPU_ERF_POLYNOMIAL),
        effect=Effect(("value", "grad"), error=within_measured("wgpu-f32", WGPU_ERF_POLYNOMIAL), downstream=True),
        backends=("wgpu",),
    ),
    bug_record(
        "wgpu-log1p-polyfill-without-log1p",
        "log1p on burn's Wgpu backend is log(1 + x): cubecl-core's polyfill (polyfills.rs `log1p`), which "
        "cubecl-wgpu lowers log1p to, rounds 1 + x before the log, so its error is absolute (eps / 2) "
        "however small the result: log1p(3e-8) = 0 in float32 (PyTorch 3e-8), 100% off for |x| < 6e-8. burn's "
        "softplus calls log1p for exactly that tail ('log1p rather than log(1 + ..) keeps the opposite "
        "tail', burn-tensor activation/base.rs), so softplus(-20) is 0 on Wgpu (PyTorch 2.1e-9). A real "
        "difference from PyTorch in cubecl's code, reportable upstream.",
        ("corpus/backends/wgpu-log1p-polyfill-without-log1p.json", CUBECL_POLYFILLS,
         burn_source("burn-tensor", "src/tensor/activation/base.rs")),
        None,
        ("float32",),
        site=op_in(LOG1P_POLYFILL_OPS),
        # log1p(exp(beta x)) / beta with beta >= 0.5: at most twice the rounding of 1 + t
        effect=Effect(("value", "grad"), error=log1p_polyfill_rounding, downstream=True),
        backends=("wgpu",),
    ),
)

# LibTorch (burn-tch) runs most ops in LibTorch itself, so it shares the burn-backend defaults'
# bugs only where it does not override them: measured by replaying the other backends' cases on
# it (`difftest versions corpus --backend flex,tch`, docs/backends.md)
TCH_BUGS: tuple[KnownBug, ...] = (
    bug_record(
        "tch-log-sigmoid-backward-without-log1p",
        "the gradient of log_sigmoid on LibTorch loses its relative precision for large x: burn-tch "
        "overrides log_sigmoid with LibTorch's kernel (the forward agrees) but not log_sigmoid_backward, "
        "so burn-backend's default divides by the sum exp(-m) + exp(-x - m), m = max(-x, 0), rounded "
        "before it is used: an absolute error of about eps / 2 in the gradient however small it is "
        "(float32 d/dx log_sigmoid(12) = 6.19888e-6 on LibTorch, 6.14417e-6 in PyTorch and float64). The "
        "backward half of ndarray-log-sigmoid-without-log1p.",
        ("corpus/backends/tch-log-sigmoid-backward-without-log1p.json", DEFAULT_ACTIVATIONS,
         burn_source("burn-tch", "src/ops/activation.rs")),
        None,
        site=log_sigmoid,
        effect=Effect(("grad",), error=absolute_rounding_at_one, downstream=True),
        backends=("tch",),
    ),
    bug_record(
        "tch-conv1d-grouped-weight-grad-shape-panic",
        "the root of conv1d-grouped-weight-grad-uncropped on LibTorch: burn-tch has no conv1d weight "
        "backward of its own, so burn-backend's default conv1d_weight_grad_groups slice-assigns each "
        "group's uncropped gradient, which LibTorch's copy_ refuses ('output with shape [1, 2, 1] doesn't "
        "match the broadcast shape [1, 2, 2]'): the backward panics where Flex gives a wrong weight "
        "gradient. The generator avoids the site (the conv1d record's trigger) on every backend.",
        ("corpus/backends/tch-conv1d-grouped-weight-grad-shape-panic.json",
         "corpus/bugs/conv1d-grouped-weight-grad-uncropped.json",
         burn_source("burn-backend", "src/backend/ops/modules/conv.rs")),
        None,
        site=conv1d_grouped_uncropped,
        effect=Effect(("outcome",), message=r"doesn't match the broadcast shape", downstream=True),
        backends=("tch",),
    ),
)
