"""Module kinds as data, like the op catalog (difftest/ops/catalog.py): one `ModuleKind` per
`module` statement kind, declaring its configuration attributes, its tensors (parameters and
buffers, with PyTorch's names and layouts and shapes derived from the configuration), the input
ranks its forward accepts and its output shape. How PyTorch builds each kind is declared next to
its executor (difftest/exec/torch_modules.py, one builder per kind here); burn's names and
layouts (gamma/beta, Linear's transposed weight) are mapped on the Rust side (rust/src/modules/, one file per kind).

Nothing here imports torch: the program layer (IR checks, JSON, shapes) reads these entries.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from difftest.program.conv_shapes import conv
from difftest.program.shapes import Shape, ShapeError

# the transforms whose handle shares its input's running state (burn: a clone shares its
# RunningState: no_grad, freeze, unfreeze; valid() and train() sync it, then copy it:
# rust/src/batch_norm_evidence.rs)
SHARES_BUFFERS_ACROSS = ("no_grad", "freeze", "unfreeze")


class ModuleError(ValueError):
    """A module statement or a forward that does not fit its kind (the message says what)."""


@dataclass(frozen=True)
class AttrSpec:
    """A configuration attribute, written as a top-level field of the module statement."""

    name: str
    kind: type  # float, int, or list (of ints, one per spatial dim: conv2d)
    check: Callable[[Any], str | None]  # an error message, or None when the value is fine


@dataclass(frozen=True)
class TensorSpec:
    """A parameter (require-grad, stepped by optimizers) or a buffer (running state: not
    require-grad, updated by train-mode forwards), inline in the module statement."""

    name: str
    buffer: bool = False
    optional: bool = False  # may be `null` (JSON) / None (IR)


@dataclass(frozen=True)
class ModuleKind:
    name: str
    attrs: tuple[AttrSpec, ...]
    tensors: tuple[TensorSpec, ...]
    # the shape each tensor must have, from the attributes and the tensors given (Linear's
    # sizes are its weight's, as the format has always had them)
    shapes: Callable[[dict[str, Any], dict[str, Shape]], dict[str, Shape]]
    input_ranks: tuple[int, ...]
    # the forward's output shape for an input shape (raises ModuleError with the reason)
    out_shape: Callable[[dict[str, Any], dict[str, Shape], Shape], Shape]
    stateful: bool = False  # train-mode forwards update buffers (running statistics)
    steppable: bool = False  # optimizer steps act on it (rust/src/optim.rs)
    saves_input: bool = False  # its backward saves the input itself, whatever needs grad (an inference
    # input cannot be saved); rms_norm (a composite in PyTorch) saves intermediates instead
    burn_transposed: tuple[str, ...] = ()  # parameters burn stores transposed (rust/src/modules/)
    # the forward's input is a tensor of indices, not a value it differentiates (embedding): it
    # must be a leaf that does not require grad, of integral entries in [0, index_bound) (see
    # check_indices); burn converts it with `.int()`, PyTorch with `.long()`
    index_bound: Callable[[dict[str, Shape]], int] | None = None

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors if not t.buffer)

    @property
    def buffers(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors if t.buffer)

    def tensor(self, name: str) -> TensorSpec | None:
        return next((t for t in self.tensors if t.name == name), None)

    def is_buffer(self, name: str) -> bool:
        t = self.tensor(name)
        return t is not None and t.buffer


def _in_unit(name: str) -> Callable[[Any], str | None]:
    def check(x: Any) -> str | None:
        return None if isinstance(x, float) and 0.0 <= x <= 1.0 else f"{name} = {x!r} is outside [0, 1]"
    return check


def _positive_finite(name: str) -> Callable[[Any], str | None]:
    def check(x: Any) -> str | None:
        ok = isinstance(x, float) and math.isfinite(x) and x > 0
        return None if ok else f"{name} = {x!r} must be finite and > 0"
    return check


def _positive_int(name: str) -> Callable[[Any], str | None]:
    def check(x: Any) -> str | None:
        ok = isinstance(x, int) and not isinstance(x, bool) and x >= 1
        return None if ok else f"{name} = {x!r} must be an integer >= 1"
    return check


def _int_pair(name: str, least: int) -> Callable[[Any], str | None]:
    def check(x: Any) -> str | None:
        ok = isinstance(x, list) and len(x) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= least for v in x)
        return None if ok else f"{name} = {x!r} must be 2 integers >= {least} (one per spatial dim)"
    return check


# ---------------------------------------------------------------- linear, dropout

def _linear_shapes(attrs: dict[str, Any], given: dict[str, Shape]) -> dict[str, Shape]:
    w = given.get("weight")
    if w is None or len(w) != 2 or any(d < 1 for d in w):
        raise ModuleError(f"weight shape {list(w) if w else None} is not [out, in] with dims >= 1")
    return {"weight": w, "bias": (w[0],)}


def _linear_out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    out_f, in_f = shapes["weight"]
    if not x or x[-1] != in_f:
        raise ModuleError(f"linear with in = {in_f} applied to an input of shape {list(x)} "
                          f"(the last dim must be {in_f})")
    return x[:-1] + (out_f,)


def _same_shape(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    return x


LINEAR = ModuleKind(
    "linear", (), (TensorSpec("weight"), TensorSpec("bias", optional=True)), _linear_shapes,
    input_ranks=(1, 2, 3, 4), out_shape=_linear_out, steppable=True, saves_input=True,
    burn_transposed=("weight",))

DROPOUT = ModuleKind(
    "dropout", (AttrSpec("p", float, _in_unit("p")),), (), lambda attrs, given: {},
    input_ranks=(1, 2, 3, 4), out_shape=_same_shape, steppable=True)


# ---------------------------------------------------------------- normalisation

def _features(attr: str) -> Callable[[dict[str, Any], dict[str, Shape]], dict[str, Shape]]:
    """Every tensor is [attrs[attr]]."""
    def shapes(attrs: dict[str, Any], given: dict[str, Shape]) -> dict[str, Shape]:
        n = attrs[attr]
        return {name: (n,) for name in ("weight", "bias", "running_mean", "running_var")}
    return shapes


def _batch_norm_out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    c = attrs["num_features"]
    if x[1] != c:
        raise ModuleError(f"batch_norm with num_features = {c} applied to an input of shape {list(x)} "
                          f"(dim 1, the channels, must be {c})")
    return x


def _layer_norm_out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    d = attrs["d_model"]
    if x[-1] != d:
        raise ModuleError(f"layer_norm with d_model = {d} applied to an input of shape {list(x)} "
                          f"(the last dim must be {d})")
    return x


# burn-nn 0.22.1 norm/batch.rs: `forward<const D>` asserts [_, num_features, ..] (rank >= 2);
# train mode normalises with the batch statistics and updates the running ones (only on the
# autodiff device), eval mode uses the running ones
BATCH_NORM = ModuleKind(
    "batch_norm",
    (AttrSpec("num_features", int, _positive_int("num_features")),
     AttrSpec("epsilon", float, _positive_finite("epsilon")),
     AttrSpec("momentum", float, _in_unit("momentum"))),
    (TensorSpec("weight"), TensorSpec("bias"), TensorSpec("running_mean", buffer=True),
     TensorSpec("running_var", buffer=True)),
    _features("num_features"), input_ranks=(2, 3, 4), out_shape=_batch_norm_out, stateful=True,
    saves_input=True)

# burn-nn 0.22.1 norm/layer.rs: normalises over the last dim (PyTorch normalized_shape = [d_model])
LAYER_NORM = ModuleKind(
    "layer_norm",
    (AttrSpec("d_model", int, _positive_int("d_model")),
     AttrSpec("epsilon", float, _positive_finite("epsilon"))),
    (TensorSpec("weight"), TensorSpec("bias", optional=True)),
    _features("d_model"), input_ranks=(1, 2, 3, 4), out_shape=_layer_norm_out, steppable=True,
    saves_input=True)


def _rms_norm_out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    d = attrs["d_model"]
    if x[-1] != d:
        raise ModuleError(f"rms_norm with d_model = {d} applied to an input of shape {list(x)} "
                          f"(the last dim must be {d})")
    return x


# burn-nn 0.22.1 norm/rms.rs: x / sqrt(mean(x^2, last dim) + epsilon) * gamma; torch.nn.RMSNorm
# with an explicit eps computes the same (epsilon inside the square root, added to the mean of
# squares): no convention to declare (tests/differential/test_module_kinds.py compares them)
RMS_NORM = ModuleKind(
    "rms_norm",
    (AttrSpec("d_model", int, _positive_int("d_model")),
     AttrSpec("epsilon", float, _positive_finite("epsilon"))),
    (TensorSpec("weight"),),
    _features("d_model"), input_ranks=(1, 2, 3, 4), out_shape=_rms_norm_out, steppable=True)


def _group_norm_shapes(attrs: dict[str, Any], given: dict[str, Shape]) -> dict[str, Shape]:
    g, c = attrs["num_groups"], attrs["num_channels"]
    if c % g:
        raise ModuleError(f"num_channels = {c} is not divisible by num_groups = {g}")
    if ("weight" in given) != ("bias" in given):
        raise ModuleError("weight and bias must both be tensors (affine) or both be null")
    return {"weight": (c,), "bias": (c,)}


def _group_norm_out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    c = attrs["num_channels"]
    if x[1] != c:
        raise ModuleError(f"group_norm with num_channels = {c} applied to an input of shape {list(x)} "
                          f"(dim 1, the channels, must be {c})")
    if math.prod(x) <= 2:
        raise ModuleError(f"group_norm applied to an input of shape {list(x)}: burn-nn 0.22.1 panics on "
                          "an input of at most 2 elements")
    return x


# burn-nn 0.22.1 norm/group.rs: reshapes to [N, num_groups, rest], (x - mean) / sqrt(biased var +
# epsilon) per group, then gamma/beta per channel (affine: both or neither); it widens only F16
# inputs (accumulation_dtype), so a float64 input stays float64. torch.nn.GroupNorm computes the same
GROUP_NORM = ModuleKind(
    "group_norm",
    (AttrSpec("num_groups", int, _positive_int("num_groups")),
     AttrSpec("num_channels", int, _positive_int("num_channels")),
     AttrSpec("epsilon", float, _positive_finite("epsilon"))),
    (TensorSpec("weight", optional=True), TensorSpec("bias", optional=True)),
    _group_norm_shapes, input_ranks=(2, 3, 4), out_shape=_group_norm_out, steppable=True,
    saves_input=True)


# ---------------------------------------------------------------- convolution

def _conv2d_shapes(attrs: dict[str, Any], given: dict[str, Shape]) -> dict[str, Shape]:
    w = given.get("weight")
    if w is None or len(w) != 4 or any(d < 1 for d in w):
        raise ModuleError(f"weight shape {list(w) if w else None} is not [C_out, C_in / groups, kh, kw] "
                          "with dims >= 1")
    if w[0] % attrs["groups"]:
        raise ModuleError(f"the weight's C_out = {w[0]} is not divisible by groups = {attrs['groups']}")
    return {"weight": w, "bias": (w[0],)}


def _conv2d_out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    """The conv2d op's shape rule (conv_shapes.py)."""
    ins = [x, shapes["weight"], *([shapes["bias"]] if "bias" in shapes else [])]
    try:
        return conv(2)(ins, attrs)
    except ShapeError as e:
        raise ModuleError(str(e)) from None


# burn-nn 0.22.1 conv/conv2d.rs: burn::tensor::module::conv2d with the module's weight
# [C_out, C_in / groups, kh, kw] (PyTorch's layout) and bias; the statement's symmetric padding
# is burn's PaddingConfig2d::Explicit(ph, pw, ph, pw). torch.nn.Conv2d computes the same
CONV2D = ModuleKind(
    "conv2d",
    (AttrSpec("stride", list, _int_pair("stride", 1)),
     AttrSpec("padding", list, _int_pair("padding", 0)),
     AttrSpec("dilation", list, _int_pair("dilation", 1)),
     AttrSpec("groups", int, _positive_int("groups"))),
    (TensorSpec("weight"), TensorSpec("bias", optional=True)),
    _conv2d_shapes, input_ranks=(4,), out_shape=_conv2d_out, steppable=True, saves_input=True)


# ---------------------------------------------------------------- embedding

def _embedding_shapes(attrs: dict[str, Any], given: dict[str, Shape]) -> dict[str, Shape]:
    w = given.get("weight")
    if w is None or len(w) != 2 or any(d < 1 for d in w):
        raise ModuleError(f"weight shape {list(w) if w else None} is not [num_embeddings, embedding_dim] "
                          "with dims >= 1")
    return {"weight": w}


def _embedding_out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    return x + (shapes["weight"][1],)


# burn-nn 0.22.1 embedding.rs: `forward(Tensor<2, Int>)` -> [B, L, d_model], the table's rows
# picked by the indices (burn::tensor::module::embedding, the embedding op's function); the
# weight [num_embeddings, embedding_dim] is PyTorch's layout. torch.nn.Embedding computes the same
# (padding_idx and max_norm unset); a row picked twice gets the sum of both rows' gradients
EMBEDDING = ModuleKind(
    "embedding", (), (TensorSpec("weight"),), _embedding_shapes, input_ranks=(2,),
    out_shape=_embedding_out, steppable=True, saves_input=True,
    index_bound=lambda shapes: shapes["weight"][0])


MODULE_KINDS: dict[str, ModuleKind] = {
    k.name: k for k in (LINEAR, DROPOUT, BATCH_NORM, LAYER_NORM, RMS_NORM, GROUP_NORM, CONV2D, EMBEDDING)}


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


def module_kind(name: str) -> ModuleKind:
    kind = MODULE_KINDS.get(name)
    if kind is None:
        raise ModuleError(f"unknown module {name!r} (known: {', '.join(MODULE_KINDS)})")
    return kind


def forward_shape(kind: ModuleKind, attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    """The output shape of a `kind` forward on an input of shape `x` (ModuleError if none)."""
    if len(x) not in kind.input_ranks:
        ranks = ", ".join(map(str, kind.input_ranks))
        raise ModuleError(f"{kind.name} takes inputs of rank {ranks}, not {list(x)}")
    return kind.out_shape(attrs, shapes, x)
