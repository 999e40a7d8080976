"""The PyTorch lowering of every op: its entry's PyTorch template, rendered (spelling.py) over the
input names `x0, x1, …` and evaluated with the inputs bound to them, in the namespace that
spelling.TORCH_NAMESPACE_SOURCE makes (the one every reproducer script starts with). So the
expression a reproducer prints for a statement is, but for the variable names, the one the
executor ran. Each distinct expression is compiled once."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from types import CodeType
from typing import TYPE_CHECKING, Any

import torch

from difftest.ops.spelling import TORCH_NAMESPACE_SOURCE, torch_expr

if TYPE_CHECKING:
    from difftest.ops.spec import OpSpec

NAMESPACE: dict[str, Any] = {}
exec(TORCH_NAMESPACE_SOURCE, NAMESPACE)

# select_max / select_min / select_mul lower to Tensor.index_reduce, whose first call in a process
# warns that it is in beta: a notice about the API, not about the run
warnings.filterwarnings("ignore", message=r"index_reduce\(\) is in beta", category=UserWarning)


_NAMES = tuple(f"x{i}" for i in range(16))


def input_names(n: int) -> tuple[str, ...]:
    """The names the executor binds `n` inputs to."""
    return _NAMES[:n] if n <= len(_NAMES) else tuple(f"x{i}" for i in range(n))


@functools.lru_cache(maxsize=8192)
def compiled(source: str) -> CodeType:
    return compile(source, "<difftest op>", "eval")


# compiled expressions by what rendering one reads (the entry's template, attribute types and
# derive hook; the input count; the attributes' repr; the input shapes where the entry derives
# values from them): rendering is a pure function of these and costs more than the op it spells
# on the small tensors programs hold; the attributes are plain values (spec.AttrSpec's types),
# whose repr tells apart any two that render differently
_SOURCES: dict[tuple[Any, ...], CodeType] = {}
_MAX_SOURCES = 8192


def lower(spec: OpSpec, inputs: Sequence[torch.Tensor], attrs: dict[str, Any]) -> torch.Tensor:
    names = input_names(len(inputs))
    shapes = tuple(tuple(t.shape) for t in inputs) if spec.derive is not None else ()
    key = (spec.pytorch, spec.attrs, spec.derive, len(inputs), repr(attrs), shapes)
    code = _SOURCES.get(key)
    if code is None:
        code = compiled(torch_expr(spec, names, attrs, list(shapes)))
        if len(_SOURCES) >= _MAX_SOURCES:
            _SOURCES.clear()
        _SOURCES[key] = code
    out: torch.Tensor = eval(code, NAMESPACE, dict(zip(names, inputs, strict=True)))
    return out


def result_strides(spec: OpSpec, shapes: Sequence[tuple[int, ...]], strides: Sequence[tuple[int, ...]],
                   attrs: dict[str, Any]) -> tuple[int, ...]:
    """The strides of the op's PyTorch result on inputs of these shapes and strides (the values
    do not matter: every element is 0.5)."""
    with torch.no_grad():
        inputs = [torch.empty_strided(shape, stride).fill_(0.5) for shape, stride in zip(shapes, strides, strict=True)]
        return tuple(lower(spec, inputs, attrs).stride())
