"""`dropout`: zeroes each element with probability p and scales the rest by 1 / (1 - p) in
training mode; its input as is in eval mode. Its mask comes from each framework's generator,
seeded before every forward (`random`); only the deterministic cases (p = 0, eval mode) are
compared element by element (difftest/divergences/rules.py), and burn panics on p = 1."""

from __future__ import annotations

from typing import TYPE_CHECKING

from difftest.program.literals import fmt_float, py_float, rust_f64
from difftest.program.modules.kind import AttrSpec, ModuleKind, in_unit, same_shape

if TYPE_CHECKING:
    from difftest.program.statements import Module


def _pytorch(st: Module, dtype: str) -> str:
    return f"torch.nn.Dropout({py_float(st.p)})"  # it holds no tensor: no dtype


def _rust(st: Module, var: str, dtype: str) -> str:
    return f"let {var} = DropoutConfig::new({rust_f64(st.p)}).init();"


DROPOUT = ModuleKind(
    "dropout", (AttrSpec("p", float, in_unit("p")),), (), lambda attrs, given: {},
    input_ranks=(1, 2, 3, 4), out_shape=same_shape, pytorch=_pytorch, rust=_rust,
    burn_uses=frozenset({"Module", "DropoutConfig"}), noise="exact",
    text=lambda st: f"{st.id}: dropout(p={fmt_float(st.p)})", steppable=True, random=True,
    layout="elementwise")
