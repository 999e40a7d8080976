"""How each module kind's PyTorch forward lays out its result (ModuleKind.layout,
ops/strides.module_result_strides), against PyTorch itself: inputs laid out in every order, sliced,
with size-1 dims, in train and eval mode. The layout decides whether a reshape of the result is a
view or a copy, and so the flags of what an inference_mode region makes of it. Strides of size-1
dims say nothing about the layout and are not compared."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch

from difftest.ops.strides import (
    MODULE_LAYOUTS,
    channels_last_strides,
    is_channels_last,
    module_result_strides,
    suggests_channels_last,
)
from difftest.program.modules import MODULE_KINDS

# each module kind, as the PyTorch executor builds it, for an input of the given shape (None
# where the kind takes no input of that rank)
BUILD: dict[str, Callable[[list[int]], torch.nn.Module | None]] = {
    "linear": lambda s: torch.nn.Linear(s[-1], 2),
    "layer_norm": lambda s: torch.nn.LayerNorm(s[-1]),
    "rms_norm": lambda s: torch.nn.RMSNorm(s[-1]),
    "prelu": lambda s: torch.nn.PReLU(1),
    "dropout": lambda s: torch.nn.Dropout(0.5),
    "group_norm": lambda s: torch.nn.GroupNorm(1, s[1]) if len(s) >= 2 else None,
    "batch_norm": lambda s: (torch.nn.BatchNorm1d(s[1]) if len(s) in (2, 3) else
                             torch.nn.BatchNorm2d(s[1]) if len(s) == 4 else None),
    "conv2d": lambda s: torch.nn.Conv2d(s[1], 2, 1) if len(s) == 4 else None,
}


def _laid_out(shape: list[int], order: list[int], rng: random.Random) -> torch.Tensor:
    """A tensor of `shape` whose memory holds its dims in `order` (outermost first), sometimes
    a slice of one (not dense in any order)."""
    base = torch.randn([shape[d] for d in order])
    x = base.permute([order.index(d) for d in range(len(shape))])
    last = len(shape) - 1
    if rng.random() < 0.3 and x.shape[last] > 2:
        x = x.narrow(last, 0, x.shape[last] - 1)
    return x


def _same_layout(shape: tuple[int, ...], a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return all(n == 1 or x == y for n, x, y in zip(shape, a, b, strict=True))


def test_every_module_kind_declares_a_known_layout_and_is_measured_here() -> None:
    assert {k.layout for k in MODULE_KINDS.values()} <= set(MODULE_LAYOUTS)
    assert set(MODULE_KINDS) - {"embedding"} <= set(BUILD)  # embedding's input is indices, its result a lookup


@pytest.mark.parametrize("kind", sorted(BUILD))
def test_the_declared_layout_is_pytorchs(kind: str) -> None:
    rng = random.Random(7)
    layout = MODULE_KINDS[kind].layout
    checked = 0
    for _ in range(600):
        rank = rng.choice([2, 3, 4])
        shape = [rng.choice([1, 2, 3, 5]) for _ in range(rank)]
        order = list(range(rank))
        rng.shuffle(order)
        m = BUILD[kind](shape)
        if m is None:
            continue
        x = _laid_out(shape, order, rng)
        for train in (True, False):
            m.train(train)
            torch.manual_seed(0)
            try:
                y = m(x)
            except (ValueError, RuntimeError):  # batch_norm training on one value per channel
                continue
            if kind == "dropout" and not train:  # the input itself (base_states.forward_returns_input)
                assert y is x
                continue
            predicted = module_result_strides(layout, tuple(x.shape), tuple(x.stride()), tuple(y.shape))
            assert _same_layout(tuple(y.shape), tuple(y.stride()), predicted), (
                kind, train, tuple(x.shape), x.stride(), y.stride(), predicted)
            checked += 1
    assert checked > 300, checked


def test_channels_last_helpers_agree_with_pytorch() -> None:
    rng = random.Random(3)
    for _ in range(400):
        shape = [rng.choice([1, 2, 3]) for _ in range(4)]
        order = list(range(4))
        rng.shuffle(order)
        x = _laid_out(shape, order, rng)
        s, st = tuple(x.shape), tuple(x.stride())
        assert is_channels_last(s, st) == x.is_contiguous(memory_format=torch.channels_last), (s, st)
        assert channels_last_strides(s) == torch.empty(s, memory_format=torch.channels_last).stride()
        # PyTorch's own choice, as empty_like makes it for a tensor it cannot copy densely
        if suggests_channels_last(s, st):
            assert torch.empty_like(x, memory_format=torch.preserve_format).is_contiguous(
                memory_format=torch.channels_last), (s, st)


def test_an_unknown_layout_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown module layout 'diagonal'"):
        module_result_strides("diagonal", (2, 3), (3, 1), (2, 3))
