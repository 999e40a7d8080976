"""`prelu`: x where x >= 0, weight * x elsewhere, with one weight ([1], for any input) or one per
channel ([C], dim 1 of an input of rank >= 2); PyTorch's weight is burn's alpha.

burn-nn 0.22.1 activation/prelu.rs: PRelu::forward is activation::prelu(x, alpha), which
broadcasts alpha over dim 1 and computes mask_where(x, x < 0, x * alpha); torch.nn.PReLU computes
the same, and both refuse [C] with C > 1 on a rank-1 input. Their gradients differ at x = 0 only
(record prelu-at-zero: PyTorch takes the weight, burn 1), which the generator keeps inputs off.
PyTorch's backward saves the input (an inference input cannot be saved)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from difftest.program.literals import burn_vector
from difftest.program.modules.kind import ModuleError, ModuleKind, TensorSpec
from difftest.program.parts import Call, Part
from difftest.program.shapes import Shape

if TYPE_CHECKING:
    from difftest.program.statements import Module


def _shapes(attrs: dict[str, Any], given: dict[str, Shape]) -> dict[str, Shape]:
    w = given.get("weight")
    if w is None or len(w) != 1 or w[0] < 1:
        raise ModuleError(f"weight shape {list(w) if w else None} is not [num_parameters] with num_parameters >= 1")
    return {"weight": w}


def _out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    (n,) = shapes["weight"]
    if n != 1 and (len(x) < 2 or x[1] != n):
        raise ModuleError(f"prelu with {n} weights applied to an input of shape {list(x)} "
                          f"(dim 1, the channels, must be {n})")
    return x


def _pytorch(st: Module, dtype: str) -> str:
    assert st.weight is not None
    return f"torch.nn.PReLU({st.weight.shape[0]}{dtype})"


def _rust(st: Module, var: str, dtype: str) -> str:
    assert st.weight is not None
    return "\n".join([
        f"let mut {var} = PReluConfig::new().with_num_parameters({st.weight.shape[0]}).init(&device);",
        "// PyTorch's weight is burn's alpha",
        f"{var}.alpha = Param::from_tensor({burn_vector(st.weight.data, dtype)});"])


def _parts(call: Call) -> tuple[Part, ...]:
    # burn-nn 0.22.1 activation/prelu.rs: PRelu::forward is activation::prelu(x, alpha), the op
    return (Part("prelu", (0, "param:weight")),)

PRELU = ModuleKind(
    "prelu", (), (TensorSpec("weight"),), _shapes, input_ranks=(1, 2, 3, 4), out_shape=_out,
    pytorch=_pytorch, rust=_rust, burn_fields={"weight": "alpha.val()"},
    burn_uses=frozenset({"Module", "Param", "PReluConfig"}), noise="as_op:prelu", steppable=True,
    saves_input=True, layout="elementwise", composed=_parts)
