"""How burn computes the ops it has no autodiff node of their own for: the catalog ops it builds
each of (burn-tensor's API, or a default of burn-backend's traits that burn-autodiff inherits),
as data of the op's catalog entry (`OpSpec.composed`).

One wrong derivative in an op burn builds others from (mul, reshape, div_scalar) shows in each
of them (square is x * x, silu x * sigmoid(x), var ends in a div_scalar, squeeze is a reshape),
and each used to be a finding of its own. The localiser (findings/composed.py) runs a failing
composite as these parts, and when burn computes the composite exactly as the parts and the
parts fail too, it names the part at fault: one bug, one finding. A composition declared wrong
cannot blame a part: burn's numbers for the composite and for the parts then differ, and the
composite keeps its own name. Compositions the catalog cannot spell exactly are not declared
(a mask burn computes from the input: clamp, leaky_relu, prelu, softplus, hard_sigmoid; the
indices of an argmax), nor those of an op with a node of its own (gelu, sigmoid, mean, cat).

Torch-free: functions of the attributes and input shapes, cited to where burn spells them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from difftest.program.ir import Shape

Attrs = dict[str, Any]


@dataclass(frozen=True)
class Part:
    """One op of a composition: a catalog op, or `detach` (a cut). An input is the composite's
    input at that position (an int) or an earlier part's result, `p<k>` (k its index)."""

    op: str
    inputs: tuple[int | str, ...]
    attrs: Attrs = field(default_factory=dict)


Composition = Callable[[Attrs, Sequence[Shape]], "tuple[Part, ...] | None"]


def _dim(attrs: Attrs, shapes: Sequence[Shape], rank: int | None = None) -> int:
    r = len(shapes[0]) if rank is None else rank
    return int(attrs["dim"]) % r


def square(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    # burn-tensor src/bridge/ops/float.rs: square is float_powi_scalar(x, 2), which burn-autodiff
    # (src/ops/tensor.rs, float_powi_scalar) runs as float_mul(x, x)
    return (Part("mul", (0, 0)),)


def _integral_power(e: int) -> tuple[Part, ...] | None:
    # burn-autodiff src/ops/tensor.rs, float_powi_scalar: 2 -> x * x, -1 -> recip, -2 -> recip(x * x),
    # 0 -> a node of its own, 1 -> x itself; any other -> the PowfScalar node (float_powi_scalar_impl
    # defers to float_powf_scalar_impl), which powf_scalar of that exponent reaches too
    return {2: (Part("mul", (0, 0)),), -1: (Part("recip", (0,)),),
            -2: (Part("mul", (0, 0)), Part("recip", ("p0",)))}.get(e)


def powi_scalar(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...] | None:
    e = int(attrs["exponent"])
    if e in (0, 1):
        return None
    return _integral_power(e) or (Part("powf_scalar", (0,), {"exponent": float(e)}),)


def powf_scalar(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...] | None:
    # burn-backend src/backend/ops/tensor.rs, float_powf_scalar: an integral exponent goes to
    # float_powi_scalar, whose 2, -1, -2 are compositions (0 is not: measured, burn's powf_scalar
    # of 0.0 and powi_scalar of 0 differ in the result's flags)
    e = float(attrs["exponent"])
    return _integral_power(int(e)) if e.is_integer() else None


def silu(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    # burn-tensor src/tensor/activation/base.rs: tensor.clone().mul(sigmoid(tensor))
    return (Part("sigmoid", (0,)), Part("mul", (0, "p0")))


def mish(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    # burn-tensor src/tensor/activation/base.rs: tensor.clone().mul(softplus(tensor, 1.0).tanh())
    return (Part("softplus", (0,), {"beta": 1.0}), Part("tanh", ("p0",)), Part("mul", (0, "p1")))


def _variance(d: int, n: int) -> tuple[Part, ...]:
    # burn-tensor src/tensor/stats/mod.rs, var_with_mean_n: tensor.sub(mean).square().sum_dim(dim)
    # .div_scalar(n), the mean a mean_dim of the tensor
    return (Part("mean_dim", (0,), {"dim": d}), Part("sub", (0, "p0")), Part("square", ("p1",)),
            Part("sum_dim", ("p2",), {"dim": d}), Part("div_scalar", ("p3",), {"scalar": float(n)}))


def var(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    d = _dim(attrs, shapes)
    return _variance(d, shapes[0][d] - 1)


def var_bias(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    d = _dim(attrs, shapes)
    return _variance(d, shapes[0][d])


def var_mean(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    # burn-tensor src/tensor/api/float.rs, var_mean: the mean_dim, and the variance with it
    d = _dim(attrs, shapes)
    return _variance(d, shapes[0][d] - 1) if attrs["part"] == 0 else (Part("mean_dim", (0,), {"dim": d}),)


def mse_loss(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    # burn-nn src/loss/mse.rs: logits.sub(targets).square(), then mean()
    return (Part("sub", (0, 1)), Part("square", ("p0",)), Part("mean", ("p1",)))


def softmax(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    # burn-backend src/backend/ops/activation.rs, softmax: the max_dim of the detached input
    # subtracted, exp, divided by its sum_dim (burn-autodiff has no softmax node)
    d = _dim(attrs, shapes)
    return (Part("detach", (0,)), Part("max_dim", ("p0",), {"dim": d}), Part("sub", (0, "p1")),
            Part("exp", ("p2",)), Part("sum_dim", ("p3",), {"dim": d}), Part("div", ("p3", "p4")))


def log_softmax(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    # burn-backend src/backend/ops/activation.rs, log_softmax: shifted - log(sum_dim(exp(shifted)))
    d = _dim(attrs, shapes)
    return (Part("detach", (0,)), Part("max_dim", ("p0",), {"dim": d}), Part("sub", (0, "p1")),
            Part("exp", ("p2",)), Part("sum_dim", ("p3",), {"dim": d}), Part("log", ("p4",)),
            Part("sub", ("p2", "p5")))


def transpose(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    # burn-backend src/backend/ops/tensor.rs, float_transpose: swap_dims of the last two
    r = len(shapes[0])
    return (Part("swap_dims", (0,), {"dim1": r - 2, "dim2": r - 1}),)


def squeeze(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    # burn-tensor src/tensor/api/base.rs, squeeze_dim: a reshape without the dim
    d, s = _dim(attrs, shapes), list(shapes[0])
    return (Part("reshape", (0,), {"shape": s[:d] + s[d + 1:]}),)


def unsqueeze(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    # burn-tensor src/tensor/api/base.rs, unsqueeze_dim: a reshape with a size-1 dim at dim
    s = list(shapes[0])
    d = _dim(attrs, shapes, len(s) + 1)
    return (Part("reshape", (0,), {"shape": s[:d] + [1] + s[d:]}),)


def _narrowed(shape: Shape, d: int, start: int, length: int) -> tuple[Part, ...]:
    # burn-tensor src/tensor/api/base.rs, narrow: a slice, the whole of every other dim
    ranges = [[0, n] for n in shape[:d]] + [[start, start + length]]
    return (Part("slice", (0,), {"ranges": ranges}),)


def narrow(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    return _narrowed(shapes[0], _dim(attrs, shapes), int(attrs["start"]), int(attrs["length"]))


def _pieces(size: int, chunks: int) -> list[tuple[int, int]]:
    """burn-tensor src/tensor/api/base.rs, chunk: its (start, length) pieces of a dim of `size`."""
    if size < chunks:
        return [(i, 1) for i in range(size)]
    if size % chunks == 0:
        n = size // chunks
        return [(k * n, n) for k in range(chunks)]
    n = size // chunks + 1
    return [(k * n, n) for k in range(chunks - 1)] + [((chunks - 1) * n, size % n)]


def chunk(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...] | None:
    d, part = _dim(attrs, shapes), int(attrs["part"])
    pieces = _pieces(shapes[0][d], int(attrs["chunks"])) if int(attrs["chunks"]) > 0 else []
    if not 0 <= part < len(pieces) or pieces[part][1] <= 0:
        return None
    return _narrowed(shapes[0], d, *pieces[part])


def split(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...] | None:
    # burn-tensor src/tensor/api/base.rs, split: narrows of split_size, the last shorter
    d, part, size = _dim(attrs, shapes), int(attrs["part"]), int(attrs["split_size"])
    start = part * size
    if size <= 0 or part < 0 or start >= shapes[0][d]:
        return None
    return _narrowed(shapes[0], d, start, min(size, shapes[0][d] - start))


def stack(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
    # burn-tensor src/tensor/api/base.rs, stack: each input unsqueezed at dim, then a cat along it
    d = _dim(attrs, shapes, len(shapes[0]) + 1)
    return (*(Part("unsqueeze", (k,), {"dim": d}) for k in range(len(shapes))),
            Part("cat", tuple(f"p{k}" for k in range(len(shapes))), {"dim": d}))


def _extreme(op: str) -> Composition:
    def parts(attrs: Attrs, shapes: Sequence[Shape]) -> tuple[Part, ...]:
        # burn-backend src/backend/ops/tensor.rs, float_max / float_min: a reshape to one dim,
        # then max_dim / min_dim along it
        n = 1
        for s in shapes[0]:
            n *= s
        return (Part("reshape", (0,), {"shape": [n]}), Part(op, ("p0",), {"dim": 0}))
    return parts


full_max = _extreme("max_dim")
full_min = _extreme("min_dim")
