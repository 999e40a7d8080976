"""The activations burn-tensor builds from other ops (src/tensor/activation/base.rs: elu, celu,
selu, gelu_approximate, hard_swish, softsign, tanhshrink, glu, softmin, hardtanh, relu6,
threshold, hard_shrink, soft_shrink): their domains, attribute samplers, terms and compositions,
and their catalog entries (the block at the end of catalog.OPS).

None of them has an autodiff node of its own, so each declares the catalog ops burn composes it
of (`composed`): a wrong derivative in a part (exp, mul, mask_where) is one finding named by the
part, not one per activation. The masks burn computes from the input (x <= 0, |x| <= lambda)
are computed here from the call's data, in its dtype, as compositions.py does.

Torch-free at import: predicates, terms and masks use tensor methods of their arguments.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from difftest.choices import Choices
from difftest.ops import sampling as draw
from difftest.ops import shape_rules as rule
from difftest.ops import tolerance as T
from difftest.ops.compositions import _mask, _scalar, _values
from difftest.ops.domains import KINK_GAP, Domain, off_or_on
from difftest.ops.entries import reduce_dim, unary
from difftest.ops.sampling import FirstInput
from difftest.ops.spec import AttrSpec, OpSpec
from difftest.program.parts import Call, Part
from difftest.program.shapes import Shape, ShapeError, check_dim

if TYPE_CHECKING:
    from torch import Tensor

Attrs = dict[str, Any]

# burn-tensor's SELU constants (activation/base.rs, selu), PyTorch's too
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_GAMMA = 1.0507009873554804934193349852946
# burn-tensor's gelu_approximate: FRAC_2_SQRT_PI * FRAC_1_SQRT_2 = sqrt(2 / pi), computed in f64
SQRT_2_OVER_PI = (2.0 / math.sqrt(math.pi)) * (1.0 / math.sqrt(2.0))
# past where exp overflows: float16 (ln 65504 = 11.09) and float32 / bfloat16 (ln 3.4e38 = 88.72).
# elu, celu and selu evaluate exp on every element, the masked-out ones included
EXP_OVERFLOW = (12.0, 89.0)

# ---------------------------------------------------------------- domains


def _kinks_at(points: Sequence[str | float]) -> tuple[Any, Any]:
    """A predicate keeping the input the kink gap from each point (a number, or an attribute's
    name; "-name" for its negation), and the same with the points themselves admitted."""
    def where(x: Tensor, a: Attrs) -> list[float]:
        out = []
        for p in points:
            if isinstance(p, str):
                v = a.get(p.lstrip("-"))
                if v is None:
                    continue
                out.append(-float(v) if p.startswith("-") else float(v))
            else:
                out.append(p)
        return out

    def off(xs: Sequence[Tensor], a: Attrs) -> bool:
        return all(bool(((x - p).abs() >= KINK_GAP).all()) for x in xs[:1] for p in where(x, a))

    def off_or_at(xs: Sequence[Tensor], a: Attrs) -> bool:
        return all(bool(off_or_on(x - p).all()) for x in xs[:1] for p in where(x, a))

    return off, off_or_at


def _kink_domain(name: str, reason: str, points: Sequence[str | float], boundary: tuple[float, ...],
                 leaf: tuple[float, float] = (-3.0, 3.0)) -> Domain:
    off, at = _kinks_at(points)
    return Domain(name, reason, off, (leaf,), tags=("kink",), boundary=(boundary,), at_kinks=at)


EXP_BRANCH = _kink_domain(
    "elu-off-zero",
    "elu / celu / selu switch branches at 0 (slope alpha or 1): inputs keep |x| >= 0.01; their "
    "exp branch is evaluated everywhere, so past exp's overflow (12 in float16, 89 in float32) too",
    (0.0,), (0.0, -0.0, *EXP_OVERFLOW))
HARD_SWISH = _kink_domain(
    "hard-swish-off-bounds", "hard_swish = x * hard_sigmoid(x) has kinks at x = -3 and 3: |x -+ 3| >= 0.01",
    (-3.0, 3.0), (-3.0, 3.0), (-4.0, 4.0))
RELU6 = _kink_domain("relu6-off-bounds", "relu6 clamps to [0, 6]: inputs keep a gap of 0.01 from 0 and 6",
                     (0.0, 6.0), (0.0, -0.0, 6.0), (-2.0, 8.0))
HARDTANH = _kink_domain("hardtanh-off-bounds", "hardtanh clamps to [min, max]: inputs keep a gap of 0.01 from them",
                        ("min", "max"), (-1.5, -1.0, -0.5, 0.5, 1.0, 1.5))
THRESHOLD = _kink_domain(
    "threshold-off-threshold", "threshold jumps from value to x at x = threshold: inputs keep a gap of 0.01",
    ("threshold",), (-1.0, -0.5, 0.0, 0.5, 1.0))
SHRINK = _kink_domain(
    "shrink-off-lambda", "hard_shrink jumps and soft_shrink bends at x = -+lambd: |x -+ lambd| >= 0.01",
    ("lambd", "-lambd"), (-1.0, -0.5, 0.0, 0.5, 1.0))

# ---------------------------------------------------------------- samplers and rules


def _bounds(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    """hardtanh's [min, max]: min <= 0 < max, at times on the half-integer grid (where the
    generator's boundary values lie, as clamp's)."""
    lo, hi = -c.floats(1, 0.0, 2.0)[0], c.floats(1, 0.25, 2.0)[0]
    if c.boolean(0.2):
        lo, hi = math.floor(lo * 2) / 2, math.ceil(hi * 2) / 2
    return {"min": lo, "max": hi}


def _threshold(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    t, v = c.floats(2, -1.5, 1.5)
    if c.boolean(0.2):  # on the half-integer grid, where the boundary values lie
        t = round(t * 2) / 2
    return {"threshold": t, "value": v}


def _ordered_bounds(attrs: Attrs) -> str | None:
    lo, hi = attrs.get("min"), attrs.get("max")
    if not (isinstance(lo, float) and isinstance(hi, float) and lo < hi):
        return f"hardtanh needs finite min < max (got {lo!r}, {hi!r}): burn's clamp and PyTorch's differ otherwise"
    return None


def _positive(name: str) -> Any:
    def rule_(attrs: Attrs) -> str | None:
        v = attrs.get(name)
        if not (isinstance(v, float) and math.isfinite(v) and v > 0):
            return f"{name} must be finite and > 0 (got {v!r}): PyTorch refuses or divides by it"
        return None
    return rule_


def _non_negative_lambda(attrs: Attrs) -> str | None:
    v = attrs.get("lambd")
    if not (isinstance(v, float) and math.isfinite(v) and v >= 0):
        return f"lambda must be finite and >= 0 (got {v!r}): PyTorch refuses a negative one"
    return None


def _even_dim(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    """glu halves a dim of even size (burn asserts it)."""
    even = [d for d, n in enumerate(shapes[0]) if n % 2 == 0 and n > 0]
    return {"dim": c.choice(even)} if even else None


def _with_even_dim(c: Choices) -> Shape:
    shape = [c.integer(1, 4) for _ in range(c.integer(1, 3))]
    shape[c.integer(0, len(shape) - 1)] = c.choice([2, 4])
    return tuple(shape)


def glu_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    x, d = shapes[0], attrs["dim"]
    check_dim(x, d)
    if x[d] % 2:
        raise ShapeError(f"glu halves dim {d}, of odd size {x[d]} in {list(x)}")
    return tuple(n // 2 if i == d else n for i, n in enumerate(x))

# ---------------------------------------------------------------- terms (where the formula cancels)


def _exp_branch_value(scaled: bool, alpha: float | None = None, gamma: float = 1.0) -> Any:
    # burn's alpha * (exp(x / s) - 1) (PyTorch's expm1): near 0 the terms cancel, leaving the
    # rounding of exp, of size alpha, on a result of size |x|; above 0 the result is gamma x
    def terms_(x: Sequence[Tensor], a: Attrs, dtype: str) -> Tensor:
        al = abs(float(a["alpha"])) if alpha is None else alpha
        s = al if scaled else 1.0
        neg = x[0] <= 0
        return neg * al * ((x[0] / s).clamp(max=0.0).exp() + 1.0) + (~neg) * x[0].abs() * gamma
    return terms_


elu_value = _exp_branch_value(False)
celu_value = _exp_branch_value(True)
selu_value = _exp_branch_value(False, SELU_ALPHA * SELU_GAMMA, SELU_GAMMA)


def tanhshrink_value(x: Sequence[Tensor], a: Attrs, dtype: str) -> Tensor:
    # x - tanh(x): near 0 the two terms cancel (the result is about x**3 / 3)
    return x[0].abs() + x[0].tanh().abs()


def tanhshrink_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # g - g * (1 - tanh(x)**2) (both differentiate the composite): near 0 the terms cancel, and
    # 1 - tanh(x)**2 sums terms of 1 and tanh(x)**2
    t = x[0].tanh()
    return [g.abs() * (2.0 + t * t)]


def softsign_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # burn differentiates x / (|x| + 1) as a quotient: g / d - g x sign(x) / d**2, d = |x| + 1,
    # two terms that cancel to g / d**2 for large |x|
    d = x[0].abs() + 1.0
    return [g.abs() * (1.0 / d + x[0].abs() / (d * d))]


def gelu_approximate_value(x: Sequence[Tensor], a: Attrs, dtype: str) -> Tensor:
    # 0.5 x (1 + tanh(u)): for x << 0 the terms of 1 + tanh cancel
    return x[0].abs() * 0.5 * (1.0 + _inner(x[0]).tanh().abs())


def gelu_approximate_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # 0.5 (1 + tanh u) + 0.5 x (1 - tanh(u)**2) u': the same cancellation in the tail
    # (burn's 1 - tanh(u)**2, from the rounded tanh: its terms, 1 + tanh(u)**2, where u is large)
    t = _inner(x[0]).tanh()
    du = SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x[0] * x[0])
    return [g.abs() * (0.5 * (1.0 + t.abs()) + 0.5 * x[0].abs() * (1.0 + t * t) * du)]


def softmin_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # softmax of -x: its backward sums s * g and s * sum(s * g), s = softmin(x)
    s = (-x[0]).softmax(a["dim"])
    return [s * (g.abs() + (s * g).abs().sum(a["dim"], keepdim=True))]


def _inner(x: Tensor) -> Tensor:
    return SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)

# ---------------------------------------------------------------- compositions (burn-tensor activation/base.rs)


def _exp_branch(call: Call, scale: float, alpha: float, keep: str) -> tuple[Part, ...] | None:
    # elu: x.mask_where(x <= 0, (exp(x) - 1) * alpha); celu: the same of x / alpha; selu:
    # ((exp(x) - 1) * alpha * gamma).mask_where(x >= 0, x * gamma)
    x = _values(call, 0)
    if x is None:
        return None
    zero = _scalar(call, 0.0)
    pre: tuple[Part, ...] = (Part("div_scalar", (0,), {"scalar": scale}),) if scale != 1.0 else ()
    e = f"p{len(pre) - 1}" if pre else 0
    k = len(pre)
    branch = (*pre, Part("exp", (e,)), Part("sub_scalar", (f"p{k}",), {"scalar": 1.0}),
              Part("mul_scalar", (f"p{k + 1}",), {"scalar": alpha}))
    last = f"p{k + 2}"
    if keep == "selu":
        return (*branch, Part("mul_scalar", (0,), {"scalar": SELU_GAMMA}),
                Part("mask_where", (last, f"p{k + 3}"), {"mask": _mask(x >= zero)}))
    return (*branch, Part("mask_where", (0, last), {"mask": _mask(x <= zero)}))


def elu(call: Call) -> tuple[Part, ...] | None:
    return _exp_branch(call, 1.0, float(call.attrs["alpha"]), "elu")


def celu(call: Call) -> tuple[Part, ...] | None:
    alpha = float(call.attrs["alpha"])
    return _exp_branch(call, alpha, alpha, "elu")


def selu(call: Call) -> tuple[Part, ...] | None:
    return _exp_branch(call, 1.0, SELU_ALPHA * SELU_GAMMA, "selu")


def gelu_approximate(call: Call) -> tuple[Part, ...]:
    # (x * (tanh((x + x.powf_scalar(3) * 0.044715) * sqrt(2 / pi)) + 1)) * 0.5
    return (Part("powf_scalar", (0,), {"exponent": 3.0}), Part("mul_scalar", ("p0",), {"scalar": 0.044715}),
            Part("add", (0, "p1")), Part("mul_scalar", ("p2",), {"scalar": SQRT_2_OVER_PI}), Part("tanh", ("p3",)),
            Part("add_scalar", ("p4",), {"scalar": 1.0}), Part("mul", (0, "p5")),
            Part("mul_scalar", ("p6",), {"scalar": 0.5}))


def hard_swish(call: Call) -> tuple[Part, ...]:
    # x.mul(hard_sigmoid(x, 1/6, 0.5))
    return (Part("hard_sigmoid", (0,)), Part("mul", (0, "p0")))


def softsign(call: Call) -> tuple[Part, ...]:
    # x.div(x.abs() + 1)
    return (Part("abs", (0,)), Part("add_scalar", ("p0",), {"scalar": 1.0}), Part("div", (0, "p1")))


def tanhshrink(call: Call) -> tuple[Part, ...]:
    # x.sub(x.tanh())
    return (Part("tanh", (0,)), Part("sub", (0, "p0")))


def glu(call: Call) -> tuple[Part, ...]:
    # a = x.slice_dim(dim, 0..n), b = x.slice_dim(dim, n..2n); a.mul(sigmoid(b))
    shape = call.shapes[0]
    d = int(call.attrs["dim"]) % len(shape)
    n = shape[d] // 2
    whole = [[0, m] for m in shape[:d]]
    return (Part("slice", (0,), {"ranges": [*whole, [0, n]]}), Part("slice", (0,), {"ranges": [*whole, [n, 2 * n]]}),
            Part("sigmoid", ("p1",)), Part("mul", ("p0", "p2")))


def softmin(call: Call) -> tuple[Part, ...]:
    # burn-backend activation.rs, softmin: softmax(neg(x)), softmax being max-shifted exp over its sum
    d = int(call.attrs["dim"]) % len(call.shapes[0])
    return (Part("neg", (0,)), Part("detach", ("p0",)), Part("max_dim", ("p1",), {"dim": d}), Part("sub", ("p0", "p2")),
            Part("exp", ("p3",)), Part("sum_dim", ("p4",), {"dim": d}), Part("div", ("p4", "p5")))


def hardtanh(call: Call) -> tuple[Part, ...]:
    # x.clamp(min, max)
    return (Part("clamp", (0,), {"min": call.attrs["min"], "max": call.attrs["max"]}),)


def relu6(call: Call) -> tuple[Part, ...]:
    return (Part("clamp", (0,), {"min": 0.0, "max": 6.0}),)


def threshold(call: Call) -> tuple[Part, ...] | None:
    # x.mask_fill(x <= threshold, value)
    x = _values(call, 0)
    if x is None:
        return None
    mask = _mask(x <= _scalar(call, float(call.attrs["threshold"])))
    return (Part("mask_fill", (0,), {"mask": mask, "value": call.attrs["value"]}),)


def hard_shrink(call: Call) -> tuple[Part, ...] | None:
    # x.mask_fill(x.abs() <= lambda, 0)
    x = _values(call, 0)
    if x is None:
        return None
    return (Part("mask_fill", (0,), {"mask": _mask(x.abs() <= _scalar(call, float(call.attrs["lambd"]))),
                                     "value": 0.0}),)


def soft_shrink(call: Call) -> tuple[Part, ...] | None:
    # shrink(x, lambda, lambda): x.sub(x.sign().mul_scalar(lambda)).mask_fill(x.abs() <= lambda, 0)
    x = _values(call, 0)
    if x is None:
        return None
    lam = float(call.attrs["lambd"])
    return (Part("sign", (0,)), Part("mul_scalar", ("p0",), {"scalar": lam}), Part("sub", (0, "p1")),
            Part("mask_fill", ("p2",), {"mask": _mask(x.abs() <= _scalar(call, lam)), "value": 0.0}))

# ---------------------------------------------------------------- the entries


A = "activation::"
ALPHA = (AttrSpec("alpha", "float", (1.0,)),)
LAMBDA = (AttrSpec("lambd", "float", (0.5,)),)

ACTIVATIONS: tuple[OpSpec, ...] = (
    unary("elu", "F.elu({x}, {alpha})", A + "elu({x}, {alpha})", T.TRANSCENDENTAL, EXP_BRANCH, attrs=ALPHA,
          draw_attrs=draw.number("alpha", 0.25, 2.0), attrs_rule=_positive("alpha"), value_terms=elu_value,
          doc="x above 0, alpha (exp(x) - 1) at and below (burn: exp of every element)", composed=elu),
    unary("celu", "F.celu({x}, {alpha})", A + "celu({x}, {alpha})", T.TRANSCENDENTAL, EXP_BRANCH, attrs=ALPHA,
          draw_attrs=draw.number("alpha", 0.25, 2.0), attrs_rule=_positive("alpha"), value_terms=celu_value,
          doc="x above 0, alpha (exp(x / alpha) - 1) at and below", composed=celu),
    unary("selu", "F.selu({x})", A + "selu({x})", T.TRANSCENDENTAL, EXP_BRANCH, value_terms=selu_value,
          doc="gamma x at and above 0 (burn), gamma alpha (exp(x) - 1) below", composed=selu),
    unary("gelu_approximate", 'F.gelu({x}, approximate="tanh")', A + "gelu_approximate({x})", T.TRANSCENDENTAL,
          value_terms=gelu_approximate_value, grad_terms=gelu_approximate_grad,
          doc="0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))", composed=gelu_approximate),
    unary("hard_swish", "F.hardswish({x})", A + "hard_swish({x})", T.TRANSCENDENTAL, HARD_SWISH,
          doc="x hard_sigmoid(x)", composed=hard_swish),
    unary("softsign", "F.softsign({x})", A + "softsign({x})", T.TRANSCENDENTAL, grad_terms=softsign_grad,
          doc="x / (1 + |x|)", composed=softsign),
    unary("tanhshrink", "F.tanhshrink({x})", A + "tanhshrink({x})", T.TRANSCENDENTAL, value_terms=tanhshrink_value,
          grad_terms=tanhshrink_grad, doc="x - tanh(x)", composed=tanhshrink),
    OpSpec("glu", "activation", 1, "F.glu({x}, {dim})", A + "glu({x}, {dim})", glu_rule, T.TRANSCENDENTAL,
           attrs=(AttrSpec("dim", "dim"),), draw_attrs=_even_dim, first_input=FirstInput(None, _with_even_dim),
           saves=(0,), measured_layout=True,
           doc="first half of dim times the sigmoid of the second", composed=glu),
    reduce_dim("softmin", "F.softmin({x}, {dim})", A + "softmin({x}, {dim})", T.TRANSCENDENTAL,
               shape_rule=rule.along_dim, grad_terms=softmin_grad, saves_tensors=True, composed=softmin),
    unary("hardtanh", "F.hardtanh({x}, {min}, {max})", A + "hardtanh({x}, {min}, {max})", T.EXACT, HARDTANH,
          attrs=(AttrSpec("min", "float"), AttrSpec("max", "float")), draw_attrs=_bounds,
          attrs_rule=_ordered_bounds, doc="clamp to [min, max]", composed=hardtanh),
    unary("relu6", "F.relu6({x})", A + "relu6({x})", T.EXACT, RELU6, doc="clamp to [0, 6]", composed=relu6),
    unary("threshold", "F.threshold({x}, {threshold}, {value})", A + "threshold({x}, {threshold}, {value})", T.EXACT,
          THRESHOLD, attrs=(AttrSpec("threshold", "float", (0.0,)), AttrSpec("value", "float", (0.0,))),
          draw_attrs=_threshold, doc="x above threshold, value at and below", composed=threshold),
    unary("hard_shrink", "F.hardshrink({x}, {lambd})", A + "hard_shrink({x}, {lambd})", T.EXACT, SHRINK,
          attrs=LAMBDA, draw_attrs=draw.number("lambd", 0.0, 1.5), attrs_rule=_non_negative_lambda,
          doc="x where |x| > lambda, else 0", composed=hard_shrink),
    unary("soft_shrink", "F.softshrink({x}, {lambd})", A + "soft_shrink({x}, {lambd})", T.ROUNDED, SHRINK,
          attrs=LAMBDA, draw_attrs=draw.number("lambd", 0.0, 1.5), attrs_rule=_non_negative_lambda,
          doc="x -+ lambda where |x| > lambda, else 0", composed=soft_shrink),
)
