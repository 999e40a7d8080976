"""The path of a finding: the statements a wrong value or gradient goes through (the ops and
module forwards the localiser runs alone, localise.py), and the optimizer step it comes after."""

from __future__ import annotations

from collections.abc import Mapping

from difftest.divergences.states import ModuleState
from difftest.oracle.compare import Mismatch
from difftest.oracle.kinks import itself
from difftest.program.ir import (
    Apply,
    Backward,
    Cut,
    Grad,
    OpCall,
    Param,
    Program,
    Statement,
    Step,
    Transform,
    ancestors,
    carries_gradient,
    depends_on,
    root_module,
    value_inputs,
)


def _sharing_gradient(program: Program, table: dict[str, Statement], ident: str) -> set[str]:
    """The statements whose gradient is `ident`'s: for a parameter read, every read of the same
    parameter of the same module and every forward of a handle of that module (burn's read is
    the parameter itself, so its gradient sums over all of them, also through a read the
    backward reaches and this one does not); for an `autodiff` cut, its input's too (of a value
    already on the autodiff device it is that value: both frameworks give it that gradient,
    whether or not the backward reads the cut); for anything else, `ident` alone."""
    st = table.get(ident)
    if isinstance(st, Cut) and st.cut == "autodiff":
        return {ident} | _sharing_gradient(program, table, st.input)
    if not isinstance(st, Param):
        return {ident}
    root = root_module(program, st.module, table).id
    out = {ident}
    for s in program.statements:
        if isinstance(s, (Param, Apply)) and root_module(program, s.module, table).id == root:
            if not isinstance(s, Param) or s.param == st.param:
                out.add(s.id)
    return out


def _gradient_path(program: Program, table: dict[str, Statement], leaf: str, bw: str | None) -> set[str]:
    """The values the gradient of `leaf` at the backward `bw` goes through."""
    root = table.get(str(bw))
    if not isinstance(root, Backward):
        return set()
    reached = set(_sharing_gradient(program, table, leaf))
    for st in program.statements:  # what a gradient flows through: no op of a no_grad region, no cut
        if carries_gradient(st) and any(x in reached for x in value_inputs(st)):
            reached.add(st.id)
    return ancestors(table, root.input) & reached


def candidates(program: Program, m: Mismatch, modules: Mapping[str, ModuleState] | None = None) -> list[Statement]:
    """The ops and module applies on the failing element's path, in program order: a gradient's
    path; a value's ancestors and, where it is computed from a gradient read (`g = grad(x; bw)`,
    a detach or an op of it), that gradient's path: of the tensor x is in both frameworks
    (`modules`: the model's module handles, for a forward that returns its input)."""
    table = program.by_id()
    if m.statement is None or m.statement not in table:
        return []
    if m.kind in ("grad", "grad-presence"):
        on_path = _gradient_path(program, table, m.statement, m.backward)
    else:
        on_path = ancestors(table, m.statement)
        for read in [table[x] for x in on_path]:
            if isinstance(read, Grad):
                on_path |= _gradient_path(program, table, itself(program, table, read.of, modules), read.grads)
    return [s for s in program.statements if s.id in on_path and isinstance(s, (OpCall, Apply))]


def path_has_step(program: Program, m: Mismatch, path: list[Statement] | None = None) -> Step | None:
    """The latest step the mismatching value derives from: one its statement's module handle
    derives from (a `param` read or a module forward after a step), or one a module forward on
    its path (`path`, default `candidates`) does (a value computed from a stepped module's
    output: every one-op program on the path passes, on PyTorch's inputs, when the step moved
    the parameters wrongly)."""
    table = program.by_id()
    index = {st.id: i for i, st in enumerate(program.statements)}
    st = table.get(m.statement or "")
    readers = ([st] if st is not None else []) + (candidates(program, m) if path is None else path)
    steps: list[Step] = []
    for reader in readers:
        handle = getattr(reader, "module", None)
        while handle is not None:
            h = table.get(handle)
            if isinstance(h, Step):
                steps.append(h)
                break
            handle = h.input if isinstance(h, Transform) else None
    return max(steps, key=lambda s: index[s.id], default=None)


def upstream(table: dict[str, Statement], site: Statement) -> set[str]:
    """What a finding at `site` is computed from, where an effect that shows downstream can
    strike: the values it is computed from (for a backward or a gradient read, its root's; for
    a value computed from a gradient read, that read's backward's graph too), and
    the module handles their forwards and parameter reads use, back through transforms and
    optimizer steps (a step's wrong parameters spoil every forward of the stepped module)."""
    root = site
    if isinstance(root, Grad):
        root = table.get(root.grads, root)
    out = depends_on(table, root.input if isinstance(root, Backward) else root.id)
    for x in list(out):
        handle = getattr(table.get(x), "module", None)
        while isinstance(handle, str) and handle not in out:
            out.add(handle)
            h = table.get(handle)
            handle = h.input if isinstance(h, Transform) else h.module if isinstance(h, Step) else None
    return out
