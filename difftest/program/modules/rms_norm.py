"""`rms_norm` over the last dim; PyTorch's weight is burn's gamma.

burn-nn 0.22.1 norm/rms.rs: x / sqrt(mean(x^2, last dim) + epsilon) * gamma; torch.nn.RMSNorm
with an explicit eps computes the same (epsilon inside the square root, added to the mean of
squares): no convention to declare (tests/differential/test_module_kinds.py compares them)."""

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
    return f"torch.nn.RMSNorm({st.attrs['d_model']}, eps={py_float(st.attrs['epsilon'])}{dtype})"


def _rust(st: Module, var: str, dtype: str) -> str:
    a = st.attrs
    assert st.weight is not None
    return "\n".join([
        f"let mut {var} = RmsNormConfig::new({a['d_model']}).with_epsilon({rust_f64(a['epsilon'])})"
        ".init(&device);",
        "// PyTorch's weight is burn's gamma",
        f"{var}.gamma = Param::from_tensor({burn_vector(st.weight.data, dtype)});"])


def _parts(call: Call) -> tuple[Part, ...]:
    # burn-nn 0.22.1 norm/rms.rs, forward: rms = (x.cast(F32).square().mean_dim(D - 1) + epsilon)
    # .sqrt(); (x / rms.cast(dtype)) * gamma.unsqueeze() (a reshape to [1, ..., d_model])
    rank, eps = len(call.shapes[0]), call.attrs["epsilon"]
    return (Part("cast", (0,), {"dtype": "float32"}), Part("square", ("p0",)),
            Part("mean_dim", ("p1",), {"dim": rank - 1}), Part("add_scalar", ("p2",), {"scalar": eps}),
            Part("sqrt", ("p3",)), Part("cast", ("p4",), {"dtype": call.dtype}), Part("div", (0, "p5")),
            Part("reshape", ("param:weight",), {"shape": [1] * (rank - 1) + [call.shapes[0][-1]]}),
            Part("mul", ("p6", "p7")))


RMS_NORM = ModuleKind(
    "rms_norm",
    (AttrSpec("d_model", int, positive_int("d_model")), AttrSpec("epsilon", float, positive_finite("epsilon"))),
    (TensorSpec("weight"),),
    features("d_model"), input_ranks=(1, 2, 3, 4), out_shape=last_dim_is("rms_norm", "d_model"),
    pytorch=_pytorch, rust=_rust,
    burn_fields={"weight": "gamma.val()"}, burn_uses=frozenset({"Module", "Param", "RmsNormConfig"}),
    noise="norm:last", imprecise=norm_half("rms_norm"), steppable=True, layout="memory_format",
    composed=_parts)
