"""Human-readable text of programs and statements (the reproducer emitters live in difftest/findings/reproducers/)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from difftest.program.ir import (
    Backward,
    ByKind,
    Cut,
    Leaf,
    Module,
    OpCall,
    Optimizer,
    Program,
    Statement,
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
    return _TEXT.of(st)(st)


def _region(st: OpCall | Cut) -> str:
    return f"   [{st.region}]" if st.region != "grad" else ""


def _leaf(st: Leaf) -> str:
    rg = " require_grad" if st.require_grad else ""
    return f"{st.id} = leaf{list(st.shape)} {st.device}{rg} {fmt_data(st.data)}"


def _op(st: OpCall) -> str:
    attrs = f"; {fmt_attrs(st.attrs)}" if st.attrs else ""
    return f"{st.id} = {st.op}({', '.join(st.inputs)}{attrs}){_region(st)}"


def _module(st: Module) -> str:
    text = module_kind(st.module).text
    if text is not None:
        return text(st)
    config = ", ".join(f"{k}={fmt_float(v) if isinstance(v, float) else v}" for k, v in st.config().items())
    tensors = " ".join(f"{k}={fmt_data(t.data)}" for k, t in st.tensors().items())
    return f"{st.id}: {st.module}({config}) {tensors}".rstrip()


def _optimizer(st: Optimizer) -> str:
    extra = "".join(f", {k}={fmt_float(getattr(st, k))}" for k in ("momentum", "dampening", "weight_decay")
                    if getattr(st, k))
    return f"{st.id}: {st.optimizer}({'nesterov' if st.nesterov else ''}{extra})".replace("(, ", "(")


def _backward(st: Backward) -> str:
    retain = ", retain_graph" if st.retain_graph else ""
    return f"{st.id}: backward({st.input}{retain})"


_TEXT: ByKind[Callable[[Any], str]] = ByKind(
    "text",
    leaf=_leaf,
    op=_op,
    cut=lambda st: f"{st.id} = {st.cut}({st.input}){_region(st)}",
    backward=_backward,
    module=_module,
    transform=lambda st: f"{st.id}: {st.input}.{st.transform}()",
    apply=lambda st: f"{st.id} = {st.module}({st.input})",
    param=lambda st: f"{st.id} = {st.module}.{st.param}",
    grad=lambda st: f"{st.id} = grad({st.of}; {st.grads})",
    zero_grad=lambda st: f"{st.id}: zero_grad()",
    optimizer=_optimizer,
    step=lambda st: f"{st.id}: {st.optimizer}.step({st.module}, {st.grads}, lr={fmt_float(st.lr)})",
)


def program_text(program: Program) -> str:
    """The statements, one a line, under a line naming the program's settings when any is not
    the default (its dtype, burn's gradient checkpointing)."""
    settings = [f"dtype {program.dtype}"] if program.dtype != "float32" else []
    if program.checkpointing != "disabled":
        settings.append(f"gradient checkpointing {program.checkpointing}")
    head = [f"# {', '.join(settings)}"] if settings else []
    return "\n".join([*head, *(statement_text(st) for st in program.statements)])
