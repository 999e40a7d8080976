"""Root probes in campaigns (difftest/oracle/probes.py): a program that passed is probed at
every other root its backwards could have had.

burn runs every probe of a program in one request (the worker's `probe`, with each probe's
outcome and the gradients of its re-rooted backward). A probe is a *suspect* when its outcome
differs from the model's prediction, or when it succeeded and its gradients fail the screen
against PyTorch's (PyTorch runs the statements before each backward once, then the backward of
each of its probes' roots; in a campaign, the check's own run of the program does, and burn
runs the batch while PyTorch runs and the check compares: `_ProbesAlongside`; `compare.screen_grads`: the same
entries and presence, dtypes, element-wise closeness; then, for gradients that differ, only the float64
runs whose verdict arbitration reaches first, `screen`). Every suspect gets a full check of its
program (PyTorch, the model, arbitration), whose verdict decides, so probes raise no alarm a
normal check would not. Every failing probe is reported; the first is the program's
finding. A suspect whose full check passes although burn's separate run differs from its
batched one (outcome or gradients) is *batch-only*: state that leaks between the runs of one
worker request. A crash or hang of the batch makes every probe a suspect; when none of them
fails on its own, the batch's error is reported as batch-only too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from difftest.divergences.rules import Rule, rules_for
from difftest.exec.backends import DEFAULT_BACKEND
from difftest.exec.burn_worker import BurnWorker, WorkerError
from difftest.exec.pending import PendingProbes
from difftest.exec.torch_exec import BeforeBackward
from difftest.exec.torch_probes import ProbeResult, probes_before_backwards, torch_probe_grads
from difftest.ops import tolerance as tol
from difftest.ops.value_dtypes import dtype_of, value_dtypes
from difftest.oracle.burn_devices import batch_norm_inference_applies, stateful_forwards
from difftest.oracle.check import check, check_on
from difftest.oracle.compare import Mismatch, Verdict, screen_grads
from difftest.oracle.model import BackwardHook, FrameworkPrediction, Prediction, predict
from difftest.oracle.noise import MagnitudeHooks
from difftest.oracle.numerics import agree_without_noise
from difftest.oracle.probe_predictions import BackwardStates, probe_prediction
from difftest.oracle.probes import RootProbe, probe_collector, root_probes
from difftest.program.ir import Backward, Program
from difftest.program.observation import BackwardObs, ErrorObs, Observation


@dataclass(frozen=True)
class ProbeFailure:
    probe: RootProbe
    verdict: Verdict  # the failing verdict of the probe's program


@dataclass
class ProbeRun:
    probes: int = 0  # probes run on burn
    screened: int = 0  # of them, gradients screened against PyTorch's (burn's backward succeeded as predicted)
    checked: int = 0  # of them, checked in full (outcome differed from the prediction, or gradients failed the screen)
    verdict: Verdict | None = None  # the first failing verdict of a probe
    probe: RootProbe | None = None  # its probe
    failures: list[ProbeFailure] = field(default_factory=list)  # every failing probe, in probe order
    batch_only: list[RootProbe] = field(default_factory=list)  # differed in the batch only (see the module doc)
    batch_error: ErrorObs | None = None  # the batch's crash or hang when no probe fails on its own

    @property
    def batch_only_count(self) -> int:
        """Batch-only findings: the batch-only probes, and a batch crash no probe explains."""
        return len(self.batch_only) + (self.batch_error is not None)

    def counts(self) -> tuple[int, int, int]:
        """(probes run, checked in full, batch-only), as a campaign's `result` message carries them."""
        return self.probes, self.checked, self.batch_only_count


def disagrees(probe: RootProbe, outcome: ErrorObs | None) -> bool:
    """Whether burn's outcome of `probe` differs from the model's prediction (a failure at the
    probe's backward, of the predicted kind and message where the prediction names them, or none)."""
    if outcome is None:
        return probe.fails
    if not probe.fails or outcome.index != probe.index:
        return True
    expected = probe.failure
    return expected is not None and not expected.matches(outcome.kind, outcome.message)


Ahead = dict[int, tuple[list[str], list[ProbeResult]]]  # backward index -> (roots, PyTorch's result of each)


def torch_ahead(program: Program, probes: Sequence[RootProbe]) -> Ahead:
    """PyTorch's results of the probes the model predicts succeed on burn, per backward
    (torch_probe_grads), run while burn works on the batch: they are the probes `screen` will
    be given when burn's outcomes all agree with the model (the usual case)."""
    out: Ahead = {}
    for index, rs in _ahead_roots(probes).items():
        prefix = program.prefix(index)
        bw = program.statements[index]
        assert isinstance(bw, Backward), (index, bw)
        inference = batch_norm_inference_applies(prefix)
        out[index] = (rs, torch_probe_grads(prefix, bw, rs, burn_inference=inference))
    return out


def _ahead_roots(probes: Sequence[RootProbe]) -> dict[int, list[str]]:
    """The roots of the probes the model predicts succeed on burn, per backward index."""
    roots: dict[int, list[str]] = {}
    for p in probes:
        if not p.fails:
            roots.setdefault(p.index, []).append(p.root)
    return roots


def screen(program: Program, items: Sequence[tuple[RootProbe, BackwardObs]], nondet: set[str] | frozenset[str],
           rules: Sequence[Rule], ahead: Ahead | None = None, recorded: BackwardStates | None = None,
           main: Prediction | None = None) -> list[bool]:
    """Whether burn's gradients of each probe (its backward succeeded as predicted) pass the
    screen against PyTorch's for the same probe (`compare.screen_grads`). PyTorch runs the
    statements before each backward once for all of its probes (difftest/exec/torch_probes.py).
    A difference between the frameworks' outcomes or gradient presence is then judged against
    the model's prediction for the probe's program, as the full check would judge it (divergence
    rules make some of them expected). A numeric one passes where the full check's arbitration
    could only pass it: at each element burn no farther from PyTorch's float64 run than PyTorch
    is (`no_farther`), or every element within its budget at zero noise, with the terms of the
    probe's float64 magnitude run (`zero_noise_agreement`, what arbitration settles before any
    noise run); anything else is left to the full check.
    `ahead` (torch_ahead): PyTorch's results computed beforehand, used for a backward whose
    roots to screen are exactly those (the same run as here); any other is run here.
    `recorded` and `main`: the model's states before each backward in its run of `program`,
    which gave `main`, from which a probe's prediction is made (probe_predictions.py)."""
    by_index: dict[int, list[int]] = {}
    for k, (p, _) in enumerate(items):
        by_index.setdefault(p.index, []).append(k)
    passed = [False] * len(items)
    for index, ks in by_index.items():
        prefix = program.prefix(index)
        bw = program.statements[index]
        assert isinstance(bw, Backward), (index, bw)
        roots = [items[k][0].root for k in ks]
        inference = batch_norm_inference_applies(prefix)
        done = (ahead or {}).get(index)
        results = done[1] if done is not None and done[0] == roots else torch_probe_grads(
            prefix, bw, roots, burn_inference=inference)
        reference: list[ProbeResult] | None = None
        undecided: dict[int, tuple[int, list[Mismatch]]] = {}  # item -> (its root's position, numeric mismatches)
        for j, (k, torch_result) in enumerate(zip(ks, results, strict=True)):
            p, burn_bw = items[k]
            probe_bw = Backward(bw.id, p.root)
            mismatches = screen_grads(prefix, probe_bw, torch_result, burn_bw, nondet)
            if mismatches and all(m.kind in ("outcome", "grad-presence", "grad") for m in mismatches):
                prediction = (probe_prediction(program, p, recorded, main, rules) if main is not None
                              else predict(p.program(program), rules))
                mismatches = screen_grads(prefix, probe_bw, torch_result, burn_bw, nondet, prediction)
            if mismatches and all(m.kind == "grad" for m in mismatches) and isinstance(torch_result, BackwardObs):
                if reference is None:  # once per backward: PyTorch in float64, every root of it
                    reference = torch_probe_grads(prefix, bw, roots, "float64", burn_inference=inference)
                ref = reference[j]
                mismatches = [m for m in mismatches
                              if not (isinstance(ref, BackwardObs) and no_farther(m, torch_result, burn_bw, ref))]
                if mismatches and isinstance(ref, BackwardObs):
                    undecided[k] = (j, mismatches)
                    continue
            passed[k] = not mismatches
        if undecided:
            # what the full check's arbitration settles first, from the same float64 runs: the
            # magnitude run of each undecided probe's program, one forward for all of them
            magnitudes = torch_probe_grads(prefix, bw, [items[k][0].root for k in undecided], "float64",
                                           burn_inference=inference, hooks=MagnitudeHooks())
            assert reference is not None
            for (k, (j, mismatches)), mags in zip(undecided.items(), magnitudes, strict=True):
                t, ref = results[j], reference[j]
                assert isinstance(t, BackwardObs) and isinstance(ref, BackwardObs), (t, ref)
                passed[k] = isinstance(mags, BackwardObs) and all(
                    zero_noise_agreement(m, t, items[k][1], ref, mags, prefix) for m in mismatches)
    return passed


def no_farther(m: Mismatch, torch_bw: BackwardObs, burn_bw: BackwardObs, ref: BackwardObs) -> bool:
    """Whether, at every element of the gradient mismatch `m`, burn is no farther from the
    float64 result than PyTorch's own run is (or within the screen of it). PyTorch's run is
    within its noise budget unless PyTorch is wrong, so such an element would pass the full
    check's arbitration too; anything else gets the full check."""
    ident = m.statement or ""
    t, b, r = torch_bw.grads.get(ident), burn_bw.grads.get(ident), ref.grads.get(ident)
    if t is None or b is None or r is None or not len(t.data) == len(b.data) == len(r.data):
        return False
    for e in m.elements:
        te, be, re_ = t.data[e], b.data[e], r.data[e]
        if not all(map(math.isfinite, (te, be, re_))):
            return False
        if abs(be - re_) > abs(te - re_) and not tol.screen(re_, be, b.dtype):
            return False
    return True


def zero_noise_agreement(m: Mismatch, torch_bw: BackwardObs, burn_bw: BackwardObs, ref: BackwardObs,
                         magnitudes: BackwardObs, prefix: Program) -> bool:
    """Whether every element of the gradient mismatch `m` is agreement before any noise is
    measured, as the full check's arbitration would find it first (numerics.agree_without_noise:
    both results within the budget of a zero deviation, with the terms of the probe's magnitude
    run): the full check could only pass it."""
    ident = m.statement or ""
    t, b, r = torch_bw.grads.get(ident), burn_bw.grads.get(ident), ref.grads.get(ident)
    mt = magnitudes.grads.get(ident)
    if t is None or b is None or r is None or mt is None or not len(t.data) == len(b.data) == len(r.data) == len(
            mt.data):
        return False
    elements = m.elements or ((m.element,) if m.element is not None else ())
    dtype = dtype_of(prefix, ident)
    return bool(elements) and agree_without_noise(t, b, r, mt, elements, dtype)


def same_burn_result(outcome: ErrorObs | None, bw: BackwardObs | None, separate: Observation, root: str,
                     nondet: set[str] | frozenset[str], program: Program) -> bool:
    """Whether burn's batched result of a probe (`outcome`, `bw`) is the one its separate run
    (`separate`, from the full check) gave: the same outcome and, after a backward that succeeded,
    the same gradient entries with values within the screen (a backward rooted at a random value,
    `nondet`, differs between runs by design: its values are not compared)."""
    err = separate.error
    if (outcome is None) != (err is None):
        return False
    if outcome is not None and err is not None:
        return (outcome.index, outcome.kind) == (err.index, err.kind)
    mine = separate.backwards[-1] if separate.backwards else None
    if bw is None or mine is None:
        return bw is None and mine is None
    if {k for k, g in bw.grads.items() if g is not None} != {k for k, g in mine.grads.items() if g is not None}:
        return False
    if root in nondet:
        return True
    dtypes = value_dtypes(program)
    for ident, g in bw.grads.items():
        h = mine.grads[ident]
        if g is None or h is None:
            continue
        dtype = dtypes.get(ident, program.dtype)
        if g.shape != h.shape or not all(tol.screen(x, y, dtype) for x, y in zip(g.data, h.data, strict=True)):
            return False
    return True


def run_probes(program: Program, worker: BurnWorker, *, rules: Sequence[Rule] | None = None,
               prediction: Prediction | None = None, values: bool = True,
               probes: list[RootProbe] | None = None, batch: PendingProbes | None = None,
               ahead: Ahead | None = None, recorded: BackwardStates | None = None) -> ProbeRun:
    """The root probes of `program` (which passed its own check, the model's `prediction`) on
    `worker`'s burn. `values=False`: outcomes only, no gradient screen (about half the cost).
    What the check computed alongside (check_with_probes), when it did: `probes`, its root probes
    as `root_probes` gives them; `batch`, their burn request, sent; `ahead`, PyTorch's results
    as torch_ahead gives them; `recorded`, the model's states before each backward of its run
    of the program that gave `prediction`."""
    if rules is None:
        rules = rules_for(worker.burn_version())
    if probes is None:
        probes = root_probes(program, rules)
    run = ProbeRun(probes=len(probes))
    if not probes:
        return run
    pending = batch if batch is not None else worker.submit_probe_grads(program, [(p.index, p.root) for p in probes])
    if ahead is None:
        ahead = torch_ahead(program, probes) if values else {}  # PyTorch's side while burn runs the batch
    answer = pending.result()
    if isinstance(answer, Observation) and answer.error is not None and answer.error.kind == "invalid-request":
        raise WorkerError(f"difftest-burn refused the root probes of a program: {answer.error.message} "
                          "(a build without the `probe` request or its gradients? rebuild it, or run without "
                          "probes: difftest fuzz --no-probes)")
    batched: dict[int, tuple[ErrorObs | None, BackwardObs | None]] = {}
    if isinstance(answer, Observation):  # the batch crashed or hung: every probe is a suspect
        suspects: list[RootProbe] = probes
    else:
        suspects = []
        to_screen: list[tuple[RootProbe, BackwardObs]] = []
        for k, (p, (outcome, bw)) in enumerate(zip(probes, answer, strict=True)):
            batched[k] = (outcome, bw)
            if disagrees(p, outcome) or (outcome is None and bw is None):
                suspects.append(p)
            elif outcome is None and bw is not None:
                to_screen.append((p, bw))
        if to_screen and values:
            main = prediction or predict(program, rules)
            run.screened = len(to_screen)
            passed = screen(program, to_screen, main.nondet, rules, ahead,
                            recorded if prediction is not None else None, main)
            suspects += [p for (p, _), ok in zip(to_screen, passed, strict=True) if not ok]
            suspects.sort(key=probes.index)
    position = {id(p): k for k, p in enumerate(probes)}
    for p in suspects:
        run.checked += 1
        # the probe's prediction from the states the check's model run recorded (equal to predict's)
        made = (probe_prediction(program, p, recorded, prediction, rules)
                if prediction is not None and recorded is not None else None)
        verdict = check(p.program(program), worker, rules=rules, prediction=made)
        if not verdict.ok:
            run.failures.append(ProbeFailure(p, verdict))
            continue
        k = position[id(p)]
        if k in batched and not same_burn_result(*batched[k], verdict.burn, p.root, verdict.prediction.nondet,
                                                 program):
            run.batch_only.append(p)
    if run.failures:
        run.verdict, run.probe = run.failures[0].verdict, run.failures[0].probe
    elif isinstance(answer, Observation):
        run.batch_error = answer.error
    return run


def check_with_probes(program: Program, worker: BurnWorker, *, probes: bool = True,
                      rules: Sequence[Rule] | None = None, values: bool = True) -> tuple[Verdict, ProbeRun]:
    """The program's verdict, or, when it passed, the first failing verdict of its root probes
    (`ProbeRun.probe` says which; `ProbeRun.failures` lists them all); with the probe counts.
    `values`: screen the gradients of the probes that succeed too (run_probes)."""
    backend = worker.backend or DEFAULT_BACKEND
    return check_with_probes_on(program, {backend: worker}, probes=probes, rules=rules, values=values)[backend]


def check_with_probes_on(program: Program, workers: Mapping[str, BurnWorker], *, probes: bool = True,
                         rules: Sequence[Rule] | None = None,
                         values: bool = True) -> dict[str, tuple[Verdict, ProbeRun]]:
    """`check_with_probes` on each worker (by backend name; one binary): the program's check is
    check.check_on's (the model and PyTorch run once, the probes' PyTorch side with them), and
    each backend's probes run on its own worker when the program passed there."""
    if rules is None:
        rules = rules_for(next(iter(workers.values())).burn_version())
    along = _ProbesAlongside(program, workers, rules, values) if probes else None
    verdicts = check_on(program, workers, rules=rules, alongside=along)
    out: dict[str, tuple[Verdict, ProbeRun]] = {}
    ahead: Ahead | None = None
    for b, verdict in verdicts.items():
        batch = along.batches.get(b) if along is not None else None
        if along is None or not verdict.ok:
            if batch is not None:
                batch.discard()
            out[b] = (verdict, ProbeRun())
            continue
        if ahead is None:  # PyTorch's side of the probes, once for every backend
            ahead = along.ahead(verdict.torch)
            if ahead is None and values:
                ahead = torch_ahead(program, along.found)
        run = run_probes(program, workers[b], rules=rules, prediction=verdict.prediction, values=values,
                         probes=along.found, batch=batch, ahead=ahead, recorded=along.recorded)
        out[b] = ((run.verdict if run.verdict is not None else verdict), run)
    return out


@dataclass
class _ProbesAlongside:
    """The root probes' share of a program's check (check.Alongside), so that a campaign runs
    neither the model nor PyTorch again for them, and burn runs the probe batch while PyTorch
    and the comparison run here: the model's burn run collects the probes
    (probes.probe_collector); the batch is sent as soon as the model has run, queued behind the
    program's run in each worker (a batch whose worker the program's run crashed or hung is
    sent again if it is wanted: exec/pending.py; it is not, the program having failed);
    PyTorch's run of the program runs, before each backward, the backwards of the probes the
    model predicts succeed there (torch_probes.probes_before_backwards: torch_ahead's results,
    from the same statements). A program with a batch_norm forward leaves PyTorch's probes to torch_ahead: which
    forwards follow burn's inference path is the model's prediction for each prefix. The model's
    state before each backward is recorded too, for the predictions the screen needs
    (probe_predictions.py)."""

    program: Program
    workers: Mapping[str, BurnWorker]  # by backend: each sends its batch when it has answered
    rules: Sequence[Rule]
    values: bool
    found: list[RootProbe] = field(default_factory=list)
    wanted: dict[int, list[str]] | None = None  # backward index -> roots PyTorch's run serves
    served: dict[int, list[ProbeResult]] = field(default_factory=dict)
    batches: dict[str, PendingProbes] = field(default_factory=dict)  # by backend
    recorded: BackwardStates = field(default_factory=BackwardStates)  # for the probes' predictions

    def model_hooks(self) -> tuple[BackwardHook | None, BackwardHook | None]:
        collect, record = probe_collector(self.program, self.rules, self.found), self.recorded.hook("burn")

        def at_burn(i: int, st: Backward, pred: FrameworkPrediction) -> None:
            collect(i, st, pred)
            record(i, st, pred)

        return at_burn, self.recorded.hook("torch")

    def torch_backward_hook(self) -> BeforeBackward | None:
        if not self.values or stateful_forwards(self.program):
            return None
        self.wanted = _ahead_roots(self.found)
        return probes_before_backwards(self.program, dict(self.wanted), self.served) if self.wanted else None

    def predicted(self) -> None:
        if self.found:
            for backend, worker in self.workers.items():
                self.batches[backend] = worker.submit_probe_grads(self.program, [(p.index, p.root) for p in self.found])

    def ahead(self, torch: Observation) -> Ahead | None:
        """torch_ahead's results from the check's PyTorch run (None: it did not serve them). A
        backward the run did not reach failed before it: that failure is each of its probes'
        result, as it is in a run of the prefix."""
        if self.wanted is None:
            return None
        out: Ahead = {}
        for index, roots in self.wanted.items():
            results = self.served.get(index)
            if results is None and torch.error is not None and torch.error.index is not None \
                    and torch.error.index < index:
                results = [torch.error for _ in roots]
            if results is not None:
                out[index] = (roots, results)
        return out
