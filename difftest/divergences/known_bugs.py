"""Known bugs, as data: burn's here, PyTorch's in torch_bugs.py (framework torch). The record of
each (its corpus case and links are its evidence) and what triggers it.

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

`avoid`: the generator does not generate the site (so property runs keep looking for new bugs)
but for a share of the times it meets it (GenConfig.p_known_site: a new bug there is found too),
on every backend (a campaign draws the same programs wherever it runs, so the trigger of a record
of some backends keeps its site out of all); None for a bug outside the generator's domains or
one that campaigns just recognise. The bug itself stays covered by its corpus case, whose status
`bug` makes the replay fail loudly once burn fixes it (a strict xfail).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from difftest.divergences.activation_bugs import ACTIVATION_BUGS
from difftest.divergences.backend_bugs import (
    BACKEND_BUGS,
    NDARRAY_BUGS,
    TCH_BUGS,
    WGPU_BUGS,
    WGPU_PRECISION,
)
from difftest.divergences.bug_records import (
    F32_ULP,
    Effect,
    Fault,
    KnownBug,
    bug_record,
    f32_reciprocal,
    hard_sigmoid_in_f32,
    within_f32_rounding,
    within_f32_rounding_of_its_tensor,
)
from difftest.divergences.bug_sites import (
    MINMAX_UPDATES,
    aliased_minmax_update,
    backward_through_swapped_reduction,
    chunk_uneven,
    conv1d_grouped_uncropped,
    div_scalar,
    hard_sigmoid,
    op_in,
    pow_zero,
    powf,
    powf_scalar_beyond_i64,
    reduce_after_unit_swap,
    rms_norm_apply,
    sgd_f32_hyperparameter,
    used_leaf_backward,
    written_pairs,
)
from difftest.divergences.knowledge import burn_source
from difftest.divergences.torch_bugs import TORCH_BUGS
from difftest.divergences.wgpu_kernel_bugs import WGPU_KERNEL_BUGS
from difftest.ops.validate import infer_shapes
from difftest.program.ir import Apply, OpCall, Statement, root_module

__all__ = ["BACKEND_BUGS", "KNOWN_BUGS", "Effect", "Fault", "KnownBug", "known_bug"]


# ------------------------------------------------------------------ error checks

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


F16_MAX = 65504.0


def divisor_squared_overflows(f: Fault) -> bool:
    """div's divisor gradient: 0 exactly at elements whose divisor squared, in float16, overflows
    (burn computes -a / b^2; b^2 rounds to inf from 65520 on, float16's largest value 65504 plus
    half an ulp of it)."""
    if not f.pairs or len(f.inputs) < 2 or not all(b == 0.0 and r != 0.0 for r, b in f.pairs):
        return False
    divisor = f.inputs[1]
    if len(divisor) == 1:
        return divisor[0] * divisor[0] >= F16_MAX + 16.0
    return all(0 <= e < len(divisor) and divisor[e] * divisor[e] >= F16_MAX + 16.0 for e in f.elements)


# burn's softplus in float16 takes the identity where beta * x > 11 (burn-tensor's
# max_finite_exp_arg: ln(65504) = 11.09 rounded down), so exp(beta x) <= exp(11) where it does not
F16_SOFTPLUS_THRESHOLD = 11.0
F16_MIN_NORMAL = 2.0**-14  # below it float16 is subnormal, spaced 2^-24 apart


def softplus_f16_quantised(f: Fault) -> bool:
    """softplus's float16 input gradient off by what burn's composed backward loses below
    float16's smallest normal value. burn computes softplus as log1p(exp(beta x)) / beta, so its
    backward runs g / beta, times recip(1 + e) (e = exp(beta x)), times e, times beta, each rounded
    to float16. Where recip(1 + e) (1 + e > 2^14) or the product q = (|g| / beta) / (1 + e) is
    below 2^-14, it is rounded to a multiple of 2^-24 (up to 2^-25 off, 0 when q < 2^-25), and
    multiplying back by e * beta scales that: burn may be off by 2^-25 * e * (beta + |g|) (5% more
    allowed here: e and beta are float16 values too, e.g. e is exp of beta x rounded, 0.4% off at
    beta x = 10), plus 4 float16 ulps of the result for the other roundings. Every failing
    element (inputs: x, then the seeded cotangent g, else g = 1; beta from the site) has
    beta x <= 11 (above it the gradient passes through exactly) and such a quantised intermediate,
    and burn's result is finite, not of the opposite sign and off by at most that bound (the
    element's own where the pairs are per failing element, else the largest): a softplus gradient
    wrong where nothing is quantised (small beta x, a cotangent far above 2^-14) is news."""
    st = f.program.by_id().get(f.site or "")
    if not isinstance(st, OpCall) or st.op != "softplus" or not f.pairs or not f.inputs or not f.elements:
        return False
    beta = float(st.attrs.get("beta", 1.0))
    xs = f.inputs[0]
    gs = f.inputs[1] if len(f.inputs) > 1 else (1.0,)
    if beta <= 0.0 or any(not 0 <= e < len(xs) or (len(gs) > 1 and not 0 <= e < len(gs)) for e in f.elements):
        return False
    bounds = []
    for e in f.elements:
        x, g = xs[e], abs(gs[0] if len(gs) == 1 else gs[e])
        if beta * x > F16_SOFTPLUS_THRESHOLD + 2.0**-7:  # float16's spacing at 11: the identity beyond it
            return False
        grown = math.exp(min(beta * x, F16_SOFTPLUS_THRESHOLD))
        if 1.0 + grown <= 1.0 / F16_MIN_NORMAL and g / beta / (1.0 + grown) >= F16_MIN_NORMAL:
            return False  # nothing below float16's smallest normal: rounded, not quantised
        bounds.append(1.05 * 2.0**-25 * grown * (beta + g))
    if len(bounds) != len(f.pairs):
        bounds = [max(bounds)] * len(f.pairs)
    return all(math.isfinite(r) and math.isfinite(b) and b * r >= 0 and abs(b - r) <= q + 2.0**-8 * abs(r)
               for (r, b), q in zip(f.pairs, bounds, strict=True))


def at_written_ties(f: Fault) -> bool:
    """A max/min update's gradient wrong only at ties: its site writes at least one value equal
    to the destination element it lands on, and every failing element is such a destination
    element or such a value (of the input whose gradient is wrong; with both inputs one value,
    either role's). The inputs are the site's one-op program's leaves, by input position."""
    st = f.program.by_id().get(f.site or "")
    if not isinstance(st, OpCall) or st.op not in MINMAX_UPDATES or not f.inputs or not f.elements:
        return False
    shapes = infer_shapes(f.program)
    # one value read as both: in the program, or in the site's one-op program (one leaf: two
    # inputs that hold one value from one source, localise.py's value_aliases)
    aliased = st.inputs[0] == st.inputs[1] or len(f.inputs) == 1
    x = f.inputs[0]
    y = x if aliased else (f.inputs[1] if len(f.inputs) > 1 else ())
    pairs = written_pairs(st, [shapes[st.inputs[0]], shapes[st.inputs[1]]])
    if any(p >= len(x) or j >= len(y) for p, j in pairs):
        return False
    ties = [(p, j) for p, j in pairs if x[p] == y[j]]
    dest, vals = {p for p, _ in ties}, {j for _, j in ties}
    by_input: dict[tuple[int, ...], set[int]] = {(0,): dest, (1,): vals}
    # one value read as both: its gradient holds both roles' elements, whichever input is named
    where = dest | vals if aliased else by_input.get(f.input or (), dest | vals)
    return bool(ties) and set(f.elements) <= where


def untracked(f: Fault) -> bool:
    """A flags mismatch where burn reports the value untracked (not in the recorded graph); or a
    rule's (`stale-rule`) downstream: a value whose rule expected a tracked input, reported
    untracked, or a backward that ran where a rule predicted it fails on a consumed graph (the
    untracked value cut it off)."""
    if f.kind == "stale-rule" and not f.observed:
        return True
    return f.kind not in ("flags", "stale-rule") or f.observed.get("is_tracked") is False


def rms_in_f32(f: Fault) -> bool:
    """At the module's own site (its one-op program), where its composition applies: exactly what
    burn-nn's forward computes, the declared parts with the rms in float32 (`Fault.as_composed`:
    burn computes the forward as those parts and PyTorch's run of them agrees, in value and
    gradient). Any other difference there, however small, is not this bug. Without that answer,
    the value at the module is x / rms * gamma with the rms computed in f32: the mean of d squares
    accumulated in f32 (at most d units of f32 rounding, relative), halved by the square root,
    plus the root's own rounding; an elementwise product, nothing cancels, so every element
    carries the rms's relative error, bounded here by (d + 4) units (the known bug's case: 0.1
    units). A formula fault of the forward is not within that: an epsilon added after the square
    root is eps (1 - 1 / (2 rms)) / rms, 84 units at an rms of 1 and 47 at an rms of 3, which the
    generic bound's 64 units explained. The gradient, which can cancel, and what the program
    computes from the value, which can amplify it, keep `within_f32_rounding`."""
    table = f.program.by_id()
    st = table.get(f.site or "")
    at_site = isinstance(st, Apply) and root_module(f.program, st.module, table).module == "rms_norm"
    if at_site and f.as_composed is not None:
        return f.as_composed
    if f.kind != "value" or not f.pairs or not at_site:
        return within_f32_rounding(f)
    assert isinstance(st, Apply)
    module = root_module(f.program, st.module, table)
    bound = (int(module.attrs["d_model"]) + 4) * F32_ULP
    return all(math.isfinite(r) and math.isfinite(b) and abs(b - r) <= bound * abs(r) for r, b in f.pairs)


# ops whose burn implementation divides by a scalar (Tensor::div_scalar), whose backward then
# multiplies by an f32 reciprocal: div_scalar itself, var / var_bias / var_mean (burn-tensor's
# stats divide the sum of squares by n or n - 1) and softplus (divides by beta)
BURN_BUGS: tuple[KnownBug, ...] = (
    bug_record(
        "powi-zero-untracked",
        "x.powi_scalar(0) on a tracked tensor returns an untracked ones tensor: the dispatch "
        "layer's default float_powi_scalar short-circuits `0 => ones` before burn-autodiff's "
        "tracked PowiScalarZero node, so the gradient through it is missing (None, and "
        "backward of a loss that only depends on it panics) where PyTorch gives zeros.",
        ("corpus/bugs/powi-zero-untracked.json", "docs/semantics.md#upstream",
         burn_source("burn-backend", "src/backend/ops/tensor.rs"), "https://github.com/tracel-ai/burn/pull/5692"),
        pow_zero,
        # the outcomes: a backward of a loss only it reaches, a gradient read of the leaf
        effect=Effect(("flags", "stale-rule", "grad-presence", "outcome"),
                      # or none: a backward that ran where the model predicted a consumed graph
                      message=r"^$|backward requires a tracked|hold no gradient of",
                      error=untracked, downstream=True),
    ),
    bug_record(
        "backward-of-used-leaf-panics",
        "backward() of a require-grad leaf that feeds a chain of ops over several leaves panics "
        "with 'graph tape has already been consumed' although nothing was consumed; PyTorch "
        "gives the leaf a gradient of ones. The generator does not avoid it; campaigns reach it "
        "through root probes (difftest/oracle/probe_run.py: a backward of every tracked value) and "
        "recognise it by its site (a backward rooted at a leaf, or a parameter, an earlier op or module "
        "read; or at an op that started a graph of its own because each input is a leaf an earlier "
        "backward reached, which burn's backward unregisters, and that an earlier op read) and its message.",
        ("corpus/bugs/backward-of-used-leaf-panics.json", "docs/semantics.md#upstream",
         "https://github.com/tracel-ai/burn/pull/5645"),
        None,
        site=used_leaf_backward,
        effect=Effect(("outcome",), message=r"graph tape has already been consumed"),
    ),
    bug_record(
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
    bug_record(
        "powf-scalar-huge-exponent-panics",
        "x.powf_scalar(e) panics ('called `Option::unwrap()` on a `None` value', burn-std "
        "element/scalar.rs) for e = +-inf and for an integral e outside i64 (|e| >= 2**63: 1e19): "
        "float_powf_scalar asks Scalar::try_as_integer whether to dispatch to powi_scalar, which takes "
        "an exponent equal to its floor for an integer and unwraps its to_i64(). PyTorch computes "
        "(0.5 ** inf = 0, 2 ** inf = inf). Both burn-backend's default and burn-flex's own "
        "float_powf_scalar ask it, on plain and autodiff devices alike. Outside the generator's "
        "exponents ([-2, 3]), so no trigger. Not found upstream (searched tracel-ai/burn issues).",
        ("corpus/bugs/powf-scalar-huge-exponent-panics.json",
         burn_source("burn-std", "src/element/scalar.rs"), burn_source("burn-backend", "src/backend/ops/tensor.rs"),
         "https://github.com/tracel-ai/burn/pull/3847"),
        None,
        site=powf_scalar_beyond_i64,
        effect=Effect(("outcome",), message=r"called `Option::unwrap\(\)` on a `None` value"),
    ),
    bug_record(
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
    bug_record(
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
    bug_record(
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
    bug_record(
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
    bug_record(
        "minmax-update-tie-grad-to-both",
        "the backward of scatter, select_assign and scatter_nd with IndexingUpdateOp::Max or Min gives a "
        "tie's whole gradient to both the destination and the value (burn-autodiff's ScatterMinMax, "
        "IndexSelectDimAssignMinMax and ScatterNdMinMax: data_won = data >= values, values_won = "
        "values >= data), so at a "
        "written position where they are equal the gradient is counted twice: "
        "d/dx sum(x.select_assign(0, [0, 1], x, Max)) = 2 where PyTorch (which splits a tie evenly) and "
        "the derivative of the identity give 1. Each operand alone lies between its one-sided limits; "
        "the sum exceeds the output's gradient, so it shows where the tied operands share a source. "
        "burn's comment calls it the cummin/cummax convention, but cummax gives a tie to one element "
        "(conventions.py, cummax-tie). With one operand tracked, burn's whole gradient to it is the "
        "subgradient where it wins (conventions.py, select-min-tie-with-constant and its siblings). The "
        "generator avoids a max/min update of a value by itself (every written position a tie) and, "
        "knowing the values, one whose tie is of two tracked values of one gradient source (a gather, "
        "a reshape, a product over a size-1 dim of it), each but for p_known_site of the times; ties "
        "of distinct operands stay, and are recognised here. Where the doubled gradient then meets a "
        "convention (hard_sigmoid at -3: 1/6 of it where PyTorch's half gives 0) no one-op run fails; "
        "triage composes this behaviour into the float64 reference (burn_conventions.BUG_MODELS) and "
        "matches the finding by its numbers (findings/reproduced.py).",
        ("corpus/bugs/minmax-update-tie-grad-to-both.json", burn_source("burn-autodiff", "src/ops/tensor.rs"),
         "https://github.com/tracel-ai/burn/pull/5582", "https://github.com/tracel-ai/burn/pull/4909"),
        aliased_minmax_update,
        site=op_in(MINMAX_UPDATES),
        effect=Effect(("grad",), error=at_written_ties),
    ),
    bug_record(
        "div-scalar-grad-f32-reciprocal",
        "in a float64 program the gradient of x.div_scalar(s) carries float32 rounding: burn-autodiff's "
        "DivScalar backward multiplies by `1.0 / s.elem::<f32>()`, a reciprocal computed in f32 "
        "(d/dx sum(x / 3) = 0.3333333432674408; PyTorch and the float64 reference 0.3333333333333333). "
        "The forward agrees; float32 programs cannot see it, float16 and bfloat16 ones round it away. "
        "Ops burn composes with div_scalar carry it too: var, var_bias, var_mean (burn-tensor "
        "src/tensor/stats/mod.rs: div_scalar(n)) and softplus (div_scalar(beta)); measured in float64 "
        "campaigns, gradient errors of ~1e-8 relative. The error shows downstream too: in every gradient "
        "whose backward passes through such an op, and in values computed from a gradient read of one "
        "(a sessions campaign, seed 38, program 6590: grad(x; bw) of softplus(cross(x, w)) into a matmul). "
        "The generator avoids them in float64 programs only where a backward can pass through them (a "
        "tracked input, in the grad region): their forward stays under test.",
        ("corpus/bugs/div-scalar-grad-f32-reciprocal.json", burn_source("burn-autodiff", "src/ops/tensor.rs")),
        div_scalar,
        ("float64",),
        effect=Effect(("grad",), error=f32_reciprocal, downstream=True),
        backward_through=(0,),
    ),
    bug_record(
        "div-divisor-grad-f16-overflow",
        "the divisor's gradient of a / b in float16 is 0 where b * b overflows float16 (|b| >= 256; "
        "float16's largest value is 65504): burn-autodiff's Div backward computes -a / b.powi(2), and "
        "b.powi(2) is inf (d/db sum(100 / b) at b = 300: burn -0.0, PyTorch and the float64 reference "
        "-0.00111). PyTorch divides twice, -a / b / b, and stays in range. a's gradient (1 / b) is right. "
        "Found by the no-false-alarm sensitivity run (seed 14, program 8587: a divisor boundary value of "
        "1000); float32, float64 and bfloat16 overflow only past 1.8e19, outside the catalog's range. "
        "Shows on Flex, Wgpu and LibTorch (burn-autodiff's backward; NdArray has no float16).",
        ("corpus/bugs/div-divisor-grad-f16-overflow.json", burn_source("burn-autodiff", "src/ops/tensor.rs")),
        None,
        ("float16",),
        site=op_in(("div",)),
        effect=Effect(("grad",), input=(1,), error=divisor_squared_overflows),
    ),
    bug_record(
        "softplus-f16-grad-underflow",
        "softplus's float16 input gradient is lost or quantised where beta * x is large and the gradient "
        "reaching it small: burn-tensor composes softplus as x.mul_scalar(beta).exp().log1p().div_scalar(beta) "
        "(the identity above beta * x = 11 in float16, ln(65504) rounded down), so burn-autodiff's backward "
        "runs in float16 through g / beta, times recip(1 + exp(beta x)), times exp(beta x), times beta, and "
        "(g / beta) / (1 + exp(beta x)) falls below float16's subnormal spacing (2^-24 = 5.96e-8): it is "
        "rounded to 0 or to a multiple of that spacing, then multiplied back by exp(beta x) (d/dx "
        "sum(softplus(x) * 1e-4) at x = 10, 9, 8: burn 0, 0, 1.78e-4; PyTorch 1.0e-4, 1.0e-4, 1.0e-4 and "
        "the float64 reference 1.0e-4, 1.0e-4, 1.0e-4; with 0.01 at x = 10 burn gives 0.0105 where float64 "
        "gives 0.0100, within float16's budget). PyTorch's fused softplus backward computes g * sigmoid(beta x) "
        "in float32 for half. The forward agrees. float16 only: bfloat16, float32 and float64 have "
        "float32's exponent range or more, and agree on the same programs. Measured on Flex; the composition "
        "is burn-tensor's and the backward burn-autodiff's, which every backend shares (NdArray has no "
        "float16). Found by the no-false-alarm "
        "sensitivity run (seed 12, program 13,183: softplus, beta 0.723, of powf(4, 1.73) = 10.9 under a "
        "log_sigmoid, whose gradient of 5.3e-5 burn lost to 0; powf's derivative lifted the loss above "
        "float16's floor). No trigger: the record explains such findings, softplus stays under test.",
        ("corpus/bugs/softplus-f16-grad-underflow.json", burn_source("burn-tensor", "src/tensor/activation/base.rs"),
         burn_source("burn-autodiff", "src/ops/tensor.rs")),
        None,
        ("float16",),
        site=op_in(("softplus",)),
        effect=Effect(("grad",), input=(0,), error=softplus_f16_quantised),
    ),
    bug_record(
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
        effect=Effect(("value", "grad"), error=hard_sigmoid_in_f32, downstream=True),
    ),
    bug_record(
        "rms-norm-f64-rms-in-f32",
        "RmsNorm of a float64 input computes its root mean square in float32: burn-nn's forward casts "
        "x to DType::F32 before square().mean_dim() + epsilon, sqrt(), and casts the rms back (an upcast "
        "meant for half precision; burn-nn's norm/mod.rs upcasts only F16), so values and gradients carry "
        "float32 rounding. The generator draws no RmsNorm forward in float64 programs; the module, its "
        "transforms and parameter reads stay under test.",
        ("corpus/bugs/rms-norm-f64-rms-in-f32.json", burn_source("burn-nn", "src/modules/norm/rms.rs")),
        rms_norm_apply,
        ("float64",),
        effect=Effect(("value", "grad"), error=rms_in_f32, downstream=True),
    ),
    bug_record(
        "sgd-momentum-f32-in-float64",
        "an SGD step with momentum in a float64 program uses the momentum rounded to f32: burn-optim "
        "converts MomentumConfig's f64 momentum into an f32 field of its Momentum state (and the "
        "weight-decay penalty is an f32 in WeightDecayConfig), so momentum 0.9 acts as 0.899999976. "
        "No trigger: in float64 programs the generator draws momenta that are exact in f32 (but in the share "
        "of training loops that keep known sites, GenConfig.p_known_site).",
        ("corpus/bugs/sgd-momentum-f32-in-float64.json", burn_source("burn-optim", "src/optim/momentum.rs")),
        None,
        ("float64",),
        site=sgd_f32_hyperparameter,
        # the stepped parameters are off by f32 rounding, and so is what is computed from them:
        # values, and the gradients of a later backward through them
        effect=Effect(("value", "grad"), error=within_f32_rounding_of_its_tensor, downstream=True),
    ),
)

KNOWN_BUGS: tuple[KnownBug, ...] = (*BURN_BUGS, *ACTIVATION_BUGS, *BACKEND_BUGS, *NDARRAY_BUGS, *WGPU_BUGS,
                                    *WGPU_KERNEL_BUGS, *WGPU_PRECISION, *TCH_BUGS, *TORCH_BUGS)


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
