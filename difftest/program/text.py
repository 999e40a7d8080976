"""Human-readable text of programs and statements (the reproducer emitters live in difftest/findings/reproducers/)."""

from __future__ import annotations

from typing import Any

from difftest.program.ir import (
    Apply,
    Cut,
    Grad,
    Leaf,
    Module,
    OpCall,
    Optimizer,
    Param,
    Program,
    Statement,
    Step,
    Transform,
    ZeroGrad,
)
from difftest.program.literals import fmt_data, fmt_float
from difftest.program.modules import module_kind


def fmt_attrs(attrs: dict[str, Any]) -> str:
    parts = []
    for k, v in attrs.items():
        if isinstance(v, dict) and "data" in v:
            parts.append(f"{k}=<{v['shape']}:{v['data'][:8]}{'…' if len(v['data']) > 8 else ''}>")
        else:
            parts.append(f"{k}={v}")
    return ", ".join(parts)


def statement_text(st: Statement) -> str:
    if isinstance(st, Leaf):
        rg = " require_grad" if st.require_grad else ""
        return f"{st.id} = leaf{list(st.shape)} {st.device}{rg} {fmt_data(st.data)}"
    if isinstance(st, OpCall):
        attrs = f"; {fmt_attrs(st.attrs)}" if st.attrs else ""
        region = f"   [{st.region}]" if st.region != "grad" else ""
        return f"{st.id} = {st.op}({', '.join(st.inputs)}{attrs}){region}"
    if isinstance(st, Cut):
        region = f"   [{st.region}]" if st.region != "grad" else ""
        return f"{st.id} = {st.cut}({st.input}){region}"
    if isinstance(st, Module):
        text = module_kind(st.module).text
        if text is not None:
            return text(st)
        config = ", ".join(f"{k}={fmt_float(v) if isinstance(v, float) else v}" for k, v in st.config().items())
        tensors = " ".join(f"{k}={fmt_data(t.data)}" for k, t in st.tensors().items())
        return f"{st.id}: {st.module}({config}) {tensors}".rstrip()
    if isinstance(st, Transform):
        return f"{st.id}: {st.input}.{st.transform}()"
    if isinstance(st, Apply):
        return f"{st.id} = {st.module}({st.input})"
    if isinstance(st, Param):
        return f"{st.id} = {st.module}.{st.param}"
    if isinstance(st, Grad):
        return f"{st.id} = grad({st.of}; {st.grads})"
    if isinstance(st, ZeroGrad):
        return f"{st.id}: zero_grad()"
    if isinstance(st, Optimizer):
        extra = "".join(f", {k}={fmt_float(getattr(st, k))}" for k in ("momentum", "dampening", "weight_decay")
                        if getattr(st, k))
        return f"{st.id}: {st.optimizer}({'nesterov' if st.nesterov else ''}{extra})".replace("(, ", "(")
    if isinstance(st, Step):
        return f"{st.id}: {st.optimizer}.step({st.module}, {st.grads}, lr={fmt_float(st.lr)})"
    retain = ", retain_graph" if st.retain_graph else ""
    return f"{st.id}: backward({st.input}{retain})"


def program_text(program: Program) -> str:
    return "\n".join(statement_text(st) for st in program.statements)
