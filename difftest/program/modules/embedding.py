"""`embedding`: the rows of a table [num_embeddings, embedding_dim] (PyTorch's layout and burn's)
picked by a leaf of indices [B, L].

burn-nn 0.22.1 embedding.rs: `forward(Tensor<2, Int>)` -> [B, L, d_model], the table's rows
picked by the indices (burn::tensor::module::embedding, the embedding op's function).
torch.nn.Embedding computes the same (padding_idx and max_norm unset); a row picked twice gets
the sum of both rows' gradients."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from difftest.program.literals import burn_tensor
from difftest.program.modules.kind import ModuleKind, TensorSpec, matrix
from difftest.program.parts import Call, Part
from difftest.program.shapes import Shape

if TYPE_CHECKING:
    from difftest.program.statements import Module

_weight = matrix("weight", "[num_embeddings, embedding_dim]")


def _out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    return x + (shapes["weight"][1],)


def _pytorch(st: Module, dtype: str) -> str:
    assert st.weight is not None
    rows, dim = st.weight.shape
    return f"torch.nn.Embedding({rows}, {dim}{dtype})"


def _rust(st: Module, var: str, dtype: str) -> str:
    assert st.weight is not None
    rows, dim = st.weight.shape
    return "\n".join([
        f"// weight [num_embeddings, embedding_dim] = [{rows}, {dim}], PyTorch's layout and burn's",
        f"let mut {var} = EmbeddingConfig::new({rows}, {dim}).init(&device);",
        f"{var}.weight = Param::from_tensor({burn_tensor(st.weight.data, [rows, dim], dtype)});"])


def _parts(call: Call) -> tuple[Part, ...] | None:
    # burn-nn 0.22.1 embedding.rs: forward is burn::tensor::module::embedding(weight, input), the
    # catalog's embedding op on the table, at the indices the input leaf holds (constants)
    if call.data is None:
        return None
    indices = {"shape": list(call.shapes[0]), "data": [int(v) for v in call.data[0]]}
    return (Part("embedding", ("param:weight",), {"indices": indices}),)


EMBEDDING = ModuleKind(
    "embedding", (), (TensorSpec("weight", layout="[num_embeddings, embedding_dim]"),),
    lambda attrs, given: {"weight": _weight(given)}, input_ranks=(2,), out_shape=_out, pytorch=_pytorch,
    rust=_rust, burn_fields={"weight": "weight.val()"}, burn_uses=frozenset({"Module", "Param", "EmbeddingConfig"}),
    noise="as_op:embedding", steppable=True, saves_input=True, index_bound=lambda shapes: shapes["weight"][0],
    composed=_parts)
