"""The generator's module statements (generator.py's `_Builder` calls `module`): a module of a
kind drawn by the kinds' weights and fitted by its fit (module_fits.py: which values a kind fits,
and how its statement is drawn), then its uses: transforms of its handle, forwards and parameter reads (the
generic ones here, or the kind's own)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from difftest.divergences.known_bugs import known_bug
from difftest.exec.torch_values import apply_module
from difftest.ops.domains import MAX_MAGNITUDE
from difftest.ops.dtype_support import supported
from difftest.program.ir import Apply, Module
from difftest.program.modules import module_kind
from difftest.strategies.choices import weighted
from difftest.strategies.config import GenConfig
from difftest.strategies.module_fits import FITS, Handles, ModuleFit, handles_of
from difftest.strategies.module_handles import forward_input, param_read, transforms
from difftest.strategies.values import _Value

if TYPE_CHECKING:
    from difftest.strategies.generator import _Builder


def _order() -> list[str]:
    """The kinds in the order the draw shrinks toward: the base ones (linear, dropout) first."""
    return [k for k, f in FITS.items() if f.base] + [k for k, f in FITS.items() if not f.base]


ORDER = _order()
BASE = [kind for kind in ORDER if FITS[kind].base]


def _weight(cfg: GenConfig, weight: str | float) -> float:
    return float(getattr(cfg, weight)) if isinstance(weight, str) else weight


def available(b: _Builder, kind: str) -> bool:
    """Whether the program may hold a module of `kind` at all: the kind is drawn in the
    program's dtype (difftest/ops/dtype_support.py) and is no known bug's trigger."""
    if not supported(kind, b.dtype):
        return False
    return not b.cfg.avoid_known_bugs or known_bug(Module("_", kind), b.statements, b.dtype) is None


def fitting(b: _Builder, kind: str, src: _Value | None) -> bool:
    """Whether a module of `kind` can be fitted to `src`: its fit says so and it is available."""
    return FITS[kind].fits(b, src) and available(b, kind)


def module(b: _Builder) -> bool:
    """An nn module: its kind drawn first, by the kinds' weights (GenConfig's knob of each
    ModuleFit: every kind about as often as the others, linear more), then fitted to an existing
    value the kind fits (or to inputs of its own), as an op is drawn before its inputs. Where no
    value fits the kind drawn, a base kind (linear against dropout) on any value. Then its uses."""
    c, cfg = b.c, b.cfg
    kinds = [k for k in ORDER if available(b, k)]
    if not kinds:
        return False
    kind = weighted(c, kinds, [_weight(cfg, FITS[k].weight) for k in kinds])
    fit = FITS[kind]
    if fit.own_input:
        return _build(b, kind, None)
    src = b.pick_existing(lambda v: not v.dtype and fit.fits(b, v))  # modules compute in the program's dtype
    if src is None and fit.fresh_shape is not None and b.leaves < cfg.max_leaves:
        fresh = b.leaf(fit.fresh_shape(c))
        src = fresh if fit.fits(b, fresh) else None
    if src is not None:
        return _build(b, kind, src)
    c.note(f"no-fit:{kind}")
    src = b.pick_existing(lambda v: not v.dtype)
    base = [k for k in BASE if k in kinds and FITS[k].fits(b, src)] if src is not None else []
    if src is None or not base:
        return False
    return _build(b, weighted(c, base, [_weight(cfg, FITS[k].weight) for k in base]), src)


def _build(b: _Builder, kind: str, src: _Value | None) -> bool:
    fit = FITS[kind]
    st = fit.build(b, src)
    if st is None:
        return False
    b.statements.append(st)
    b.c.note(f"module:{st.module}")
    return (fit.uses or forwards)(b, st, src, handles_of(st))


def forwards(b: _Builder, st: Module, src: _Value | None, handles: Handles) -> bool:
    """The generic uses of a module fitted to `src`: transforms of it, then forwards on `src`
    (or on another value it fits) and reads of its parameters, each through one of its handles."""
    assert src is not None
    c = b.c
    fit: ModuleFit = FITS[st.module]
    transforms(b, handles)
    for _ in range(c.integer(1, 2)):
        ident, handle = c.choice(handles[::-1])
        if st.weight is not None and c.boolean(0.3):  # a kind with parameters, built with them
            param_read(b, st, ident, handle)
            continue
        x = src if c.boolean(0.7) else b.pick_existing(lambda v: fit.also_fits(st, src, v) and not v.dtype)
        x = x if x is not None else src  # every other fitting value is in a consumed graph
        if x is not src and not fitting(b, st.module, x):
            x = src  # a normalisation only of values away from its tie (nearly constant groups)
        with torch.no_grad():
            out = apply_module(handle.module, x.tensor)
        if not bool(torch.isfinite(out).all()) or (out.numel() and float(out.abs().max()) > MAX_MAGNITUDE):
            c.note("out-of-range:apply")
            continue
        x = forward_input(b, handle, x)
        app = Apply(b.fresh("y"), ident, x.id)
        if b.avoids(known_bug(app, b.statements, b.dtype), f"apply:{st.module}"):
            continue  # the forward only: the module stays
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
