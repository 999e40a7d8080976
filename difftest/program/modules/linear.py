"""`linear`: y = x W^T + b over the last dim. The weight [out, in] is PyTorch's layout; burn's
Linear stores it [in, out] (transposed when built, reported back in PyTorch's layout)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from difftest.program.literals import burn_tensor, fmt_data
from difftest.program.modules.kind import ModuleError, ModuleKind, TensorSpec, matrix
from difftest.program.shapes import Shape

if TYPE_CHECKING:
    from difftest.program.statements import Module

_weight = matrix("weight", "[out, in]")


def _shapes(attrs: dict[str, Any], given: dict[str, Shape]) -> dict[str, Shape]:
    w = _weight(given)
    return {"weight": w, "bias": (w[0],)}


def _out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    out_f, in_f = shapes["weight"]
    if not x or x[-1] != in_f:
        raise ModuleError(f"linear with in = {in_f} applied to an input of shape {list(x)} "
                          f"(the last dim must be {in_f})")
    return x[:-1] + (out_f,)


def _pytorch(st: Module, dtype: str) -> str:
    out_f, in_f = st.weight.shape if st.weight is not None else (0, 0)
    return f"torch.nn.Linear({in_f}, {out_f}, bias={st.bias is not None}{dtype})"


def _rust(st: Module, var: str, dtype: str) -> str:
    assert st.weight is not None
    out_f, in_f = st.weight.shape
    # burn's Linear stores [in, out]: the program's [out, in] weight, transposed
    wt = [st.weight.data[o * in_f + i] for i in range(in_f) for o in range(out_f)]
    bias = "None" if st.bias is None else f"Some(Param::from_tensor({burn_tensor(st.bias.data, [out_f], dtype)}))"
    return "\n".join([
        f"// weight [out, in] = [{out_f}, {in_f}], stored by burn as [in, out]",
        f"let {var} = Linear {{",
        f"    weight: Param::from_tensor({burn_tensor(wt, [in_f, out_f], dtype)}),",
        f"    bias: {bias},",
        "};",
    ])


def _text(st: Module) -> str:
    assert st.weight is not None
    bias = fmt_data(st.bias.data) if st.bias is not None else "None"
    return f"{st.id}: linear{list(st.weight.shape)} weight={fmt_data(st.weight.data)} bias={bias}"


LINEAR = ModuleKind(
    "linear", (), (TensorSpec("weight", layout="[out, in]"), TensorSpec("bias", optional=True)), _shapes,
    input_ranks=(1, 2, 3, 4), out_shape=_out, pytorch=_pytorch, rust=_rust,
    burn_fields={"weight": "weight.val()", "bias": "bias.as_ref().unwrap().val()"},
    burn_uses=frozenset({"Module", "Param", "Linear"}), noise="linear", text=_text, steppable=True,
    saves_input=True, burn_transposed=("weight",))
