"""`group_norm`: the channels (dim 1) in `num_groups` groups, each normalised over its channels
and the rest of the input; PyTorch's weight/bias are burn's gamma/beta, both or neither
(affine).

burn-nn 0.22.1 norm/group.rs: reshapes to [N, num_groups, rest], (x - mean) / sqrt(biased var +
epsilon) per group, then gamma/beta per channel; it widens only F16 inputs
(accumulation_dtype), so a float64 input stays float64. torch.nn.GroupNorm computes the same."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from difftest.program.literals import burn_vector, py_float, rust_f64
from difftest.program.modules.kind import (
    AttrSpec,
    ModuleError,
    ModuleKind,
    TensorSpec,
    norm_half,
    positive_finite,
    positive_int,
)
from difftest.program.parts import Call, Part
from difftest.program.shapes import Shape

if TYPE_CHECKING:
    from difftest.program.statements import Module


def _shapes(attrs: dict[str, Any], given: dict[str, Shape]) -> dict[str, Shape]:
    g, c = attrs["num_groups"], attrs["num_channels"]
    if c % g:
        raise ModuleError(f"num_channels = {c} is not divisible by num_groups = {g}")
    if ("weight" in given) != ("bias" in given):
        raise ModuleError("weight and bias must both be tensors (affine) or both be null")
    return {"weight": (c,), "bias": (c,)}


def _out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    c = attrs["num_channels"]
    if x[1] != c:
        raise ModuleError(f"group_norm with num_channels = {c} applied to an input of shape {list(x)} "
                          f"(dim 1, the channels, must be {c})")
    if math.prod(x) <= 2:
        raise ModuleError(f"group_norm applied to an input of shape {list(x)}: burn-nn 0.22.1 panics on "
                          "an input of at most 2 elements")
    return x


def _pytorch(st: Module, dtype: str) -> str:
    g, n, eps = st.attrs["num_groups"], st.attrs["num_channels"], py_float(st.attrs["epsilon"])
    return f"torch.nn.GroupNorm({g}, {n}, eps={eps}, affine={st.weight is not None}{dtype})"


def _rust(st: Module, var: str, dtype: str) -> str:
    a = st.attrs
    affine = st.weight is not None and st.bias is not None
    mut = "mut " if affine else ""
    lines = [f"let {mut}{var} = GroupNormConfig::new({a['num_groups']}, {a['num_channels']})"
             f".with_epsilon({rust_f64(a['epsilon'])}).with_affine({str(affine).lower()}).init(&device);"]
    if st.weight is not None and st.bias is not None:
        lines += ["// PyTorch's weight/bias are burn's gamma/beta",
                  f"{var}.gamma = Some(Param::from_tensor({burn_vector(st.weight.data, dtype)}));",
                  f"{var}.beta = Some(Param::from_tensor({burn_vector(st.bias.data, dtype)}));"]
    return "\n".join(lines)


def _parts(call: Call) -> tuple[Part, ...] | None:
    # burn-nn 0.22.1 norm/group.rs, group_norm: x reshaped to [N, groups, rest]; x - mean_dim(2),
    # divided by sqrt(mean_dim(square, 2) + epsilon); reshaped back, times gamma and plus beta
    # (each reshaped to [1, C, 1, ...]) when affine. A float16 input is widened first: not here
    if call.dtype == "float16":
        return None
    shape = list(call.shapes[0])
    n, c, g = shape[0], shape[1], int(call.attrs["num_groups"])
    hidden = math.prod(shape[2:]) * c // g
    parts = (Part("reshape", (0,), {"shape": [n, g, hidden]}), Part("mean_dim", ("p0",), {"dim": 2}),
             Part("sub", ("p0", "p1")), Part("square", ("p2",)), Part("mean_dim", ("p3",), {"dim": 2}),
             Part("add_scalar", ("p4",), {"scalar": call.attrs["epsilon"]}), Part("sqrt", ("p5",)),
             Part("div", ("p2", "p6")), Part("reshape", ("p7",), {"shape": shape}))
    if not {"weight", "bias"} <= set(call.params):
        return parts
    affine = [1, c] + [1] * (len(shape) - 2)
    return (*parts, Part("reshape", ("param:weight",), {"shape": affine}), Part("mul", ("p8", "p9")),
            Part("reshape", ("param:bias",), {"shape": affine}), Part("add", ("p10", "p11")))

GROUP_NORM = ModuleKind(
    "group_norm",
    (AttrSpec("num_groups", int, positive_int("num_groups")),
     AttrSpec("num_channels", int, positive_int("num_channels")),
     AttrSpec("epsilon", float, positive_finite("epsilon"))),
    (TensorSpec("weight", optional=True), TensorSpec("bias", optional=True)),
    _shapes, input_ranks=(2, 3, 4), out_shape=_out, pytorch=_pytorch, rust=_rust,
    burn_fields={"weight": "gamma.as_ref().unwrap().val()", "bias": "beta.as_ref().unwrap().val()"},
    burn_uses=frozenset({"Module", "Param", "GroupNormConfig"}), noise="norm:channels",
    imprecise=norm_half("group_norm"), steppable=True, saves_input=True, layout="memory_format", composed=_parts)
