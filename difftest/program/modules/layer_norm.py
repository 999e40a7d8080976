"""`layer_norm` over the last dim (PyTorch's normalized_shape = [d_model]); PyTorch's
weight/bias are burn's gamma/beta, the bias optional.

burn-nn 0.22.1 norm/layer.rs: normalises over the last dim."""

from __future__ import annotations

from typing import TYPE_CHECKING

from difftest.program.literals import burn_vector, py_float, rust_f64
from difftest.program.modules.kind import (
    AttrSpec,
    ModuleKind,
    TensorSpec,
    features,
    last_dim_is,
    norm_half,
    positive_finite,
    positive_int,
)
from difftest.program.parts import Call, Part

if TYPE_CHECKING:
    from difftest.program.statements import Module


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


def _parts(call: Call) -> tuple[Part, ...] | None:
    # burn-backend 0.22.1 ops/modules/base.rs, layer_norm (burn-autodiff has no node for it):
    # centered = x - mean_dim(x); (centered / sqrt(mean_dim(centered * centered) + epsilon)) *
    # gamma (+ beta), the parameters reshaped to [1, ..., d_model]. burn-nn widens a float16
    # input to f32 first (norm/mod.rs, accumulation_dtype): not composed here
    if call.dtype == "float16":
        return None
    rank, d = len(call.shapes[0]), call.shapes[0][-1]
    last, shape = rank - 1, [1] * (rank - 1) + [d]
    parts = (Part("mean_dim", (0,), {"dim": last}), Part("sub", (0, "p0")), Part("mul", ("p1", "p1")),
             Part("mean_dim", ("p2",), {"dim": last}), Part("add_scalar", ("p3",), {"scalar": call.attrs["epsilon"]}),
             Part("sqrt", ("p4",)), Part("div", ("p1", "p5")), Part("reshape", ("param:weight",), {"shape": shape}),
             Part("mul", ("p6", "p7")))
    if "bias" not in call.params:
        return parts
    return (*parts, Part("reshape", ("param:bias",), {"shape": shape}), Part("add", ("p8", "p9")))

LAYER_NORM = ModuleKind(
    "layer_norm",
    (AttrSpec("d_model", int, positive_int("d_model")), AttrSpec("epsilon", float, positive_finite("epsilon"))),
    (TensorSpec("weight"), TensorSpec("bias", optional=True)),
    features("d_model"), input_ranks=(1, 2, 3, 4), out_shape=last_dim_is("layer_norm", "d_model"),
    pytorch=_pytorch, rust=_rust,
    burn_fields={"weight": "gamma.val()", "bias": "beta.as_ref().unwrap().val()"},
    burn_uses=frozenset({"Module", "Param", "LayerNormConfig"}), noise="norm:last",
    imprecise=norm_half("layer_norm"), steppable=True, saves_input=True, composed=_parts)
