"""The generator's module statements (generator.py's `_Builder` inherits them): a module of each
kind fitted to an existing value, transforms of its handle, forwards and parameter reads, and a
BatchNorm's running statistics as the program runs."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from difftest.divergences.known_bugs import known_bug
from difftest.divergences.states import BurnState
from difftest.exec.torch_exec import build_module, module_param, transform_module
from difftest.exec.torch_modules import burn_inference_path
from difftest.exec.torch_values import TorchModule, apply_module
from difftest.ops.domains import MAX_MAGNITUDE
from difftest.ops.dtype_support import supported
from difftest.ops.nn_shapes import CONV, conv, conv_attrs
from difftest.oracle.model import predict
from difftest.program.ir import (
    TRANSFORMS,
    Apply,
    InlineTensor,
    Leaf,
    Module,
    Param,
    Program,
    Transform,
    numel,
)
from difftest.program.module_kinds import module_kind
from difftest.program.shapes import ShapeError
from strategies.choices import weighted
from strategies.values import _Handle, _Value

if TYPE_CHECKING:
    from strategies.generator import _Builder

NORM_KINDS = ("batch_norm", "layer_norm", "rms_norm", "group_norm")


def module(b: _Builder) -> bool:
    """An nn module fitted to an existing value: a Linear whose `in` is the value's last dim
    (weights drawn here) or a Dropout; then transforms of it, forwards and parameters."""
    c, cfg = b.c, b.cfg
    if c.boolean(cfg.embedding_weight / (cfg.embedding_weight + cfg.linear_weight + 1.0)):
        return embedding_module(b)
    src = b.pick_existing(lambda v: not v.dtype)  # modules compute in the program's dtype
    if src is None:
        return False
    norms = norms_fitting(b, src)
    if norms and c.boolean(cfg.norm_weight / (cfg.norm_weight + cfg.linear_weight + 1.0)):
        st = norm_module(b, c.choice(norms), src)
    elif len(src.shape) == 4 and c.boolean(cfg.conv_weight / (cfg.conv_weight + cfg.linear_weight + 1.0)):
        conv = conv_module(b, src)
        if conv is None:
            return False
        st = conv
    elif c.boolean(cfg.linear_weight / (cfg.linear_weight + 1.0)):
        d_in, d_out = src.shape[-1], c.integer(1, cfg.max_dim)
        weight = InlineTensor((d_out, d_in), tuple(b.floats(d_out * d_in, -1.0, 1.0)))
        bias = InlineTensor((d_out,), tuple(b.floats(d_out, -1.0, 1.0))) if c.boolean(0.7) else None
        st = Module(b.fresh("m"), "linear", weight, bias)
    else:
        p = weighted(c, (0.0, 0.5, 1.0), cfg.dropout_p_weights)
        st = Module(b.fresh("m"), "dropout", p=p)
    b.statements.append(st)
    c.note(f"module:{st.module}")
    handles = [(st.id, _Handle(TorchModule(build_module(st, torch.float32)), st.module, st.p))]
    if st.module == "batch_norm":  # its running statistics change as the program runs
        return batch_norm_uses(b, st, src, handles)
    transforms(b, handles)
    for _ in range(c.integer(1, 2)):
        ident, handle = c.choice(handles[::-1])
        if st.weight is not None and c.boolean(0.3):  # a kind with parameters, built with them
            param_read(b, st, ident, handle)
            continue
        x = src if c.boolean(0.7) else b.pick_existing(lambda v: _fits(st, src, v) and not v.dtype)
        x = x if x is not None else src  # every other fitting value is in a consumed graph
        if x is not src and st.module in NORM_KINDS and st.module not in norms_fitting(b, x):
            x = src  # a normalisation only of values away from its tie (nearly constant groups)
        with torch.no_grad():
            out = apply_module(handle.module, x.tensor)
        if not bool(torch.isfinite(out).all()) or (out.numel() and float(out.abs().max()) > MAX_MAGNITUDE):
            c.note("out-of-range:apply")
            continue
        app = Apply(b.fresh("y"), ident, x.id)
        b.statements.append(app)
        if handle.valid:
            tracked, depth = False, 0
        elif module_kind(handle.kind).params and st.weight is not None:
            tracked = x.tracked or handle.params_require_grad
            depth = x.depth + 1 if x.tracked else 1
        else:  # dropout: deterministic only where it returns its input (a group_norm without
            # parameters: p = 0)
            tracked = x.tracked and (handle.p == 0.0 or not handle.training)
            depth = x.depth
        b.values.append(_Value(app.id, tuple(out.shape), out.detach().clone(), tracked, depth))
        c.note("apply")
    return True

def transforms(b: _Builder, handles: list[tuple[str, _Handle]]) -> None:
    """0 to 2 transforms of the module's handles (each of the latest handles likelier)."""
    for _ in range(b.c.integer(0, 2)):
        transform(b, handles)

def transform(b: _Builder, handles: list[tuple[str, _Handle]]) -> None:
    """One transform of one of the module's handles (the latest likelier), a new handle."""
    c = b.c
    ident, handle = c.choice(handles[::-1])
    kind = weighted(c, TRANSFORMS, b.cfg.transform_weights)
    t = Transform(b.fresh("t"), kind, ident)  # type: ignore[arg-type]
    b.statements.append(t)
    handles.append((t.id, _transformed(handle, kind)))
    c.note(f"transform:{kind}")

def param_read(b: _Builder, st: Module, ident: str, handle: _Handle) -> None:
    """A `param` read of the weight (or the bias, where it has one) through the handle `ident`."""
    name = "bias" if st.bias is not None and b.c.boolean(0.3) else "weight"
    param = Param(b.fresh("p"), ident, name)  # type: ignore[arg-type]
    b.statements.append(param)
    tensor = getattr(handle.module.module, name).detach().clone()
    b.values.append(_Value(param.id, tuple(tensor.shape), tensor))
    b.c.note("param")

def embedding_module(b: _Builder) -> bool:
    """An embedding table, transforms of it, forwards on leaves of indices [B, L] (a row
    picked twice, so that its gradient must accumulate, as the embedding op's) and, most
    often, a read of its weight (whose gradient is the only one its backward has). The
    indices are data (a leaf that does not require grad), as token ids are; they are not
    values other statements draw from."""
    c, cfg = b.c, b.cfg
    rows, dim = c.integer(2, cfg.max_dim + 1), c.integer(1, cfg.max_dim)
    weight = InlineTensor((rows, dim), tuple(b.floats(rows * dim, -1.0, 1.0)))
    st = Module(b.fresh("m"), "embedding", weight)
    b.statements.append(st)
    c.note("module:embedding")
    handles = [(st.id, _Handle(TorchModule(build_module(st, torch.float32)), st.module))]
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

def norms_fitting(b: _Builder, src: _Value) -> list[str]:
    """The normalisation kinds a module fitted to `src` can be: layer_norm over a last dim of
    more than one element; batch_norm for ranks 2 to 4 with more than one value per channel (PyTorch's
    train-mode forward needs them) on burn's autodiff device (its train path)."""
    shape = src.shape
    # a layer_norm over one element is its bias (a constant: its gradient is all rounding);
    # a (nearly) constant row or channel is the normalisations' tie: x - mean is rounding,
    # which the division by sqrt(var + eps) blows up (kept away from, like ops' kinks)
    kinds = ["layer_norm", "rms_norm"] if shape[-1] > 1 and _spread(src.tensor, [-1]) else []
    if 2 <= len(shape) <= 4 and numel(shape) > shape[1] and \
            _spread(src.tensor, [d for d in range(len(shape)) if d != 1]) and on_autodiff(b, src.id):
        kinds.append("batch_norm")
    if _group_counts(src):
        kinds.append("group_norm")
    kinds = [k for k in kinds if supported(k, b.dtype)]  # difftest/ops/dtype_support.py
    if b.cfg.avoid_known_bugs:
        kinds = [k for k in kinds if known_bug(Module("_", k), b.statements, b.dtype) is None]
    return kinds

def on_autodiff(b: _Builder, ident: str) -> bool:
    """Whether burn holds the value `ident` on the autodiff device (the model's prediction)."""
    state = predict(Program(tuple(b.statements))).burn.states.get(ident)
    return isinstance(state, BurnState) and state.is_autodiff

def conv_module(b: _Builder, src: _Value) -> Module | None:
    """A conv2d fitted to the image `src`, its attributes and weight drawn as the conv2d op's
    (difftest/ops/nn_shapes.py); None when the drawn kernel does not fit the image."""
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

def norm_module(b: _Builder, kind: str, src: _Value) -> Module:
    c = b.c
    if kind == "rms_norm":
        d = src.shape[-1]
        weight = InlineTensor((d,), tuple(b.floats(d, 0.5, 1.5)))
        return Module(b.fresh("m"), "rms_norm", weight, attrs={"d_model": d, "epsilon": 1e-5})
    if kind == "group_norm":
        n, groups = src.shape[1], c.choice(_group_counts(src))
        affine = c.boolean(0.8)
        gamma = InlineTensor((n,), tuple(b.floats(n, 0.5, 1.5))) if affine else None
        beta = InlineTensor((n,), tuple(b.floats(n, -1.0, 1.0))) if affine else None
        return Module(b.fresh("m"), "group_norm", gamma, beta,
                      attrs={"num_groups": groups, "num_channels": n, "epsilon": 1e-5})
    if kind == "layer_norm":
        d = src.shape[-1]
        weight = InlineTensor((d,), tuple(b.floats(d, 0.5, 1.5)))
        bias = InlineTensor((d,), tuple(b.floats(d, -1.0, 1.0))) if c.boolean(0.7) else None
        return Module(b.fresh("m"), "layer_norm", weight, bias, attrs={"d_model": d, "epsilon": 1e-5})
    n = src.shape[1]
    weight = InlineTensor((n,), tuple(b.floats(n, 0.5, 1.5)))
    bias = InlineTensor((n,), tuple(b.floats(n, -1.0, 1.0)))
    buffers = {"running_mean": InlineTensor((n,), tuple(b.floats(n, -1.0, 1.0))),
               "running_var": InlineTensor((n,), tuple(b.floats(n, 0.5, 2.0)))}
    momentum = c.choice((0.1, 0.25, 0.5))
    return Module(b.fresh("m"), "batch_norm", weight, bias, attrs={"num_features": n, "epsilon": 1e-5,
                                                                      "momentum": momentum}, buffers=buffers)

def batch_norm_uses(b: _Builder, st: Module, src: _Value, handles: list[tuple[str, _Handle]]) -> bool:
    """Forwards of a batch_norm (on `src`, train mode first), reads of its running
    statistics, transforms: a train-mode forward updates the statistics, so values are not
    precomputed here: each forward's output is computed by running it (as the executor does)."""
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
        app = Apply(b.fresh("y"), ident, src.id)
        b.statements.append(app)
        tracked = not handle.valid and (src.tracked or handle.params_require_grad)
        depth = src.depth + 1 if tracked else 0
        b.values.append(_Value(app.id, tuple(out.shape), out.detach().clone(), tracked, depth))
        c.note("apply:batch_norm")
    return True


def _fits(st: Module, src: _Value, v: _Value) -> bool:
    """Whether the module `st`, fitted to `src`, can also be applied to `v`."""
    if st.module == "conv2d":  # the same channels and image size (the kernel fits)
        return v.shape[1:] == src.shape[1:]
    if st.module == "group_norm":
        return v.shape[1:2] == src.shape[1:2] and st.attrs["num_groups"] in _group_counts(v)
    return v.shape[-1:] == src.shape[-1:]


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


def _spread(x: torch.Tensor, dims: list[int], rel: float = 1e-2) -> bool:
    """Whether every slice of `x` over `dims` has a standard deviation of at least `rel` of its
    largest magnitude (and above zero): no (nearly) constant row or channel."""
    x = x.double()
    std = x.std(dim=dims, unbiased=False)
    scale = x.abs().amax(dim=dims)
    return bool((std > rel * scale).all()) and bool((std > 0).all())


def _transformed(h: _Handle, kind: str) -> _Handle:
    module = transform_module(h.module, kind)
    if kind == "valid":
        return replace(h, module=module, valid=True, training=False)
    if kind == "train":
        return replace(h, module=module, valid=False, training=True)
    if kind == "no_grad":
        return replace(h, module=module, params_require_grad=False)
    if kind == "freeze":
        return replace(h, module=module, params_require_grad=False, training=False, burn_configured=False)
    return replace(h, module=module, params_require_grad=True, training=True, valid=False,  # unfreeze
                   burn_configured=True)
