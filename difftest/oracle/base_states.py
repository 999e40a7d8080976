"""The model's base predictions (model.py): the state PyTorch's autograd gives a statement's
result, and the state burn's autodiff gives it, before any declared divergence rule applies;
and the module handle a `module` or `transform` statement defines."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from difftest.divergences.knowledge import Framework
from difftest.divergences.rules import (
    burn_param_state,
    torch_param_state,
)
from difftest.divergences.states import (
    EMPTY,
    BurnState,
    ModuleState,
    State,
    TorchState,
)
from difftest.ops.catalog import CATALOG
from difftest.ops.strides import contiguous_strides, elementwise_strides, is_contiguous, module_result_strides
from difftest.program.ir import (
    Apply,
    Cut,
    Leaf,
    Module,
    OpCall,
    Param,
    Shape,
    Statement,
    Transform,
)
from difftest.program.modules import module_kind


def _union(states: Sequence[State]) -> frozenset[str]:
    out: frozenset[str] = EMPTY
    for s in states:
        out = out | s.sources
    return out


def _torch_param(st: Param, ins: list[TorchState], shapes: Mapping[str, Shape],
                 module: ModuleState | None) -> TorchState:
    assert module is not None
    return torch_param_state(module, st.param, shapes[st.id])


def _torch_apply(st: Apply, ins: list[TorchState], shapes: Mapping[str, Shape],
                    module: ModuleState | None) -> TorchState:
    assert module is not None
    return _torch_forward(module, ins[0], shapes[st.input], shapes[st.id])


def _torch_leaf(st: Leaf, ins: list[TorchState], shapes: Mapping[str, Shape],
                module: ModuleState | None) -> TorchState:
    key = st.id if st.require_grad else None
    return TorchState(st.require_grad, True, False, False, key,
                      frozenset({st.id}) if key else EMPTY, contiguous_strides(st.shape))


def _torch_cut(st: Cut, ins: list[TorchState], shapes: Mapping[str, Shape],
               module: ModuleState | None) -> TorchState:
    x = ins[0]
    if st.cut == "autodiff":
        return x  # identity: the same tensor object
    return TorchState(False, True, False, x.is_inference, strides=x.strides)  # detach is a view


def _torch_op(st: OpCall, ins: list[TorchState], shapes: Mapping[str, Shape],
              module: ModuleState | None) -> TorchState:
    """PyTorch autograd, including its view semantics: a view made inside no_grad /
    inference_mode keeps its base's requires_grad (as a leaf without grad_fn, whose gradient
    reaches nobody) and its base's inference-ness."""
    spec = CATALOG[st.op]
    x = ins[0]
    in_shape = shapes[st.inputs[0]]
    is_view = spec.view is not None and (
        not spec.view_needs_contiguous or is_contiguous(in_shape, x.strides)
    )
    if spec.view and is_view:
        strides = spec.view(in_shape, x.strides, st.attrs)
    elif spec.measured_layout:
        strides = spec.result_strides([shapes[i] for i in st.inputs], [s.strides for s in ins], st.attrs)
    elif spec.family in ("unary", "scalar", "binary") or spec.keeps_layout:
        operands = [(shapes[i], s.strides) for i, s in zip(st.inputs, ins)]
        strides = elementwise_strides(shapes[st.id], operands)
    else:
        strides = contiguous_strides(shapes[st.id])
    if st.region != "grad":
        if is_view:
            return TorchState(x.requires_grad, True, False, x.is_inference, strides=strides)
        return TorchState(False, True, False, st.region == "inference_mode", strides=strides)
    if is_view and x.is_inference:
        return TorchState(False, True, False, True, strides=strides)
    if any(s.requires_grad for s in ins):
        return TorchState(True, False, True, False, None, _union(ins), strides)
    return TorchState(False, True, False, False, strides=strides)


def forward_returns_input(m: ModuleState) -> bool:
    """Both frameworks answer a forward of `m` with its input tensor itself: a dropout with p = 0
    or in eval mode (PyTorch's native dropout, burn-nn's Dropout::forward)."""
    return m.kind == "dropout" and (not m.training or m.p == 0.0)


def _torch_forward(m: ModuleState, x: TorchState, in_shape: Shape, shape: Shape) -> TorchState:
    """A module's forward on x (of `in_shape`); a module derived from `valid` runs under
    torch.no_grad(). Its result is laid out by the module kind's `layout` (ops/strides.py)."""
    layout = contiguous_strides(shape)
    if x.strides:
        layout = module_result_strides(module_kind(m.kind).layout, in_shape, x.strides, shape)
    const = TorchState(False, True, False, False, strides=layout)
    if m.kind == "dropout":
        if forward_returns_input(m):
            return x  # PyTorch returns its input itself
        if m.valid or not x.requires_grad:
            return const
        return TorchState(True, False, True, False, None, x.sources, layout)
    params = [torch_param_state(m, name, ()) for name in m.params]
    if m.valid or not any(s.requires_grad for s in (x, *params)):
        return const
    return TorchState(True, False, True, False, None, _union([x, *params]), layout)


def _burn_param(st: Param, ins: list[BurnState], shapes: Mapping[str, Shape],
                module: ModuleState | None) -> BurnState:
    assert module is not None
    return burn_param_state(module, st.param)


def _burn_apply(st: Apply, ins: list[BurnState], shapes: Mapping[str, Shape],
                   module: ModuleState | None) -> BurnState:
    assert module is not None
    return _burn_forward(module, ins[0])


def _burn_leaf(st: Leaf, ins: list[BurnState], shapes: Mapping[str, Shape], module: ModuleState | None) -> BurnState:
    ad = st.device == "autodiff"
    key = st.id if st.require_grad else None
    return BurnState(ad, st.require_grad, st.require_grad, key, frozenset({st.id}) if key else EMPTY)


def _burn_cut(st: Cut, ins: list[BurnState], shapes: Mapping[str, Shape], module: ModuleState | None) -> BurnState:
    x = ins[0]
    if st.cut == "autodiff":
        return BurnState(True, x.is_tracked, x.is_require_grad, x.key, x.sources, x.default_strategy)
    # detach (on its input's strategy) and (base) without_autodiff
    return BurnState(x.is_autodiff, False, False, default_strategy=x.is_autodiff and x.default_strategy)


def _burn_op(st: OpCall, ins: list[BurnState], shapes: Mapping[str, Shape], module: ModuleState | None) -> BurnState:
    ad = any(s.is_autodiff for s in ins)
    if st.region != "grad":
        return BurnState(ad, False, False)
    tracked = any(s.is_tracked for s in ins)
    # the result is on its autodiff inputs' strategy (checkpointing_rules.py: they share one)
    default = any(s.default_strategy for s in ins if s.is_autodiff)
    return BurnState(ad, tracked, False, None, _union([s for s in ins if s.is_tracked]), default)


def _burn_forward(m: ModuleState, x: BurnState) -> BurnState:
    """PyTorch's apply (see _torch_forward) mapped onto burn's flags; the parameters are on the
    autodiff device, so the output is too (a module without parameters, a group_norm built
    without affine ones, computes on its input's device)."""
    if m.kind == "dropout":
        if forward_returns_input(m):
            return x
        default = x.is_autodiff and x.default_strategy  # computed on its input's strategy
        if m.valid:
            return BurnState(x.is_autodiff, False, False, default_strategy=default)
        return BurnState(x.is_autodiff, x.is_tracked, False, None, x.sources if x.is_tracked else EMPTY, default)
    if m.valid:
        return BurnState(True, False, False)
    ins = [x, *(burn_param_state(m, name) for name in m.params)]
    tracked = [s for s in ins if s.is_tracked]
    # parameters are on the module's strategy (checkpointing_rules.py); without any, the input's holds
    default = m.default_strategy if m.params else x.is_autodiff and x.default_strategy
    return BurnState(x.is_autodiff or bool(m.params), bool(tracked), False, None, _union(tracked), default)


@dataclass(frozen=True)
class Base:
    """A value kind's base prediction: the state PyTorch's autograd gives its result (`torch`),
    and burn's autodiff as if it followed PyTorch's autograd, mapped onto burn's three flags
    (`burn`); each from its inputs' states, every value's shape and the module it reads."""

    torch: Callable[[Any, list[TorchState], Mapping[str, Shape], ModuleState | None], TorchState]
    burn: Callable[[Any, list[BurnState], Mapping[str, Shape], ModuleState | None], BurnState]

    def state(self, fw: Framework, st: Statement, inputs: Sequence[State], shapes: Mapping[str, Shape],
              module: ModuleState | None) -> TorchState | BurnState:
        if fw == "torch":
            return self.torch(st, [s for s in inputs if isinstance(s, TorchState)], shapes, module)
        return self.burn(st, [s for s in inputs if isinstance(s, BurnState)], shapes, module)


# the value kinds the rules predict (the model's table, model.py, names each one's)
LEAF = Base(_torch_leaf, _burn_leaf)
OP = Base(_torch_op, _burn_op)
CUT = Base(_torch_cut, _burn_cut)
APPLY = Base(_torch_apply, _burn_apply)
PARAM = Base(_torch_param, _burn_param)


def module_handle(st: Module) -> ModuleState:
    """The handle a `module` statement defines (see ModuleState)."""
    params = tuple(name for name in module_kind(st.module).params if st.tensor(name) is not None)
    return ModuleState(st.id, st.module, st.p, params, burn_origin=st.id)


def transform_handle(st: Transform, modules: dict[str, ModuleState]) -> ModuleState:
    """The handle a `transform` statement derives from its input's (see ModuleState)."""
    m = modules[st.input]
    new = replace(m, id=st.id)
    t = st.transform
    if t == "valid":  # eval(); burn: a snapshot on the plain device, configured state kept
        return replace(new, training=False, valid=True, burn_training=False, burn_origin=None)
    if t == "train":  # burn: back on autodiff; a require-grad parameter stays the same leaf
        if m.requires_grad:
            origin = st.id if m.valid else m.burn_origin
        else:
            origin = None
        return replace(new, training=True, valid=False, burn_training=m.burn_configured_training,
                       burn_origin=origin)
    if t == "no_grad":  # requires_grad_(False); training flags untouched
        return replace(new, requires_grad=False, no_grad=True, burn_origin=None)
    if t == "freeze":  # requires_grad_(False) + eval(); burn: persistently
        return replace(new, requires_grad=False, training=False, burn_training=False,
                       burn_configured_training=False, burn_origin=None)
    assert t == "unfreeze", t
    # requires_grad_(True) + train(); burn: a plain-device parameter stays plain until train(),
    # a require-grad one stays the same leaf, a detached one becomes a new leaf
    if m.valid:
        origin = None
    else:
        origin = m.burn_origin if m.requires_grad else st.id
    return replace(new, requires_grad=True, training=True, burn_training=True, burn_configured_training=True,
                   no_grad=False, burn_origin=origin)
