"""`layer_norm` over the last dim (PyTorch's normalized_shape = [d_model]); PyTorch's
weight/bias are burn's gamma/beta, the bias optional.

burn-nn 0.22.1 norm/layer.rs: normalises over the last dim."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from difftest.program.literals import burn_vector, py_float, rust_f64
from difftest.program.modules.kind import (
    AttrSpec,
    ModuleError,
    ModuleKind,
    TensorSpec,
    features,
    norm_half,
    positive_finite,
    positive_int,
)
from difftest.program.shapes import Shape

if TYPE_CHECKING:
    from difftest.program.statements import Module


def _out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    d = attrs["d_model"]
    if x[-1] != d:
        raise ModuleError(f"layer_norm with d_model = {d} applied to an input of shape {list(x)} "
                          f"(the last dim must be {d})")
    return x


def _pytorch(st: Module, dtype: str) -> str:
    d, eps = st.attrs["d_model"], py_float(st.attrs["epsilon"])
    return f"torch.nn.LayerNorm({d}, eps={eps}, bias={st.bias is not None}{dtype})"


def _rust(st: Module, var: str, dtype: str) -> str:
    a = st.attrs
    assert st.weight is not None
    lines = [f"let mut {var} = LayerNormConfig::new({a['d_model']}).with_epsilon({rust_f64(a['epsilon'])})"
             f".with_bias({str(st.bias is not None).lower()}).init(&device);",
             "// PyTorch's weight/bias are burn's gamma/beta",
             f"{var}.gamma = Param::from_tensor({burn_vector(st.weight.data, dtype)});"]
    if st.bias is not None:
        lines.append(f"{var}.beta = Some(Param::from_tensor({burn_vector(st.bias.data, dtype)}));")
    return "\n".join(lines)


LAYER_NORM = ModuleKind(
    "layer_norm",
    (AttrSpec("d_model", int, positive_int("d_model")), AttrSpec("epsilon", float, positive_finite("epsilon"))),
    (TensorSpec("weight"), TensorSpec("bias", optional=True)),
    features("d_model"), input_ranks=(1, 2, 3, 4), out_shape=_out, pytorch=_pytorch, rust=_rust,
    burn_fields={"weight": "gamma.val()", "bias": "beta.as_ref().unwrap().val()"},
    burn_uses=frozenset({"Module", "Param", "LayerNormConfig"}), noise="norm:last",
    imprecise=norm_half("layer_norm"), steppable=True, saves_input=True)
