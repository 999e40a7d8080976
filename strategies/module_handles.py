"""What the generator does with a module handle of any kind: transforms of it (a new handle
each), reads of its parameters. Used by the generic forwards (module_draws.py) and the kinds'
own uses (module_fits.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from difftest.divergences.states import BurnState
from difftest.exec.torch_exec import transform_module
from difftest.program.ir import TRANSFORMS, Cut, Module, Param, Transform
from difftest.strategies.choices import weighted
from difftest.strategies.values import _Handle, _Value

if TYPE_CHECKING:
    from difftest.strategies.generator import _Builder


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


def forward_input(b: _Builder, handle: _Handle, x: _Value) -> _Value:
    """The value a forward through `handle` takes for `x`: `x`, or, for a valid() module (its
    parameters on the inner backend) with GenConfig.p_valid_inner, `x` taken off the autodiff
    device by a without_autodiff cut, as inference feeds a model (burn then runs the inner
    backend's own module kernel, not autodiff's composition of ops)."""
    state = b.burn_states().get(x.id) if handle.valid else None
    if not isinstance(state, BurnState) or not state.is_autodiff or not b.c.boolean(b.cfg.p_valid_inner):
        return x
    st = Cut(b.fresh("c"), "without_autodiff", x.id, "grad")
    b.statements.append(st)
    inner = _Value(st.id, x.shape, x.tensor, False, 0, dtype=x.dtype)
    b.values.append(inner)
    b.c.note("cut:without_autodiff:valid-forward")
    return inner
