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


GROUP_NORM = ModuleKind(
    "group_norm",
    (AttrSpec("num_groups", int, positive_int("num_groups")),
     AttrSpec("num_channels", int, positive_int("num_channels")),
     AttrSpec("epsilon", float, positive_finite("epsilon"))),
    (TensorSpec("weight", optional=True), TensorSpec("bias", optional=True)),
    _shapes, input_ranks=(2, 3, 4), out_shape=_out, pytorch=_pytorch, rust=_rust,
    burn_fields={"weight": "gamma.as_ref().unwrap().val()", "bias": "beta.as_ref().unwrap().val()"},
    burn_uses=frozenset({"Module", "Param", "GroupNormConfig"}), noise="norm:channels",
    imprecise=norm_half("group_norm"), steppable=True, saves_input=True, layout="memory_format")
