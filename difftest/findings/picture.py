"""Programs as pictures: a program with its verdict as a Graphviz graph.

`dot(verdict)` writes DOT text; Graphviz lays it out (`svg` runs `dot -Tsvg`). One node per
statement (id, op or kind, shape), burn's flags as style (tracked: bold border; require-grad:
double border; off the autodiff device: grey fill, dotted border), edges from inputs, cut edges
dashed (into a `detach` / `without_autodiff`, or into a value the model predicts untracked in
burn from a tracked input), `no_grad` / `inference_mode` statements in cluster boxes, each
backward a node with a bold edge from its root, module handles as boxes with dashed edges to
their uses, and statements with a finding in red (a dismissed numeric mismatch in orange)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from difftest.divergences.states import BurnState
from difftest.oracle.compare import DISMISSED
from difftest.program.ir import (
    Backward,
    ByKind,
    Cut,
    Region,
    Statement,
    handle_inputs,
    module_inputs,
    region_of,
    value_inputs,
)

from .table import what

if TYPE_CHECKING:
    from difftest.oracle.compare import Verdict

DOT_MISSING = "Graphviz's `dot` is not installed: apt-get install graphviz, or use --dot to get the DOT text"


class DotMissing(RuntimeError):
    """Graphviz's `dot` program is not on PATH."""


def _q(text: str) -> str:
    """A DOT double-quoted string (newlines become DOT's centred line breaks)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _attrs(**kv: str | int) -> str:
    return "[" + ", ".join(f"{k}={_q(v) if isinstance(v, str) else v}" for k, v in kv.items()) + "]"


def _burn_flags(verdict: Verdict, ident: str) -> dict[str, bool] | None:
    """burn's observed flags of `ident`, else the model's prediction."""
    for v in verdict.burn.values:
        if v.id == ident:
            return dict(v.flags)
    state = verdict.prediction.burn.states.get(ident)
    return state.flags() if isinstance(state, BurnState) else None


def _tracked(state: object) -> bool | None:
    return state.is_tracked if isinstance(state, BurnState) else None


def _shape(verdict: Verdict, ident: str) -> str | None:
    for obs in (verdict.burn, verdict.torch):
        for v in obs.values:
            if v.id == ident:
                return "[" + ", ".join(str(d) for d in v.value.shape) + "]"
    return None


def _marks(verdict: Verdict) -> dict[str, str]:
    """statement id -> `!` (a finding) or `~` (only dismissed numeric mismatches)."""
    out: dict[str, str] = {}
    for m in verdict.mismatches:
        if m.statement is None:
            continue
        mark = "~" if m.verdict in DISMISSED else "!"
        if out.get(m.statement) != "!":
            out[m.statement] = mark
    return out


def _node(verdict: Verdict, st: Statement, mark: str | None) -> str:
    label, kv = _NODES.of(st)(verdict, st)
    if mark:
        label += f"\n{mark} {'finding' if mark == '!' else 'dismissed'}"
        kv["color"] = kv["fontcolor"] = "red" if mark == "!" else "orange"
        kv["penwidth"] = 2
    return f"  {_q(st.id)} {_attrs(label=label, **kv)};"


Node = tuple[str, dict[str, str | int]]  # a node's label and its other attributes


def _value_node(verdict: Verdict, st: Statement) -> Node:
    """An ellipse with the value's shape, styled by burn's flags."""
    label = f"{st.id}\n{what(st)}"
    kv: dict[str, str | int] = {}
    shape = _shape(verdict, st.id)
    if shape:
        label += f"\n{shape}"
    flags = _burn_flags(verdict, st.id) or {}
    style: list[str] = []
    if flags.get("is_tracked"):
        style.append("bold")
    if flags.get("is_require_grad"):
        kv["peripheries"] = 2
    if flags and not flags.get("is_autodiff", True):
        style += ["filled", "dotted"]
        kv["fillcolor"] = "lightgrey"
    kv["shape"] = "ellipse"
    if style:
        kv["style"] = ",".join(style)
    return label, kv


def _handle_node(kind: Callable[[Any], str]) -> Callable[[Verdict, Statement], Node]:
    """A module handle: a box with its kind (module, transform, step)."""
    return lambda verdict, st: (f"{st.id}\n{kind(st)}", {"shape": "box"})


def _plain_node(**kv: str | int) -> Callable[[Verdict, Statement], Node]:
    return lambda verdict, st: (f"{st.id}\n{what(st)}", dict(kv))


_NODES: ByKind[Callable[[Verdict, Any], Node]] = ByKind(
    "picture",
    leaf=_value_node,
    op=_value_node,
    cut=_value_node,
    backward=_plain_node(shape="diamond", style="bold"),
    module=_handle_node(lambda st: st.module),
    transform=_handle_node(lambda st: st.transform),
    apply=_value_node,
    param=_value_node,
    grad=_value_node,
    zero_grad=_plain_node(shape="note"),
    optimizer=_plain_node(shape="note"),
    step=_handle_node(lambda st: f"step lr={st.lr:g}"),
)


def _edges(verdict: Verdict, st: Statement) -> list[str]:
    states = verdict.prediction.burn.states
    out: list[str] = []
    if isinstance(st, Backward):
        return [f"  {_q(st.input)} -> {_q(st.id)} {_attrs(style='bold', penwidth=2, label='root')};"]
    mine = _tracked(states.get(st.id))
    for src in value_inputs(st):
        cut = isinstance(st, Cut) and st.cut in ("detach", "without_autodiff")
        if not cut and mine is False and _tracked(states.get(src)):
            cut = True
        if cut:
            out.append(f"  {_q(src)} -> {_q(st.id)} {_attrs(style='dashed', label='cut')};")
        else:
            out.append(f"  {_q(src)} -> {_q(st.id)} {_attrs(style='solid')};")
    for handle in module_inputs(st):
        out.append(f"  {_q(handle)} -> {_q(st.id)} {_attrs(style='dashed', arrowhead='empty')};")
    for ref in handle_inputs(st):  # gradients handles, optimizers, the value a grad is of
        out.append(f"  {_q(ref)} -> {_q(st.id)} {_attrs(style='dotted')};")
    return out


def dot(verdict: Verdict) -> str:
    """The program of `verdict` as DOT text (a `digraph`); Graphviz does the layout."""
    statements = verdict.program.statements
    marks = _marks(verdict)
    title = f"verdict: {verdict.kind}"
    general = [m for m in verdict.findings if m.statement is None]
    if general:
        title += "\n" + "\n".join(f"{m.kind}: {m.observed}" for m in general)
    lines = [
        "digraph program {",
        f"  graph {_attrs(rankdir='TB', label=title, labelloc='t', fontname='Helvetica')};",
        f"  node {_attrs(fontname='Helvetica')};",
        f"  edge {_attrs(fontname='Helvetica', fontsize=10)};",
    ]
    # consecutive statements in the same no_grad / inference_mode region form one cluster box
    runs: list[tuple[Region, list[Statement]]] = []
    for st in statements:
        region = region_of(st)
        if runs and runs[-1][0] == region:
            runs[-1][1].append(st)
        else:
            runs.append((region, [st]))
    for k, (region, group) in enumerate(runs):
        nodes = [_node(verdict, st, marks.get(st.id)) for st in group]
        if region == "grad":
            lines += nodes
            continue
        lines.append(f"  subgraph cluster_{k}_{region} {{")
        lines.append(f"    graph {_attrs(label=region, style='rounded,dashed', color='blue')};")
        lines += ["  " + n for n in nodes]
        lines.append("  }")
    for st in statements:
        lines += _edges(verdict, st)
    lines.append("}")
    return "\n".join(lines) + "\n"


def svg(dot_text: str, timeout: float = 60.0) -> str:
    """`dot -Tsvg` of `dot_text`; DotMissing when Graphviz is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        raise DotMissing(DOT_MISSING)
    done = subprocess.run([exe, "-Tsvg"], input=dot_text, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"dot -Tsvg failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout
