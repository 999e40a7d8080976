"""Whether a known bug's record explains a finding (`explains`), and the one record that explains
every finding of a verdict (`known_bug_of`): its site predicate holds at the finding's localised
statement (or upstream of it, for effects declared to show downstream) in the dtype it runs in,
and its effect matches the finding's kind, input, outcome message and error; or its modelled
behaviour, composed into the reference, reproduces burn's result (`Fault.reproduced`)."""

from __future__ import annotations

import re

from difftest.divergences.known_bugs import KNOWN_BUGS, Fault, KnownBug
from difftest.findings.paths import upstream
from difftest.ops.value_dtypes import dtype_of
from difftest.program.ir import Apply, Backward, OpCall, Program, Statement


def dtype_at(program: Program, st: Statement) -> str:
    """The dtype a statement runs in: its first input's, else the program's."""
    inputs = st.inputs if isinstance(st, OpCall) else (st.input,) if isinstance(st, Apply) else ()
    if inputs:
        return dtype_of(program, inputs[0])
    return program.dtype


def explains(bug: KnownBug, f: Fault) -> bool:
    """Whether `bug` shows on the fault's backend and on this machine, is the bug of the
    framework the finding blames (PyTorch's for a torch-wrong verdict, else burn's), its site holds
    at the fault's statement (or upstream of it, for an effect that shows downstream) and its
    effect matches the fault (or the fault's other reading, `Fault.alternative`)."""
    return _explains(bug, f) or (f.alternative is not None and _explains(bug, f.alternative))


def _explains(bug: KnownBug, f: Fault) -> bool:
    eff = bug.effect
    if eff is None or f.site is None or f.kind not in eff.kinds or not bug.shows_on(f.backend):
        return False
    if (bug.framework == "torch") != (f.verdict == "torch-wrong") or not bug.shows_here():
        return False
    if any(name == bug.name for name, _ in f.reproduced):
        # the reference with the bug's behaviour composed gives burn's result (reproduced.py): a
        # check of the effect itself, at the statement where the model struck
        return any(name == bug.name and _strikes_at(bug, f.program, at) for name, at in f.reproduced)
    if eff.message is not None and f.kind == "outcome" and not re.search(eff.message, f.message, re.IGNORECASE):
        return False
    if eff.input is not None and f.input != eff.input:
        return False
    if eff.error is not None and not eff.error(f):
        return False
    statements = f.program.statements
    table = f.program.by_id()
    site = table.get(f.site)
    if site is None:
        return False
    sites = {f.site}
    if eff.downstream:
        sites |= upstream(table, site)
        if f.kind in ("stale-rule", "outcome") and isinstance(site, Backward):
            # a backward that ran where a rule predicted a consumed graph: what the earlier
            # backwards consumed decides it (an untracked value there cut the graph off)
            for st in statements[:statements.index(site)]:
                if isinstance(st, Backward):
                    sites |= upstream(table, st)
    for i, st in enumerate(statements):
        if st.id in sites and bug.strikes(st, statements[:i], dtype_at(f.program, st)):
            return True
    return False


def known_bug_of(faults: list[Fault], bugs: tuple[KnownBug, ...] = KNOWN_BUGS) -> KnownBug | None:
    """The one record that explains every fault; else, when each fault is explained by some
    record (a program that hits two known bugs, say float64 sigmoid and hard_sigmoid on
    NdArray), the record of the first; None when a fault no record explains remains."""
    if not faults:
        return None
    for bug in bugs:
        if all(explains(bug, f) for f in faults):
            return bug
    first = next((b for b in bugs if explains(b, faults[0])), None)
    if first is not None and all(any(explains(b, f) for b in bugs) for f in faults[1:]):
        return first
    return None


def _strikes_at(bug: KnownBug, program: Program, at: str) -> bool:
    """Whether the record's site holds at statement `at` of `program`."""
    ids = [st.id for st in program.statements]
    if at not in ids:
        return False
    i = ids.index(at)
    st = program.statements[i]
    return bug.strikes(st, program.statements[:i], dtype_at(program, st))
