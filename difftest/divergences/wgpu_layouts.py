"""The memory layout (shape and strides) burn's Wgpu backend gives each value of a program
(burn-cubecl 0.22.1, no fusion), which decides how its reductions read it (wgpu_reduce.py).

What burn-cubecl does, as read in its source and measured on lavapipe
(tests/backends/test_wgpu_layouts.py runs each rule against the backend):
- permute, transpose, swap_dims and expand change metadata only (expand: stride 0);
- narrow and slice are views of the same strides when the bytes cut off at the start and at the
  end are multiples of the device's memory alignment (`kernel/index/slice.rs`; 32 bytes on
  lavapipe), else a contiguous copy;
- an elementwise op (unary, scalar, binary, the cast, the activations burn composes of them) walks
  its operands in the order the operands of the output's shape occupy memory, by a vote of their
  bytes, and writes a fresh result dense in that order (`kernel/memory_order.rs`; ties and the
  logical order give a contiguous result);
- conv1d (`kernel/conv/base.rs` conv_forward::<1>) writes a channels-last buffer and returns it
  viewed as NCL (measured through reductions and top-k of it: tests/backends);
- conv2d and the 2-d poolings write a channels-last buffer and return it viewed as NCHW
  (`kernel/pool/base.rs`, `kernel/conv/direct.rs`: `permute_nhwc_to_nchw`), except an adaptive
  average pool to [1, 1] (`global_avg_pool2d`, contiguous);
- unfold is a view (`ops/base.rs` unfold): the unfolded dim's stride times `step`, and a last dim
  of the input dim's stride;
- a cut (detach, autodiff, without_autodiff) keeps its input's layout; every other op, leaf and
  parameter is taken as contiguous (not traced further: a reduction after one is not predicted
  wrong, so a finding there stays news)."""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from difftest.ops.catalog import CATALOG
from difftest.ops.strides import Strides, contiguous_strides
from difftest.ops.validate import infer_shapes
from difftest.program.ir import Cut, OpCall, Program, ProgramError, Shape, Statement

Layout = tuple[Shape, Strides]

MEMORY_ALIGNMENT = 32  # bytes: lavapipe's, measured through slice's views
ELEMENTWISE_FAMILIES = frozenset({"unary", "scalar", "binary", "activation"})
CHANNELS_LAST_OPS = frozenset({"conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"})
ITEM_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


def nests_logically(shape: Shape, strides: Strides) -> bool:
    """The dims other than size-1 ones nest in logical order (gaps allowed)."""
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        if size == 1:
            continue
        if stride < expected:
            return False
        expected = stride * size
    return True


def _nested_order(shape: Shape, strides: Strides) -> list[int] | None:
    """The axes outermost first by stride (ties by axis), or None where they overlap."""
    order = sorted(range(len(shape)), key=lambda a: (-strides[a], a))
    expected = 1
    for a in reversed(order):
        if shape[a] == 1:
            continue
        if strides[a] < expected:
            return None
        expected = strides[a] * shape[a]
    return order


def dense_in_order(shape: Shape, order: Sequence[int]) -> Strides:
    strides = [0] * len(shape)
    acc = 1
    for a in reversed(order):
        strides[a] = acc
        acc *= shape[a]
    return tuple(strides)


def elementwise(out_shape: Shape, operands: Sequence[Layout]) -> Strides:
    """The strides of a fresh elementwise result (`MemoryOrder::of`, then the permute back)."""
    voters = [(s, t) for s, t in operands if s == out_shape]
    if all(nests_logically(s, t) for s, t in voters):
        return contiguous_strides(out_shape)
    votes: dict[tuple[int, ...], int] = {}
    for s, t in voters:
        order = _nested_order(s, t)
        if order is None:
            continue
        if nests_logically(s, t):
            order = list(range(len(s)))
        else:  # size-1 axes first, in logical order; the others as they lie in memory
            order.sort(key=lambda a: (s[a] != 1, a if s[a] == 1 else 0))
        votes[tuple(order)] = votes.get(tuple(order), 0) + prod(s)
    if not votes:
        return contiguous_strides(out_shape)
    most = max(votes.values())
    winners = [o for o, n in votes.items() if n == most]
    if len(winners) > 1 or list(winners[0]) == list(range(len(out_shape))):
        return contiguous_strides(out_shape)
    return dense_in_order(out_shape, winners[0])


def channels_last(shape: Shape) -> Strides:
    """An NCHW (NCL) view of a dense NHWC (NLC) buffer: what burn-cubecl's 2-d pools and its
    convolutions return (and the pools' backwards, for the input's gradient)."""
    c, spatial = shape[1], shape[2:]
    inner = [c * prod(spatial[i + 1 :]) for i in range(len(spatial))]
    return (c * prod(spatial), 1, *inner)


def _sliced(shape: Shape, strides: Strides, starts: Sequence[int], ends: Sequence[int], item: int) -> Strides:
    cut_start = sum(st * s for st, s in zip(strides, starts, strict=False))
    cut_end = sum(st * (n - e) for st, n, e in zip(strides, shape, ends, strict=False))
    aligned = (cut_start * item) % MEMORY_ALIGNMENT == 0 and (cut_end * item) % MEMORY_ALIGNMENT == 0
    new_shape = tuple(e - s for s, e in zip(starts, ends, strict=True))
    return strides if aligned else contiguous_strides(new_shape)


def _op_strides(st: OpCall, ins: list[Layout], out: Shape, item: int) -> Strides:
    attrs = st.attrs
    if st.op in ("permute", "transpose", "swap_dims"):
        shape, strides = ins[0]
        axes = list(range(len(shape)))
        if st.op == "permute":
            axes = list(attrs["axes"])
        elif st.op == "transpose":
            axes[-1], axes[-2] = axes[-2], axes[-1]
        else:
            a, b = attrs["dim1"] % len(shape), attrs["dim2"] % len(shape)
            axes[a], axes[b] = axes[b], axes[a]
        return tuple(strides[a] for a in axes)
    if st.op == "expand":
        shape, strides = ins[0]
        lead = len(out) - len(shape)
        return (0,) * lead + tuple(0 if n == 1 and out[lead + i] != 1 else s
                                   for i, (n, s) in enumerate(zip(shape, strides, strict=True)))
    if st.op == "unfold":  # a view: the dim steps by `step` windows, a new last dim by one element
        shape, strides = ins[0]
        d = attrs["dim"] % len(shape)
        return tuple(attrs["step"] * s if a == d else s for a, s in enumerate(strides)) + (strides[d],)
    if st.op in ("narrow", "slice"):
        shape, strides = ins[0]
        starts, ends = [0] * len(shape), list(shape)
        if st.op == "narrow":
            d = attrs["dim"] % len(shape)
            starts[d], ends[d] = attrs["start"], attrs["start"] + attrs["length"]
        else:
            for d, (a, b) in enumerate(attrs["ranges"]):
                starts[d], ends[d] = a, b
        return _sliced(shape, strides, starts, ends, item)
    spec = CATALOG.get(st.op)
    if spec is not None and spec.family in ELEMENTWISE_FAMILIES:
        return elementwise(out, ins)
    if st.op == "conv1d" and len(out) == 3:  # conv_forward::<1>: the NLC result viewed as NCL
        return channels_last(out)
    if st.op in CHANNELS_LAST_OPS and len(out) == 4:
        if st.op == "adaptive_avg_pool2d" and tuple(out[2:]) == (1, 1):
            return contiguous_strides(out)
        return channels_last(out)
    return contiguous_strides(out)


def burn_layouts(prior: Sequence[Statement], dtype: str = "float32") -> dict[str, Layout]:
    """The layout of each value of `prior` on Wgpu, as far as the rules of the module's docstring
    trace it (empty where the statements' shapes cannot be inferred)."""
    try:
        shapes = infer_shapes(Program(tuple(prior), dtype))
    except ProgramError:
        return {}
    item = ITEM_BYTES.get(dtype, 4)
    out: dict[str, Layout] = {}
    for st in prior:
        shape = shapes.get(st.id)
        if shape is None:
            continue
        if isinstance(st, Cut) and st.input in out:
            out[st.id] = out[st.input]
        elif isinstance(st, OpCall) and all(x in out for x in st.inputs):
            ins = [out[x] for x in st.inputs]
            try:
                out[st.id] = (shape, _op_strides(st, ins, shape, item))
            except (KeyError, IndexError, TypeError, ValueError):
                out[st.id] = (shape, contiguous_strides(shape))
        else:
            out[st.id] = (shape, contiguous_strides(shape))
    return out
