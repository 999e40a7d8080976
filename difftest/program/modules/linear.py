"""`linear`: y = x W^T + b over the last dim. The weight [out, in] is PyTorch's layout; burn's
Linear stores it [in, out] (transposed when built, reported back in PyTorch's layout)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from difftest.program.literals import burn_tensor, fmt_data
from difftest.program.modules.kind import ModuleError, ModuleKind, TensorSpec, matrix
from difftest.program.parts import Call, Part
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


def _parts(call: Call) -> tuple[Part, ...] | None:
    # burn-tensor 0.22.1 module.rs `linear`: a rank-1 input is unsqueezed to [1, in], run as rank 2
    # and squeezed back. Otherwise burn-backend's default ModuleOps::linear (modules/linear.rs;
    # burn-dispatch has no linear of its own, so burn-autodiff's linear node is not reached) on
    # burn's [in, out] weight: the leading dims folded into the rows (one [rows, in] @ [in, out]
    # matmul, the bias reshaped to [1, out] and added, the result reshaped back) where burn-std's
    # MatmulTransformPolicy merges the batches, else the weight and the bias given leading size-1
    # dims up to the input's rank, a batched matmul and an add. burn's weight is the transpose of
    # the program's (PyTorch's [out, in]): a transpose first
    x = list(call.shapes[0])
    d_in, d_out = x[-1], call.param_shapes["weight"][0]
    bias = "bias" in call.params
    parts = [Part("transpose", ("param:weight",))]  # p0: burn's [in, out]

    def then(op: str, inputs: tuple[int | str, ...], attrs: dict[str, Any] | None = None) -> str:
        parts.append(Part(op, inputs, attrs or {}))
        return f"p{len(parts) - 1}"

    if len(x) == 1:
        y = then("matmul", (then("reshape", (0,), {"shape": [1, d_in]}), "p0"))
        if bias:
            y = then("add", (y, then("reshape", ("param:bias",), {"shape": [1, d_out]})))
        then("reshape", (y,), {"shape": [d_out]})
        return tuple(parts)
    batches, rows = math.prod(x[:-2]), x[-2]
    if _merges(batches, rows, d_out):
        y = then("matmul", (then("reshape", (0,), {"shape": [batches * rows, d_in]}), "p0"))
        if bias:
            y = then("add", (y, then("reshape", ("param:bias",), {"shape": [1, d_out]})))
        then("reshape", (y,), {"shape": [*x[:-1], d_out]})
        return tuple(parts)
    w = then("reshape", ("p0",), {"shape": [1] * (len(x) - 2) + [d_in, d_out]}) if len(x) > 2 else "p0"
    y = then("matmul", (0, w))
    if bias:
        then("add", (y, then("reshape", ("param:bias",), {"shape": [1] * (len(x) - 1) + [d_out]})))
    return tuple(parts)


ROW_TILE = 32  # burn-std 0.22.1 tensor/matmul.rs


def _merges(batches: int, rows: int, cols: int) -> bool:
    """burn-std 0.22.1 MatmulTransformPolicy::BetterTiling on a shared [in, out] weight: merge
    the batches into the rows unless there is one batch, the rows fill row tiles already, or the
    merged output is no closer to square."""
    if batches == 1 or rows % ROW_TILE == 0:
        return False
    merged = batches * rows
    return min(merged, cols) * max(rows, cols) > min(rows, cols) * max(merged, cols)


LINEAR = ModuleKind(
    "linear", (), (TensorSpec("weight", layout="[out, in]"), TensorSpec("bias", optional=True)), _shapes,
    input_ranks=(1, 2, 3, 4), out_shape=_out, pytorch=_pytorch, rust=_rust,
    burn_fields={"weight": "weight.val()", "bias": "bias.as_ref().unwrap().val()"},
    burn_uses=frozenset({"Module", "Param", "Linear"}), noise="linear", text=_text, steppable=True,
    saves_input=True, burn_transposed=("weight",), composed=_parts)
