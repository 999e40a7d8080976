"""Where the known burn bugs strike: predicates on a statement and the statements before it
(the `triggers` and `site`s of known_bugs.py), kept apart from the records they serve."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

from difftest.divergences.bug_records import DtypeSite
from difftest.divergences.noops import NOOPS_BY_OP
from difftest.ops.validate import infer_shapes
from difftest.program.ir import (
    Apply,
    Backward,
    Cut,
    Leaf,
    OpCall,
    Optimizer,
    Param,
    Program,
    ProgramError,
    Statement,
    Step,
    ancestors,
    root_module,
)

DIV_SCALAR_OPS = frozenset({"div_scalar", "var", "var_bias", "var_mean", "softplus", "celu"})


def div_scalar(st: Statement, prior: Sequence[Statement]) -> bool:
    return isinstance(st, OpCall) and st.op in DIV_SCALAR_OPS


# ops that reach ActivationOps::hard_sigmoid: hard_sigmoid, and hard_swish (burn-tensor's
# x * hard_sigmoid(x))
HARD_SIGMOID_OPS = frozenset({"hard_sigmoid", "hard_swish"})


def hard_sigmoid(st: Statement, prior: Sequence[Statement]) -> bool:
    # burn-autodiff's default hard_sigmoid: only an op on the autodiff device (the grad region, an
    # input there); flex's own, off it, computes in the input's dtype
    if not (isinstance(st, OpCall) and st.op in HARD_SIGMOID_OPS and st.region == "grad"):
        return False
    by_id = prior_by_id(prior)
    return any(_on_autodiff(x, by_id) for x in st.inputs)


# ops that reach burn-backend's default ActivationOps::sigmoid on a backend without its own:
# sigmoid, silu (burn-tensor's x * sigmoid(x)) and glu (a * sigmoid(b))
SIGMOID_OPS = frozenset({"sigmoid", "silu", "glu"})


def sigmoid_default(st: Statement, prior: Sequence[Statement]) -> bool:
    return isinstance(st, OpCall) and st.op in SIGMOID_OPS


def hard_sigmoid_any(st: Statement, prior: Sequence[Statement]) -> bool:
    # a backend without its own hard_sigmoid runs burn-backend's default on either device
    return isinstance(st, OpCall) and st.op in HARD_SIGMOID_OPS


# ops that reach burn-backend's default ActivationOps::log_sigmoid on a backend without its own:
# log_sigmoid, and burn-nn's BinaryCrossEntropyLoss with logits ((1 - t) x - log_sigmoid(x))
LOG_SIGMOID_OPS = frozenset({"log_sigmoid", "binary_cross_entropy_with_logits"})


def log_sigmoid(st: Statement, prior: Sequence[Statement]) -> bool:
    return isinstance(st, OpCall) and st.op in LOG_SIGMOID_OPS


def gelu(st: Statement, prior: Sequence[Statement]) -> bool:
    return isinstance(st, OpCall) and st.op == "gelu"


def _on_autodiff(ident: str, by_id: dict[str, Statement]) -> bool:
    """Whether burn holds the value `ident` on the autodiff device: a leaf created there, an
    `autodiff` cut (in any region), a grad-region `detach` or op of such a value; off it: a plain
    leaf, a `without_autodiff` cut and anything else computed in a no_grad / inference_mode
    region (whose inputs difftest takes without_autodiff, rule region-off-autodiff). Module forwards, parameter
    and gradient reads count as on it (the generator then avoids what may trigger)."""
    seen: set[str] = set()
    stack = [ident]
    while stack:
        st = by_id.get(stack.pop())
        if st is None or st.id in seen:
            continue
        seen.add(st.id)
        if isinstance(st, Leaf):
            if st.device == "autodiff":
                return True
        elif isinstance(st, Cut):
            if st.cut == "autodiff":
                return True
            if st.region == "grad" and st.cut == "detach":
                stack.append(st.input)
        elif isinstance(st, OpCall):
            if st.region == "grad":
                stack.extend(st.inputs)
        else:
            return True
    return False


def pow_zero(st: Statement, prior: Sequence[Statement]) -> bool:
    # powf_scalar with an integral exponent is dispatched to powi_scalar by burn
    return isinstance(st, OpCall) and st.op in ("powi_scalar", "powf_scalar") and st.attrs.get("exponent") == 0


def conv1d_grouped_uncropped(st: Statement, prior: Sequence[Statement]) -> bool:
    # the span of a group's weight-gradient conv exceeds the kernel when the stride does not
    # divide L + 2 padding - dilation (k - 1) - 1 (shapes read from the leaves and values before)
    if not (isinstance(st, OpCall) and st.op == "conv1d" and st.attrs.get("groups", 1) > 1):
        return False
    s, p, d = st.attrs["stride"][0], st.attrs["padding"][0], st.attrs["dilation"][0]
    if s == 1:
        return False
    shapes = prior_shapes(prior)
    x, w = shapes.get(st.inputs[0]), shapes.get(st.inputs[1])
    if x is None or w is None:
        return True  # unknown shapes: avoid conservatively
    return bool((x[-1] + 2 * p - d * (w[-1] - 1) - 1) % s != 0)


def prior_shapes(prior: Sequence[Statement]) -> dict[str, tuple[int, ...]]:
    """The shapes of the values before a statement, as far as the catalog's shape rules give them."""

    try:
        return infer_shapes(Program(tuple(prior)))
    except ProgramError:
        return {}


def burn_chunk_panics(size: int, chunks: int) -> bool:
    """Whether burn-tensor 0.22.1's `Tensor::chunk(chunks, dim)` panics on a dim of `size`: not a
    multiple of `chunks` (and size >= chunks), it narrows `chunks - 1` pieces of size / chunks + 1
    and the remainder, which runs past the end or is empty when fewer pieces cover the dim."""
    if size < chunks or size % chunks == 0:
        return False
    step = size // chunks + 1
    last = size % step
    return step * (chunks - 1) + last != size or last == 0


def chunk_uneven(st: Statement, prior: Sequence[Statement]) -> bool:
    if not (isinstance(st, OpCall) and st.op == "chunk"):
        return False

    source = next((s for s in prior if s.id == st.inputs[0]), None)
    if source is None:
        return False
    shape = infer_shapes(Program(tuple(prior)))[source.id]
    dim = st.attrs["dim"]
    return 0 <= dim < len(shape) and burn_chunk_panics(shape[dim], st.attrs["chunks"])


def prior_by_id(prior: Sequence[Statement]) -> dict[str, Statement]:
    return {s.id: s for s in prior}


def _unit_swap(st: Statement | None, prior: Sequence[Statement]) -> bool:
    """A swap_dims, permute or transpose that moves a size-1 dim (the layout burn-flex's
    `is_contiguous` misjudges: it ignores size-1 dims, so a reduction along a moved unit dim
    takes its `dim_stride == 1` branch on a strided tensor)."""
    if not isinstance(st, OpCall) or st.op not in ("swap_dims", "permute", "transpose"):
        return False
    shape = prior_shapes(prior).get(st.inputs[0])
    if shape is None:
        return False
    rank = len(shape)
    if st.op == "swap_dims":
        d1, d2 = st.attrs.get("dim1"), st.attrs.get("dim2")
        if not (isinstance(d1, int) and isinstance(d2, int)):
            return False
        perm = list(range(rank))
        perm[d1 % rank], perm[d2 % rank] = perm[d2 % rank], perm[d1 % rank]
    elif st.op == "transpose":
        perm = list(range(rank))
        if rank >= 2:
            perm[-1], perm[-2] = perm[-2], perm[-1]
    else:
        perm = [int(a) % rank for a in st.attrs.get("axes", st.attrs.get("dims", ()))]
    moved = [p for i, p in enumerate(perm) if i != p]
    return any(shape[p] == 1 for p in moved)


UNIT_SWAP_REDUCTIONS = frozenset({"sum_dim", "mean_dim"})


def reduce_after_unit_swap(st: Statement, prior: Sequence[Statement]) -> bool:
    if not (isinstance(st, OpCall) and st.op in UNIT_SWAP_REDUCTIONS):
        return False
    table = prior_by_id(prior)
    return _unit_swap(table.get(st.inputs[0]), [s for s in prior if s.id != st.id])


def backward_through_swapped_reduction(st: Statement, prior: Sequence[Statement]) -> bool:
    """A backward whose root depends on a reduction whose result is unit-swapped (SumDim's
    backward re-reduces the swapped gradient through the same burn-flex branch)."""
    if not isinstance(st, Backward):
        return False

    table = prior_by_id(prior)
    for ident in ancestors(table, st.input):
        s = table[ident]
        if _unit_swap(s, prior) and isinstance(s, OpCall):
            source = table.get(s.inputs[0])
            if isinstance(source, OpCall) and source.op in UNIT_SWAP_REDUCTIONS:
                return True
    return False


def _require_grad_leaf(root: Statement | None, table: dict[str, Statement]) -> bool:
    """A require-grad leaf in burn: one, or a detach of one (burn's detach of a require-grad leaf
    is a new require-grad leaf: the leaf-detach rule), through any number of detaches."""
    while isinstance(root, Cut) and root.cut == "detach":
        root = table.get(root.input)
    return isinstance(root, Leaf) and root.require_grad


def used_leaf_backward(st: Statement, prior: Sequence[Statement]) -> bool:
    """A backward rooted at the origin of a graph of burn's (burn-autodiff's GraphLocator keys
    each graph by the node that started it) that an earlier op or module read: a require-grad leaf
    (or a detach of one) or a module parameter, an op burn answers with such a leaf (noops.py), or
    an op that started a graph of its own because each of its inputs is a leaf whose graph entry
    an earlier backward removed (`_starts_a_graph`). Merging a graph keyed by such an origin into
    another, and that one into a third, leaves the origin keyed to the emptied middle graph."""

    if not isinstance(st, Backward):
        return False
    table = prior_by_id(prior)
    root = table.get(st.input)
    while isinstance(root, OpCall) and root.op in NOOPS_BY_OP and NOOPS_BY_OP[root.op].applies(root.attrs):
        root = table.get(root.inputs[0])
    if isinstance(root, Param):
        return any(isinstance(s, Apply) for s in prior)
    if root is None or not (_require_grad_leaf(root, table) or _starts_a_graph(root, prior, table)):
        return False
    return any(isinstance(s, OpCall) and root.id in s.inputs for s in prior)


def _starts_a_graph(st: Statement, prior: Sequence[Statement], table: dict[str, Statement]) -> bool:
    """A recorded op whose inputs are all leaves, each require-grad one reached by a backward
    before the op: burn's backward removes the graph entries of the leaves it reaches, so the op
    finds no graph among its parents and starts one keyed by itself."""
    if not (isinstance(st, OpCall) and st.region == "grad") or st.id not in table:
        return False
    before = prior[:next(i for i, s in enumerate(prior) if s.id == st.id)]
    tracked: list[str] = []
    for x in st.inputs:
        node = table.get(x)
        if _require_grad_leaf(node, table):
            tracked.append(x)
        elif not isinstance(node, Leaf):
            return False  # an op result, or a cut of something other than a require-grad leaf
    reached = _leaves_reached(before, table)
    return bool(tracked) and all(x in reached for x in tracked)


def _leaves_reached(prior: Sequence[Statement], table: dict[str, Statement]) -> set[str]:
    """The require-grad leaves (and detaches of them) some backward among `prior` reaches through
    recorded ops."""
    reached: set[str] = set()
    seen: set[str] = set()
    stack = [s.input for s in prior if isinstance(s, Backward)]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        node = table.get(v)
        if _require_grad_leaf(node, table):
            reached.add(v)
        elif isinstance(node, OpCall) and node.region == "grad":
            stack.extend(node.inputs)
    return reached


def powf(st: Statement, prior: Sequence[Statement]) -> bool:
    return isinstance(st, OpCall) and st.op == "powf"


def powf_scalar_fractional(st: Statement, prior: Sequence[Statement]) -> bool:
    # burn dispatches an integral exponent to powi_scalar; only a fractional one reaches the
    # backend's powf_scalar (a backward's e - 1 is fractional exactly when e is)
    if not (isinstance(st, OpCall) and st.op == "powf_scalar"):
        return False
    exponent = st.attrs.get("exponent")
    return isinstance(exponent, float) and not exponent.is_integer()


def powf_scalar_beyond_i64(st: Statement, prior: Sequence[Statement]) -> bool:
    # burn-std's Scalar::try_as_integer, which float_powf_scalar asks whether to dispatch to
    # powi_scalar, takes an exponent equal to its floor for an integer and unwraps its to_i64():
    # +-inf and integral exponents outside i64 ([-2**63, 2**63)) panic there
    if not (isinstance(st, OpCall) and st.op == "powf_scalar"):
        return False
    e = st.attrs.get("exponent")
    if not isinstance(e, (int, float)) or isinstance(e, bool) or math.isnan(e):
        return False
    return math.isinf(e) or not -(2.0**63) <= e < 2.0**63


# ops whose float64 results burn's Wgpu backend gets wrong on lavapipe (measured: one-op programs
# of every catalog op in float64, docs/backends.md): transcendental functions (exp, log, the
# trigonometric and hyperbolic ones, erf, pow, sqrt's backward) and what burn composes of them,
# and the float64 cast
WGPU_F64_OPS = frozenset({
    "exp", "log", "log1p", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh", "erf", "atan", "gelu", "cast",
    "asin", "acos", "asinh", "acosh", "atanh", "atan2",
    "powf_scalar", "powf", "softmax", "log_softmax", "quiet_softmax", "cross_entropy", "cross_entropy_with_logits",
    "softplus", "mish", "log_sigmoid",
})


NORM_MODULES = frozenset({"batch_norm", "layer_norm", "rms_norm", "group_norm"})


def wgpu_f64_op(st: Statement, prior: Sequence[Statement]) -> bool:
    if not isinstance(st, OpCall):
        return False
    # powi_scalar is exact arithmetic for exponents -2 to 2 and pow beyond (measured: x^3 = 0)
    return st.op in WGPU_F64_OPS or (st.op == "powi_scalar" and abs(st.attrs.get("exponent", 0)) >= 3)


def wgpu_f64_site(st: Statement, prior: Sequence[Statement]) -> bool:
    """`wgpu_f64_op`, a forward of a normalisation module (its statistics' sqrt), or a parameter
    read after such a statement (SGD steps and running statistics carry its error into it)."""
    if wgpu_f64_op(st, prior):
        return True
    if isinstance(st, Param):
        return any(wgpu_f64_site(p, prior[:i]) for i, p in enumerate(prior) if not isinstance(p, Param))
    if not isinstance(st, Apply):
        return False
    try:
        return root_module(Program(()), st.module, prior_by_id(prior)).module in NORM_MODULES
    except (KeyError, AssertionError):
        return False


def rms_norm_apply(st: Statement, prior: Sequence[Statement]) -> bool:
    if not isinstance(st, Apply):
        return False
    try:
        return root_module(Program(()), st.module, prior_by_id(prior)).module == "rms_norm"
    except (KeyError, AssertionError):
        return False


def _inexact_in_f32(x: float) -> bool:
    import struct

    return float(struct.unpack("f", struct.pack("f", x))[0]) != x


def sgd_f32_hyperparameter(st: Statement, prior: Sequence[Statement]) -> bool:
    """An SGD step whose momentum or weight decay is not exact in f32."""

    if not isinstance(st, Step):
        return False
    opt = prior_by_id(prior).get(st.optimizer)
    return isinstance(opt, Optimizer) and (
        (opt.momentum != 0.0 and _inexact_in_f32(opt.momentum))
        or (opt.weight_decay != 0.0 and _inexact_in_f32(opt.weight_decay))
    )


# ops whose float32 error on Wgpu (lavapipe) a precision record declares (backend_bugs.py), each
# with the parts declared: the Vulkan driver's GLSL.std.450 functions and what burn composes of
# them; cubecl's own erf polynomial; cubecl's log1p polyfill and burn's softplus, which calls it
WGPU_DRIVER_PRECISION: dict[str, tuple[str, ...]] = {
    **{op: ("value", "grad") for op in ("exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh",
                                        "atan", "sigmoid", "silu", "mish", "softmax", "log_softmax",
                                        "quiet_softmax")},
    "erf": ("grad",),  # burn-autodiff's erf backward: 2 / sqrt(pi) exp(-x^2), the driver's exp
    # the inverse functions' values (their gradients are PyTorch's to the ulp): asin 3,820 ulps
    # (3.5e-4 at -0.84), acos 1,310, asinh and atanh near 0 (5.7e-7 and 1.6e-7 absolute)
    **{op: ("value",) for op in ("asin", "acos", "asinh", "acosh", "atanh")},
    # atan2's value, as atan's (347 ulps, 3.3e-6 absolute; its gradient, arithmetic, is PyTorch's)
    "atan2": ("value",),
}
WGPU_ERF_POLYNOMIAL: dict[str, tuple[str, ...]] = {"erf": ("value",), "gelu": ("value",)}
LOG1P_POLYFILL_OPS = frozenset({"log1p", "softplus"})


def op_in(ops: Collection[str]) -> Callable[[Statement, Sequence[Statement]], bool]:
    """A site: an op call of one of `ops`."""
    names = frozenset(ops)

    def site(st: Statement, prior: Sequence[Statement]) -> bool:
        return isinstance(st, OpCall) and st.op in names

    site.__doc__ = f"an op call of {', '.join(sorted(names))}"
    return site


def log_softmax_of_one_computed(st: Statement, prior: Sequence[Statement]) -> bool:
    """A log_softmax over a dim of size 1 (its exact result: 0) of a value an op computed."""
    if not (isinstance(st, OpCall) and st.op == "log_softmax"):
        return False
    if not isinstance(prior_by_id(prior).get(st.inputs[0]), OpCall):
        return False
    shape = prior_shapes(prior).get(st.inputs[0])
    dim = st.attrs.get("dim", -1)
    return shape is None or (0 <= dim < len(shape) and shape[dim] == 1)


def cast_to_bfloat16(st: Statement, prior: Sequence[Statement]) -> bool:
    return isinstance(st, OpCall) and st.op == "cast" and st.attrs.get("dtype") == "bfloat16"


# scatter_nd with any update, and gather_nd (whose backward is a scatter_nd add)
ND_INDEXING = ("scatter_nd", "gather_nd", "scatter_nd_replace", "scatter_nd_mul", "scatter_nd_max", "scatter_nd_min")


def nd_indexing(st: Statement, prior: Sequence[Statement]) -> bool:
    """A scatter_nd (any update) or gather_nd: NdArray's kernel of both reads its tensors as
    contiguous slices, whatever the update."""
    return isinstance(st, OpCall) and st.op in ND_INDEXING


def repeated_nd_tuples(st: Statement, prior: Sequence[Statement]) -> bool:
    """A scatter_nd (add), or a gather_nd (whose backward is one), with an index tuple given
    more than once: where Wgpu's scatter_nd kernel drops all but one of the repeated updates."""
    if not (isinstance(st, OpCall) and st.op in ("scatter_nd", "gather_nd")):
        return False
    idx = st.attrs.get("indices") or {}
    shape, data = idx.get("shape") or [0, 1], idx.get("data") or []
    k = max(int(shape[-1]), 1)
    tuples = [tuple(data[i : i + k]) for i in range(0, len(data), k)]
    return len(set(tuples)) < len(tuples)


def _runs_in_bfloat16(st: Statement, prior: Sequence[Statement], dtype: str) -> bool:
    """A cast to bfloat16, or an op or module forward whose inputs are bfloat16 (a bfloat16
    program's, or downstream of such a cast)."""
    return cast_to_bfloat16(st, prior) or (dtype == "bfloat16" and isinstance(st, (OpCall, Apply)))


runs_in_bfloat16 = DtypeSite(_runs_in_bfloat16, ("float32", "float64", "float16", "bfloat16"))


# scatter / select_assign / scatter_nd with IndexingUpdateOp::Max or Min (difftest/ops/index_reduce.py,
# nd_index.py)
MINMAX_UPDATES = ("scatter_max", "scatter_min", "select_max", "select_min", "scatter_nd_max", "scatter_nd_min")


def aliased_minmax_update(st: Statement, prior: Sequence[Statement]) -> bool:
    """A max/min update of a value by itself (both inputs one statement): every position it
    writes is a tie of the destination and the value that lands there."""
    return isinstance(st, OpCall) and st.op in MINMAX_UPDATES and st.inputs[0] == st.inputs[1]


def writes_a_tie(attrs: dict[str, Any], dest: Sequence[float], values: Sequence[float],
                 shapes: Sequence[Sequence[int]]) -> bool:
    """Whether a max/min update with attributes `attrs` of the destination `dest` by `values`
    (flat, row-major, of `shapes`) writes a value equal to the destination element it lands on."""
    return any(dest[p] == values[j] for p, j in pairs_written(attrs, shapes))


def written_pairs(st: OpCall, shapes: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """(destination position, value position), row-major flat, of each value a scatter,
    select_assign or scatter_nd call `st` writes, given its input shapes (destination, values)."""
    return pairs_written(st.attrs, shapes)


def pairs_written(attrs: dict[str, Any], shapes: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """`written_pairs` of a call with attributes `attrs`."""
    dest, values = shapes[0], shapes[1]
    idx = attrs["indices"]
    out = []
    if "dim" not in attrs:  # scatter_nd: value (t, rest) lands at (tuple t, rest)
        k = idx["shape"][1]
        for j, coords in enumerate(_coordinates(values)):
            t = coords[0]
            out.append((_flat(list(idx["data"][t * k:(t + 1) * k]) + list(coords[1:]), dest), j))
        return out
    dim = attrs["dim"]
    for j, coords in enumerate(_coordinates(values)):
        at = list(coords)
        at[dim] = idx["data"][j] if isinstance(idx, dict) else idx[coords[dim]]
        out.append((_flat(at, dest), j))
    return out


def _coordinates(shape: Sequence[int]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for n in shape:
        out = [c + (i,) for c in out for i in range(n)]
    return out


def _flat(coords: Sequence[int], shape: Sequence[int]) -> int:
    k = 0
    for c, n in zip(coords, shape, strict=True):
        k = k * n + c
    return k
