"""Localisation: the statement whose own computation is wrong, for a value or gradient finding.

Gradients are observed at leaves and values at the end of a path, so a finding names where a
wrong number was *seen*, not where it was *made*. A gradient finding whose backward gives a wrong
gradient already when rooted at a bare leaf of its root's shape is the backward's own (how it
seeds its root), before any op is tried. The localiser re-runs each op (or module
apply) on the failing element's path on its own, in both frameworks, on the inputs PyTorch
recorded for it in the program (forward, and the backward of its result seeded with ones, which
is its vector-Jacobian product with ones: its own derivative at those inputs), and judges the
one-op program with the same oracle (model, float64 arbiter, noise budgets). The first candidate,
in program order, whose one-op program fails is the statement at fault; its one-op program is
the finding's minimal reproducer, and its error class (`error_class`: NaN / inf, zero, sign, or
rounding / small / large by the relative error) goes into the signature with the op and
the mismatch kind (the inputs whose gradient is wrong are recorded beside it). If no
candidate fails with ones, each is run again with the cotangent PyTorch propagated to its result
in the failing backward, then with a fixed varied one (applied through a `mul`, burn seeding a
backward with ones only: a seeded experiment that fails names its op only when the cotangent
applied to a bare leaf is right, else the `mul` is named), then, for an op some of whose inputs
burn did not track in the program, with those inputs constants again (a backward wrong only
beside constant inputs: `cat` slicing by the tracked inputs alone); if none fails then, the
one that deviates most beyond PyTorch's own error is named as a suspect; failing that, a
finding after an optimizer step is traced to the gradients the step consumed (a wrong one is
localised in the program up to the step; right ones name the step itself: `step`), and any
other fault is in how the graph combines them (accumulation, a lost branch): `graph`. A module
forward's one-op program reads the module's parameters too (one_op.py), so a wrong derivative
that shows only in their gradients is named by the module.

Only numeric (`value`, `grad`) and `grad-presence` findings are localised; an outcome, flags
or shape finding already names the statement that failed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from difftest.findings import broadcast
from difftest.findings.accumulation import accumulates, rerooted_finding
from difftest.findings.backward_as import kernel_fault
from difftest.findings.composed import as_composed, inside
from difftest.findings.cotangents import cotangents
from difftest.findings.deviation import deviant, relative_error, suspect_rank
from difftest.findings.error_classes import mismatch_class
from difftest.findings.forward_behind import forward_behind, sized
from difftest.findings.graph_roots import shown_name, smallest_root
from difftest.findings.localisation import Localisation
from difftest.findings.one_op import (
    HARNESS_OP,
    PARAM_READ,
    harness_program,
    one_op_program,
    param_reads,
    seed_program,
    value_aliases,
)
from difftest.findings.paths import candidates, path_has_step
from difftest.findings.recompute import recompute_fault
from difftest.findings.unshared import right_unshared
from difftest.ops.validate import check_program, infer_shapes
from difftest.ops.value_dtypes import dtype_of, value_dtypes
from difftest.oracle.check import check
from difftest.oracle.compare import Mismatch, Verdict
from difftest.oracle.kinks import as_gradient
from difftest.program.ir import (
    Apply,
    Backward,
    OpCall,
    Program,
    ProgramError,
    Statement,
    Step,
    ancestors,
    root_module,
)
from difftest.program.jsonio import program_to_json

if TYPE_CHECKING:
    from difftest.exec.burn_worker import BurnWorker

LOCALISED_KINDS = ("value", "grad", "grad-presence")
MAX_CANDIDATES = 24  # one-op programs run per finding, at most (the path's earliest ops first)


def position(program: Program, m: Mismatch) -> int:
    """Where in the program a finding shows: a gradient at its backward, anything else at its
    statement (a finding without one, at the end)."""
    index = {st.id: i for i, st in enumerate(program.statements)}
    if m.kind in ("grad", "grad-presence") and m.backward in index:
        return index[str(m.backward)]
    return index.get(m.statement or "", len(index))


def primary(program: Program, findings: list[Mismatch]) -> Mismatch:
    """The finding a verdict is signed by: the one that shows first in the program (an op's
    wrong flags before the backward that then panics, a wrong value before the gradients it
    spoils); the first reported among equals."""
    return min(findings, key=lambda m: position(program, m))


def _inputs_differ(st: Statement, verdict: Verdict) -> bool:
    """Whether burn computed some input of the op `st` differently from PyTorch."""
    inputs = st.inputs if isinstance(st, OpCall) else (st.input,) if isinstance(st, Apply) else ()
    for ident in inputs:
        t, b = verdict.torch.value(ident), verdict.burn.value(ident)
        if t is not None and b is not None and t.value.data != b.value.data:
            return True
    return False


def _some_untracked(st: Statement, verdict: Verdict) -> bool:
    """Whether `st` is an op with several inputs some of which burn tracked in the program and
    some not (its one-op programs make every input a tracked leaf)."""
    if not isinstance(st, OpCall) or len(set(st.inputs)) < 2:
        return False
    tracked = set()
    for ident in st.inputs:
        b = verdict.burn.value(ident)
        if b is None:
            return False
        tracked.add(b.flags.get("is_tracked") is True)
    return tracked == {True, False}


def _aliased(st: Statement) -> bool:
    """Whether an op reads one value at several input positions."""
    return isinstance(st, OpCall) and len(set(st.inputs)) < len(st.inputs)


Judged = dict[str, "Verdict | None"]  # one-op program (its JSON) -> its verdict, within one triage


def judge(p: Program, worker: BurnWorker, memo: Judged | None = None) -> Verdict | None:
    """`p` checked on `worker` (None when it cannot run: an op that cannot stand alone on its
    inputs), memoised in `memo` within one triage."""
    key = program_to_json(p) if memo is not None else ""
    if memo is not None and key in memo:
        return memo[key]
    v: Verdict | None = None
    try:
        check_program(p)
    except (ProgramError, ValueError):
        pass  # the op cannot stand alone on these inputs: no one-op verdict
    else:
        v = check(p, worker)  # an error of the check itself is not swallowed
    if memo is not None:
        memo[key] = v
    return v


def localise(verdict: Verdict, worker: BurnWorker, m: Mismatch | None = None, *,
             same_kind: bool = False, memo: Judged | None = None) -> Localisation | None:
    """The localisation of the finding `m` of `verdict` (its first by default), or None when it
    is not a value, gradient or gradient-presence finding (an outcome, flags or shape finding
    names its statement). `same_kind`: report the one-op finding of `m`'s kind where there is
    one (to explain `m` itself), not the one that shows first (to sign the verdict)."""
    findings = verdict.findings
    if m is None:
        if not findings:
            return None
        m = primary(verdict.program, findings)
    if m.kind not in LOCALISED_KINDS:
        return None
    program = verdict.program
    dtypes = value_dtypes(program)
    dtype = dtypes.get(m.statement or "", program.dtype)
    seeded_wrong = _seed_fault(program, m, worker, memo)
    if seeded_wrong is not None:
        return seeded_wrong
    suspects: list[tuple[float, Statement, Program, dict[str, int], Verdict, Mismatch, bool]] = []
    # the gradient of a value both frameworks return as another tensor itself (a dropout with
    # p = 0, a cast to its own dtype) is that tensor's: its path is that tensor's path
    modules = verdict.prediction.torch.modules
    as_grad = as_gradient(program, m, modules)
    if m.kind == "value" and as_grad.kind == "grad":
        # a value read from a gradients handle is that gradient: localised as the gradient finding
        # (the cotangents of its backward, the one-op programs' gradient findings and suspects)
        m = as_grad
    path = candidates(program, as_grad, modules)[:MAX_CANDIDATES]
    # first each op's own derivative (seeded with ones: nothing else in the one-op program), then
    # its product (through one `mul`) with the cotangent PyTorch propagated to it in the failing
    # backward, then with a fixed varied one (ops whose ones-product vanishes, results PyTorch's
    # backward did not reach)
    real = cotangents(program, m.backward) if m.backward and m.kind in ("grad", "grad-presence") else {}
    passes: list[tuple[Statement, bool, tuple[float, ...] | None]] = [(st, False, None) for st in path]
    passes += [(st, True, real[st.id][1]) for st in path if st.id in real]
    passes += [(st, True, None) for st in path]
    # an op reading one value at several positions runs first with a leaf per position (each
    # operand's own derivative), then as the program has it (a fault only aliasing shows); so
    # does one reading a value and another holding it from the same source (value_aliases)
    split_passed: set[tuple[str, bool, tuple[float, ...] | None]] = set()
    aliases = {st.id: value_aliases(program, st, verdict.torch, verdict.burn) for st in path}
    runs = [(st, seeded, seed, split, False, False) for st, seeded, seed in passes
            for split in ((True, False) if _aliased(st) or aliases[st.id] else (False,))]
    # then each op whose inputs burn computed differently, on burn's inputs: an op whose own
    # error shows only there (Wgpu's tanh of burn's 8.5e-14 is 3e-8; of PyTorch's 0, 0)
    runs += [(st, False, None, False, True, False) for st in path if _inputs_differ(st, verdict)]
    # last, each op with some inputs burn did not track in the program, with those inputs
    # constants again and the cotangent that reached it: a backward wrong only beside constants
    runs += [(st, True, real[st.id][1] if st.id in real else None, False, False, True)
             for st in path if _some_untracked(st, verdict)]
    for st, seeded, seed, split, burn_inputs, as_tracked in runs:
        built = one_op_program(program, st, verdict.torch, verdict.burn, seeded=seeded,
                               grads=m.kind in ("grad", "grad-presence"), split=split, seed=seed,
                               burn_inputs=burn_inputs, as_tracked=as_tracked,
                               alias=None if split else aliases.get(st.id))
        if built is None:
            continue
        p, positions = built
        v = judge(p, worker, memo)
        if v is None:
            continue
        if split and right_unshared(v):
            split_passed.add((st.id, seeded, seed))
        if v.ok:
            suspect = deviant(v, m.kind)
            if suspect is not None:  # as-is deviant where a leaf per position is right: the sum's
                summed = not split and (st.id, seeded, seed) in split_passed
                suspects.append((suspect[0], st, p, positions, v, suspect[1], summed))
            continue
        if seeded:
            # the seeded experiment applies its cotangent with a `mul`: when that alone is wrong,
            # every seeded experiment fails, whatever op it holds, and the fault is the mul's
            harness = _harness_fault(p, worker, memo)
            if harness is not None:
                return harness
        picked = _pick(v.findings, m.kind, p, same_kind)
        found = _found(program, st, p, positions, v, picked, "fails")
        if not split and found.kind == "grad" and (
                (st.id, seeded, seed) in split_passed or accumulates(v, picked, lambda q: judge(q, worker, memo))):
            # with a leaf per position the op passed, or burn's gradient of the one value is not
            # the sum of the leaves' there: what fails (or, for a suspect, deviates) is the sum
            # of what the one value receives (unshared.py)
            return replace(found, mechanism="accumulate")
        # a gradient burn computes with another op's forward kernel, wrong there: that op's
        # forward fault (backward_as.py)
        kernel = kernel_fault(found, lambda q: judge(q, worker, memo),
                              lambda v, f: localise(v, worker, f, same_kind=True, memo=memo))
        if kernel is not None:
            return kernel
        # an op burn builds from others, failing as its parts do: the part at fault (composed.py)
        part = inside(found, lambda q: judge(q, worker, memo),
                      lambda v, f: localise(v, worker, f, same_kind=True, memo=memo))
        if part is not None:
            return part
        found = replace(found, as_composed=as_composed(found, lambda q: judge(q, worker, memo)))
        found = _broadcast(found, worker, memo)
        if same_kind:  # explaining `m` itself: its own kind, as the one-op program shows it
            return found
        # a float64 error of rounding's size that is no rounding; a composite's gradient that is
        # its forward's (forward_behind.py)
        return forward_behind(sized(found, lambda q: judge(q, worker, memo)), lambda q: judge(q, worker, memo))
    # a checkpointed program: an op whose output, as burn's checkpointing recomputes it for a
    # backward that reads it, is wrong (recompute.py)
    recomputed = recompute_fault(verdict, path, m.kind in ("grad", "grad-presence"), lambda q: judge(q, worker, memo))
    if recomputed is not None:
        r = recomputed
        f = _pick(r.verdict.findings, m.kind, r.program, same_kind)
        found = _found(program, r.statement, r.program, r.positions, r.verdict, f, "fails")
        return replace(found, mechanism="recompute")
    if suspects and accumulates(verdict, m, lambda q: judge(q, worker, memo), proved=True):
        # a suspect is a judgment of deviation; burn's gradient of a shared value apart from
        # the sum it gives the value's copies is a proof, and names the summation (unshared.py)
        return Localisation(None, "graph", m.kind, None, dtype, mismatch_class(verdict, m), m.verdict or m.kind,
                            confidence="summed", mechanism="accumulate")
    if suspects:
        # no op fails on its own, but one deviates from the float64 result far more than PyTorch's
        # float32 run does (a fault inside the budget of its one-op program, which the path
        # amplified): the most deviant one is named, marked as a suspect
        size = relative_error(verdict, m)
        _, st, p, positions, v, f, summed = max(suspects, key=lambda x: suspect_rank(
            x[0], x[5], relative_error(x[4], x[5]), size))
        found = _found(program, st, p, positions, v, f, "suspect", m.verdict or m.kind)
        if summed and found.kind == "grad":
            return replace(found, mechanism="accumulate")
        # a suspect op burn builds from others, deviating as its parts do (composed.py)
        part = inside(found, lambda q: judge(q, worker, memo),
                      lambda v, f: localise(v, worker, f, same_kind=True, memo=memo))
        return part if part is not None else found
    step = path_has_step(program, m, path)
    if step is not None:
        consumed = _consumed_gradient(verdict, worker, step, memo)
        if consumed is not None:
            return consumed
        alone = _step_alone(verdict, worker, step, memo)
        if alone is not None:
            return alone
        return Localisation(step.id, "step", m.kind, None, dtype, mismatch_class(verdict, m), m.verdict or m.kind)
    shown = smallest_root(program, m, path, lambda p: judge(p, worker, memo))
    # no value shared (each computed once per path that reads it): right then, or burn's sum of
    # the copies' gradients not the shared one, the fault is in how a value's gradient
    # contributions are summed (unshared.py); tried on the program, then rerooted where the
    # finding first shows (a root the tree cannot be built through, a module's forward, is
    # often beyond it)
    accumulates_ = accumulates(verdict, m, lambda q: judge(q, worker, memo))
    if not accumulates_ and shown is not None and m.backward is not None:
        rerooted = rerooted_finding(program, m, shown, lambda q: judge(q, worker, memo))
        accumulates_ = rerooted is not None and accumulates(*rerooted, lambda q: judge(q, worker, memo))
    return Localisation(None, "graph", m.kind, None, dtype, mismatch_class(verdict, m), m.verdict or m.kind,
                        shown_at=shown_name(program, shown) if shown is not None else None,
                        mechanism="accumulate" if accumulates_ else None)


def _broadcast(found: Localisation, worker: BurnWorker, memo: Judged | None) -> Localisation:
    """`found` (an op's failing one-op program) as a broadcast's fault where the op is right with
    the inputs it broadcasts expanded first (broadcast.py): the rank promotion's reshape where it
    is wrong alone; else the reduction every broadcasting op shares where another op
    broadcasting the same input the same way is wrong too (`broadcast`), or the op's own
    (`own-broadcast`). `found` itself where the op is wrong without its broadcast."""
    def judged(q: Program) -> Verdict | None:
        return judge(q, worker, memo)

    expanded = broadcast.right_without_broadcast(found, judged)
    if not expanded:
        return found
    promoted = broadcast.promotion_fails(found, expanded, judged)
    if promoted is not None:
        wrong = [f for f in promoted.findings if f.kind == "grad"]
        loc = localise(promoted, worker, wrong[0], same_kind=True, memo=memo)
        if loc is not None and loc.where != "graph":
            return loc
    mechanism = broadcast.SHARED if broadcast.shared(found, expanded, judged) else broadcast.OWN
    return replace(found, mechanism=mechanism, expanded=expanded)


def _seed_fault(program: Program, m: Mismatch, worker: BurnWorker, memo: Judged | None) -> Localisation | None:
    """A gradient finding whose backward is wrong before any op: the backward of a fresh leaf of
    its root's shape and dtype, rooted at the leaf (one_op.seed_program), already gives a wrong
    gradient. Every op's one-op program would then fail too, each naming its op; the finding is
    the backward's (`where` "backward", at the finding's backward statement). None otherwise."""
    table = program.by_id()
    bw = table.get(str(m.backward))
    if m.kind not in ("grad", "grad-presence") or not isinstance(bw, Backward):
        return None
    try:
        shape = infer_shapes(program)[bw.input]
        seed = seed_program(tuple(shape), dtype_of(program, bw.input), program.checkpointing)
    except (ProgramError, ValueError, KeyError):
        return None
    v = judge(seed, worker, memo)
    wrong = [f for f in v.findings if f.kind in ("grad", "grad-presence")] if v is not None else []
    if v is None or not wrong:
        return None
    f = wrong[0]
    return Localisation(bw.id, "backward", f.kind, None, seed.dtype, mismatch_class(v, f), f.verdict or f.kind,
                        {}, seed, v, f, "fails")


def _harness_fault(p: Program, worker: BurnWorker, memo: Judged | None) -> Localisation | None:
    """The localisation of a failing seeded one-op program `p` to its harness: when the cotangent
    applied to a bare leaf (one_op.harness_program) already gives a wrong gradient, the op the
    harness applies it with is wrong on its own (its one-op program is that control), and the
    op `p` holds is not shown wrong. Not at a statement of the program, which may hold no such
    op: known-bug records match the finding where the program shows it. None when the control
    is right."""
    control = harness_program(p)
    v = judge(control, worker, memo) if control is not None else None
    wrong = [f for f in v.findings if f.kind in ("grad", "grad-presence")] if v is not None else []
    if control is None or v is None or not wrong:
        return None
    f = wrong[0]
    return Localisation(None, HARNESS_OP, f.kind, (0,), control.dtype, mismatch_class(v, f), f.verdict or f.kind,
                        {}, control, v, f, "fails")


def _step_alone(verdict: Verdict, worker: BurnWorker, step: Step, memo: Judged | None) -> Localisation | None:
    """A step whose consumed gradients are right, shown by what it computes: the program up to
    the step, then a read of each parameter of the stepped module. Its failing parameter is the
    finding's (the step's error, measured where the step makes it, not where values computed from
    the parameters amplify it). None when those parameters agree (the step is named by the path)."""
    program = verdict.program
    at = program.statements.index(step) + 1
    reads = param_reads(program, step.id)
    try:
        alone = program.with_statements((*program.statements[:at], *reads))
    except ProgramError:
        return None
    v = judge(alone, worker, memo)
    ids = {r.id for r in reads}
    wrong = [f for f in v.findings if f.kind == "value" and f.statement in ids] if v is not None else []
    if v is None or not wrong:
        return None
    f = wrong[0]
    return Localisation(step.id, "step", f.kind, None, alone.dtype, mismatch_class(v, f), f.verdict or f.kind,
                        program=alone, one_op=v, mismatch=f, confidence="fails")


def _consumed_gradient(verdict: Verdict, worker: BurnWorker, step: Step, memo: Judged | None) -> Localisation | None:
    """A finding after an optimizer step, traced to the gradients the step consumed: the
    program up to the step, reading the stepped module's parameters (right after the handle
    the step reads, so that the step's backward gives them gradients), is checked. A wrong
    derivative makes a wrong step, and then wrong values and gradients downstream of it: one
    finding, named by the derivative. A gradient there that fails is localised as any other;
    one within its noise budget (a float16 gradient 5% off passes; the step then moves a
    parameter outside the budget of its value) only when an op's one-op program on its path
    fails on its own. None when neither holds (the step itself is at fault) or no one op is."""
    program = verdict.program
    handle = program.by_id().get(step.module)
    if handle is None or step not in program.statements:
        return None
    reads = param_reads(program, step.module)
    at = program.statements.index(handle) + 1
    statements = (*program.statements[:at], *reads, *program.statements[at:program.statements.index(step)])
    try:
        before = program.with_statements(statements)
    except ProgramError:
        return None
    v = judge(before, worker, memo)
    if v is None:
        return None
    ids = {r.id for r in reads}
    at_reads = [f for f in v.mismatches if f.kind in ("grad", "grad-presence") and f.statement in ids
                and f.backward == step.grads]
    wrong = [f for f in at_reads if f in v.findings]
    for f in wrong[:1] or [f for f in at_reads if f.verdict == "agreement"]:
        loc = localise(v, worker, f, same_kind=True, memo=memo)
        if loc is not None and loc.statement is not None and loc.where != "step" and (
                f in wrong or loc.confidence == "fails"):
            return loc
    return None


def localise_tracking(verdict: Verdict, worker: BurnWorker, m: Mismatch) -> Localisation | None:
    """A flags finding at an op, or a backward that burn ran without the error the model (or a
    rule, `stale-rule`) predicted (it, or an earlier backward, did not reach what the prediction
    says), traced to an op that drops an input's gradient: the op itself, or each op that
    backward or an earlier one reaches, run alone with every input requiring grad. The localisation of the first one-op
    program that misses a gradient, or None (the finding keeps its statement's signature)."""
    program = verdict.program
    table = program.by_id()
    st = table.get(m.statement or "")
    if m.kind == "flags" and isinstance(st, (OpCall, Apply)):
        path: list[Statement] = [st]
    elif m.kind in ("outcome", "stale-rule") and isinstance(st, Backward) and (
            verdict.burn.error is None or verdict.burn.error.statement != st.id):
        # what this backward reaches, and what the earlier ones consumed (a backward that should
        # fail on a graph an earlier one consumed runs when that one missed part of it)
        upto = program.statements[: program.statements.index(st) + 1]
        on_path: set[str] = set()
        for bw in upto:
            if isinstance(bw, Backward):
                on_path |= ancestors(table, bw.input)
        path = [s for s in upto if s.id in on_path and isinstance(s, (OpCall, Apply))]
    else:
        return None
    runs = [(c, split) for c in path[:MAX_CANDIDATES] for split in ((True, False) if _aliased(c) else (False,))]
    for s, split in runs:
        built = one_op_program(program, s, verdict.torch, verdict.burn, grads=True, split=split)
        if built is None:
            continue
        p, positions = built
        v = judge(p, worker)
        missing = [f for f in v.findings if f.kind == "grad-presence"] if v is not None else []
        if v is not None and missing:
            return _found(program, s, p, positions, v, missing[0], "fails")
    return None


def _found(program: Program, st: Statement, p: Program, positions: dict[str, int], v: Verdict, f: Mismatch,
           confidence: str, verdict: str | None = None) -> Localisation:
    where = st.op if isinstance(st, OpCall) else _apply_where(program, st) if isinstance(st, Apply) else "?"
    attrs = dict(st.attrs) if isinstance(st, OpCall) else {}
    index = None
    params: tuple[str, ...] = ()
    if f.kind in ("grad", "grad-presence"):
        # every input (and module parameter) whose gradient the one-op program shows wrong the same
        # way; `f` among them (a suspect's floor loss is no mismatch of the verdict: deviation.py)
        same = [x.statement for x in (*v.mismatches, f) if x.kind == f.kind and x.verdict == f.verdict and x.statement]
        index = tuple(sorted({positions[x] for x in same if x in positions})) or None
        params = tuple(sorted({x.removeprefix(PARAM_READ) for x in same if x.startswith(PARAM_READ)}))
    return Localisation(st.id, where, f.kind, index, p.dtype, mismatch_class(v, f), verdict or f.verdict or f.kind,
                        attrs, p, v, f, confidence, params=params)


def _pick(findings: list[Mismatch], kind: str, program: Program, same_kind: bool) -> Mismatch:
    """The one-op finding to report: the first of `kind` with `same_kind`; else the one that
    shows first (a wrong value before the wrong gradient it implies) when it is a value,
    outcome or flags finding, else the first of `kind`."""
    first = primary(program, findings)
    of_kind = next((f for f in findings if f.kind == kind), None)
    if same_kind and of_kind is not None:
        return of_kind
    if first.kind in ("value", "outcome", "flags") or of_kind is None:
        return first
    return of_kind


def _apply_where(program: Program, st: Apply) -> str:
    try:
        return f"apply:{root_module(program, st.module).module}"
    except (KeyError, AssertionError):
        return "apply"
