"""Module kinds as data, like the op catalog (difftest/ops/catalog.py): one `ModuleKind` entry
per `module` statement kind, one file per kind here (kind.py says what an entry holds), listed
once in `MODULE_KINDS`. The program layer (IR checks, JSON, schema) reads the entries, and so
do the PyTorch executor, the noise model, the reproducers and the dtype table. The burn side of
each kind is its file in rust/src/modules/; the generator's fit is strategies/module_fits.py.
docs/adding-a-module.md walks through adding one.

Torch-free at import.
"""

from __future__ import annotations

from typing import Any

from difftest.program.modules.batch_norm import BATCH_NORM
from difftest.program.modules.conv2d import CONV2D
from difftest.program.modules.dropout import DROPOUT
from difftest.program.modules.embedding import EMBEDDING
from difftest.program.modules.group_norm import GROUP_NORM
from difftest.program.modules.kind import (
    NOISE_CLASSES,
    SHARES_BUFFERS_ACROSS,
    AttrSpec,
    ModuleError,
    ModuleKind,
    TensorSpec,
)
from difftest.program.modules.layer_norm import LAYER_NORM
from difftest.program.modules.linear import LINEAR
from difftest.program.modules.prelu import PRELU
from difftest.program.modules.rms_norm import RMS_NORM
from difftest.program.shapes import Shape

__all__ = ["MODULE_KINDS", "NOISE_CLASSES", "SHARES_BUFFERS_ACROSS", "AttrSpec", "ModuleError", "ModuleKind",
           "TensorSpec", "check_indices", "forward_shape", "module_kind"]

# the registry, in the format's order (the schema's enum, the interpreter's `module_kinds!` table)
MODULE_KINDS: dict[str, ModuleKind] = {
    k.name: k for k in (LINEAR, DROPOUT, BATCH_NORM, LAYER_NORM, RMS_NORM, GROUP_NORM, CONV2D, EMBEDDING, PRELU)}


def module_kind(name: str) -> ModuleKind:
    kind = MODULE_KINDS.get(name)
    if kind is None:
        raise ModuleError(f"unknown module {name!r} (known: {', '.join(MODULE_KINDS)})")
    return kind


def check_indices(kind: ModuleKind, shapes: dict[str, Shape], data: tuple[float, ...] | None,
                  require_grad: bool) -> None:
    """The input of an index-taking kind's forward (embedding): a leaf (`data` is its data, None
    for any other statement) that does not require grad, of integral entries in [0, bound)."""
    if kind.index_bound is None:
        return
    if data is None:
        raise ModuleError(f"{kind.name} takes indices: its input must be a leaf (of integral entries), "
                          "not a computed value")
    if require_grad:
        raise ModuleError(f"{kind.name} takes indices: its input leaf must not require grad")
    bound = kind.index_bound(shapes)
    for k, v in enumerate(data):
        if not (float(v).is_integer() and 0 <= v < bound):
            raise ModuleError(f"{kind.name} takes indices in [0, {bound}): element {k} of its input is {v!r}")


def forward_shape(kind: ModuleKind, attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    """The output shape of a `kind` forward on an input of shape `x` (ModuleError if none)."""
    if len(x) not in kind.input_ranks:
        ranks = ", ".join(map(str, kind.input_ranks))
        raise ModuleError(f"{kind.name} takes inputs of rank {ranks}, not {list(x)}")
    return kind.out_shape(attrs, shapes, x)
