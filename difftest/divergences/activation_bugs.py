"""burn bugs in the activations burn-tensor builds from other ops (difftest/ops/activations.py),
as known-bug records: their sites, the error each explains, and the case that shows it.

Both come from one pattern: a formula evaluated on every element, whose intermediate overflows
on elements the result does not use. The forward discards the overflowed branch; the backward
multiplies the zero gradient that reaches it by the infinite local derivative, 0 * inf = NaN.
Neither has a trigger: the generator keeps drawing the ops, and the records explain the
findings whose every failing element is that NaN where the intermediate overflows.
"""

from __future__ import annotations

import math

from difftest.divergences.bug_records import Effect, Fault, KnownBug, bug_record
from difftest.divergences.bug_sites import op_in
from difftest.divergences.knowledge import burn_source
from difftest.program.ir import OpCall

F16_MAX = 65504.0
# the largest finite value of each dtype, and where exp of an input overflows to inf
LARGEST = {"float16": F16_MAX, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38,
           "float64": 1.7976931348623157e308}
EXP_OVERFLOWS_AT = {d: math.log(v) for d, v in LARGEST.items()}
ROUNDING = 1e-3  # the input's own rounding in half precision, relative, on the way to exp


def _nan_where(f: Fault, overflows: object) -> bool:
    """Every failing element is burn's NaN where the reference is finite, at an element whose
    input `overflows(x)`."""
    if not f.pairs or not f.inputs or not callable(overflows):
        return False
    if not all(math.isnan(b) and math.isfinite(r) for r, b in f.pairs):
        return False
    x = f.inputs[0]
    return all(0 <= e < len(x) and bool(overflows(x[e])) for e in f.elements)


def exp_branch_overflows(f: Fault) -> bool:
    """elu, celu, selu: NaN where exp of the input (over alpha, for celu) overflows the dtype."""
    st = f.program.by_id().get(f.site or "")
    if not isinstance(st, OpCall) or f.dtype not in EXP_OVERFLOWS_AT:
        return False
    scale = float(st.attrs.get("alpha", 1.0)) if st.op == "celu" else 1.0
    limit = EXP_OVERFLOWS_AT[f.dtype] * (1.0 - ROUNDING)
    return scale > 0 and _nan_where(f, lambda x: x / scale > limit)


def cube_derivative_overflows(f: Fault) -> bool:
    """gelu_approximate in float16: NaN where 3 x**2, x**3's derivative, overflows float16."""
    return f.dtype == "float16" and _nan_where(f, lambda x: 3.0 * x * x > F16_MAX * (1.0 - ROUNDING))


ACTIVATION_BUGS: tuple[KnownBug, ...] = (
    bug_record(
        "elu-exp-overflow-grad-nan",
        "elu, celu and selu give a NaN gradient where exp of the input overflows the dtype (x > 88.7 in "
        "float32 and bfloat16, 11.1 in float16, 709.8 in float64; x / alpha for celu): burn-tensor builds "
        "each as x.mask_where(mask, alpha * (exp(x) - 1)) (selu the other way round), evaluating exp on "
        "every element. The forward takes x there and is right; the backward hands the exp branch a zero "
        "gradient at those elements, and exp's backward multiplies it by exp(x) = inf: 0 * inf = NaN "
        "(d/dx sum(elu(x)) at x = 100 in float32: burn NaN, PyTorch and the float64 reference 1). "
        "PyTorch's elu kernel computes one branch per element. burn's own softplus caps the masked "
        "branch's input for this reason (burn-tensor activation/base.rs, softplus_with_threshold); "
        "the fix is the same cap, or exp of x.clamp_max(0). Found by the first campaign of the "
        "activations (difftest fuzz --seed 1, program 340).",
        ("corpus/bugs/elu-exp-overflow-grad-nan.json", "tests/differential/test_activation_bugs.py",
         burn_source("burn-tensor", "src/tensor/activation/base.rs")),
        None,
        site=op_in(("elu", "celu", "selu")),
        effect=Effect(("grad",), input=(0,), error=exp_branch_overflows),
    ),
    bug_record(
        "gelu-approximate-f16-cube-grad-nan",
        "gelu_approximate in float16 gives a NaN gradient where |x| >= 148: burn-tensor computes "
        "0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x.powf_scalar(3)))) in float16, so tanh saturates "
        "and its backward sends 0 towards x**3, whose backward multiplies that 0 by 3 x**2, inf in "
        "float16 from |x| = 147.8 on: 0 * inf = NaN (d/dx sum(gelu_approximate(x)) at x = 200: burn NaN, "
        "PyTorch and the float64 reference 1; at x = -300, 0). PyTorch computes its tanh-approximate "
        "GELU backward in float32 for float16 inputs. bfloat16, float32 and float64 overflow only past "
        "1e19. Found by the first campaign of the activations (difftest fuzz --seed 1, program 207).",
        ("corpus/bugs/gelu-approximate-f16-cube-grad-nan.json",
         burn_source("burn-tensor", "src/tensor/activation/base.rs")),
        None,
        ("float16",),
        site=op_in(("gelu_approximate",)),
        effect=Effect(("grad",), input=(0,), error=cube_derivative_overflows),
    ),
)
