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
    hard_sigmoid_in_f32,
    within_f32_rounding,
)
from difftest.divergences.bug_sites import (
    cast_to_bfloat16,
    conv1d_grouped_uncropped,
    gelu,
    hard_sigmoid_any,
    log_sigmoid,
    powf_scalar_fractional,
    sigmoid_default,
    wgpu_f64_op,
)
from difftest.divergences.knowledge import burn_source
from difftest.program.dtypes import EPS

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
        "and Wgpu, 0.8674951 in PyTorch and float64: errors up to 8.7e-4 (at x = 2.02), in any dtype. "
        "The forward agrees.",
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
)

WGPU_BUGS: tuple[KnownBug, ...] = (
    bug_record(
        "wgpu-f64-transcendentals-wrong",
        "burn's Wgpu backend on lavapipe (Mesa's CPU Vulkan driver) returns wrong float64 results for "
        "transcendental functions: exp(0.5) = 8.7e-315, sin(0.5) = 0, cos(1.5) = 1, log(0.7) = 53.4, and so "
        "on for log1p, tan, tanh, sinh, cosh, erf, atan, pow and sqrt's backward, what burn composes of them "
        "(gelu, softplus, mish, log_sigmoid, softmax, the cross entropies) and the float64 cast; arithmetic "
        "(add, mul, matmul, recip, abs, floor) is right. cubecl-wgpu registers F64 for every use when the "
        "device has SHADER_F64 (src/backend/wgsl.rs), which lavapipe advertises; the builtins reach SPIR-V "
        "as GLSL.std.450 instructions, which the extended instruction set defines for 16- and 32-bit floats "
        "only. Not measured on a GPU. Any error at those ops in a float64 program on Wgpu is this bug.",
        ("corpus/backends/wgpu-f64-transcendentals-wrong.json",
         "https://docs.rs/crate/cubecl-wgpu/0.11.3/source/src/backend/wgsl.rs",
         "https://registry.khronos.org/SPIR-V/specs/unified1/GLSL.std.450.html"),
        None,
        ("float64",),
        site=wgpu_f64_op,
        effect=Effect(("value", "grad"), downstream=True),
        backends=("wgpu",),
    ),
    bug_record(
        "wgpu-bfloat16-wrong",
        "burn's Wgpu backend on lavapipe computes bfloat16 tensors wrong: a cast of float32 "
        "[0.5, 1, -2, 3.25] to bfloat16 gives [0, 0, 0, 0] (PyTorch and Flex: the same values), and a "
        "bfloat16 program's mul gives 0 where x * x = 0.25. WGSL has no bfloat16 type; burn does not "
        "refuse the dtype on Wgpu (float16 is right). Not measured on a GPU. Any error at a cast to "
        "bfloat16 on Wgpu, and downstream of it, is this bug; a bfloat16 program on Wgpu is not drawn "
        "by a campaign (profile no-half).",
        ("corpus/backends/wgpu-bfloat16-wrong.json",),
        None,
        site=cast_to_bfloat16,
        effect=Effect(("value", "grad"), downstream=True),
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
