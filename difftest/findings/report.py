"""`difftest report`: one self-contained HTML file about corpora, cases and campaigns.

Inputs are corpus directories, case files and campaign summaries (`difftest fuzz --json`,
`difftest merge --json`). Every case is replayed now (the corpus's cases, and the case each
campaign finding was saved as or matched), so its section shows what this difftest, this
interpreter and this PyTorch give: the verdict and replay outcome, the picture (picture.py), the
per-statement table (table.py), the evidence of every mismatch (issue.py), both reproducers and
the versions. A case that cannot be run gets a section with the error; one recorded on a
backend the interpreter was not built with, or needing CPU flags this machine lacks, is skipped,
with the reason, as `difftest replay` skips it; the report is written all the same. The HTML itself is report_html.py's.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from difftest.divergences.rules import rules_for
from difftest.exec.backends import DEFAULT_BACKEND
from difftest.exec.burn_worker import BurnWorker
from difftest.exec.sibling_workers import backend_workers
from difftest.findings.corpus import Case, CorpusError, ReplayOutcome, iter_case_files, judge, judge_memory, load_case
from difftest.findings.coverage import Coverage
from difftest.findings.picture import DotMissing, dot, svg
from difftest.findings.report_coverage import is_coverage, is_suspects, load_coverages, load_suspects
from difftest.findings.report_html import page
from difftest.findings.summary import SUMMARY_FORMAT, Summary, finding_case_path
from difftest.memory.table import format_table
from difftest.ops.validate import check_program
from difftest.oracle.check import check
from difftest.oracle.compare import Verdict, compare
from difftest.oracle.model import predict
from difftest.oracle.numerics import arbitrate
from difftest.oracle.pytorch import run as run_torch
from difftest.program.files import JsonFileError, read_json
from difftest.program.observation import Observation
from difftest.versions import difftest_version, torch_version


class ReportInputError(ValueError):
    """A report input that is neither a corpus directory, a case file nor a campaign summary."""


@dataclass
class Campaign:
    """A campaign summary given as input."""

    path: Path
    summary: Summary


@dataclass
class CaseReport:
    """One case's section: what was loaded and what running it gave (or why it could not run)."""

    path: Path
    group: str  # the directory it is listed under in the corpus summary
    origin: str  # "corpus", or the campaign finding it stands for
    case: Case | None = None
    verdict: Verdict | None = None
    outcome: ReplayOutcome | None = None
    error: str | None = None  # cannot be run: corrupt file, missing file, worker failure
    skipped: str | None = None  # not run here: another backend, CPU flags this machine lacks
    memory_table: str | None = None  # a memory case's measured table
    picture: str | None = None  # inline SVG
    picture_note: str | None = None  # why there is no picture

    @property
    def name(self) -> str:
        return self.case.name if self.case is not None and self.case.name else self.path.stem

    @property
    def state(self) -> str:
        """ok | fail | error | skipped."""
        if self.skipped is not None:
            return "skipped"
        if self.error is not None or self.outcome is None:
            return "error"
        return "ok" if self.outcome.ok else "fail"


@dataclass
class Report:
    campaigns: list[Campaign] = field(default_factory=list)
    cases: list[CaseReport] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)  # what runs now (difftest, burn, torch)
    inputs: list[str] = field(default_factory=list)
    coverages: list[tuple[Path, Coverage]] = field(default_factory=list)  # `difftest coverage --json` files
    suspects: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)  # `difftest suspects --json` files


# ---------------------------------------------------------------------- inputs

def _is_summary(path: Path) -> bool:
    try:
        doc = read_json(path, strict=False)
    except JsonFileError:
        return False  # a corrupt file is reported as a case that cannot be run
    return isinstance(doc, dict) and doc.get("format") == SUMMARY_FORMAT


def collect(paths: list[Path]) -> tuple[list[Campaign], list[CaseReport]]:
    """Campaigns and the cases to run, in the order given (each case file once)."""
    campaigns: list[Campaign] = []
    cases: list[CaseReport] = []
    seen: set[Path] = set()

    def add(path: Path, group: str, origin: str) -> None:
        key = path.resolve()
        if key in seen:
            return
        seen.add(key)
        cases.append(CaseReport(path, group, origin))

    for path in paths:
        if not path.exists():
            raise ReportInputError(f"{path}: no such file or directory")
        if path.is_dir():
            files = iter_case_files([path])
            if not files:
                raise ReportInputError(f"{path}: a directory without case files (*.json)")
            for f in files:
                add(f, f.parent.as_posix(), "corpus")
        elif path.suffix != ".json":
            raise ReportInputError(f"{path}: expected a corpus directory, a case file (.json) or a campaign summary "
                                   "(difftest fuzz --json)")
        elif is_coverage(path) or is_suspects(path):  # a coverage section (build reads it), no cases
            try:
                load_coverages([path])
                load_suspects([path])
            except ValueError as e:
                raise ReportInputError(str(e)) from e
        elif _is_summary(path):
            try:
                summary = Summary.from_dict(read_json(path, strict=False))
            except (ValueError, KeyError, TypeError) as e:
                raise ReportInputError(f"{path}: a campaign summary that cannot be read: {e}") from e
            campaigns.append(Campaign(path, summary))
            for finding in summary.ordered_findings():
                if finding.path is not None:
                    case_path = finding_case_path(finding.path, path)
                    add(case_path, case_path.parent.as_posix(), f"finding {finding.signature} of {path}")
        else:
            add(path, path.parent.as_posix(), "case file")
    return campaigns, cases


# ---------------------------------------------------------------------- running

def _picture(item: CaseReport) -> None:

    assert item.verdict is not None
    try:
        text = svg(dot(item.verdict))
    except DotMissing as e:
        item.picture_note = str(e)
        return
    except Exception as e:  # dot failed or timed out: the report is written without the picture
        item.picture_note = f"the picture could not be drawn: {e}"
        return
    start = text.find("<svg")
    item.picture = text[start:] if start >= 0 else None
    if item.picture is None:
        item.picture_note = "Graphviz's output holds no <svg> element"


def recorded_verdict(case: Case) -> Verdict | None:
    """The burn observation recorded when `case` was found, judged against PyTorch now (what a
    report can show of a case it cannot replay), or None when the case recorded none."""
    observations = case.record.get("observations")
    burn = observations.get("burn") if isinstance(observations, dict) else None
    if case.memory is not None or not isinstance(burn, dict):
        return None
    versions = case.record.get("versions")
    version = versions.get("burn") if isinstance(versions, dict) else None
    prediction = predict(case.program, rules_for(version if isinstance(version, str) else ""))
    torch_obs = run_torch(case.program)
    return compare(case.program, check_program(case.program), prediction, torch_obs,
                   Observation.from_dict(burn, "burn"), arbiter=arbitrate)


def _show_recorded(item: CaseReport) -> None:
    assert item.case is not None
    try:
        item.verdict = recorded_verdict(item.case)
    except Exception as e:  # an old or damaged record: the section says the case was skipped all the same
        item.picture_note = f"the recorded observation cannot be shown: {e}"
        return
    if item.verdict is not None:
        _picture(item)


def run_case(item: CaseReport, workers: Mapping[str, BurnWorker] | BurnWorker) -> None:
    """Loads and replays one case (fills `item`) on the worker of its backend; every failure
    becomes `item.error`, a case this machine or interpreter cannot replay `item.skipped`."""

    if not item.path.exists():
        item.error = f"{item.path}: the case file does not exist (moved or deleted since the campaign?)"
        return
    try:
        item.case = load_case(item.path)
    except CorpusError as e:
        item.error = str(e)
        return
    case = item.case
    if isinstance(workers, BurnWorker):
        workers = {workers.backend or DEFAULT_BACKEND: workers}
    worker = workers.get(case.backend)
    if worker is None:
        binary = next(iter(workers.values())).binary
        item.skipped = (f"recorded on the {case.backend} backend, which {binary} was not built with; "
                        f"`--backend {case.backend}` builds one")
        _show_recorded(item)
        return
    item.skipped = case.not_here()
    if item.skipped is not None:
        _show_recorded(item)
        return
    try:
        item.verdict = check(case.program, worker)
        if case.memory is not None:

            rows = case.memory.run(full=False)
            size = case.memory.size(False)
            item.memory_table = format_table(rows, size.n, size.iters)
            item.outcome = judge_memory(case, rows, full=False)
        else:
            item.outcome = judge(case, item.verdict)
    except Exception:
        item.error = f"{item.path}: running the case failed:\n{traceback.format_exc()}"
        return
    _picture(item)


def _versions(worker: BurnWorker) -> dict[str, Any]:

    out: dict[str, Any] = {"difftest": difftest_version(), "torch": torch_version()}
    try:
        burn = worker.version()
    except Exception as e:  # the cases say it too, each with its error
        out["burn"] = f"unknown (difftest-burn did not start: {e})"
        return out
    out["burn"] = burn.get("burn")
    out["difftest_burn"] = burn.get("difftest_burn")
    if burn.get("fault"):
        out["fault"] = burn.get("fault")
    return out


def build(paths: list[Path], worker: BurnWorker,
          on_case: Callable[[int, int, CaseReport], None] | None = None) -> Report:
    """Collects the inputs and replays every case with `worker`; `on_case(done, total, item)`
    after each (progress)."""
    campaigns, cases = collect(paths)
    report = Report(campaigns, cases, _versions(worker), [p.as_posix() for p in paths], load_coverages(paths),
                    load_suspects(paths))
    try:
        workers = backend_workers(worker)
    except RuntimeError:  # it does not start: each case says so, with its error
        workers = {worker.backend or DEFAULT_BACKEND: worker}
    try:
        for k, item in enumerate(cases, 1):
            run_case(item, workers)
            if on_case is not None:
                on_case(k, len(cases), item)
    finally:
        for w in workers.values():
            if w is not worker:  # the caller's own is the caller's to close
                w.close()
    return report


def write(report: Report, out: Path) -> None:

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page(report), encoding="utf-8")
