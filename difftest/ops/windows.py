"""unfold: the windows of one dim (burn's `Tensor::unfold`, PyTorch's `Tensor.unfold`), its
attribute sampler, shape rule and view. The windows overlap when the step is below their size,
so the backward adds several output gradients into one input element: the accumulation that
burn-autodiff's `Unfold` node does. Torch-free at import."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from difftest.choices import Choices
from difftest.program.ir import MAX_RANK, Shape
from difftest.program.shapes import ShapeError, check_dim

Attrs = dict[str, Any]
Strides = tuple[int, ...]

MAX_STEP = 3  # steps 1 to 3: overlapping, touching and gapped windows on the small dims drawn


def unfold(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    """A dim, a window size up to its extent and a step (the result is one rank higher: none for
    an input of the largest rank)."""
    s = shapes[0]
    if len(s) >= MAX_RANK:
        return None
    d = c.integer(0, len(s) - 1)
    return {"dim": d, "size": c.integer(1, s[d]), "step": c.integer(1, MAX_STEP)}


def unfold_rule(shapes: Sequence[Shape], attrs: Attrs) -> Shape:
    """dim becomes the number of complete windows, and the window is a new last dim. A window
    larger than the dim leaves no window (burn and PyTorch): an empty tensor, which programs
    do not hold, so it is refused."""
    s = shapes[0]
    if len(s) >= MAX_RANK:
        raise ShapeError(f"unfold of a rank-{len(s)} input gives rank {len(s) + 1} (ranks 1 to {MAX_RANK})")
    d = check_dim(s, attrs["dim"])
    size, step = attrs["size"], attrs["step"]
    if size < 1 or step < 1:
        raise ShapeError(f"unfold size {size} and step {step} must be >= 1")
    if size > s[d]:
        raise ShapeError(f"unfold size {size} exceeds dim {d} of size {s[d]} (no window)")
    return s[:d] + ((s[d] - size) // step + 1,) + s[d + 1 :] + (size,)


def unfold_view(shape: Shape, strides: Strides, attrs: Attrs) -> Strides:
    """PyTorch's result is a view: windows `step` elements of dim apart, a window along dim."""
    d = attrs["dim"]
    return strides[:d] + (strides[d] * attrs["step"],) + strides[d + 1 :] + (strides[d],)
