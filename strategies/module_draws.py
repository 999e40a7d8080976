"""The generator's module statements (generator.py's `_Builder` calls `module`): a module of a
kind drawn by the kinds' fits (module_fits.py: which kind fits an existing value, and how its
statement is drawn), then its uses: transforms of its handle, forwards and parameter reads (the
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
from difftest.strategies.config import GenConfig
from difftest.strategies.module_fits import FITS, Handles, ModuleFit, handles_of
from difftest.strategies.module_handles import param_read, transforms
from difftest.strategies.values import _Value

if TYPE_CHECKING:
    from difftest.strategies.generator import _Builder


def _groups() -> list[tuple[str | float, list[str]]]:
    """The kinds other than the base ones, grouped by weight knob, in FITS's order."""
    groups: dict[str | float, list[str]] = {}
    for kind, fit in FITS.items():
        if not fit.base:
            groups.setdefault(fit.weight, []).append(kind)
    return list(groups.items())


GROUPS = _groups()
BASE = [kind for kind, fit in FITS.items() if fit.base]


def _weight(cfg: GenConfig, weight: str | float) -> float:
    return float(getattr(cfg, weight)) if isinstance(weight, str) else weight


def fitting(b: _Builder, kind: str, src: _Value | None) -> bool:
    """Whether a module of `kind` can be fitted to `src`: its fit says so, the kind is drawn in
    the program's dtype (difftest/ops/dtype_support.py) and is no known bug's trigger."""
    if not FITS[kind].fits(b, src) or not supported(kind, b.dtype):
        return False
    return not b.cfg.avoid_known_bugs or known_bug(Module("_", kind), b.statements, b.dtype) is None


def module(b: _Builder) -> bool:
    """An nn module: a kind of each group in turn (where one fits, with its group's weight
    against the base kinds'), else a base kind (linear against dropout); fitted to an existing
    value (or to inputs of its own); then its uses."""
    c, cfg = b.c, b.cfg
    base_weights = [_weight(cfg, FITS[k].weight) for k in BASE]
    src: _Value | None = None
    for weight, kinds in GROUPS:
        if src is None and not all(FITS[k].own_input for k in kinds):
            src = b.pick_existing(lambda v: not v.dtype)  # modules compute in the program's dtype
            if src is None:
                return False
        fit = [k for k in kinds if fitting(b, k, src)]
        w = total = _weight(cfg, weight)
        for bw in base_weights:
            total += bw
        if fit and c.boolean(w / total):
            return _build(b, fit[0] if len(kinds) == 1 else c.choice(fit), src)
    if src is None:
        src = b.pick_existing(lambda v: not v.dtype)
        if src is None:
            return False
    base = [k for k in BASE if fitting(b, k, src)]
    for i, kind in enumerate(base[:-1]):
        total = 0.0
        for bw in base_weights[i:]:
            total += bw
        if c.boolean(base_weights[i] / total):
            return _build(b, kind, src)
    return _build(b, base[-1], src) if base else False


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
