"""The model's base predictions (model.py): the state PyTorch's autograd gives a statement's
result, and the state burn's autodiff gives it, before any declared divergence rule applies."""

from __future__ import annotations

from collections.abc import Sequence

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
from difftest.ops.strides import contiguous_strides, elementwise_strides, is_contiguous
from difftest.program.ir import (
    Apply,
    Cut,
    Leaf,
    OpCall,
    Param,
    Shape,
    Statement,
)


def _union(states: Sequence[State]) -> frozenset[str]:
    out: frozenset[str] = EMPTY
    for s in states:
        out = out | s.sources
    return out


def _base_torch(
    st: Statement, inputs: tuple[State, ...], shapes: dict[str, Shape], module: ModuleState | None = None
) -> TorchState:
    """PyTorch autograd, including its view semantics: a view made inside no_grad /
    inference_mode keeps its base's requires_grad (as a leaf without grad_fn, whose gradient
    reaches nobody) and its base's inference-ness."""
    ins = [s for s in inputs if isinstance(s, TorchState)]
    if isinstance(st, Param):
        assert module is not None
        return torch_param_state(module, st.param, shapes[st.id])
    if isinstance(st, Apply):
        assert module is not None
        return _torch_apply(module, ins[0], shapes[st.id])
    if isinstance(st, Leaf):
        key = st.id if st.require_grad else None
        return TorchState(st.require_grad, True, False, False, key,
                          frozenset({st.id}) if key else EMPTY, contiguous_strides(st.shape))
    if isinstance(st, Cut):
        x = ins[0]
        if st.cut == "autodiff":
            return x  # identity: the same tensor object
        return TorchState(False, True, False, x.is_inference, strides=x.strides)  # detach is a view
    assert isinstance(st, OpCall)
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


def _torch_apply(m: ModuleState, x: TorchState, shape: Shape) -> TorchState:
    """nn.Linear / nn.Dropout on x; a module derived from `valid` runs under torch.no_grad()."""
    const = TorchState(False, True, False, False, strides=contiguous_strides(shape))
    if m.kind == "dropout":
        if not m.training or m.p == 0.0:
            return x  # PyTorch returns its input itself
        if m.valid or not x.requires_grad:
            return const
        return TorchState(True, False, True, False, None, x.sources, contiguous_strides(shape))
    params = [torch_param_state(m, name, ()) for name in m.params]
    if m.valid or not any(s.requires_grad for s in (x, *params)):
        return const
    return TorchState(True, False, True, False, None, _union([x, *params]), contiguous_strides(shape))


def _base_burn(st: Statement, inputs: tuple[State, ...], module: ModuleState | None = None) -> BurnState:
    """burn as if it followed PyTorch's autograd, mapped onto burn's three flags."""
    ins = [s for s in inputs if isinstance(s, BurnState)]
    if isinstance(st, Param):
        assert module is not None
        return burn_param_state(module, st.param)
    if isinstance(st, Apply):
        assert module is not None
        return _burn_apply(module, ins[0])
    if isinstance(st, Leaf):
        ad = st.device == "autodiff"
        key = st.id if st.require_grad else None
        return BurnState(ad, st.require_grad, st.require_grad, key, frozenset({st.id}) if key else EMPTY)
    if isinstance(st, Cut):
        x = ins[0]
        if st.cut == "autodiff":
            return BurnState(True, x.is_tracked, x.is_require_grad, x.key, x.sources)
        return BurnState(x.is_autodiff, False, False)  # detach and (base) without_autodiff
    assert isinstance(st, OpCall)
    ad = any(s.is_autodiff for s in ins)
    if st.region != "grad":
        return BurnState(ad, False, False)
    tracked = any(s.is_tracked for s in ins)
    return BurnState(ad, tracked, False, None, _union([s for s in ins if s.is_tracked]))


def _burn_apply(m: ModuleState, x: BurnState) -> BurnState:
    """PyTorch's apply (see _torch_apply) mapped onto burn's flags; the parameters are on the
    autodiff device, so the output is too (a module without parameters, a group_norm built
    without affine ones, computes on its input's device)."""
    if m.kind == "dropout":
        if not m.training or m.p == 0.0:
            return x
        if m.valid:
            return BurnState(x.is_autodiff, False, False)
        return BurnState(x.is_autodiff, x.is_tracked, False, None, x.sources if x.is_tracked else EMPTY)
    if m.valid:
        return BurnState(True, False, False)
    ins = [x, *(burn_param_state(m, name) for name in m.params)]
    tracked = [s for s in ins if s.is_tracked]
    return BurnState(x.is_autodiff or bool(m.params), bool(tracked), False, None, _union(tracked))
