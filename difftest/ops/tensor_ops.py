"""The data of the tensor ops, activations and losses (catalog.py, the block at the end of
`OPS`): their domains, attribute samplers, partner rules, shape rules and terms, kept apart from
the older ops' (domains.py, sampling.py, shape_rules.py, terms.py) but written the same way.
Torch-free at import: predicates and terms use tensor methods of their arguments.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from difftest.choices import Choices
from difftest.ops.domains import KINK_GAP, Domain, off_or_on
from difftest.ops.sampling import Partners, slice_ranges
from difftest.ops.shape_rules import slice_rule
from difftest.ops.spec import GradTerms, ValueTerms
from difftest.ops.tolerance import F32_EPS, scale
from difftest.program.dtypes import EPS
from difftest.program.ir import Shape, numel
from difftest.program.shapes import ShapeError, check_dim, same_shapes

if TYPE_CHECKING:
    from torch import Tensor

Attrs = dict[str, Any]

# ---------------------------------------------------------------- domains


def _distinct_along(x: Tensor, dim: int, exact: bool = False) -> bool:
    """The values along dim differ by more than the kink gap (with `exact`, or are exactly equal)."""
    if x.shape[dim] < 2:
        return True
    s = x.double().sort(dim=dim).values
    gaps = s.narrow(dim, 1, x.shape[dim] - 1) - s.narrow(dim, 0, x.shape[dim] - 1)
    ok = gaps > KINK_GAP
    return bool((ok | (gaps == 0)).all() if exact else ok.all())


DISTINCT_ALONG_DIM = Domain(
    "distinct-along-dim",
    "sort/topk/cummax/cummin route each output's gradient to the input it came from; equal values "
    "(ties) make that index ambiguous: the values along dim differ by >= 0.01",
    lambda xs, a: _distinct_along(xs[0], a["dim"]),
    tags=("kink",),
    at_kinks=lambda xs, a: _distinct_along(xs[0], a["dim"], exact=True),
)
HARD_SIGMOID = Domain(
    "hard-sigmoid-off-bounds",
    "hard_sigmoid (alpha 1/6, beta 1/2) has kinks at x = -3 and x = 3: |x -+ 3| >= 0.01",
    lambda xs, a: bool((((xs[0] + 3.0).abs() >= KINK_GAP) & ((xs[0] - 3.0).abs() >= KINK_GAP)).all()),
    ((-4.0, 4.0),),
    tags=("kink",),
    boundary=((-3.0, 3.0),),
    at_kinks=lambda xs, a: bool((off_or_on(xs[0] + 3.0) & off_or_on(xs[0] - 3.0)).all()),
)
SOFTPLUS = Domain(
    "softplus-below-threshold",
    "softplus (and mish, through softplus with beta 1) switches to the identity where "
    "beta * x > 20 (both frameworks' threshold): beta * x <= 18",
    lambda xs, a: bool((xs[0] * float(a.get("beta", 1.0)) <= 18.0).all()),
    tags=("kink",),
)
PRELU = Domain(
    "prelu-off-zero",
    "prelu is not differentiable at x = 0: |x| >= 0.01 (the weight is free)",
    lambda xs, a: bool((xs[0].abs() >= KINK_GAP).all()),
    ((-3.0, 3.0), (-1.0, 1.0)),
    tags=("kink",),
    boundary=((0.0, -0.0), ()),
    at_kinks=lambda xs, a: bool(off_or_on(xs[0]).all()),
)
QUIET_SOFTMAX = Domain(
    "quiet-softmax-range",
    "burn's quiet_softmax divides by sum(exp(x - max)) + exp(-max), which overflows float32 "
    "for max < -88: |x| <= 30",
    lambda xs, a: bool((xs[0].abs() <= 30.0).all()),
    boundary=((-30.0, 30.0),),
)
PROBABILITIES = Domain(
    "probabilities",
    "binary_cross_entropy takes probabilities: x in [0.05, 0.95] keeps log(x) and log(1 - x) "
    "moderate (burn clamps both logs at -100, PyTorch too)",
    lambda xs, a: bool(((xs[0] >= 0.05) & (xs[0] <= 0.95)).all()),
    ((0.1, 0.9),),
    boundary=((0.05, 0.95, 0.5),),
)
SOFT_TARGETS = Domain(
    "soft-targets",
    "cross-entropy with probability targets: the targets (input 1) in [0, 1]",
    lambda xs, a: bool(((xs[1] >= 0.0) & (xs[1] <= 1.0)).all()),
    ((-3.0, 3.0), (0.0, 1.0)),
    boundary=((), (0.0, 1.0)),
)

# ---------------------------------------------------------------- attribute samplers


def scatter(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    """Indices of the destination's shape but along dim (1 to 4 there), repeats allowed (they
    accumulate)."""
    s = shapes[0]
    d = c.integer(0, len(s) - 1)
    ishape = list(s)
    ishape[d] = c.integer(1, 4)
    data = [c.integer(0, s[d] - 1) for _ in range(numel(tuple(ishape)))]
    return {"dim": d, "indices": {"shape": ishape, "data": data}}


def select_assign(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    s = shapes[0]
    d = c.integer(0, len(s) - 1)
    return {"dim": d, "indices": [c.integer(0, s[d] - 1) for _ in range(c.integer(1, 4))]}


def slice_assign(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    return slice_ranges(c, shapes)


def topk(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    s = shapes[0]
    d = c.integer(0, len(s) - 1)
    return {"dim": d, "k": c.integer(1, s[d])}


def diagonal(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    return {"diagonal": c.integer(-2, 2)}


def narrow(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    s = shapes[0]
    d = c.integer(0, len(s) - 1)
    start = c.integer(0, s[d] - 1)
    return {"dim": d, "start": start, "length": c.integer(1, s[d] - start)}


def variance_dim(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    """A dim of size >= 2 (the unbiased variance of one element divides by 0)."""
    dims = [i for i, n in enumerate(shapes[0]) if n >= 2]
    return {"dim": c.choice(dims)} if dims else None


def class_targets(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    s = shapes[0]
    if len(s) != 2:
        return None
    return {"targets": [c.integer(0, s[1] - 1) for _ in range(s[0])]}


def binary_targets(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    s = shapes[0]
    return {"targets": {"shape": list(s), "data": [c.integer(0, 1) for _ in range(numel(s))]}}


# ---------------------------------------------------------------- partners


def _scattered(c: Choices, first: Shape, attrs: Attrs, max_dim: int) -> Iterator[Shape]:
    yield tuple(attrs["indices"]["shape"])


def _selected(c: Choices, first: Shape, attrs: Attrs, max_dim: int) -> Iterator[Shape]:
    d = attrs["dim"]
    yield first[:d] + (len(attrs["indices"]),) + first[d + 1 :]


def _sliced(c: Choices, first: Shape, attrs: Attrs, max_dim: int) -> Iterator[Shape]:
    yield slice_rule([first], attrs)


def _prelu_weight(c: Choices, first: Shape, attrs: Attrs, max_dim: int) -> Iterator[Shape]:
    yield (first[1],) if len(first) >= 2 and c.boolean() else (1,)


SCATTERED = Partners("scattered", _scattered, after_attrs=True)  # values of the indices' shape
SELECTED = Partners("selected", _selected, after_attrs=True)  # the destination's shape, len(indices) at dim
SLICED = Partners("sliced", _sliced, after_attrs=True)  # the shape of the slice the ranges cut
PRELU_WEIGHT = Partners("prelu-weight", _prelu_weight)  # [1] or [channels] (dim 1)

# ---------------------------------------------------------------- shape rules


def scatter_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s, v = shapes[0], shapes[1]
    d = check_dim(s, attrs["dim"])
    idx = attrs["indices"]
    ishape = tuple(idx["shape"])
    if len(ishape) != len(s) or any(ishape[i] != s[i] for i in range(len(s)) if i != d):
        raise ShapeError(f"scatter indices shape {list(ishape)} must match {list(s)} off dim {d}")
    if v != ishape:
        raise ShapeError(f"scatter values shape {list(v)} must equal the indices shape {list(ishape)}")
    if any(not 0 <= i < s[d] for i in idx["data"]):
        raise ShapeError(f"scatter index out of range for dim {d} of size {s[d]}")
    return s


def select_assign_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s, v = shapes[0], shapes[1]
    d = check_dim(s, attrs["dim"])
    idx = attrs["indices"]
    if not idx or any(not 0 <= i < s[d] for i in idx):
        raise ShapeError(f"select_assign indices {idx} out of range for dim {d} of size {s[d]}")
    want = s[:d] + (len(idx),) + s[d + 1 :]
    if v != want:
        raise ShapeError(f"select_assign values shape {list(v)} must be {list(want)}")
    return s


def slice_assign_saves(attrs: Attrs, shapes: Sequence[Shape]) -> bool:
    """PyTorch's `t[slices] = v` records CopySlices, which saves, unless the slices cover the
    whole tensor: then it is a plain copy, which saves nothing (measured)."""
    x = shapes[0]
    return not all(r[0] == 0 and r[1] == x[d] for d, r in enumerate(attrs["ranges"]))


def slice_assign_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    want = slice_rule(shapes[:1], attrs)
    if shapes[1] != want:
        raise ShapeError(f"slice_assign values shape {list(shapes[1])} must be the slice's {list(want)}")
    return shapes[0]


def topk_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    d = check_dim(s, attrs["dim"])
    k = attrs["k"]
    if not 1 <= k <= s[d]:
        raise ShapeError(f"topk k={k} outside 1..{s[d]} (dim {d})")
    return s[:d] + (k,) + s[d + 1 :]


def tri_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    if len(shapes[0]) < 2:
        raise ShapeError("tril/triu need rank >= 2")
    return shapes[0]


def narrow_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    d = check_dim(s, attrs["dim"])
    start, length = attrs["start"], attrs["length"]
    if start < 0 or length < 1 or start + length > s[d]:
        raise ShapeError(f"narrow start={start} length={length} does not fit dim {d} of size {s[d]}")
    return s[:d] + (length,) + s[d + 1 :]


def variance_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    d = check_dim(s, attrs["dim"])
    if s[d] < 2:
        raise ShapeError(f"var along dim {d} of size 1 (the unbiased variance divides by n - 1 = 0)")
    return s[:d] + (1,) + s[d + 1 :]


def class_loss_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = shapes[0]
    if len(s) != 2:
        raise ShapeError(f"cross_entropy takes logits [batch, classes], got {list(s)}")
    t = attrs["targets"]
    if len(t) != s[0] or any(not 0 <= i < s[1] for i in t):
        raise ShapeError(f"cross_entropy targets {t}: one class in 0..{s[1] - 1} per row of {list(s)}")
    return (1,)


def pair_loss_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    same_shapes(shapes, "losses")
    return (1,)


def logits_probs_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = same_shapes(shapes, "cross_entropy_with_logits")
    if len(s) != 2:
        raise ShapeError(f"cross_entropy_with_logits takes [batch, classes] logits and targets, got {list(s)}")
    return (1,)


def binary_loss_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    t = attrs["targets"]
    if tuple(t["shape"]) != shapes[0] or any(v not in (0, 1) for v in t["data"]):
        raise ShapeError(f"binary cross-entropy targets: 0/1 of the input's shape {list(shapes[0])}")
    return (1,)


def prelu_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s, w = shapes[0], shapes[1]
    if len(w) != 1 or not (w[0] == 1 or (len(s) >= 2 and w[0] == s[1])):
        raise ShapeError(f"prelu weight {list(w)}: [1] or [channels] (dim 1 of {list(s)})")
    return s


def cross_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    s = same_shapes(shapes, "cross")
    d = check_dim(s, attrs["dim"])
    if s[d] != 3:
        raise ShapeError(f"cross: dim {d} of {list(s)} has size {s[d]}; it needs 3")
    return s


def cross_dim(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    """A dim of size 3 (the cross product's), if the input has one."""
    dims = [i for i, n in enumerate(shapes[0]) if n == 3]
    return {"dim": c.choice(dims)} if dims else None


# ---------------------------------------------------------------- reduced extents


def scatter_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    return int(attrs["indices"]["shape"][attrs["dim"]]) + 1  # the destination plus what lands on it


def select_assign_extent(shapes: Sequence[Shape], attrs: Attrs) -> int:
    return len(attrs["indices"]) + 1


# ---------------------------------------------------------------- terms


def cross_entropy_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # (softmax - one_hot(targets)) / batch: where the target's probability is near 1 the terms
    # cancel (burn: log_softmax, then gather, mean and neg)
    s = x[0].softmax(1)
    hot = s.new_zeros(s.shape)
    for row, cls in enumerate(a["targets"]):
        hot[row, cls] = 1.0
    return [g * (s + hot) / s.shape[0]]


def _variance_value(correction: int) -> ValueTerms:
    def terms(x: Sequence[Tensor], a: Attrs, dtype: str) -> Tensor:
        # burn: mean, then sum((x - mean)^2) / (n - correction). The float32 mean is off by
        # d ~ eps sqrt(n) mean|x|; the first-order term -2 d sum(x - mean) vanishes, n d^2 remains,
        # which is all there is where the values are equal (the variance 0): the term
        # eps n^1.5 mean|x|^2 (times the accumulation noise eps sqrt(n), n d^2).
        # The float64 reference is no two-pass: PyTorch's float64 var (over a strided dim, and
        # var_mean) is a Welford pass, M2 += (x_k - m_{k-1}) (x_k - m_k), whose running mean m_k
        # rounds relative to |mean|, not to the deviations: first order, eps64 sqrt(n) |mean|
        # sum|x - mean| / (n - c) (measured: at most 0.2 sqrt(n) of it, n = 2 to 300). Float32's
        # own rounding, measured for a float64 program (tolerance.measured_in), cannot show it:
        # PyTorch's float32 var accumulates in float64. Seed 12's program 7023: var of
        # [1.389, 1.400, 1.433], PyTorch float64 14 ulps off the exact 5.43654977268678e-4, burn 1.
        # A float64 size in every dtype: the injected noise is eps * sqrt(n) * these terms.
        d = a["dim"]
        n = x[0].shape[d]
        mean = x[0].mean(d, keepdim=True)
        centred = ((x[0] - mean) ** 2).sum(d, keepdim=True)
        spread = x[0].abs().mean(d, keepdim=True) ** 2 * (F32_EPS * n**1.5)
        running = mean.abs() * (x[0] - mean).abs().sum(d, keepdim=True) * (EPS["float64"] / (F32_EPS * scale(dtype)))
        out: Tensor = (centred + spread + running) / (n - correction)
        return out

    return terms


def _variance_grad(correction: int) -> GradTerms:
    def terms(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
        # burn composes var as sum((x - mean)^2) / (n - c) with mean = x.mean_dim(dim) not
        # detached, so its backward adds the path through the mean:
        #   d/dx_i = 2 (x_i - m) g_i / (n - c) - (1/n) sum_j 2 (x_j - m) g_j / (n - c).
        # Both cancel: the first where x_i is near its mean, the second always where g is constant
        # along dim (exactly 0 then; its float32 value is the rounding of a sum of n terms of size
        # 2 |x_j - m| g_j / (n - c)). PyTorch's VarBackward has the first alone, so an element
        # near its mean shows the second's rounding in burn only. Measured (a float32 campaign,
        # seed 1, var over dim 2 of size 5): an element whose gradient is 7.57e-4 carried 2.45e-8,
        # which is 2 / (n (n - 1)) times the float32 sum of (x_j - m), 2.38e-7; the first term's
        # own terms gave a budget of 9.7e-9. With the second's terms (1/n) sum_j 2 |x_j - m| g /
        # (n - c) = 0.60 there, TERMS_ULPS eps of them is 2.8e-7: the size of that sum's rounding
        # (PyTorch's own autograd through the same composition gives -2.3e-8 on those inputs).
        d = a["dim"]
        n = x[0].shape[d]
        mean = x[0].mean(d, keepdim=True)
        own = g * 2.0 * (x[0].abs() + mean.abs())
        through_mean = (g * 2.0 * (x[0] - mean).abs()).mean(d, keepdim=True)
        return [(own + through_mean) / (n - correction)]

    return terms


var_value, var_grad = _variance_value(1), _variance_grad(1)
var_bias_value, var_bias_grad = _variance_value(0), _variance_grad(0)


def mse_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # 2 (x - y) / n for x, its negation for y: terms of sizes |x| and |y| cancel where x nears
    # y, and a rounding of either (its own, or one made upstream) stays their size
    t = g * 2.0 * (x[0].abs() + x[1].abs()) / x[0].numel()
    return [t, t]


def bce_logits_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # PyTorch: (sigmoid(x) - t) / n; burn: (1 - t) x - log_sigmoid(x), whose gradient is
    # (1 - t) - sigmoid(-x). Either way terms of size ~1 cancel where sigmoid(x) is near the
    # target, leaving float32 noise of their size (burn's quantised to ulps of 1)
    t = x[0].new_tensor(a["targets"]["data"]).reshape(x[0].shape)
    return [g * (x[0].sigmoid() + t + (1.0 - t) + (-x[0]).sigmoid()) / x[0].numel()]


def cross_entropy_probs_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    # logits: (softmax(x) sum(t) - t) / batch, cancelling where softmax matches the targets;
    # targets: -log_softmax(x) / batch
    s = x[0].softmax(1)
    batch = x[0].shape[0]
    return [g * (s * x[1].abs().sum(1, keepdim=True) + x[1].abs()) / batch,
            g * x[0].log_softmax(1).abs() / batch]


# ---------------------------------------------------------------- several outputs: one `part` each
# An op with several outputs is one statement per output: its attribute `part` names which one
# (docs/format.md, "Several outputs"). PyTorch's chunk/split sizes are the reference.


def torch_chunk_lengths(size: int, chunks: int) -> list[int]:
    """torch.chunk's pieces along a dim of `size`: ceil(size / chunks) each, the last shorter,
    as many as that takes (possibly fewer than `chunks`)."""
    step = -(-size // chunks)
    return [min(step, size - start) for start in range(0, size, step)]


def split_lengths(size: int, split_size: int) -> list[int]:
    return [min(split_size, size - start) for start in range(0, size, split_size)]


def chunk(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    s = shapes[0]
    d = c.integer(0, len(s) - 1)
    n = c.integer(1, 4)
    return {"chunks": n, "dim": d, "part": c.integer(0, len(torch_chunk_lengths(s[d], n)) - 1)}


def split(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    s = shapes[0]
    d = c.integer(0, len(s) - 1)
    n = c.integer(1, s[d])
    return {"split_size": n, "dim": d, "part": c.integer(0, len(split_lengths(s[d], n)) - 1)}


def var_mean(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    dims = [i for i, n in enumerate(shapes[0]) if n >= 2]
    return {"dim": c.choice(dims), "part": c.integer(0, 1)} if dims else None


def _part_of(lengths: list[int], shapes: Sequence[Shape], attrs: Attrs, what: str) -> Shape:
    s, d, part = shapes[0], attrs["dim"], attrs["part"]
    if not 0 <= part < len(lengths):
        raise ShapeError(f"{what} part={part}: there are {len(lengths)} parts along dim {d}")
    return s[:d] + (lengths[part],) + s[d + 1 :]


def chunk_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    d = check_dim(shapes[0], attrs["dim"])
    if attrs["chunks"] < 1:
        raise ShapeError("chunk chunks must be >= 1")
    return _part_of(torch_chunk_lengths(shapes[0][d], attrs["chunks"]), shapes, attrs, "chunk")


def split_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    d = check_dim(shapes[0], attrs["dim"])
    if attrs["split_size"] < 1:
        raise ShapeError("split split_size must be >= 1")
    return _part_of(split_lengths(shapes[0][d], attrs["split_size"]), shapes, attrs, "split")


def var_mean_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    if attrs["part"] not in (0, 1):
        raise ShapeError(f"var_mean part={attrs['part']}: 0 (the variance) or 1 (the mean)")
    return variance_rule(shapes, attrs)


def var_mean_value(x: Sequence[Tensor], a: Attrs, dtype: str) -> Tensor:
    if a["part"] == 0:
        return var_value(x, a, dtype)
    return x[0].abs().mean(a["dim"], keepdim=True)


def var_mean_grad(x: Sequence[Tensor], a: Attrs, g: Tensor) -> list[Tensor]:
    if a["part"] == 0:
        return var_grad(x, a, g)
    return [g.expand_as(x[0]) / x[0].shape[a["dim"]]]


# ---------------------------------------------------------------- select_assign with Assign (index_copy)


def select_replace(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    """Distinct indices (with repeats, which one lands is undefined in both frameworks)."""
    s = shapes[0]
    d = c.integer(0, len(s) - 1)
    pool = list(range(s[d]))
    picked = [pool.pop(c.integer(0, len(pool) - 1)) for _ in range(c.integer(1, min(3, s[d])))]
    return {"dim": d, "indices": picked}


def select_replace_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    if len(set(attrs["indices"])) != len(attrs["indices"]):
        raise ShapeError(f"select_replace indices {attrs['indices']} repeat (which value lands is undefined)")
    return select_assign_rule(shapes, attrs)
