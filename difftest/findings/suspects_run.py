"""Running findings and a passing sample on a coverage build for `difftest suspects`
(suspects.py): each program is checked against PyTorch as a campaign checks it, and the burn
lines its run executed are read from the worker.

The sample is the programs the catalog's reach is measured with (each op alone, and programs
rich in nn modules: coverage_run.reach_programs), which put every op's code into runs that pass
unless the op is broken, and a campaign's programs (the command's --programs of --seed), which
put the ops together as the findings do. A program of the sample that fails counts as failing: the fault
shows wherever it shows, whether or not a case was saved for that program."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from difftest.divergences.rules import Rule
from difftest.exec.backends import DEFAULT_BACKEND
from difftest.exec.burn_worker import BurnWorker
from difftest.exec.coverage_map import EdgeMap, edges_after, worker_marks
from difftest.findings.backends import verdict_blames_torch
from difftest.findings.corpus import FAILING, Case
from difftest.findings.coverage_run import reach_programs
from difftest.findings.suspects import Line, Run, Spectrum
from difftest.oracle.check import check
from difftest.program.ir import Program

OnRun = Callable[[int], None]


def line_table(m: EdgeMap) -> list[Line | None]:
    """Per edge of the binary: the burn source line it lies on, None outside burn."""
    crates = m.file_crates
    out: list[Line | None] = []
    for e in range(len(m)):
        f, ln = m.file[e], m.line[e]
        where = crates[f] if f >= 0 else None
        if where is None or ln <= 0:
            out.append(None)
            continue
        fn = m.functions[m.function[e]] if m.function[e] >= 0 else ""
        out.append(Line(where[0], where[1], ln, fn, m.files[f]))
    return out


@dataclass
class Runner:
    """Checks programs on a coverage worker and turns each into a Run."""

    worker: BurnWorker
    lines: list[Line | None]
    rules: Sequence[Rule]

    last: tuple[int, int] | None = None  # the worker's marks after the last run

    def run(self, label: str, program: Program, finding: str | None = None) -> Run:
        """The first program a worker process runs also runs the process's one-time
        initialisation (burn's device and config set-up), which would make its lines look like
        that program's alone: a new process runs the program once before it counts."""
        if worker_marks(self.worker) != self.last:
            self.worker.run(program)
        marks = worker_marks(self.worker)
        verdict = check(program, self.worker, rules=self.rules)
        table = self.lines
        executed = frozenset(ln for e in edges_after(self.worker, program, marks) if (ln := table[e]) is not None)
        self.last = worker_marks(self.worker)
        failed = bool(verdict.findings) and not verdict_blames_torch(verdict)
        return Run(label, failed, executed, finding)


def sample_programs(campaign: Iterable[tuple[str, Program]] = (), per_op: int = 4) -> list[tuple[str, Program]]:
    """The passing sample: `per_op` programs of each catalog op alone and the module-rich ones
    (as the catalog's reach), then `campaign`'s (labelled) programs."""
    return [(f"{op} #{k}", p) for op, ps in reach_programs(per_op).items() for k, p in enumerate(ps)] + list(campaign)


@dataclass
class Outcome:
    """What the runs gave: the spectrum (sample and findings together), the findings' runs, and
    the cases that could not be located, with why."""

    spectrum: Spectrum = field(default_factory=Spectrum)
    finding_runs: list[Run] = field(default_factory=list)
    # recorded failing ("bug", "new") but passing here: fixed on this build, or PyTorch's bug
    not_failing: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # case -> why it was not run
    sample_failing: int = 0


def skip_reason(case: Case) -> str | None:
    """Why a case is not run on the coverage build (a Flex build of this machine), or None."""
    if case.memory is not None:
        return "a memory case (no program to locate)"
    if case.backend != DEFAULT_BACKEND:
        return f"recorded on {case.backend}; the coverage build runs {DEFAULT_BACKEND} only"
    return case.not_here()


def run_all(runner: Runner, cases: Iterable[Case], sample: Iterable[tuple[str, Program]],
            on_run: OnRun | None = None) -> Outcome:
    """The sample first, then the cases: code a process runs once (a lazy initialisation, the
    first use of an allocator's size class) then lands in the sample's first runs, not in
    whichever finding happened to run first."""
    out = Outcome()
    n = 0
    for label, program in sample:
        r = runner.run(label, program)
        out.spectrum.add(r)
        out.sample_failing += r.failed
        n += 1
        if on_run is not None:
            on_run(n)
    for case in cases:
        why = skip_reason(case)
        if why is not None:
            out.skipped[case.name] = why
            continue
        r = runner.run(case.name, case.program, case.name)
        out.spectrum.add(r)
        if r.failed:
            out.finding_runs.append(r)
        elif case.status in FAILING:
            out.not_failing.append(case.name)
        n += 1
        if on_run is not None:
            on_run(n)
    return out
