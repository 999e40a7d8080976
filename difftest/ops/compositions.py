"""How burn computes the ops it has no autodiff node of their own for: the catalog ops it builds
each of (burn-tensor's API, or a default of burn-backend's traits that burn-autodiff inherits),
as data of the op's catalog entry (`OpSpec.composed`).

One wrong derivative in an op burn builds others from (mul, reshape, div_scalar) shows in each
of them (square is x * x, silu x * sigmoid(x), var ends in a div_scalar, squeeze is a reshape),
and each used to be a finding of its own. The localiser (findings/composed.py) runs a failing
composite as these parts, and when burn computes the composite exactly as the parts and the
parts fail too, it names the part at fault: one bug, one finding. A composition declared wrong
cannot blame a part: burn's numbers for the composite and for the parts then differ, and the
composite keeps its own name. A mask burn computes from the input (clamp, maximum, leaky_relu,
softplus) is computed here from the call's data, in its dtype, and enters the parts as the
constant mask of a mask_fill or mask_where. Not declared: the ops with a node of their own
(gelu, sigmoid, mean, cat) and compositions the catalog cannot spell (an argmax's indices; a
broadcasting maximum, whose mask_where would need its operands expanded).

Torch-free at import: functions of the call, cited to where burn spells them; masks import torch
when they are computed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from difftest.program.dtypes import FLOAT_DTYPES
from difftest.program.parts import Call, Composition, Part
from difftest.program.shapes import Shape

if TYPE_CHECKING:
    import torch



def _dim(call: Call, rank: int | None = None) -> int:
    r = len(call.shapes[0]) if rank is None else rank
    return int(call.attrs["dim"]) % r


def square(call: Call) -> tuple[Part, ...]:
    # burn-tensor src/bridge/ops/float.rs: square is float_powi_scalar(x, 2), which burn-autodiff
    # (src/ops/tensor.rs, float_powi_scalar) runs as float_mul(x, x)
    return (Part("mul", (0, 0)),)


def _integral_power(e: int) -> tuple[Part, ...] | None:
    # burn-autodiff src/ops/tensor.rs, float_powi_scalar: 2 -> x * x, -1 -> recip, -2 -> recip(x * x),
    # 0 -> a node of its own, 1 -> x itself; any other -> the PowfScalar node (float_powi_scalar_impl
    # defers to float_powf_scalar_impl), which powf_scalar of that exponent reaches too
    return {2: (Part("mul", (0, 0)),), -1: (Part("recip", (0,)),),
            -2: (Part("mul", (0, 0)), Part("recip", ("p0",)))}.get(e)


def powi_scalar(call: Call) -> tuple[Part, ...] | None:
    e = int(call.attrs["exponent"])
    if e in (0, 1):
        return None
    return _integral_power(e) or (Part("powf_scalar", (0,), {"exponent": float(e)}),)


def powf_scalar(call: Call) -> tuple[Part, ...] | None:
    # burn-backend src/backend/ops/tensor.rs, float_powf_scalar: an integral exponent goes to
    # float_powi_scalar, whose 2, -1, -2 are compositions (0 is not: measured, burn's powf_scalar
    # of 0.0 and powi_scalar of 0 differ in the result's flags)
    e = float(call.attrs["exponent"])
    return _integral_power(int(e)) if e.is_integer() else None


def silu(call: Call) -> tuple[Part, ...]:
    # burn-tensor src/tensor/activation/base.rs: tensor.clone().mul(sigmoid(tensor))
    return (Part("sigmoid", (0,)), Part("mul", (0, "p0")))


def mish(call: Call) -> tuple[Part, ...]:
    # burn-tensor src/tensor/activation/base.rs: tensor.clone().mul(softplus(tensor, 1.0).tanh())
    return (Part("softplus", (0,), {"beta": 1.0}), Part("tanh", ("p0",)), Part("mul", (0, "p1")))


def _variance(d: int, n: int) -> tuple[Part, ...]:
    # burn-tensor src/tensor/stats/mod.rs, var_with_mean_n: tensor.sub(mean).square().sum_dim(dim)
    # .div_scalar(n), the mean a mean_dim of the tensor
    return (Part("mean_dim", (0,), {"dim": d}), Part("sub", (0, "p0")), Part("square", ("p1",)),
            Part("sum_dim", ("p2",), {"dim": d}), Part("div_scalar", ("p3",), {"scalar": float(n)}))


def var(call: Call) -> tuple[Part, ...]:
    d = _dim(call)
    return _variance(d, call.shapes[0][d] - 1)


def var_bias(call: Call) -> tuple[Part, ...]:
    d = _dim(call)
    return _variance(d, call.shapes[0][d])


def var_mean(call: Call) -> tuple[Part, ...]:
    # burn-tensor src/tensor/api/float.rs, var_mean: the mean_dim, and the variance with it
    d = _dim(call)
    return _variance(d, call.shapes[0][d] - 1) if call.attrs["part"] == 0 else (Part("mean_dim", (0,), {"dim": d}),)


def mse_loss(call: Call) -> tuple[Part, ...]:
    # burn-nn src/loss/mse.rs: logits.sub(targets).square(), then mean()
    return (Part("sub", (0, 1)), Part("square", ("p0",)), Part("mean", ("p1",)))


def softmax(call: Call) -> tuple[Part, ...]:
    # burn-backend src/backend/ops/activation.rs, softmax: the max_dim of the detached input
    # subtracted, exp, divided by its sum_dim (burn-autodiff has no softmax node)
    d = _dim(call)
    return (Part("detach", (0,)), Part("max_dim", ("p0",), {"dim": d}), Part("sub", (0, "p1")),
            Part("exp", ("p2",)), Part("sum_dim", ("p3",), {"dim": d}), Part("div", ("p3", "p4")))


def log_softmax(call: Call) -> tuple[Part, ...]:
    # burn-backend src/backend/ops/activation.rs, log_softmax: shifted - log(sum_dim(exp(shifted)))
    d = _dim(call)
    return (Part("detach", (0,)), Part("max_dim", ("p0",), {"dim": d}), Part("sub", (0, "p1")),
            Part("exp", ("p2",)), Part("sum_dim", ("p3",), {"dim": d}), Part("log", ("p4",)),
            Part("sub", ("p2", "p5")))


def quiet_softmax(call: Call) -> tuple[Part, ...] | None:
    # burn-tensor src/tensor/activation/base.rs, quiet_softmax (no backend op of its own): the
    # max_dim of the detached input, a max of -inf set to 0 (a mask burn computes from the data),
    # then exp(x - max) / (sum_dim(exp(x - max)) + exp(-max))
    x = _values(call, 0)
    if x is None:
        return None
    d = _dim(call)
    top = x.amax(dim=d, keepdim=True)
    return (Part("detach", (0,)), Part("max_dim", ("p0",), {"dim": d}),
            Part("mask_fill", ("p1",), {"mask": _mask(top == float("-inf")), "value": 0.0}),
            Part("sub", (0, "p2")), Part("exp", ("p3",)), Part("sum_dim", ("p4",), {"dim": d}),
            Part("neg", ("p2",)), Part("exp", ("p6",)), Part("add", ("p5", "p7")), Part("div", ("p4", "p8")))


def transpose(call: Call) -> tuple[Part, ...]:
    # burn-backend src/backend/ops/tensor.rs, float_transpose: swap_dims of the last two
    r = len(call.shapes[0])
    return (Part("swap_dims", (0,), {"dim1": r - 2, "dim2": r - 1}),)


def squeeze(call: Call) -> tuple[Part, ...]:
    # burn-tensor src/tensor/api/base.rs, squeeze_dim: a reshape without the dim
    d, s = _dim(call), list(call.shapes[0])
    return (Part("reshape", (0,), {"shape": s[:d] + s[d + 1:]}),)


def unsqueeze(call: Call) -> tuple[Part, ...]:
    # burn-tensor src/tensor/api/base.rs, unsqueeze_dim: a reshape with a size-1 dim at dim
    s = list(call.shapes[0])
    d = _dim(call, len(s) + 1)
    return (Part("reshape", (0,), {"shape": s[:d] + [1] + s[d:]}),)


def _narrowed(shape: Shape, d: int, start: int, length: int) -> tuple[Part, ...]:
    # burn-tensor src/tensor/api/base.rs, narrow: a slice, the whole of every other dim
    ranges = [[0, n] for n in shape[:d]] + [[start, start + length]]
    return (Part("slice", (0,), {"ranges": ranges}),)


def narrow(call: Call) -> tuple[Part, ...]:
    return _narrowed(call.shapes[0], _dim(call), int(call.attrs["start"]), int(call.attrs["length"]))


def _pieces(size: int, chunks: int) -> list[tuple[int, int]]:
    """burn-tensor src/tensor/api/base.rs, chunk: its (start, length) pieces of a dim of `size`."""
    if size < chunks:
        return [(i, 1) for i in range(size)]
    if size % chunks == 0:
        n = size // chunks
        return [(k * n, n) for k in range(chunks)]
    n = size // chunks + 1
    return [(k * n, n) for k in range(chunks - 1)] + [((chunks - 1) * n, size % n)]


def chunk(call: Call) -> tuple[Part, ...] | None:
    d, part = _dim(call), int(call.attrs["part"])
    pieces = _pieces(call.shapes[0][d], int(call.attrs["chunks"])) if int(call.attrs["chunks"]) > 0 else []
    if not 0 <= part < len(pieces) or pieces[part][1] <= 0:
        return None
    return _narrowed(call.shapes[0], d, *pieces[part])


def split(call: Call) -> tuple[Part, ...] | None:
    # burn-tensor src/tensor/api/base.rs, split: narrows of split_size, the last shorter
    d, part, size = _dim(call), int(call.attrs["part"]), int(call.attrs["split_size"])
    start = part * size
    if size <= 0 or part < 0 or start >= call.shapes[0][d]:
        return None
    return _narrowed(call.shapes[0], d, start, min(size, call.shapes[0][d] - start))


def stack(call: Call) -> tuple[Part, ...]:
    # burn-tensor src/tensor/api/base.rs, stack: each input unsqueezed at dim, then a cat along it
    d = _dim(call, len(call.shapes[0]) + 1)
    return (*(Part("unsqueeze", (k,), {"dim": d}) for k in range(len(call.shapes))),
            Part("cat", tuple(f"p{k}" for k in range(len(call.shapes))), {"dim": d}))


def _extreme(op: str) -> Composition:
    def parts(call: Call) -> tuple[Part, ...]:
        # burn-backend src/backend/ops/tensor.rs, float_max / float_min: a reshape to one dim,
        # then max_dim / min_dim along it
        n = 1
        for s in call.shapes[0]:
            n *= s
        return (Part("reshape", (0,), {"shape": [n]}), Part(op, ("p0",), {"dim": 0}))
    return parts


full_max = _extreme("max_dim")
full_min = _extreme("min_dim")


# ---------------------------------------------------------------- compositions through a mask

def _values(call: Call, k: int) -> torch.Tensor | None:
    """Input k's values as burn holds them (in the call's dtype), or None without data."""
    import torch

    if call.data is None or k >= len(call.data) or call.dtype not in FLOAT_DTYPES:
        return None
    return torch.tensor(list(call.data[k]), dtype=torch.float64).to(getattr(torch, call.dtype)).reshape(
        tuple(call.shapes[k]))


def _scalar(call: Call, v: float) -> torch.Tensor:
    """A scalar as burn compares it with a tensor of the call's dtype: converted to that dtype."""
    import torch

    return torch.tensor(float(v), dtype=torch.float64).to(getattr(torch, call.dtype))


def _mask(m: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(m.shape), "data": [bool(b) for b in m.reshape(-1).tolist()]}


def clamp_min(call: Call) -> tuple[Part, ...] | None:
    # burn-backend src/backend/ops/tensor.rs, float_clamp_min: mask_fill(x, x < min, min)
    x = _values(call, 0)
    lo = call.attrs["min"]
    return None if x is None else (Part("mask_fill", (0,), {"mask": _mask(x < _scalar(call, lo)), "value": lo}),)


def clamp_max(call: Call) -> tuple[Part, ...] | None:
    # burn-backend src/backend/ops/tensor.rs, float_clamp_max: mask_fill(x, x > max, max)
    x = _values(call, 0)
    hi = call.attrs["max"]
    return None if x is None else (Part("mask_fill", (0,), {"mask": _mask(x > _scalar(call, hi)), "value": hi}),)


def clamp(call: Call) -> tuple[Part, ...]:
    # burn-backend src/backend/ops/tensor.rs, float_clamp: clamp_min(clamp_max(x, max), min)
    return (Part("clamp_max", (0,), {"max": call.attrs["max"]}), Part("clamp_min", ("p0",), {"min": call.attrs["min"]}))


def _pair(take_other: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Composition:
    def parts(call: Call) -> tuple[Part, ...] | None:
        # burn-tensor src/tensor/api/orderable.rs, max_pair / min_pair: x.mask_where(mask, y), the
        # mask x < y (max_pair) or y < x (min_pair); of one shape only (mask_where's operands)
        x, y = _values(call, 0), _values(call, 1)
        if x is None or y is None or x.shape != y.shape:
            return None
        return (Part("mask_where", (0, 1), {"mask": _mask(take_other(x, y))}),)
    return parts


maximum = _pair(lambda x, y: x < y)
minimum = _pair(lambda x, y: y < x)


def leaky_relu(call: Call) -> tuple[Part, ...] | None:
    # burn-backend src/backend/ops/activation.rs, leaky_relu: x.mask_where(x < 0, x * slope)
    x = _values(call, 0)
    if x is None:
        return None
    return (Part("mul_scalar", (0,), {"scalar": call.attrs["slope"]}),
            Part("mask_where", (0, "p0"), {"mask": _mask(x < 0)}))


def prelu(call: Call) -> tuple[Part, ...] | None:
    # burn-tensor src/tensor/activation/base.rs, prelu: the weight reshaped to [1, channels, 1, ...]
    # (or all ones), then burn-backend's prelu: x.mask_where(x < 0, x * weight)
    x = _values(call, 0)
    if x is None:
        return None
    rank, n = len(call.shapes[0]), call.shapes[1][0]
    shape = [1] * rank
    if n != 1:
        shape[1] = n
    return (Part("reshape", (1,), {"shape": shape}), Part("mul", (0, "p0")),
            Part("mask_where", (0, "p1"), {"mask": _mask(x < 0)}))


def _triangle(keep_lower: bool) -> Composition:
    def parts(call: Call) -> tuple[Part, ...]:
        # burn-tensor src/tensor/api/numeric.rs, tril / triu: mask_fill(x, mask, 0), the mask
        # (api/bool.rs, tri_mask) of the last two dims: col - row > diagonal for tril, < for triu
        import torch

        shape, k = list(call.shapes[0]), int(call.attrs["diagonal"])
        h, w = shape[-2], shape[-1]
        offset = torch.arange(w).reshape(1, w) - torch.arange(h).reshape(h, 1)
        fill = offset > k if keep_lower else offset < k
        return (Part("mask_fill", (0,), {"mask": _mask(fill.expand(*shape)), "value": 0.0}),)
    return parts


tril = _triangle(True)
triu = _triangle(False)

# burn-tensor src/tensor/activation/base.rs, max_finite_exp_arg: the threshold above which softplus
# is the identity, at most DEFAULT_SOFTPLUS_THRESHOLD (20)
SOFTPLUS_LIMIT = {"float16": 11.0, "float64": 709.0, "float32": 88.0, "bfloat16": 88.0}


def softplus(call: Call) -> tuple[Part, ...] | None:
    # burn-tensor src/tensor/activation/base.rs, softplus_with_threshold: scaled = x * beta; the
    # mask scaled > threshold; scaled.mask_fill(mask, threshold).exp().log1p().div_scalar(beta),
    # then .mask_where(mask, x)
    x = _values(call, 0)
    if x is None or call.dtype not in SOFTPLUS_LIMIT:
        return None
    beta = call.attrs["beta"]
    threshold = min(20.0, SOFTPLUS_LIMIT[call.dtype])
    mask = _mask(x * _scalar(call, beta) > _scalar(call, threshold))
    return (Part("mul_scalar", (0,), {"scalar": beta}), Part("mask_fill", ("p0",), {"mask": mask, "value": threshold}),
            Part("exp", ("p1",)), Part("log1p", ("p2",)), Part("div_scalar", ("p3",), {"scalar": beta}),
            Part("mask_where", ("p4", 0), {"mask": mask}))


def hard_sigmoid(call: Call) -> tuple[Part, ...]:
    # burn-backend src/backend/ops/activation.rs, hard_sigmoid: in f32, clamp(x * alpha + beta, 0, 1),
    # cast back to the input's dtype (the catalog's alpha 1/6 and beta 1/2)
    return (Part("cast", (0,), {"dtype": "float32"}), Part("mul_scalar", ("p0",), {"scalar": 1.0 / 6.0}),
            Part("add_scalar", ("p1",), {"scalar": 0.5}), Part("clamp", ("p2",), {"min": 0.0, "max": 1.0}),
            Part("cast", ("p3",), {"dtype": call.dtype}))


# ---------------------------------------------------------------- losses

def cross_entropy_with_logits(call: Call) -> tuple[Part, ...]:
    # burn-tensor src/tensor/loss/mod.rs: log_softmax(logits, D - 1).mul(targets).sum_dim(D - 1).mean().neg()
    d = len(call.shapes[0]) - 1
    return (Part("log_softmax", (0,), {"dim": d}), Part("mul", ("p0", 1)), Part("sum_dim", ("p1",), {"dim": d}),
            Part("mean", ("p2",)), Part("neg", ("p3",)))


def cross_entropy(call: Call) -> tuple[Part, ...]:
    # burn-nn src/loss/cross_entropy.rs, CrossEntropyLoss::forward with the default config (no
    # weights, padding or smoothing; logits): log_softmax(logits, 1) gathered at the targets as
    # [batch, 1] (constants of the call), reshaped to [batch], then mean().neg()
    b = call.shapes[0][0]
    targets = [int(v) for v in call.attrs["targets"]]
    return (Part("log_softmax", (0,), {"dim": 1}),
            Part("gather", ("p0",), {"dim": 1, "indices": {"shape": [b, 1], "data": targets}}),
            Part("reshape", ("p1",), {"shape": [b]}), Part("mean", ("p2",)), Part("neg", ("p3",)))


def _targets(call: Call, f: Callable[[int], float]) -> Part:
    t = call.attrs["targets"]
    return Part("const", (), {"shape": list(t["shape"]), "data": [f(int(v)) for v in t["data"]]})


def binary_cross_entropy_with_logits(call: Call) -> tuple[Part, ...]:
    # burn-nn src/loss/binary_cross_entropy.rs, forward with logits: (targets.neg() + 1) * logits -
    # log_sigmoid(logits), then mean(). The targets' own ops are kept: burn's backward visits a
    # node after those of greater depth, and the untracked neg and add before the mul make it
    # deeper than the log_sigmoid, which decides the order the two contributions to the logits
    # are summed in
    return (_targets(call, float), Part("neg", ("p0",)), Part("add_scalar", ("p1",), {"scalar": 1.0}),
            Part("mul", ("p2", 0)), Part("log_sigmoid", (0,)), Part("sub", ("p3", "p4")), Part("mean", ("p5",)))


def binary_cross_entropy(call: Call) -> tuple[Part, ...]:
    # burn-nn src/loss/binary_cross_entropy.rs, forward on probabilities: (targets - 1) *
    # log1p(-x).clamp_min(-100) - targets * log(x).clamp_min(-100), then mean() (the targets' own
    # ops kept, as above)
    return (_targets(call, float), Part("sub_scalar", ("p0",), {"scalar": 1.0}), Part("neg", (0,)),
            Part("log1p", ("p2",)), Part("clamp_min", ("p3",), {"min": -100.0}), Part("mul", ("p1", "p4")),
            Part("log", (0,)), Part("clamp_min", ("p6",), {"min": -100.0}), Part("mul", ("p0", "p7")),
            Part("sub", ("p5", "p8")), Part("mean", ("p9",)))


# ---------------------------------------------------------------- gathers at computed indices

def _gather_at(indices: Callable[[torch.Tensor, int, Call], torch.Tensor]) -> Composition:
    def parts(call: Call) -> tuple[Part, ...] | None:
        # the catalog's templates: burn's gather at indices it computes from the input without a
        # gradient (argmax, argmin, sort_with_indices, topk_with_indices), constants of the call;
        # where burn breaks a tie otherwise, its numbers differ from the parts' and no part is named
        x = _values(call, 0)
        if x is None:
            return None
        d = _dim(call)
        idx = indices(x, d, call)
        return (Part("gather", (0,), {"dim": d, "indices": {"shape": list(idx.shape),
                                                            "data": [int(v) for v in idx.reshape(-1).tolist()]}}),)
    return parts


gather_argmax = _gather_at(lambda x, d, call: x.argmax(d, keepdim=True))
gather_argmin = _gather_at(lambda x, d, call: x.argmin(d, keepdim=True))
gather_sort_indices = _gather_at(lambda x, d, call: x.sort(dim=d, stable=True).indices)
gather_topk_indices = _gather_at(lambda x, d, call: x.topk(int(call.attrs["k"]), d).indices)
