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
