"""What a composition is: the ops burn builds an op or a module's forward of, when it has no
autodiff node of its own for it (`OpSpec.composed`, difftest/ops/compositions.py;
`ModuleKind.composed`, difftest/program/modules/). The localiser runs a failing composite as its
parts (difftest/findings/composed.py). Torch-free."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from difftest.program.shapes import Shape

Attrs = dict[str, Any]


@dataclass(frozen=True)
class Part:
    """One op of a composition: a catalog op, `detach` (a cut), or `const`, a tensor burn makes
    from the call's attributes (a loss's targets), its `shape` and `data` attributes, on the
    autodiff device and untracked. An input is the composite's input at that position (an int)
    or an earlier part's result, `p<k>` (k its index); in a module's composition, one of its
    parameters, `param:<name>` (PyTorch's name: `param:weight`), or one of its buffers,
    `buffer:<name>`, a constant of the call (its value before the forward)."""

    op: str
    inputs: tuple[int | str, ...]
    attrs: Attrs = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """The call a composition spells: the op's attributes, its inputs' shapes, and, where the
    call's inputs are known values (a one-op program's leaves), their data (flat) and dtype: a
    mask burn computes from the input is a constant of the call."""

    attrs: Attrs
    shapes: Sequence[Shape]
    data: Sequence[Sequence[float]] | None = None
    dtype: str = "float32"
    params: tuple[str, ...] = ()  # a module's: the parameters it has (an optional bias may be absent)
    param_shapes: dict[str, Shape] = field(default_factory=dict)  # their shapes (PyTorch's layout)
    # a module forward that takes burn's inference path (a BatchNorm off the autodiff device or
    # frozen: it normalises with its running statistics), whose buffers are then constants
    inference: bool = False


Composition = Callable[[Call], "tuple[Part, ...] | None"]
