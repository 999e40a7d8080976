"""Where burn's Wgpu backend reads a layout wrong: the sites of the Wgpu kernel records
(wgpu_kernel_bugs.py), decided by the layout model (wgpu_layouts.py) and cubecl's vectorisation
replayed (wgpu_reduce.py)."""

from __future__ import annotations

from collections.abc import Sequence

from difftest.divergences.bug_records import DtypeSite
from difftest.divergences.bug_sites import prior_by_id, prior_shapes
from difftest.divergences.wgpu_layouts import ITEM_BYTES, Layout, burn_layouts, channels_last, elementwise
from difftest.divergences.wgpu_reduce import copy_misvectorised, full_reduce_wrong, reads_wrong, topk_verdict
from difftest.program.ir import OpCall, Statement


def last_two_swapped_after_rank_expand(st: Statement, prior: Sequence[Statement]) -> bool:
    """A permute of a rank-4 value that swaps its last two dims and keeps the others, where the
    value is an expand that added leading dims: where Wgpu's gradient was measured to land on
    the wrong elements (the same permute of a leaf, of an expand of a size-1 dim without a new
    one, permutes moving other dims, and rank 3 were right)."""
    if not (isinstance(st, OpCall) and st.op == "permute" and st.attrs.get("axes") == [0, 1, 3, 2]):
        return False
    source = prior_by_id(prior).get(st.inputs[0])
    if not (isinstance(source, OpCall) and source.op == "expand"):
        return False
    shapes = prior_shapes(prior)
    before = shapes.get(source.inputs[0])
    return before is None or len(before) < 4


# reductions burn-cubecl runs as cubek-reduce's reduce_dim along `dim` of their input
DIM_REDUCTIONS = frozenset({"sum_dim", "mean_dim", "max_dim", "min_dim", "prod_dim", "gather_argmax",
                            "gather_argmin"})
# composed by burn of a max_dim or mean_dim of the input and a sum_dim of an elementwise result of it
SHIFTED_REDUCTIONS = frozenset({"softmax", "log_softmax", "quiet_softmax", "var", "var_bias", "var_mean"})
# whole-tensor reductions that reduce one dim at a time (a whole-tensor sum is shared_sum: right)
WHOLE_REDUCTIONS = frozenset({"mean", "max", "min", "prod"})
TOPK_OPS = frozenset({"topk", "gather_topk_indices"})


def _wgpu_input(st: OpCall, prior: Sequence[Statement], dtype: str) -> Layout | None:
    return burn_layouts(prior, dtype).get(st.inputs[0])


def _reduce_misvectorised(st: Statement, prior: Sequence[Statement], dtype: str) -> bool:
    if not (isinstance(st, OpCall) and st.op in DIM_REDUCTIONS | SHIFTED_REDUCTIONS | WHOLE_REDUCTIONS | TOPK_OPS):
        return False
    layout = _wgpu_input(st, prior, dtype)
    if layout is None:
        return False
    shape, strides = layout
    item = ITEM_BYTES.get(dtype, 4)
    if st.op in WHOLE_REDUCTIONS:
        return full_reduce_wrong(shape, strides, item)
    dim = st.attrs.get("dim", -1) % len(shape)
    if st.op in TOPK_OPS:
        return reads_wrong(shape, strides, dim, slots=int(st.attrs.get("k", 1)), item=item)
    if reads_wrong(shape, strides, dim, item=item):
        return True
    # the sum over an elementwise result of the input (exp(x - max), (x - mean)^2)
    return st.op in SHIFTED_REDUCTIONS and reads_wrong(shape, elementwise(shape, [layout]), dim, item=item)


# A reduction whose input's layout on Wgpu makes cubek-reduce pick a vector that spans axes the
# output orders differently (wgpu_reduce.py, defect 1): it reads the wrong elements.
reduce_misvectorised = DtypeSite(_reduce_misvectorised, ("float32", "float64"))


def _topk_slots_misplaced(st: Statement, prior: Sequence[Statement], dtype: str) -> bool:
    if not (isinstance(st, OpCall) and st.op in TOPK_OPS and int(st.attrs.get("k", 1)) >= 2):
        return False
    layout = _wgpu_input(st, prior, dtype)
    if layout is None:
        return False
    shape, strides = layout
    dim = st.attrs.get("dim", -1) % len(shape)
    return topk_verdict(shape, strides, dim, int(st.attrs["k"]), ITEM_BYTES.get(dtype, 4)) != "right"


# A top-k of k >= 2 whose k output slots cubek-reduce writes out of place (wgpu_reduce.py, defect
# 2; or a read of defect 1, which the same emulation replays).
topk_slots_misplaced = DtypeSite(_topk_slots_misplaced, ("float32", "float64"))


POOLS_2D = frozenset({"adaptive_avg_pool2d", "avg_pool2d", "max_pool2d"})
# ops whose backward returns the gradient of their (first) input channels-last, viewed as NCHW
# (burn-cubecl kernel/pool/base.rs, the convolutions' backward data kernels)
CHANNELS_LAST_GRADS = POOLS_2D | {"conv2d"}
# ops whose backward hands the incoming gradient to these inputs as it is (the same tensor)
GRAD_PASSES_TO = {"add": (0, 1), "scatter_nd": (0,)}
# ops whose backward sums the incoming gradient along `dim`, and the layout it sums, from the
# incoming gradient's: sum_dim's and mean_dim's backward sum it as it is (along the reduced dim
# of size 1); softmax's too (burn's composition of exp, sum_dim and div, measured); log_softmax's
# backward sums neg(gradient), a fresh elementwise result of it. Softmax's and log_softmax's
# were measured in float32 only: in float64 Wgpu's exp is wrong everywhere (another record)
SUMS_GRADIENT: dict[str, tuple[tuple[str, ...], bool]] = {
    "sum_dim": (("float32", "float64"), False),
    "mean_dim": (("float32", "float64"), False),
    "softmax": (("float32",), False),
    "log_softmax": (("float32",), True),
}


def _summing_source(ident: str, by_id: dict[str, Statement], shape: tuple[int, ...],
                    shapes: dict[str, tuple[int, ...]]) -> OpCall | None:
    """The op of SUMS_GRADIENT the gradient at `ident` (of `shape`) reaches unchanged, through
    the ops of GRAD_PASSES_TO, if any."""
    st = by_id.get(ident)
    if not isinstance(st, OpCall) or shapes.get(st.id) != shape:
        return None
    if st.op in SUMS_GRADIENT:
        return st
    for i in GRAD_PASSES_TO.get(st.op, ()):
        if i < len(st.inputs) and (found := _summing_source(st.inputs[i], by_id, shape, shapes)) is not None:
            return found
    return None


def _channels_last_grad_summed(st: Statement, prior: Sequence[Statement], dtype: str) -> bool:
    if not (isinstance(st, OpCall) and st.op in CHANNELS_LAST_GRADS):
        return False
    shapes = prior_shapes(prior)
    shape = shapes.get(st.inputs[0])
    if shape is None or len(shape) != 4:
        return False
    source = _summing_source(st.inputs[0], prior_by_id(prior), shape, shapes)
    if source is None:
        return False
    dtypes, negated = SUMS_GRADIENT[source.op]
    if dtype not in dtypes:
        return False
    layout = channels_last(shape)
    if negated:
        layout = elementwise(shape, [(shape, layout)])
    return reads_wrong(shape, layout, source.attrs.get("dim", -1) % 4, item=ITEM_BYTES.get(dtype, 4))


# A 2-d pool or conv2d whose input's gradient reaches, unchanged, a backward that sums it along a
# dim (sum_dim, mean_dim, softmax, log_softmax): the pool's or convolution's backward returns that
# gradient channels-last, and the sum reads it misvectorised where wgpu_reduce.py's defect 1 holds
# for that layout; the gradient is moved between positions. Measured against the backend for every
# [B, C, H, W] up to [2, 4, 3, 3], each dim, conv2d and avg_pool2d, directly and through add and
# scatter_nd (tests/backends/test_wgpu_layouts.py)
channels_last_grad_summed = DtypeSite(_channels_last_grad_summed, ("float32", "float64"))


def _misvectorised_view(st: Statement, prior: Sequence[Statement], dtype: str) -> bool:
    if not isinstance(st, OpCall):
        return False
    layout = burn_layouts([*prior, st], dtype).get(st.id)
    return layout is not None and copy_misvectorised(*layout, ITEM_BYTES.get(dtype, 4))


# A value Wgpu holds as a view that cubecl reads in vectors its strides do not fit (wgpu_reduce.py,
# defect 3): whatever reads it (its read-back, an elementwise op, a sum) gets the wrong elements.
misvectorised_view = DtypeSite(_misvectorised_view, ("float32", "float64"))
