"""The op catalog: one declarative entry per op (PyTorch OpInfo style).

Each entry names the op, its family and arity, its attributes (with how to draw them), its
shape rule, its input domain, its PyTorch lowering, which inputs PyTorch saves for backward,
and its tolerance class. The Rust interpreter has one enum variant and one match arm per entry;
`tests/test_catalog.py` checks the two agree. See docs/adding-an-op.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from difftest.choices import Choices
from difftest.ops import domains as dom
from difftest.ops import strides as sv
from difftest.ops import tolerance as tol
from difftest.program.ir import MAX_RANK, Shape, numel
from difftest.program.shapes import ShapeError, broadcast, check_dim, check_rank, matmul_shape, same_shapes

Attrs = dict[str, Any]
Lowering = Callable[[Sequence[torch.Tensor], Attrs], torch.Tensor]
ShapeRule = Callable[[Sequence[Shape], Attrs], Shape]
AttrSampler = Callable[[Choices, Sequence[Shape]], "Attrs | None"]
ViewRule = Callable[[Shape, tuple[int, ...], Attrs], tuple[int, ...]]
GradTerms = Callable[[Sequence[torch.Tensor], Attrs, torch.Tensor], list[torch.Tensor]]
ValueTerms = Callable[[Sequence[torch.Tensor], Attrs], torch.Tensor]

VARIADIC = -1


@dataclass(frozen=True)
class AttrSpec:
    name: str
    type: str  # float | int | dim | dims | shape | ranges | int_tensor | bool_tensor | ints


@dataclass(frozen=True)
class OpSpec:
    name: str
    family: str
    arity: int
    lower: Lowering
    shape_rule: ShapeRule
    tolerance: tol.ToleranceClass
    domain: dom.Domain = dom.ANY
    attrs: tuple[AttrSpec, ...] = ()
    draw_attrs: AttrSampler | None = None
    min_rank: int = 1
    saves: tuple[int, ...] = ()  # inputs PyTorch saves for backward (inference-tensor rule)
    # of those, the ones PyTorch saves only when *another* input needs a gradient (mul saves a
    # for b's gradient); the others are saved whenever the op is recorded
    saved_for_other: tuple[int, ...] = ()
    reduced_extent: Callable[[Sequence[Shape], Attrs], int] = field(default=lambda s, a: 1)
    # ops that burn differentiates through the primitives it composes them of: the size of the
    # terms their gradient sums (given the inputs, attrs and |incoming gradient|), one tensor per
    # input; float32 noise of that size may remain where the terms cancel (noise.py)
    grad_terms: GradTerms | None = None
    # the same for the op's value, where its formula sums terms larger than the result (the
    # accumulating ops' terms are the op applied to |inputs|, no declaration needed)
    value_terms: ValueTerms | None = None
    view: ViewRule | None = None  # PyTorch returns a view of input 0: how its strides change
    view_needs_contiguous: bool = False  # a view only when input 0 is contiguous (else a copy)
    # not a view, but the result keeps input 0's memory layout (PyTorch's flip), as elementwise
    # ops do; other copies are contiguous
    keeps_layout: bool = False
    doc: str = ""

    def shape(self, shapes: Sequence[Shape], attrs: Attrs) -> Shape:
        if self.arity != VARIADIC and len(shapes) != self.arity:
            raise ShapeError(f"{self.name} takes {self.arity} input(s), got {len(shapes)}")
        if not shapes:
            raise ShapeError(f"{self.name} needs at least one input")
        for s in shapes:
            if len(s) < self.min_rank:
                raise ShapeError(f"{self.name} needs rank >= {self.min_rank}, got {list(s)}")
        self.check_attrs(attrs)
        return check_rank(tuple(self.shape_rule(shapes, attrs)))

    def check_attrs(self, attrs: Attrs) -> None:
        names = {a.name for a in self.attrs}
        extra = set(attrs) - names
        if extra:
            raise ShapeError(f"{self.name} has no attribute(s) {sorted(extra)}")
        for a in self.attrs:
            if a.name not in attrs:
                raise ShapeError(f"{self.name} needs attribute {a.name!r}")
            _check_attr_type(self.name, a, attrs[a.name])

    def sample_attrs(self, c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
        return self.draw_attrs(c, shapes) if self.draw_attrs else {}


def _check_attr_type(op: str, a: AttrSpec, v: Any) -> None:
    def is_int(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    ok = {
        "float": isinstance(v, (int, float)) and not isinstance(v, bool),
        "int": is_int(v),
        "dim": is_int(v),
        "dims": isinstance(v, list) and all(is_int(x) for x in v),
        "ints": isinstance(v, list) and all(is_int(x) for x in v),
        "shape": isinstance(v, list) and all(is_int(x) and x >= 1 for x in v),
        "ranges": isinstance(v, list)
        and all(isinstance(r, list) and len(r) == 2 and all(is_int(x) for x in r) for r in v),
        "int_tensor": isinstance(v, dict) and "shape" in v and "data" in v and all(is_int(x) for x in v["data"]),
        "bool_tensor": isinstance(v, dict)
        and "shape" in v
        and "data" in v
        and all(isinstance(x, bool) for x in v["data"]),
    }[a.type]
    if not ok:
        raise ShapeError(f"{op}: attribute {a.name!r}={v!r} is not of type {a.type}")
    if a.type in ("int_tensor", "bool_tensor") and len(v["data"]) != numel(tuple(v["shape"])):
        raise ShapeError(f"{op}: attribute {a.name!r} data does not fit its shape {v['shape']}")


# ---------------------------------------------------------------- shape rules

def same(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    return shapes[0]


def bcast(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    return broadcast(shapes[0], shapes[1])


def to_one(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    return (1,)


def keep_dim(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    d = check_dim(s, attrs["dim"])
    return s[:d] + (1,) + s[d + 1 :]


def along_dim(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    check_dim(shapes[0], attrs["dim"])
    return shapes[0]


def reshape_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    new = tuple(attrs["shape"])
    if numel(new) != numel(shapes[0]):
        raise ShapeError(f"reshape {list(shapes[0])} -> {list(new)} changes the element count")
    return new


def transpose_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    return s[:-2] + (s[-1], s[-2])


def swap_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = list(shapes[0])
    a, b = check_dim(shapes[0], attrs["dim1"], "dim1"), check_dim(shapes[0], attrs["dim2"], "dim2")
    s[a], s[b] = s[b], s[a]
    return tuple(s)


def permute_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s, axes = shapes[0], attrs["axes"]
    if sorted(axes) != list(range(len(s))):
        raise ShapeError(f"permute axes {axes} are not a permutation of 0..{len(s) - 1}")
    return tuple(s[a] for a in axes)


def unsqueeze_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s, d = shapes[0], attrs["dim"]
    if not 0 <= d <= len(s):
        raise ShapeError(f"unsqueeze dim={d} outside 0..{len(s)}")
    return s[:d] + (1,) + s[d:]


def squeeze_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    d = check_dim(s, attrs["dim"])
    if s[d] != 1:
        raise ShapeError(f"squeeze dim={d} has size {s[d]}, not 1")
    return s[:d] + s[d + 1 :]


def flip_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    for a in attrs["axes"]:
        check_dim(shapes[0], a, "axes")
    if len(set(attrs["axes"])) != len(attrs["axes"]):
        raise ShapeError("flip axes repeat")
    return shapes[0]


def slice_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s, ranges = list(shapes[0]), attrs["ranges"]
    if len(ranges) > len(s):
        raise ShapeError(f"slice has {len(ranges)} ranges for a rank-{len(s)} tensor")
    for i, (a, b) in enumerate(ranges):
        if not 0 <= a < b <= s[i]:
            raise ShapeError(f"slice range {[a, b]} does not fit dim {i} of size {s[i]}")
        s[i] = b - a
    return tuple(s)


def cat_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    d = check_dim(shapes[0], attrs["dim"])
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or s[:d] + s[d + 1 :] != shapes[0][:d] + shapes[0][d + 1 :]:
            raise ShapeError(f"cat along {d} needs equal other dims, got {[list(x) for x in shapes]}")
    return shapes[0][:d] + (sum(s[d] for s in shapes),) + shapes[0][d + 1 :]


def stack_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = same_shapes(shapes, "stack")
    d = attrs["dim"]
    if not 0 <= d <= len(s):
        raise ShapeError(f"stack dim={d} outside 0..{len(s)}")
    return s[:d] + (len(shapes),) + s[d:]


def expand_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s, target = shapes[0], tuple(attrs["shape"])
    if len(target) < len(s) or broadcast(s, target) != target:
        raise ShapeError(f"cannot expand {list(s)} to {list(target)}")
    return target


def repeat_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    d = check_dim(s, attrs["dim"])
    if attrs["times"] < 1:
        raise ShapeError("repeat_dim times must be >= 1")
    return s[:d] + (s[d] * attrs["times"],) + s[d + 1 :]


def gather_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    d = check_dim(s, attrs["dim"])
    idx = attrs["indices"]
    ishape = tuple(idx["shape"])
    if len(ishape) != len(s) or any(ishape[i] != s[i] for i in range(len(s)) if i != d):
        raise ShapeError(f"gather indices shape {list(ishape)} must match {list(s)} off dim {d}")
    if any(not 0 <= i < s[d] for i in idx["data"]):
        raise ShapeError(f"gather index out of range for dim {d} of size {s[d]}")
    return ishape


def select_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    d = check_dim(s, attrs["dim"])
    idx = attrs["indices"]
    if not idx or any(not 0 <= i < s[d] for i in idx):
        raise ShapeError(f"select indices {idx} out of range for dim {d} of size {s[d]}")
    return s[:d] + (len(idx),) + s[d + 1 :]


def mask_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = same_shapes(shapes, "mask ops")
    if tuple(attrs["mask"]["shape"]) != s:
        raise ShapeError(f"mask shape {attrs['mask']['shape']} must equal input shape {list(s)}")
    return s


def matmul_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    return matmul_shape(shapes[0], shapes[1])


# ---------------------------------------------------------------- attribute samplers

def _dim(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    return {"dim": c.integer(0, len(shapes[0]) - 1)}


def _scalar(name: str, lo: float, hi: float) -> AttrSampler:
    def draw(c: Choices, shapes: Sequence[Shape]) -> Attrs:
        return {name: c.floats(1, lo, hi)[0]}

    return draw


def _clamp(kind: str) -> AttrSampler:
    def draw(c: Choices, shapes: Sequence[Shape]) -> Attrs:
        lo, hi = sorted(c.floats(2, -2.0, 2.0))
        if hi - lo < 0.25:
            hi = lo + 0.25
        return {"clamp": {"min": lo, "max": hi}, "clamp_min": {"min": lo}, "clamp_max": {"max": hi}}[kind]

    return draw


def _reshape(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    n = numel(shapes[0])
    factors = [d for d in range(1, n + 1) if n % d == 0]
    rank = c.integer(1, MAX_RANK)
    out: list[int] = []
    rest = n
    for _ in range(rank - 1):
        f = c.choice([d for d in factors if rest % d == 0])
        out.append(f)
        rest //= f
    out.append(rest)
    return {"shape": out}


def _swap(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    r = len(shapes[0])
    return {"dim1": c.integer(0, r - 1), "dim2": c.integer(0, r - 1)}


def _permute(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    rest = list(range(len(shapes[0])))
    axes = []
    while rest:
        axes.append(rest.pop(c.integer(0, len(rest) - 1)))
    return {"axes": axes}


def _unsqueeze(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    if len(shapes[0]) >= MAX_RANK:
        return None
    return {"dim": c.integer(0, len(shapes[0]))}


def _squeeze(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    ones = [i for i, d in enumerate(shapes[0]) if d == 1]
    if not ones or len(shapes[0]) < 2:
        return None
    return {"dim": c.choice(ones)}


def _flip(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    axes = [i for i in range(len(shapes[0])) if c.boolean()]
    return {"axes": axes or [0]}


def _slice(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    s = shapes[0]
    ranges = []
    for i in range(c.integer(1, len(s))):
        a = c.integer(0, s[i] - 1)
        ranges.append([a, c.integer(a + 1, s[i])])
    return {"ranges": ranges}


def _stack(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    if len(shapes[0]) >= MAX_RANK:
        return None
    return {"dim": c.integer(0, len(shapes[0]))}


def _expand(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    s = shapes[0]
    lead = c.integer(0, MAX_RANK - len(s))
    target = [c.integer(1, 3) for _ in range(lead)] + [d if d != 1 else c.integer(1, 3) for d in s]
    return {"shape": target}


def _repeat(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    return {"dim": c.integer(0, len(shapes[0]) - 1), "times": c.integer(1, 3)}


def _gather(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    s = shapes[0]
    d = c.integer(0, len(s) - 1)
    ishape = list(s)
    ishape[d] = c.integer(1, 4)
    data = [c.integer(0, s[d] - 1) for _ in range(numel(tuple(ishape)))]
    return {"dim": d, "indices": {"shape": ishape, "data": data}}


def _select(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    s = shapes[0]
    d = c.integer(0, len(s) - 1)
    return {"dim": d, "indices": [c.integer(0, s[d] - 1) for _ in range(c.integer(1, 4))]}


def _mask(with_value: bool) -> AttrSampler:
    def draw(c: Choices, shapes: Sequence[Shape]) -> Attrs:
        s = shapes[0]
        mask = {"shape": list(s), "data": [c.boolean() for _ in range(numel(s))]}
        return {"mask": mask, "value": c.floats(1, -2.0, 2.0)[0]} if with_value else {"mask": mask}

    return draw


# ---------------------------------------------------------------- lowerings

def _bool_tensor(spec: dict[str, Any]) -> torch.Tensor:
    return torch.tensor(spec["data"], dtype=torch.bool).reshape(spec["shape"])


def _int_tensor(spec: dict[str, Any]) -> torch.Tensor:
    return torch.tensor(spec["data"], dtype=torch.int64).reshape(spec["shape"])


def _slice_lower(x: Sequence[torch.Tensor], a: Attrs) -> torch.Tensor:
    return x[0][tuple(slice(lo, hi) for lo, hi in a["ranges"])]


def _repeat_lower(x: Sequence[torch.Tensor], a: Attrs) -> torch.Tensor:
    reps = [a["times"] if i == a["dim"] else 1 for i in range(x[0].dim())]
    return x[0].repeat(*reps)


def _extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    return numel(shapes[0])


def _dim_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    return shapes[0][attrs["dim"]]


def _matmul_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    return shapes[0][-1]


A_DIM = (AttrSpec("dim", "dim"),)


def unary(name: str, f: Callable[[torch.Tensor], torch.Tensor], t: tol.ToleranceClass,
          d: dom.Domain = dom.ANY, saves: tuple[int, ...] = (0,), family: str = "unary",
          grad_terms: GradTerms | None = None, value_terms: ValueTerms | None = None) -> OpSpec:
    return OpSpec(name, family, 1, lambda x, a: f(x[0]), same, t, d, saves=saves, grad_terms=grad_terms,
                  value_terms=value_terms)


def _tanh_grad_terms(x: Sequence[torch.Tensor], a: Attrs, g: torch.Tensor) -> list[torch.Tensor]:
    # both frameworks compute 1 - y**2 from the rounded output y: near |y| = 1 the terms cancel
    y = torch.tanh(x[0])
    return [g * (1.0 + y * y)]


def _sigmoid_grad_terms(x: Sequence[torch.Tensor], a: Attrs, g: torch.Tensor) -> list[torch.Tensor]:
    # y * (1 - y) from the rounded output y: near y = 1 the terms of 1 - y cancel
    y = torch.sigmoid(x[0])
    return [g * y * (1.0 + y)]


def _gelu_value_terms(x: Sequence[torch.Tensor], a: Attrs) -> torch.Tensor:
    # x * 0.5 * (1 + erf(x / sqrt 2)): for x << 0 the terms of 1 + erf cancel, leaving noise of
    # float32 size relative to |x| / 2 (PyTorch's float32 forward shows it)
    return x[0].abs() * 0.5 * (1.0 + torch.erf(x[0] / math.sqrt(2.0)).abs())


def _gelu_grad_terms(x: Sequence[torch.Tensor], a: Attrs, g: torch.Tensor) -> list[torch.Tensor]:
    # Phi(x) + x * phi(x), with Phi = 0.5 * (1 + erf(x / sqrt 2)): the same cancellation in the
    # tail (burn's float32 backward shows it)
    phi = torch.exp(-0.5 * x[0] * x[0]) / math.sqrt(2.0 * math.pi)
    return [g * (0.5 * (1.0 + torch.erf(x[0] / math.sqrt(2.0)).abs()) + x[0].abs() * phi)]


def scalar_op(name: str, f: Callable[[torch.Tensor, float], torch.Tensor], attr: str,
              lo: float, hi: float, t: tol.ToleranceClass, d: dom.Domain = dom.ANY,
              attr_type: str = "float", saves: tuple[int, ...] = ()) -> OpSpec:
    def draw(c: Choices, shapes: Sequence[Shape]) -> Attrs:
        if attr_type == "int":
            return {attr: c.integer(int(lo), int(hi))}
        return {attr: c.floats(1, lo, hi)[0]}

    return OpSpec(name, "scalar", 1, lambda x, a: f(x[0], a[attr]), same, t, d,
                  (AttrSpec(attr, attr_type),), draw, saves=saves)


def binary(name: str, f: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], t: tol.ToleranceClass,
           d: dom.Domain = dom.ANY, saves: tuple[int, ...] = (0, 1),
           saved_for_other: tuple[int, ...] = ()) -> OpSpec:
    return OpSpec(name, "binary", 2, lambda x, a: f(x[0], x[1]), bcast, t, d, saves=saves,
                  saved_for_other=saved_for_other)


def reduce_all(name: str, f: Callable[[torch.Tensor], torch.Tensor], t: tol.ToleranceClass,
               d: dom.Domain = dom.ANY, saves: tuple[int, ...] = ()) -> OpSpec:
    return OpSpec(name, "reduction", 1, lambda x, a: f(x[0]).reshape(1), to_one, t, d,
                  saves=saves, reduced_extent=_extent)


def reduce_dim(name: str, f: Callable[[torch.Tensor, int], torch.Tensor], t: tol.ToleranceClass,
               d: dom.Domain = dom.ANY, saves: tuple[int, ...] = (), rule: ShapeRule = keep_dim,
               grad_terms: GradTerms | None = None) -> OpSpec:
    return OpSpec(name, "reduction", 1, lambda x, a: f(x[0], a["dim"]), rule, t, d, A_DIM, _dim,
                  saves=saves, reduced_extent=_dim_extent, grad_terms=grad_terms)


def _softmax_terms(x: Sequence[torch.Tensor], a: Attrs, g: torch.Tensor) -> list[torch.Tensor]:
    # burn: exp(x - max) / sum(exp(x - max)); its backward sums s*g and s * sum(s*g)
    s = torch.softmax(x[0], a["dim"])
    return [s * (g + (s * g).sum(a["dim"], keepdim=True))]


def _log_softmax_terms(x: Sequence[torch.Tensor], a: Attrs, g: torch.Tensor) -> list[torch.Tensor]:
    # burn: x - log(sum(exp(x - max))) - max; its backward sums g and softmax * sum(g)
    s = torch.softmax(x[0], a["dim"])
    return [g + s * g.sum(a["dim"], keepdim=True)]


T = tol
OPS: tuple[OpSpec, ...] = (
    # unary elementwise
    unary("exp", torch.exp, T.TRANSCENDENTAL, dom.EXP, saves=()),
    unary("log", torch.log, T.TRANSCENDENTAL, dom.POSITIVE),
    unary("log1p", torch.log1p, T.TRANSCENDENTAL, dom.LOG1P),
    unary("sqrt", torch.sqrt, T.TRANSCENDENTAL, dom.POSITIVE, saves=()),
    unary("sin", torch.sin, T.TRANSCENDENTAL),
    unary("cos", torch.cos, T.TRANSCENDENTAL),
    unary("tan", torch.tan, T.TRANSCENDENTAL, dom.TAN, saves=()),
    unary("tanh", torch.tanh, T.TRANSCENDENTAL, saves=(), grad_terms=_tanh_grad_terms),
    unary("sinh", torch.sinh, T.TRANSCENDENTAL, dom.EXP),
    unary("cosh", torch.cosh, T.TRANSCENDENTAL, dom.EXP),
    unary("erf", torch.erf, T.TRANSCENDENTAL),
    unary("atan", torch.atan, T.TRANSCENDENTAL),
    unary("recip", torch.reciprocal, T.ROUNDED, dom.NONZERO, saves=()),
    unary("square", torch.square, T.ROUNDED),
    unary("abs", torch.abs, T.EXACT, dom.KINK_AT_ZERO),
    unary("neg", torch.neg, T.EXACT, saves=()),
    unary("sign", torch.sign, T.STEP, dom.KINK_AT_ZERO, saves=()),
    unary("floor", torch.floor, T.STEP, dom.ROUNDING, saves=()),
    unary("ceil", torch.ceil, T.STEP, dom.ROUNDING, saves=()),
    unary("round", torch.round, T.STEP, dom.ROUND_HALF, saves=()),
    unary("sigmoid", torch.sigmoid, T.TRANSCENDENTAL, saves=(), grad_terms=_sigmoid_grad_terms),
    unary("relu", torch.relu, T.EXACT, dom.KINK_AT_ZERO, saves=()),
    unary("gelu", F.gelu, T.TRANSCENDENTAL, grad_terms=_gelu_grad_terms, value_terms=_gelu_value_terms),
    OpSpec("leaky_relu", "unary", 1, lambda x, a: F.leaky_relu(x[0], a["slope"]), same, T.ROUNDED,
           dom.KINK_AT_ZERO, (AttrSpec("slope", "float"),), _scalar("slope", 0.01, 0.5), saves=(0,)),
    scalar_op("powf_scalar", torch.pow, "exponent", -2.0, 3.0, T.TRANSCENDENTAL, dom.POW_BASE, saves=(0,)),
    scalar_op("powi_scalar", torch.pow, "exponent", -2, 3, T.ROUNDED, dom.POWI_BASE, "int", saves=(0,)),
    OpSpec("clamp", "unary", 1, lambda x, a: torch.clamp(x[0], a["min"], a["max"]), same, T.EXACT,
           dom.CLAMP, (AttrSpec("min", "float"), AttrSpec("max", "float")), _clamp("clamp"), saves=(0,)),
    OpSpec("clamp_min", "unary", 1, lambda x, a: torch.clamp(x[0], min=a["min"]), same, T.EXACT,
           dom.CLAMP, (AttrSpec("min", "float"),), _clamp("clamp_min"), saves=(0,)),
    OpSpec("clamp_max", "unary", 1, lambda x, a: torch.clamp(x[0], max=a["max"]), same, T.EXACT,
           dom.CLAMP, (AttrSpec("max", "float"),), _clamp("clamp_max"), saves=(0,)),
    # scalar forms
    scalar_op("add_scalar", lambda x, s: x + s, "scalar", -3.0, 3.0, T.ROUNDED),
    scalar_op("sub_scalar", lambda x, s: x - s, "scalar", -3.0, 3.0, T.ROUNDED),
    scalar_op("mul_scalar", lambda x, s: x * s, "scalar", -3.0, 3.0, T.ROUNDED),
    scalar_op("div_scalar", lambda x, s: x / s, "scalar", 0.25, 4.0, T.ROUNDED),
    # binary with broadcasting
    binary("add", torch.add, T.ROUNDED, saves=()),
    binary("sub", torch.sub, T.ROUNDED, saves=()),
    binary("mul", torch.mul, T.ROUNDED, saved_for_other=(0, 1)),
    binary("div", torch.div, T.ROUNDED, dom.DIVISOR, saved_for_other=(0,)),
    binary("powf", torch.pow, T.TRANSCENDENTAL, dom.POW_BASE),
    binary("maximum", torch.maximum, T.EXACT, dom.NO_TIES_PAIR),
    binary("minimum", torch.minimum, T.EXACT, dom.NO_TIES_PAIR),
    OpSpec("matmul", "matmul", 2, lambda x, a: torch.matmul(x[0], x[1]), matmul_rule, T.ACCUMULATE,
           min_rank=2, saves=(0, 1), saved_for_other=(0, 1), reduced_extent=_matmul_extent),
    # reductions
    reduce_all("sum", torch.sum, T.ACCUMULATE),
    reduce_all("mean", torch.mean, T.ACCUMULATE),
    reduce_all("max", torch.max, T.EXACT, dom.UNIQUE_EXTREME, saves=(0,)),
    reduce_all("min", torch.min, T.EXACT, dom.UNIQUE_EXTREME, saves=(0,)),
    reduce_all("prod", torch.prod, T.ACCUMULATE, dom.PRODUCT, saves=(0,)),
    reduce_dim("sum_dim", lambda x, d: x.sum(d, keepdim=True), T.ACCUMULATE),
    reduce_dim("mean_dim", lambda x, d: x.mean(d, keepdim=True), T.ACCUMULATE),
    reduce_dim("max_dim", lambda x, d: x.max(d, keepdim=True).values, T.EXACT, dom.UNIQUE_EXTREME, (0,)),
    reduce_dim("min_dim", lambda x, d: x.min(d, keepdim=True).values, T.EXACT, dom.UNIQUE_EXTREME, (0,)),
    reduce_dim("prod_dim", lambda x, d: x.prod(d, keepdim=True), T.ACCUMULATE, dom.PRODUCT, (0,)),
    reduce_dim("cumsum", torch.cumsum, T.ACCUMULATE, rule=along_dim),
    reduce_dim("cumprod", torch.cumprod, T.ACCUMULATE, dom.PRODUCT, (0,), rule=along_dim),
    reduce_dim("softmax", torch.softmax, T.TRANSCENDENTAL, rule=along_dim, grad_terms=_softmax_terms),
    reduce_dim("log_softmax", torch.log_softmax, T.TRANSCENDENTAL, rule=along_dim, grad_terms=_log_softmax_terms),
    # shape and indexing
    OpSpec("reshape", "shape", 1, lambda x, a: x[0].contiguous().view(a["shape"]), reshape_rule, T.EXACT,
           attrs=(AttrSpec("shape", "shape"),), draw_attrs=_reshape, view=sv.reshape_view,
           view_needs_contiguous=True),
    OpSpec("transpose", "shape", 1, lambda x, a: x[0].transpose(-1, -2), transpose_rule, T.EXACT, min_rank=2,
           view=sv.transpose_view),
    OpSpec("swap_dims", "shape", 1, lambda x, a: x[0].transpose(a["dim1"], a["dim2"]), swap_rule, T.EXACT,
           attrs=(AttrSpec("dim1", "dim"), AttrSpec("dim2", "dim")), draw_attrs=_swap, view=sv.swap_view),
    OpSpec("permute", "shape", 1, lambda x, a: x[0].permute(*a["axes"]), permute_rule, T.EXACT,
           attrs=(AttrSpec("axes", "dims"),), draw_attrs=_permute, view=sv.permute_view),
    OpSpec("unsqueeze", "shape", 1, lambda x, a: x[0].unsqueeze(a["dim"]), unsqueeze_rule, T.EXACT,
           attrs=A_DIM, draw_attrs=_unsqueeze, view=sv.unsqueeze_view),
    OpSpec("squeeze", "shape", 1, lambda x, a: x[0].squeeze(a["dim"]), squeeze_rule, T.EXACT,
           attrs=A_DIM, draw_attrs=_squeeze, view=sv.squeeze_view),
    OpSpec("flip", "shape", 1, lambda x, a: x[0].flip(a["axes"]), flip_rule, T.EXACT,
           attrs=(AttrSpec("axes", "dims"),), draw_attrs=_flip, keeps_layout=True),
    OpSpec("slice", "index", 1, _slice_lower, slice_rule, T.EXACT,
           attrs=(AttrSpec("ranges", "ranges"),), draw_attrs=_slice, view=sv.same_view),
    OpSpec("cat", "shape", VARIADIC, lambda x, a: torch.cat(list(x), a["dim"]), cat_rule, T.EXACT,
           attrs=A_DIM, draw_attrs=_dim),
    OpSpec("stack", "shape", VARIADIC, lambda x, a: torch.stack(list(x), a["dim"]), stack_rule, T.EXACT,
           attrs=A_DIM, draw_attrs=_stack),
    OpSpec("expand", "shape", 1, lambda x, a: x[0].expand(*a["shape"]), expand_rule, T.EXACT,
           attrs=(AttrSpec("shape", "shape"),), draw_attrs=_expand, view=sv.expand_view),
    OpSpec("repeat_dim", "shape", 1, _repeat_lower, repeat_rule, T.EXACT,
           attrs=(AttrSpec("dim", "dim"), AttrSpec("times", "int")), draw_attrs=_repeat),
    OpSpec("gather", "index", 1, lambda x, a: torch.gather(x[0], a["dim"], _int_tensor(a["indices"])),
           gather_rule, T.EXACT, attrs=(AttrSpec("dim", "dim"), AttrSpec("indices", "int_tensor")),
           draw_attrs=_gather),
    OpSpec("select", "index", 1,
           lambda x, a: torch.index_select(x[0], a["dim"], torch.tensor(a["indices"], dtype=torch.int64)),
           select_rule, T.EXACT, attrs=(AttrSpec("dim", "dim"), AttrSpec("indices", "ints")),
           draw_attrs=_select),
    OpSpec("mask_fill", "index", 1, lambda x, a: x[0].masked_fill(_bool_tensor(a["mask"]), a["value"]),
           mask_rule, T.EXACT, attrs=(AttrSpec("mask", "bool_tensor"), AttrSpec("value", "float")),
           draw_attrs=_mask(True)),
    OpSpec("mask_where", "index", 2, lambda x, a: torch.where(_bool_tensor(a["mask"]), x[1], x[0]),
           mask_rule, T.EXACT, attrs=(AttrSpec("mask", "bool_tensor"),), draw_attrs=_mask(False)),
)

CATALOG: dict[str, OpSpec] = {op.name: op for op in OPS}
assert len(CATALOG) == len(OPS), "duplicate op name in the catalog"


def get(name: str) -> OpSpec:
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {', '.join(sorted(CATALOG))}") from None


def families() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for op in OPS:
        out.setdefault(op.family, []).append(op.name)
    return out


def _is_finite_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
