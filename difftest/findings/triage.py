"""Triage of a failing verdict: its signature (from the localised fault) and whether a known bug
explains it (difftest/divergences/known_bugs.py).

`triage(verdict, worker)` localises the first finding (findings/localise.py) and signs it:

    <verdict>:<framework>:<where>:<kind>:<error class> #<12 hex digits>

of the finding that shows first in the program (`primary`), for a value, gradient or
gradient-presence finding (`burn-wrong:-:exp:grad:small`; where is the
op whose own computation is wrong, or `graph` when no single op is), and the outcome / flags /
crash signature of findings/signature.py for the others. The dtype and the inputs whose
gradient is wrong are part of the localisation's record, not of the signature: the same wrong
derivative in float32 and float64 programs, seen at one input or at several, is one bug.

A verdict is a known bug only when *every* finding is explained by a record (one record for
all of them, or several known bugs in one program): the record is declared for the backend
the worker ran on (its `backends`), its site predicate holds at the finding's localised
statement (or upstream of it, for effects declared to show downstream) in the dtype it runs in,
and its effect matches the finding's kind, input, outcome message and error. A finding that no
single op explains (localised to the graph) is matched where the program shows it. A finding no
record explains makes the verdict news, whatever its signature.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from difftest.divergences.known_bugs import KNOWN_BUGS, Fault, KnownBug
from difftest.exec.backends import DEFAULT_BACKEND
from difftest.findings.consequences import consequence
from difftest.findings.error_classes import (
    WRONG_NUMBER,
    failing_elements,
    mismatch_pairs,
    mismatch_terms,
    step_terms,
)
from difftest.findings.explaining import dtype_at, explains, known_bug_of
from difftest.findings.flags_parts import flags_in_parts
from difftest.findings.graph_roots import shown_name
from difftest.findings.hangs import hang_signature
from difftest.findings.localisation import Localisation
from difftest.findings.localise import (
    LOCALISED_KINDS,
    Judged,
    judge,
    localise,
    localise_tracking,
    primary,
)
from difftest.findings.reproduced import reproduced
from difftest.findings.signature import signature_of_mismatch
from difftest.oracle.compare import Mismatch, Verdict
from difftest.oracle.gradient_reads import between_read, selecting
from difftest.program.ir import (
    Apply,
    Backward,
    Cut,
    Grad,
    Leaf,
    OpCall,
    Program,
    Statement,
    Transform,
    ancestors,
    value_inputs,
)

if TYPE_CHECKING:
    from difftest.exec.burn_worker import BurnWorker

# findings of one verdict localised to match them against known bugs; those past it are matched as
# the program shows them (`shown_fault`): a bug whose effect shows downstream (a float64 op computed
# in f32 on NdArray) gives a finding at every value computed from it
MAX_LOCALISED = 12

KNOWN_PREFIX = "known-bug:"  # a campaign's key for findings a known bug explains (by its name)


@dataclass
class Triage:
    signature: str
    localisation: Localisation | None
    known: KnownBug | None
    faults: list[Fault] = field(default_factory=list)

    def describe(self) -> str:
        head = f"known bug {self.known.name}" if self.known else "new"
        loc = f"; localised: {self.localisation.describe()}" if self.localisation else ""
        return f"{head}: {self.signature}{loc}"

    @property
    def key(self) -> str:
        """What a campaign keys the finding by: the known bug that explains it, else its signature."""
        return f"{KNOWN_PREFIX}{self.known.name}" if self.known is not None else self.signature

    def to_dict(self) -> dict[str, Any]:
        return {"signature": self.signature, "known": self.known.name if self.known else None,
                "localisation": self.localisation.to_dict() if self.localisation else None}


def localised_signature(loc: Localisation, framework: str | None) -> str:
    """The signature of a localised fault: what is wrong (op, kind, error class), not which of
    its inputs shows it in one program (a wrong conv2d backward shows at the input, the weight,
    the bias or several of them, depending on the data); the inputs are in the localisation, and
    known-bug records match on them. A wrong number's size and sign are the data's (a derivative
    scaled by 1.001 is `small` where the op computes it alone and `large` at a tie, where the
    one-op program is only a suspect; a dropped operand is `zero` or `large` by what else reaches
    the leaf): they sign as one class, `wrong`; NaN, inf and, in float64, rounding keep theirs
    (an overflow or a precision loss is another bug; `wrong_number`)."""
    fw = framework or "-"
    error = "wrong" if loc.kind in ("value", "grad") and wrong_number(loc) else loc.error
    # a gradient no single op explains, by the op where it first shows (graph_roots.py); a
    # shared mechanism (a broadcast operand's gradient reduced wrong, a value's contributions
    # summed wrong) by that mechanism, whichever op showed it
    where = loc.mechanism or (f"{loc.where}@{loc.shown_at}" if loc.where == "graph" and loc.shown_at else loc.where)
    if loc.mechanism == "recompute":  # one op's own recomputation: the op names the fault
        where = f"recompute:{loc.where}"
    if loc.mechanism == "own-broadcast":  # one op's own reduction of a broadcast operand's gradient
        where = f"broadcast:{loc.where}"
    key = "\x1f".join((loc.verdict, fw, where, loc.kind, error))
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return f"{loc.verdict}:{fw}:{where}:{loc.kind}:{error} #{digest}"




def wrong_number(loc: Localisation) -> bool:
    """Whether the localised fault's numbers are wrong, whatever their size and sign. An error of
    rounding's size (error_classes.ROUNDING) is a precision loss, another bug, only where the op
    computes in float64: a computation through f32. In float32 (or a half dtype), the narrower
    dtypes' rounding is larger than that, so an error of that size beyond the measured noise is a
    wrong number that the data made small (an epsilon added after a square root is 1e-6 of the
    result or 1e-5 by the input's scale): one bug, one signature."""
    return loc.error in WRONG_NUMBER or (loc.error == "rounding" and loc.dtype != "float64")


def forward_fault(verdict: Verdict, m: Mismatch, loc: Localisation | None) -> str | None:
    """The signature of an op whose forward is wrong, however the data show it: a wrong value
    (of any size or sign: which one is the data's), a wrong shape, or a panic where the model
    predicts none, at that op (a wrong broadcasting rule shows all of them): one case per op.
    A value off by NaN, inf or, in float64, rounding keeps its own class (a precision or overflow bug is
    another bug); None for anything else. A wrong value no single op makes (`graph`: a fused
    kernel, a layout two ops make together) is signed by the op that shows it too, so that two
    such bugs are two cases."""
    program = verdict.program
    where: str | None = None
    if loc is not None and loc.kind == "value" and wrong_number(loc) and loc.verdict == "burn-wrong":
        where = loc.where
        shown = program.by_id().get(m.statement or "")
        if where == "graph" and isinstance(shown, (OpCall, Apply)):
            where += "@" + shown_name(program, shown)
    elif loc is None and m.kind in ("shape", "outcome") and m.framework == "burn":
        st = program.by_id().get(m.statement or "")
        failed_here = verdict.burn.error is not None and verdict.burn.error.statement == m.statement
        if isinstance(st, (OpCall, Apply)) and (m.kind == "shape" or failed_here):
            where = shown_name(program, st)
    if where is None:
        return None
    digest = hashlib.sha256(f"forward\x1f{where}".encode()).hexdigest()[:12]
    return f"burn-wrong:-:{where}:forward #{digest}"


def state_fault(verdict: Verdict, m: Mismatch) -> str | None:
    """The signature of wrong flags (or a stale rule about them) by what decides them: in a
    no_grad / inference_mode region, the region (its ops take their inputs off autodiff, so
    their flags are the region's, whatever the op); after a `valid()` module, the transform;
    at a cut (in any region), the cut; the flags that differ, not their values (a negated flag shows both
    ways), or `is_autodiff` alone when it is one of them (the others follow from it). None for
    anything else (an op's own flags keep the op's signature)."""
    if m.kind not in ("flags", "stale-rule") or not isinstance(m.expected, dict) or not isinstance(m.observed, dict):
        return None
    table = verdict.program.by_id()
    st = table.get(m.statement or "")
    where = None
    if isinstance(st, Cut):  # a cut's result is the cut's, in a region too
        where = f"cut:{st.cut}"
    elif isinstance(st, OpCall) and st.region != "grad":
        where = f"region:{st.region}"
    elif isinstance(st, Apply):
        handle = table.get(st.module)
        while isinstance(handle, Transform):
            if handle.transform == "valid":
                where = "transform:valid"
                break
            handle = table.get(handle.input)
    if where is None:
        return None
    differ = sorted(k for k in set(m.expected) | set(m.observed) if m.expected.get(k) != m.observed.get(k))
    # a tensor off the autodiff device neither requires grad nor is tracked: when is_autodiff is
    # wrong, the other two differ or not by what the input was, so it alone signs the fault
    flags = "is_autodiff" if "is_autodiff" in differ else ",".join(differ)
    digest = hashlib.sha256(f"flags\x1f{m.framework}\x1f{where}\x1f{flags}".encode()).hexdigest()[:12]
    return f"flags:{m.framework or '-'}:{where}:{flags} #{digest}"


def fault_of(verdict: Verdict, m: Mismatch, loc: Localisation | None, backend: str = DEFAULT_BACKEND) -> Fault:
    """The finding `m` of `verdict` as known-bug records read it (`loc`: its localisation;
    `backend`: the burn backend the verdict's program ran on)."""
    program = verdict.program
    if loc is not None and loc.statement is not None and loc.one_op is not None and loc.mismatch is not None:
        one = loc.one_op
        leaves = sorted(((s.id, s) for s in one.program.statements if isinstance(s, Leaf)), key=lambda x: x[0])
        inputs = tuple(s.data for _, s in leaves)
        lm = loc.mismatch
        observed = dict(lm.observed) if isinstance(lm.observed, dict) else {}  # a one-op flags finding's
        terms = mismatch_terms(one, lm)
        if not any(terms):  # a step's: the parameter it updated (error_classes.step_terms)
            terms = step_terms(one.program, lm) or terms
        # a part of a composite (composed.py): its site is the part, in the composite run as its parts
        site, program = (loc.part, loc.composed) if loc.composed is not None and loc.part else (loc.statement, program)
        return Fault(lm.kind, site, program, loc.dtype, lm.framework, lm.detail, loc.input,
                     tuple(mismatch_pairs(one, lm)), failing_elements(lm), inputs, observed, backend=backend,
                     terms=tuple(terms), verdict=lm.verdict, as_composed=None if loc.part else loc.as_composed)
    if loc is not None and loc.statement is None:  # no single op: where the program shows it
        return shown_fault(verdict, m, backend)
    if loc is not None:  # a step: the error as the program shows it
        return Fault(m.kind, loc.statement, program, loc.dtype, m.framework, m.detail, None,
                     tuple(mismatch_pairs(verdict, m)), failing_elements(m), backend=backend,
                     terms=tuple(mismatch_terms(verdict, m)), verdict=m.verdict)
    observed = dict(m.observed) if isinstance(m.observed, dict) else {}
    st = program.by_id().get(m.statement or "")
    dtype = dtype_at(program, st) if st is not None else program.dtype
    return Fault(m.kind, m.statement, program, dtype, m.framework, m.detail, observed=observed, backend=backend,
                 verdict=m.verdict)


def shown_fault(verdict: Verdict, m: Mismatch, backend: str = DEFAULT_BACKEND) -> Fault:
    """A value or gradient finding as the program shows it, not localised: at its own statement
    (a value) or at its backward (a gradient; a value computed from a gradient read counts as
    that backward's gradient), with the program's error there. Only a record
    whose effect shows downstream of its site explains it (a site upstream of that statement or
    of the backward's root, the error as declared), or one whose site is the value's own op: the
    finding is then that bug's effect where the program shows it."""
    program = verdict.program
    table = program.by_id()
    kind, at = m.kind, m.backward if m.kind in ("grad", "grad-presence") and m.backward else m.statement
    st = table.get(m.statement or "")
    dtype = dtype_at(program, st) if st is not None else program.dtype
    fault = Fault(kind, at, program, dtype, m.framework, m.detail, None, tuple(mismatch_pairs(verdict, m)),
                  failing_elements(m), backend=backend, terms=tuple(mismatch_terms(verdict, m)), verdict=m.verdict)
    only = _only_consumer(table, m.statement, m.backward) if m.kind == "grad" else None
    if only is not None:
        # a leaf's gradient, when one op alone reads the leaf on the way to the root, is that
        # op's gradient of that input as the program shows it: the other reading, matched where
        # the op alone could not show it (an effect that varies from run to run)
        op, position = only
        return replace(fault, alternative=replace(fault, site=op.id, input=(position,),
                                                  dtype=dtype_at(program, op)))
    read = _gradient_read(table, m.statement) if m.kind == "value" else None
    if read is not None:
        # a value computed from a gradient read: that backward's gradient, as shown, or else the
        # value itself (an op between the read and the value, a float64 log_sigmoid on Wgpu).
        # The read itself, or a cut of it, holds the gradient's elements: its terms are the
        # gradient's (a value's own terms, of a detach, are none)
        terms = fault.terms
        between = between_read(table, m.statement, read.id, selecting)
        if between is not None and all(isinstance(x, Cut) for x in between) and not any(terms):
            terms = _gradient_terms(verdict, read) or terms
        elif not any(terms) and between:
            # ops that only move or select the read's elements (cummax, gather, a reshape): each
            # element is one of the gradient's, whose error its terms bound at most by the largest
            gradient = _gradient_terms(verdict, read)
            terms = (max(gradient),) * len(fault.pairs) if gradient and fault.pairs else terms
        return replace(fault, kind="grad", site=read.grads, alternative=fault, terms=terms)
    return fault


def _only_consumer(table: dict[str, Statement], leaf: str | None,
                   backward: str | None) -> tuple[OpCall, int] | None:
    """The op, and the input position, through which alone the gradient of the leaf `leaf`
    reaches the root of `backward`: the one statement of the backward's graph that reads the
    leaf, an op reading it at one position; None otherwise."""
    bw = table.get(backward or "")
    if not isinstance(table.get(leaf or ""), Leaf) or not isinstance(bw, Backward):
        return None
    graph = ancestors(table, bw.input) | {bw.input}
    users = [table[x] for x in graph if x in table and leaf in value_inputs(table[x])]
    if len(users) != 1 or not isinstance(users[0], OpCall) or users[0].inputs.count(leaf or "") != 1:
        return None
    return users[0], users[0].inputs.index(leaf or "")


def _gradient_terms(verdict: Verdict, read: Grad) -> tuple[float, ...]:
    """The terms of the gradient finding `read` reads (of `read.of` at `read.grads`), if the
    verdict has one."""
    for g in verdict.findings:
        if g.kind == "grad" and g.statement == read.of and g.backward == read.grads:
            return tuple(mismatch_terms(verdict, g))
    return ()


def _gradient_read(table: dict[str, Statement], ident: str | None) -> Grad | None:
    """The gradient read (`grad(x; bw)`) the value `ident` is computed from, if any: a value
    that no single op explains and that carries a gradient differs by that gradient's error."""
    for x in sorted(ancestors(table, ident)) if ident else ():
        st = table.get(x)
        if isinstance(st, Grad):
            return st
    return None


def _spread(program: Program, first: Mismatch, findings: list[Mismatch]) -> list[Mismatch]:
    """The findings in the order their localisations are spent (MAX_LOCALISED): the first of
    each source first (the gradients of each backward, the values computed from its gradient
    reads, the other values), then the rest, each in program order; so that a bug that shows only
    at a later backward is localised however many findings an earlier one gives."""
    table = program.by_id()

    def source(m: Mismatch) -> str:
        if m.kind in ("grad", "grad-presence"):
            return f"backward {m.backward}"
        read = _gradient_read(table, m.statement) if m.kind == "value" else None
        return f"backward {read.grads}" if read is not None else m.kind

    sources = {source(first)}
    firsts: list[Mismatch] = []
    rest: list[Mismatch] = []
    for m in findings:
        (rest if source(m) in sources else firsts).append(m)
        sources.add(source(m))
    return firsts + rest


def triage(verdict: Verdict, worker: BurnWorker, *, bugs: tuple[KnownBug, ...] = KNOWN_BUGS) -> Triage:
    """The signature of a failing verdict and the known bug that explains it, if one does (a
    record declared for the backend `worker` runs on). A verdict whose first finding a record
    explains but another finding no record does is news signed by that other finding: a program
    that shows a known bug and a new one is a case of the new one, named after it."""
    findings = verdict.findings
    backend = worker.backend or DEFAULT_BACKEND
    if not findings:
        return Triage("pass", None, None)
    first = primary(verdict.program, findings)
    memo: Judged = {}  # the one-op verdicts, shared by the findings' localisations
    loc = localise(verdict, worker, first, memo=memo) if first.kind in LOCALISED_KINDS else None
    faults = [_read(verdict, first, fault_of(verdict, first, loc, backend), bugs)]
    if not any(explains(b, faults[0]) for b in bugs):
        return Triage(*_sign(verdict, worker, first, loc), None, faults)
    table = verdict.program.by_id()

    def key(m: Mismatch) -> tuple[str, str | None, str | None]:
        # a gradient read's value is the gradient it reads: one finding, localised once
        read = table.get(m.statement or "")
        if m.kind == "value" and isinstance(read, Grad):
            return "grad", read.of, read.grads
        return m.kind, m.statement, m.backward

    seen = {key(first)}
    # the gradients (value, backward) a record explains: what is computed from reads of them
    # is checked on burn's read values (consequences.py)
    explained = _gradient(key(first))
    localised = 1
    # findings no record explains, each judged a consequence or news once every record-explained
    # gradient is known: a later backward's gradient computed from a read of x1's gradient
    # comes before x1's own finding in the spread order, yet is that finding's consequence
    pending: list[tuple[Mismatch, Fault]] = []

    def is_consequence(m: Mismatch) -> bool:  # the same numbers on both sides make it agree
        return consequence(verdict, m, explained, lambda p: judge(p, worker, memo))

    for m in _spread(verdict.program, first, findings):
        if key(m) in seen:
            continue
        seen.add(key(m))
        other = None
        if m.kind in LOCALISED_KINDS:
            if localised >= MAX_LOCALISED:  # too many to localise each: as the program shows it
                fault = shown_fault(verdict, m, backend)
            else:
                localised += 1
                other = localise(verdict, worker, m, same_kind=True, memo=memo)
                fault = fault_of(verdict, m, other, backend)
        else:
            fault = fault_of(verdict, m, None, backend)
        fault = _read(verdict, m, fault, bugs)
        if any(explains(b, fault) for b in bugs):
            faults.append(fault)
            explained |= _gradient(key(m))
        elif not is_consequence(m):
            pending.append((m, fault))
    news: dict[int, Fault] = {}  # id of a finding no record explains -> its fault
    for m, fault in pending:
        if is_consequence(m):
            continue
        if m.kind in LOCALISED_KINDS and localised >= MAX_LOCALISED:
            # beyond the localisation budget it was judged as the program shows it: localised
            # now, as the findings before it were, a record may explain the fault it is (the
            # step whose f32 momentum a path after it amplified, every op on the way right)
            other = localise(verdict, worker, m, same_kind=True, memo=memo)
            placed = fault_of(verdict, m, other, backend) if other is not None else None
            if placed is not None and any(explains(b, placed) for b in bugs):
                faults.append(placed)
                continue
        news[id(m)] = fault
    if news:
        # signed by the news that shows first in the program, as a verdict without a known bug
        # is (`primary`): a detach's wrong flags, not the backward through it that then runs
        m = primary(verdict.program, [m for m, _ in pending if id(m) in news])
        faults.append(news[id(m)])
        # localised as a first finding is (the one-op finding that shows first), to sign it as alone
        shown = localise(verdict, worker, m, memo=memo) if m.kind in LOCALISED_KINDS else None
        if shown is not None and any(explains(b, fault_of(verdict, m, shown, backend)) for b in bugs):
            # the one-op program's first finding is a known bug's (a float64 RmsNorm's value,
            # before the gradient that is news): the news is signed by its own kind's
            shown = localise(verdict, worker, m, same_kind=True, memo=memo)
        return Triage(*_sign(verdict, worker, m, shown), None, faults)
    return Triage(*_sign(verdict, worker, first, loc), known_bug_of(faults, bugs), faults)


def _read(verdict: Verdict, m: Mismatch, fault: Fault, bugs: tuple[KnownBug, ...]) -> Fault:
    """The fault with the modelled known bugs whose behaviour reproduces burn's result
    (reproduced.py), when no record explains it as localised."""
    if fault.kind != "grad" or any(explains(b, fault) for b in bugs):
        return fault
    return replace(fault, reproduced=reproduced(verdict, m))


def _gradient(key: tuple[str, str | None, str | None]) -> set[tuple[str, str]]:
    """The (value, backward) of a finding key that names a gradient, as a set (empty otherwise)."""
    kind, of, grads = key
    return {(of, grads)} if kind == "grad" and of is not None and grads is not None else set()


def _sign(verdict: Verdict, worker: BurnWorker, m: Mismatch,
          loc: Localisation | None) -> tuple[str, Localisation | None]:
    """The signature of the finding `m` and its localisation (`loc`: as localised, None for kinds
    not localised; a composite's flags finding: at the part deciding them, flags_parts.py)."""
    forward = forward_fault(verdict, m, loc)
    if forward is not None:
        return forward, loc
    if loc is not None:
        shown = loc.mismatch if loc.mismatch is not None else m
        return localised_signature(loc, shown.framework if shown.kind == "grad-presence" else None), loc
    # an op's lost tracking shows as wrong flags, a missing gradient or a backward that does not
    # fail where it should: signed, where one can be traced, as the op's missing gradient, so that
    # one fault makes one case (its known-bug matching stays on the finding itself)
    if (hang := hang_signature(verdict, worker, m)) is not None:  # by the op it never returns from
        return hang, None
    state = state_fault(verdict, m)
    tracked = localise_tracking(verdict, worker, m)
    if tracked is not None:
        return localised_signature(tracked, tracked.mismatch.framework if tracked.mismatch else None), None
    part = flags_in_parts(verdict, worker, m) if state is None else None
    if part is not None and part.mismatch is not None:  # signed as the part's own flags finding
        return signature_of_mismatch(part.mismatch, part.program), part
    return state if state is not None else signature_of_mismatch(m, verdict.program), None
