"""The generator's fit of each module kind (difftest/program/modules/ holds the rest of a kind):
one `ModuleFit` per kind in `FITS`, saying which weight knob of GenConfig draws it, where it
fits (the value its module is fitted to), how its statement is drawn, which other values its
forwards may take, and its own uses where the generic ones (module_draws.py) do not do.

These stay in the generator rather than in the kinds' entries: the fits read the values
themselves (a normalisation keeps away from nearly constant rows and channels, its tie), and
the oracle's model (burn's BatchNorm trains only on its autodiff device); conv2d draws with the
conv2d op's sampler (difftest/ops/nn_shapes.py); and every draw goes through the generator's
builder (data in the program's dtype, fresh ids, the values it tracks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from difftest.choices import Choices
from difftest.divergences.states import BurnState
from difftest.exec.torch_exec import build_module, module_param
from difftest.exec.torch_modules import burn_inference_path
from difftest.exec.torch_values import apply_module
from difftest.ops.catalog import CATALOG
from difftest.ops.nn_shapes import CONV, IMAGE, conv, conv_attrs
from difftest.program.ir import Apply, InlineTensor, Leaf, Module, Param, Shape, numel
from difftest.program.shapes import ShapeError
from difftest.strategies.choices import weighted
from difftest.strategies.module_handles import forward_input, param_read, transform, transforms
from difftest.strategies.values import _Handle, _Value

if TYPE_CHECKING:
    from difftest.strategies.generator import _Builder

Handles = list[tuple[str, _Handle]]


def _anywhere(b: _Builder, src: _Value | None) -> bool:
    return True


def _same_last_dim(st: Module, src: _Value, v: _Value) -> bool:
    return v.shape[-1:] == src.shape[-1:]


@dataclass(frozen=True)
class ModuleFit:
    """How the generator draws one module kind: its weight in the draw of a kind
    (module_draws.module), the values it fits and how its statement is drawn. The base kinds
    (linear, dropout) fit any value: one of them is drawn where no value fits the kind drawn."""

    weight: str | float  # the GenConfig knob of its weight, or a constant weight
    # its statement, fitted to `src` (None for a kind that draws its own input); None when what
    # was drawn does not fit after all
    build: Callable[[_Builder, _Value | None], Module | None]
    fits: Callable[[_Builder, _Value | None], bool] = _anywhere  # whether a module can be fitted to `src`
    # whether the module `st`, fitted to `src`, can also be applied to another value
    also_fits: Callable[[Module, _Value, _Value], bool] = _same_last_dim
    # its forwards, reads and transforms (None: the generic ones, module_draws.forwards)
    uses: Callable[[_Builder, Module, _Value | None, Handles], bool] | None = None
    base: bool = False
    own_input: bool = False  # it draws its own inputs (embedding: leaves of indices)
    # the shape of a fresh leaf to fit it to when no existing value fits it (None: a base kind
    # is drawn instead), for kinds whose inputs programs rarely hold (conv2d: an image)
    fresh_shape: Callable[[Choices], Shape] | None = None


# ---------------------------------------------------------------- linear, dropout

def _linear(b: _Builder, src: _Value | None) -> Module:
    assert src is not None
    c = b.c
    d_in, d_out = src.shape[-1], c.integer(1, b.cfg.max_dim)
    weight = InlineTensor((d_out, d_in), tuple(b.floats(d_out * d_in, -1.0, 1.0)))
    bias = InlineTensor((d_out,), tuple(b.floats(d_out, -1.0, 1.0))) if c.boolean(0.7) else None
    return Module(b.fresh("m"), "linear", weight, bias)


def _dropout(b: _Builder, src: _Value | None) -> Module:
    return Module(b.fresh("m"), "dropout", p=weighted(b.c, (0.0, 0.5, 1.0), b.cfg.dropout_p_weights))


# ---------------------------------------------------------------- normalisations

def _spread(x: torch.Tensor, dims: list[int], rel: float = 1e-2) -> bool:
    """Whether every slice of `x` over `dims` has a standard deviation of at least `rel` of its
    largest magnitude (and above zero): no (nearly) constant row or channel."""
    x = x.double()
    std = x.std(dim=dims, unbiased=False)
    scale = x.abs().amax(dim=dims)
    return bool((std > rel * scale).all()) and bool((std > 0).all())


def _last_dim_spread(b: _Builder, src: _Value | None) -> bool:
    """layer_norm, rms_norm: over a last dim of more than one element (over one, a layer_norm is
    its bias: a constant, whose gradient is all rounding), every row spread: a (nearly)
    constant row is the normalisations' tie (x - mean is rounding, which the division by
    sqrt(var + eps) blows up), kept away from like ops' kinks."""
    assert src is not None
    return src.shape[-1] > 1 and _spread(src.tensor, [-1])


def on_autodiff(b: _Builder, ident: str) -> bool:
    """Whether burn holds the value `ident` on the autodiff device (the model's prediction)."""
    state = b.burn_states().get(ident)
    return isinstance(state, BurnState) and state.is_autodiff


def _batch_norm_fits(b: _Builder, src: _Value | None) -> bool:
    """Ranks 2 to 4 with more than one value per channel (PyTorch's train-mode forward needs
    them), every channel spread, on burn's autodiff device (its train path)."""
    assert src is not None
    shape = src.shape
    return 2 <= len(shape) <= 4 and numel(shape) > shape[1] and \
        _spread(src.tensor, [d for d in range(len(shape)) if d != 1]) and on_autodiff(b, src.id)


def _group_counts(v: _Value) -> list[int]:
    """The group counts a group_norm over `v` can have: `v` of rank 2 to 4 with more than 2
    elements (burn panics on fewer), the groups dividing its channels (dim 1), more than one
    element per group (one is the bias: a constant) and every group spread (the normalisations' tie)."""
    shape = v.shape
    if not 2 <= len(shape) <= 4 or numel(shape) <= 2:
        return []
    n, c = shape[0], shape[1]
    return [g for g in range(1, c + 1) if c % g == 0 and numel(shape) // (n * g) > 1
            and _spread(v.tensor.reshape(n, g, -1), [2])]


def _layer_norm(b: _Builder, src: _Value | None) -> Module:
    assert src is not None
    d = src.shape[-1]
    weight = InlineTensor((d,), tuple(b.floats(d, 0.5, 1.5)))
    bias = InlineTensor((d,), tuple(b.floats(d, -1.0, 1.0))) if b.c.boolean(0.7) else None
    return Module(b.fresh("m"), "layer_norm", weight, bias, attrs={"d_model": d, "epsilon": 1e-5})


def _rms_norm(b: _Builder, src: _Value | None) -> Module:
    assert src is not None
    d = src.shape[-1]
    weight = InlineTensor((d,), tuple(b.floats(d, 0.5, 1.5)))
    return Module(b.fresh("m"), "rms_norm", weight, attrs={"d_model": d, "epsilon": 1e-5})


def _batch_norm(b: _Builder, src: _Value | None) -> Module:
    assert src is not None
    n = src.shape[1]
    weight = InlineTensor((n,), tuple(b.floats(n, 0.5, 1.5)))
    bias = InlineTensor((n,), tuple(b.floats(n, -1.0, 1.0)))
    buffers = {"running_mean": InlineTensor((n,), tuple(b.floats(n, -1.0, 1.0))),
               "running_var": InlineTensor((n,), tuple(b.floats(n, 0.5, 2.0)))}
    momentum = b.c.choice((0.1, 0.25, 0.5))
    return Module(b.fresh("m"), "batch_norm", weight, bias, attrs={"num_features": n, "epsilon": 1e-5,
                                                                      "momentum": momentum}, buffers=buffers)


def _batch_norm_uses(b: _Builder, st: Module, src: _Value | None, handles: Handles) -> bool:
    """Forwards of a batch_norm (on `src`, train mode first), reads of its running
    statistics, transforms: a train-mode forward updates the statistics, so values are not
    precomputed here: each forward's output is computed by running it (as the executor does)."""
    assert src is not None
    c = b.c
    for _ in range(c.integer(1, 3)):
        if c.boolean(0.4):
            transform(b, handles)
        ident, handle = c.choice(handles[::-1])
        if c.boolean(0.3):
            name = c.choice(("running_mean", "running_var", "weight", "bias"))
            param = Param(b.fresh("p"), ident, name)
            b.statements.append(param)
            tensor = module_param(handle.module, name).detach().clone()
            b.values.append(_Value(param.id, tuple(tensor.shape), tensor))
            c.note("param")
            continue
        # burn's train() after freeze() keeps the inference path (batch-norm-freeze-survives-train)
        with torch.no_grad(), burn_inference_path(handle.module.module, not handle.burn_configured):
            out = apply_module(handle.module, src.tensor)
        x = forward_input(b, handle, src)
        app = Apply(b.fresh("y"), ident, x.id)
        b.statements.append(app)
        tracked = not handle.valid and (x.tracked or handle.params_require_grad)
        depth = x.depth + 1 if tracked else 0
        b.values.append(_Value(app.id, tuple(out.shape), out.detach().clone(), tracked, depth))
        c.note("apply:batch_norm")
    return True


def _group_norm(b: _Builder, src: _Value | None) -> Module:
    assert src is not None
    c = b.c
    n, groups = src.shape[1], c.choice(_group_counts(src))
    affine = c.boolean(0.8)
    gamma = InlineTensor((n,), tuple(b.floats(n, 0.5, 1.5))) if affine else None
    beta = InlineTensor((n,), tuple(b.floats(n, -1.0, 1.0))) if affine else None
    return Module(b.fresh("m"), "group_norm", gamma, beta,
                  attrs={"num_groups": groups, "num_channels": n, "epsilon": 1e-5})


def _group_norm_also(st: Module, src: _Value, v: _Value) -> bool:
    return v.shape[1:2] == src.shape[1:2] and st.attrs["num_groups"] in _group_counts(v)


# ---------------------------------------------------------------- conv2d

def _conv2d(b: _Builder, src: _Value | None) -> Module | None:
    """A conv2d fitted to the image `src`, its attributes and weight drawn as the conv2d op's
    (difftest/ops/nn_shapes.py); None when the drawn kernel does not fit the image."""
    assert src is not None
    c = b.c
    attrs = conv_attrs(2)(c, [src.shape])
    assert attrs is not None
    shapes = list(CONV.draw(c, src.shape, attrs, b.cfg.max_dim))
    try:
        conv(2)([src.shape, *shapes], attrs)
    except ShapeError:
        c.note("no-fit:conv2d")
        return None
    w = shapes[0]
    weight = InlineTensor(w, tuple(b.floats(numel(w), -1.0, 1.0)))
    bias = InlineTensor((w[0],), tuple(b.floats(w[0], -1.0, 1.0))) if len(shapes) == 2 else None
    return Module(b.fresh("m"), "conv2d", weight, bias, attrs={
        "stride": list(attrs["stride"]), "padding": list(attrs["padding"]), "dilation": list(attrs["dilation"]),
        "groups": attrs["groups"]})


# ---------------------------------------------------------------- embedding

def _embedding(b: _Builder, src: _Value | None) -> Module:
    c, cfg = b.c, b.cfg
    rows, dim = c.integer(2, cfg.max_dim + 1), c.integer(1, cfg.max_dim)
    weight = InlineTensor((rows, dim), tuple(b.floats(rows * dim, -1.0, 1.0)))
    return Module(b.fresh("m"), "embedding", weight)


def _embedding_uses(b: _Builder, st: Module, src: _Value | None, handles: Handles) -> bool:
    """Transforms of an embedding table, forwards on leaves of indices [B, L] (a row picked
    twice, so that its gradient must accumulate, as the embedding op's) and, most often, a read
    of its weight (whose gradient is the only one its backward has). The indices are data (a
    leaf that does not require grad), as token ids are; they are not values other statements
    draw from."""
    c = b.c
    assert st.weight is not None
    rows = st.weight.shape[0]
    transforms(b, handles)
    indices: list[Leaf] = []
    for _ in range(c.integer(1, 2)):
        ident, handle = c.choice(handles[::-1])
        idx = c.choice(indices) if indices and c.boolean(0.3) else index_leaf(b, rows)
        if idx not in indices:
            indices.append(idx)
        with torch.no_grad():
            out = apply_module(handle.module, torch.tensor(idx.data).reshape(idx.shape))
        app = Apply(b.fresh("y"), ident, idx.id)
        b.statements.append(app)
        tracked = not handle.valid and handle.params_require_grad
        b.values.append(_Value(app.id, tuple(out.shape), out.detach().clone(), tracked, int(tracked)))
        c.note("apply:embedding")
    # the indices have no gradient: the weight's is all there is to see of its backward
    if c.boolean(0.8):
        ident, handle = c.choice(handles[::-1])
        param_read(b, st, ident, handle)
    return True


def index_leaf(b: _Builder, rows: int) -> Leaf:
    """A leaf of indices [B, L] in [0, rows), one of them repeated when there are two or more
    (the embedding op's draw, difftest/ops/nn_shapes.py), on burn's autodiff device or rarely
    the plain one; it does not require grad."""
    c = b.c
    shape = (c.integer(1, 2), c.integer(1, 4))
    data = [c.integer(0, rows - 1) for _ in range(numel(shape))]
    if len(data) > 1 and len(set(data)) == len(data):
        data[-1] = data[0]
    plain = c.boolean(b.cfg.p_plain_leaf)
    st = Leaf(b.fresh("x"), shape, tuple(float(i) for i in data), "plain" if plain else "autodiff", False)
    b.statements.append(st)
    c.note("leaf:indices" + (":plain" if plain else ""))
    return st


# ---------------------------------------------------------------- prelu

def _off_kink(b: _Builder, src: _Value | None) -> bool:
    """Values off prelu's kink at 0 (the prelu op's domain: its subgradient there is a
    convention, prelu-at-zero)."""
    assert src is not None
    return CATALOG["prelu"].domain.predicate([src.tensor], {})


def _prelu(b: _Builder, src: _Value | None) -> Module:
    """One weight, or one per channel (dim 1) of an input of rank >= 2, in the prelu op's range."""
    assert src is not None
    c = b.c
    n = src.shape[1] if len(src.shape) >= 2 and c.boolean(0.5) else 1
    return Module(b.fresh("m"), "prelu", InlineTensor((n,), tuple(b.floats(n, -1.0, 1.0))))


def _prelu_also(st: Module, src: _Value, v: _Value) -> bool:
    assert st.weight is not None
    n = st.weight.shape[0]
    return n == 1 or (len(v.shape) >= 2 and v.shape[1] == n)


# ---------------------------------------------------------------- the table

# One entry per kind of difftest/program/modules/: an embedding (its own input), the
# normalisations, a conv2d (on images), a prelu, linear and dropout (the base kinds).
FITS: dict[str, ModuleFit] = {
    "embedding": ModuleFit("embedding_weight", _embedding, uses=_embedding_uses, own_input=True),
    "layer_norm": ModuleFit("norm_weight", _layer_norm, _last_dim_spread),
    "rms_norm": ModuleFit("norm_weight", _rms_norm, _last_dim_spread),
    "batch_norm": ModuleFit("norm_weight", _batch_norm, _batch_norm_fits, uses=_batch_norm_uses),
    "group_norm": ModuleFit("norm_weight", _group_norm, lambda b, src: src is not None and bool(_group_counts(src)),
                            _group_norm_also),
    "conv2d": ModuleFit("conv_weight", _conv2d, lambda b, src: src is not None and len(src.shape) == 4,
                        lambda st, src, v: v.shape[1:] == src.shape[1:],  # the same channels and image size
                        fresh_shape=IMAGE.draw),
    "prelu": ModuleFit("prelu_weight", _prelu, _off_kink, _prelu_also),
    "linear": ModuleFit("linear_weight", _linear, base=True),
    "dropout": ModuleFit(1.0, _dropout, base=True),
}


def handles_of(st: Module) -> Handles:
    """The module's first handle, built in PyTorch (float32) so forwards can be evaluated."""
    return [(st.id, _Handle(build_module(st, torch.float32), st.module, st.p))]
