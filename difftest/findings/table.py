"""Per-statement tables of a verdict: one row per value statement with both
frameworks' flags, the model's prediction where it differs, the rules that fired, abbreviated
values and gradients, and mismatching cells marked (`!` a finding, `~` a dismissed numeric
mismatch). `rows` is the data (`difftest run --json`), `table` a rich Table, `text` plain text."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from difftest.divergences.states import BurnState, TorchState
from difftest.oracle.compare import DISMISSED
from difftest.program.ir import (
    Backward,
    ByKind,
    Cut,
    OpCall,
    Statement,
    is_value,
)
from difftest.program.observation import TensorObs

if TYPE_CHECKING:
    from rich.table import Table

    from difftest.oracle.compare import Verdict

BURN_FLAGS = ("is_autodiff", "is_tracked", "is_require_grad")
TORCH_FLAGS = ("requires_grad", "is_leaf", "has_grad_fn", "is_inference")
_AT_BACKWARD = re.compile(r"at backward (\S+?);")


def what(st: Statement) -> str:
    """The op, or the leaf / cut kind, with the region when it is not `grad`."""
    return _WHAT.of(st)(st)


def _region(st: OpCall | Cut) -> str:
    return f" [{st.region}]" if st.region != "grad" else ""


_WHAT: ByKind[Callable[[Any], str]] = ByKind(
    "table",
    leaf=lambda st: "leaf" + (" rg" if st.require_grad else "") + ("" if st.device == "autodiff" else f" {st.device}"),
    op=lambda st: st.op + _region(st),
    cut=lambda st: st.cut + _region(st),
    backward=lambda st: st.kind,
    module=lambda st: st.kind,
    transform=lambda st: st.kind,
    apply=lambda st: f"apply {st.module}",
    param=lambda st: f"{st.module}.{st.param}",
    grad=lambda st: f"grad of {st.of} in {st.grads}",
    zero_grad=lambda st: st.kind,
    optimizer=lambda st: st.kind,
    step=lambda st: st.kind,
)


def compact(flags: dict[str, bool] | None, names: tuple[str, ...]) -> str:
    """`T T T` in the order of `names` (`?` for a flag not reported); `-` for no flags."""
    if flags is None:
        return "-"
    return " ".join("?" if n not in flags else ("T" if flags[n] else "F") for n in names)


def _num(x: float | str) -> str:
    if isinstance(x, str):  # a non-finite difference kept JSON-ready by `rows` ("nan", "inf")
        return x
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.4g}"


def abbrev(t: TensorObs | None, n: int = 3) -> str:
    """The first `n` elements, `-` for none."""
    if t is None:
        return "-"
    items = [_num(x) for x in t.data[:n]]
    return "[" + ", ".join(items) + (", …" if len(t.data) > n else "") + "]"


def diff(a: TensorObs | None, b: TensorObs | None) -> tuple[float, float] | None:
    """(max abs, max rel) difference, None when either is missing or the shapes differ."""
    if a is None or b is None or tuple(a.shape) != tuple(b.shape) or len(a.data) != len(b.data):
        return None
    abs_d = rel_d = 0.0
    for x, y in zip(a.data, b.data):
        if x == y:  # equal infinities included
            continue
        d = abs(x - y)
        if math.isnan(d):
            return (math.nan, math.nan)
        abs_d = max(abs_d, d)
        rel_d = max(rel_d, d / max(abs(x), abs(y), 1e-30))
    return abs_d, rel_d


def _fmt_diff(d: tuple[float | str, float | str] | None) -> str:
    return "-" if d is None else f"{_num(d[0])} / {_num(d[1])}"


def _plain(x: float | None) -> float | str | None:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def rows(verdict: Verdict) -> list[dict[str, Any]]:
    """One dict per value statement; `marks` maps a cell name (shape, burn, torch, value,
    grad:<backward>) to `!` (a finding) or `~` (a dismissed numeric mismatch)."""
    program, pred = verdict.program, verdict.prediction
    backwards = [st.id for st in program.statements if isinstance(st, Backward)]
    bvals = {v.id: v for v in verdict.burn.values}
    tvals = {v.id: v for v in verdict.torch.values}
    bgrads = {bw.id: bw.grads for bw in verdict.burn.backwards}
    tgrads = {bw.id: bw.grads for bw in verdict.torch.backwards}
    out: list[dict[str, Any]] = []
    for st in program.statements:
        if not is_value(st):
            continue
        marks: dict[str, str] = {}
        for m in verdict.mismatches:
            if m.statement != st.id:
                continue
            mark = "~" if m.verdict in DISMISSED else "!"
            cells: list[str] = []
            if m.kind in ("flags", "stale-rule") and m.framework in ("burn", "torch"):
                cells = [m.framework]
            elif m.kind == "shape":
                cells = ["shape"]
            elif m.kind == "value":
                cells = ["value"]
            elif m.kind == "grad" and m.backward:
                cells = [f"grad:{m.backward}"]
            elif m.kind == "grad-presence":
                found = _AT_BACKWARD.search(m.detail)
                cells = [f"grad:{found.group(1)}"] if found else [f"grad:{b}" for b in backwards]
            for c in cells:
                if marks.get(c) != "!":
                    marks[c] = mark
        bv, tv = bvals.get(st.id), tvals.get(st.id)
        predicted: dict[str, dict[str, bool]] = {}
        for fw, obs_v in (("burn", bv), ("torch", tv)):
            state = pred.of(fw).states.get(st.id)
            if isinstance(state, (BurnState, TorchState)) and obs_v is not None and state.flags() != obs_v.flags:
                predicted[fw] = state.flags()
        d = diff(tv.value if tv else None, bv.value if bv else None)
        grads: dict[str, dict[str, Any]] = {}
        for b in backwards:
            bg = bgrads.get(b, {}).get(st.id)
            tg = tgrads.get(b, {}).get(st.id)
            gd = diff(tg, bg)
            grads[b] = {"burn": list(bg.data) if bg else None, "torch": list(tg.data) if tg else None,
                        "burn_text": abbrev(bg), "torch_text": abbrev(tg),
                        "max_abs": _plain(gd[0]) if gd else None, "max_rel": _plain(gd[1]) if gd else None}
        shape = bv.value.shape if bv else (tv.value.shape if tv else None)
        out.append({
            "id": st.id,
            "what": what(st),
            "shape": list(shape) if shape is not None else None,
            "burn_flags": dict(bv.flags) if bv else None,
            "torch_flags": dict(tv.flags) if tv else None,
            "burn": compact(bv.flags if bv else None, BURN_FLAGS),
            "torch": compact(tv.flags if tv else None, TORCH_FLAGS),
            "predicted": predicted,
            "rules": [f"{f.rule} ({f.framework})" for f in pred.firings if f.statement == st.id],
            "burn_value": abbrev(bv.value if bv else None),
            "torch_value": abbrev(tv.value if tv else None),
            "max_abs": _plain(d[0]) if d else None,
            "max_rel": _plain(d[1]) if d else None,
            "grads": grads,
            "marks": marks,
        })
    return out


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    grads = {b: {k: ([_plain(x) for x in v] if isinstance(v, list) else v) for k, v in g.items()}
             for b, g in row["grads"].items()}
    return {**row, "grads": grads}


def json_rows(verdict: Verdict) -> list[dict[str, Any]]:
    return [_jsonable(r) for r in rows(verdict)]


def table(verdict: Verdict) -> Table:
    from rich.table import Table
    from rich.text import Text

    backwards = [st.id for st in verdict.program.statements if isinstance(st, Backward)]
    t = Table(title=None, show_lines=True)
    t.add_column("id", overflow="fold")
    t.add_column("op", overflow="fold")
    t.add_column("shape")
    t.add_column("burn\nad trk rg", no_wrap=True)
    t.add_column("torch\nrg leaf fn inf", no_wrap=True)
    t.add_column("predicted", overflow="fold")
    t.add_column("rules", overflow="fold")
    t.add_column("value burn / torch\nmax abs / rel", overflow="fold")
    for b in backwards:
        t.add_column(f"grad@{b} burn / torch\nmax abs / rel", overflow="fold")

    def cell(text: str, mark: str | None) -> Text:
        if not mark:
            return Text(text)
        return Text(text + " " + mark, style="bold red" if mark == "!" else "yellow")

    for r in rows(verdict):
        marks = r["marks"]
        grad_cells = [cell(grad_text(r["grads"][b]), marks.get(f"grad:{b}")) for b in backwards]
        t.add_row(
            Text(r["id"]), Text(r["what"]), cell(shape_text(r), marks.get("shape")),
            cell(r["burn"], marks.get("burn")), cell(r["torch"], marks.get("torch")),
            Text(predicted_text(r)), Text("\n".join(r["rules"])),
            cell(value_text(r), marks.get("value")), *grad_cells,
        )
    return t


# The texts of a row's cells (lines separated by newlines), shared by the terminal table and
# the HTML report (report_html.py).

def shape_text(row: dict[str, Any]) -> str:
    return "-" if row["shape"] is None else str(row["shape"])


def predicted_text(row: dict[str, Any]) -> str:
    """The model's flags where they differ from the observed ones, one framework a line."""
    return "\n".join(
        f"{fw} {compact(flags, BURN_FLAGS if fw == 'burn' else TORCH_FLAGS)}" for fw, flags in row["predicted"].items()
    )


def value_text(row: dict[str, Any]) -> str:
    """burn's and PyTorch's values (abbreviated) and their max abs / rel difference."""
    if row["max_abs"] == 0 and row["burn_value"] == row["torch_value"]:
        return f"{row['burn_value']} (equal)"
    text = f"{row['burn_value']}\n{row['torch_value']}"
    if row["max_abs"] is not None:
        text += f"\n{_fmt_diff((row['max_abs'], row['max_rel']))}"
    return text


def grad_text(g: dict[str, Any]) -> str:
    """One backward's gradients of a value in both frameworks, and their difference."""
    if g["burn"] is None and g["torch"] is None:
        return "-"
    if g["max_abs"] == 0 and g["burn_text"] == g["torch_text"]:
        return f"{g['burn_text']} (equal)"
    text = f"{g['burn_text']}\n{g['torch_text']}"
    if g["max_abs"] is not None:
        text += f"\n{_fmt_diff((g['max_abs'], g['max_rel']))}"
    return text


def text(verdict: Verdict, width: int = 160) -> str:
    """The table as plain text (no colour: marks are the `!` / `~` characters)."""
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, markup=False, highlight=False).print(table(verdict))
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines())


def report(verdict: Verdict) -> str:
    """The verdict's report (Verdict.report) and its per-statement table."""
    return "\n".join([verdict.report(), "table (! a finding, ~ a dismissed numeric mismatch):", text(verdict)])
