"""Strides of PyTorch views, so the model knows which results are views and which views are
contiguous (PyTorch's view semantics decide `is_inference` and `requires_grad` of results
made inside `no_grad` / `inference_mode`)."""

from __future__ import annotations

from typing import Any

from difftest.program.ir import Shape

Strides = tuple[int, ...]


def contiguous_strides(shape: Shape) -> Strides:
    out = []
    acc = 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def is_contiguous(shape: Shape, strides: Strides) -> bool:
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def permuted(strides: Strides, axes: list[int]) -> Strides:
    return tuple(strides[a] for a in axes)


def transpose_view(shape: Shape, strides: Strides, attrs: dict[str, Any]) -> Strides:
    axes = list(range(len(shape)))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return permuted(strides, axes)


def swap_view(shape: Shape, strides: Strides, attrs: dict[str, Any]) -> Strides:
    axes = list(range(len(shape)))
    a, b = attrs["dim1"], attrs["dim2"]
    axes[a], axes[b] = axes[b], axes[a]
    return permuted(strides, axes)


def permute_view(shape: Shape, strides: Strides, attrs: dict[str, Any]) -> Strides:
    return permuted(strides, list(attrs["axes"]))


def unsqueeze_view(shape: Shape, strides: Strides, attrs: dict[str, Any]) -> Strides:
    d = attrs["dim"]
    new = 1 if d >= len(shape) else shape[d] * strides[d]
    return strides[:d] + (new,) + strides[d:]


def squeeze_view(shape: Shape, strides: Strides, attrs: dict[str, Any]) -> Strides:
    d = attrs["dim"]
    return strides[:d] + strides[d + 1 :]


def same_view(shape: Shape, strides: Strides, attrs: dict[str, Any]) -> Strides:
    return strides


def expand_view(shape: Shape, strides: Strides, attrs: dict[str, Any]) -> Strides:
    target = list(attrs["shape"])
    lead = len(target) - len(shape)
    out = [0] * lead
    for i, (size, stride) in enumerate(zip(shape, strides)):
        out.append(0 if size == 1 and target[lead + i] != 1 else stride)
    return tuple(out)


def reshape_view(shape: Shape, strides: Strides, attrs: dict[str, Any]) -> Strides:
    """`x.contiguous().view(shape)`: a view of x when x is contiguous."""
    return contiguous_strides(tuple(attrs["shape"]))


def elementwise_strides(out_shape: Shape, operands: list[tuple[Shape, Strides]]) -> Strides:
    """Strides of an elementwise result, as PyTorch's TensorIterator lays it out: contiguous
    when every operand is, otherwise in the dim order the operands' strides imply (so the
    result of a transposed input is transposed too)."""
    rank = len(out_shape)
    padded: list[Strides] = []
    for shape, strides in operands:
        lead = rank - len(shape)
        st = [0] * lead + list(strides)
        for i, size in enumerate(shape):
            if size == 1 and out_shape[lead + i] != 1:
                st[lead + i] = 0  # broadcast
        padded.append(tuple(st))
    if all(is_contiguous(s, st) for s, st in operands):
        return contiguous_strides(out_shape)

    def should_swap(d0: int, d1: int) -> int:
        for st in padded:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if out_shape[d0] > out_shape[d1]:
                return 1
        return 0

    perm = list(range(rank - 1, -1, -1))  # perm[0] is the innermost dim
    for i in range(1, rank):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    out = [0] * rank
    acc = 1
    for d in perm:
        out[d] = acc
        acc *= out_shape[d]
    return tuple(out)


# The dims of an [N, C, H, W] tensor from the innermost out, in PyTorch's channels-last format
CHANNELS_LAST_ORDER = (1, 3, 2, 0)


def channels_last_strides(shape: Shape) -> Strides:
    """The strides of a dense channels-last tensor of the 4-d `shape` (C innermost, then W, H, N)."""
    out = [0] * 4
    acc = 1
    for d in CHANNELS_LAST_ORDER:
        out[d] = acc
        acc *= shape[d]
    return tuple(out)


def is_channels_last(shape: Shape, strides: Strides) -> bool:
    """Whether a 4-d tensor is dense in channels-last order (size-1 dims do not count)."""
    if len(shape) != 4:
        return False
    expected = 1
    for d in CHANNELS_LAST_ORDER:
        if shape[d] == 1:
            continue
        if strides[d] != expected:
            return False
        expected *= shape[d]
    return True


def suggests_channels_last(shape: Shape, strides: Strides) -> bool:
    """Whether PyTorch's `suggest_memory_format` picks channels-last for a 4-d tensor: its strides
    do not decrease along C, W, H, N, each at least the extent of the one inside it, C's not 0
    and N's not where C's is (a dense [N, C, H, W] with H = W = 1 stays contiguous). A slice of
    a channels-last tensor still suggests it; a tensor with an empty dim never does."""
    if len(shape) != 4 or strides[1] == 0:
        return False
    floor = 0
    for d in CHANNELS_LAST_ORDER:
        if shape[d] == 0 or strides[d] < floor:
            return False
        if d == 0 and floor == strides[1]:
            return False
        floor = strides[d] * shape[d]
    return True


# How a module's PyTorch forward lays out its result (ModuleKind.layout), as measured on
# PyTorch 2.15 over every permutation, slice and size-1 pattern of small inputs
# (tests/unit/test_module_layouts.py compares each rule with PyTorch itself):
#   contiguous      always contiguous (linear, layer_norm, embedding)
#   elementwise     as an elementwise op lays out a result of its input (prelu, dropout)
#   memory_format   channels-last when the 4-d input suggests it, else contiguous (conv2d,
#                   group_norm, rms_norm)
#   batch_norm      the same, and also when the input is dense channels-last without being
#                   contiguous (batch_norm's kernels test that, not the suggestion)
MODULE_LAYOUTS = ("contiguous", "elementwise", "memory_format", "batch_norm")


def module_result_strides(layout: str, in_shape: Shape, in_strides: Strides, out_shape: Shape) -> Strides:
    """The strides of a module forward's result of `out_shape` whose PyTorch forward lays it out
    by `layout` (MODULE_LAYOUTS) from an input of `in_shape` and `in_strides`."""
    if layout == "elementwise":
        return elementwise_strides(out_shape, [(in_shape, in_strides)])
    if layout in ("memory_format", "batch_norm") and len(in_shape) == 4 == len(out_shape):
        dense_last = is_channels_last(in_shape, in_strides) and not is_contiguous(in_shape, in_strides)
        if suggests_channels_last(in_shape, in_strides) or (layout == "batch_norm" and dense_last):
            return channels_last_strides(out_shape)
    if layout not in MODULE_LAYOUTS:
        raise ValueError(f"unknown module layout {layout!r}; known: {', '.join(MODULE_LAYOUTS)}")
    return contiguous_strides(out_shape)
