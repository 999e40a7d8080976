"""`difftest replay` and `difftest report`: the commands that run corpus cases (main.py
dispatches here). Their imports wait until the command runs, as main.py's do."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from difftest.cli.checks import bad_case_paths
from difftest.cli.common import make_console, make_worker
from difftest.exec.sibling_workers import backend_workers


def cmd_replay(args: argparse.Namespace) -> int:
    from difftest.findings.corpus import CorpusError, iter_case_files, judge, load_case
    from difftest.oracle.check import check

    given = [Path(p) for p in (args.paths or [args.corpus])]
    problem = bad_case_paths(given)
    if problem is not None:
        print(f"difftest replay: {problem}", file=sys.stderr)
        return 2
    files = iter_case_files(given)
    if not files:
        print(f"difftest replay: no corpus cases (*.json) in {', '.join(map(str, given))}", file=sys.stderr)
        return 2
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    worker = make_worker(args)
    workers = backend_workers(worker)
    width = max(len(str(f)) for f in files)
    console = make_console()

    def out(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    def replay_one(f: Path) -> str:
        """Replays case file `f` and prints its line; whether it passed, failed or was skipped."""
        try:
            case = load_case(f)
        except CorpusError as e:
            out(f"{f!s:<{width}}  {'?':<34}  CORRUPT: {e}")
            return "failed"
        on = workers.get(case.backend)  # a case found on another backend replays there
        if on is None:
            out(f"{f!s:<{width}}  {case.status:<34}  skipped: runs on {case.backend}, not compiled into "
                f"{worker.binary} (--backend {case.backend} builds one)")
            return "skipped"
        elsewhere = case.not_here()  # a PyTorch kernel of some CPUs: corpus/README.md#host
        if elsewhere is not None:
            out(f"{f!s:<{width}}  {case.status:<34}  skipped: {elsewhere}")
            return "skipped"
        verdict = check(case.program, on)
        outcome = judge(case, verdict)
        head = outcome.message.splitlines()[0]
        out(f"{f!s:<{width}}  {case.status:<34}  {'ok' if outcome.ok else 'FAIL'}: {head}")
        if args.verbose:
            from difftest.findings.table import table

            console.print(table(verdict))
        return "passed" if outcome.ok else "failed"

    out(f"{'case':<{width}}  {'status':<34}  outcome")
    # a live bar (rate, ETA) on a terminal; elsewhere the per-case lines are the progress
    bar = Progress(TextColumn("replay"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.speed} cases/s"),
                   TimeRemainingColumn(), console=console, transient=True, disable=not console.is_terminal)
    tally: Counter[str] = Counter()
    interrupted = False
    try:
        with bar:
            task = bar.add_task("replay", total=len(files))
            for f in files:
                bar.advance(task)
                tally[replay_one(f)] += 1
    except KeyboardInterrupt:  # Ctrl-C: the tally of the cases that ran
        interrupted = True
    finally:
        for w in workers.values():
            w.close()
    line = f"\n{tally['passed']} passed, {tally['failed']} failed" + (
        f", {tally['skipped']} skipped" if tally["skipped"] else "")
    if interrupted:
        print(f"{line}, interrupted after {tally.total()} of {len(files)} cases")
        return 130
    print(line)
    return 1 if tally["failed"] else 0


def cmd_report(args: argparse.Namespace) -> int:
    from difftest.findings.report import CaseReport, ReportInputError, build, collect, write

    paths = [Path(p) for p in (args.paths or ["corpus"])]
    try:
        collect(paths)  # bad input fails here, before the worker starts
    except ReportInputError as e:
        print(f"difftest report: {e}", file=sys.stderr)
        return 2
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    err = Console(stderr=True, markup=False, highlight=False)
    bar = Progress(TextColumn("report"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.speed} cases/s"),
                   TimeRemainingColumn(), console=err, transient=True, disable=not err.is_terminal)

    def on_case(done: int, total: int, item: CaseReport) -> None:
        bar.update(task, completed=done, total=total)
        if not err.is_terminal:  # elsewhere one line a case is the progress
            why = next((f" ({t.splitlines()[0]})" for t in (item.error, item.skipped) if t), "")
            print(f"[{done}/{total}] {item.path}: {item.state}{why}", file=sys.stderr, flush=True)

    worker = make_worker(args)
    try:
        with bar:
            task = bar.add_task("report", total=None)
            report = build(paths, worker, on_case)
    finally:
        worker.close()
    out = Path(args.output)
    try:
        write(report, out)
    except OSError as e:
        print(f"difftest report: cannot write {out}: {e}", file=sys.stderr)
        return 2
    states = Counter(item.state for item in report.cases)
    print(f"wrote {out}: {len(report.campaigns)} campaign summary(ies), {len(report.cases)} case(s): "
          f"{states['ok']} ok, {states['fail']} failed, {states['error']} cannot run, {states['skipped']} skipped",
          file=sys.stderr)
    if err.is_terminal:  # the per-case lines said why already elsewhere
        for item in report.cases:
            if item.state == "error" and item.error:
                print(f"cannot run: {item.error.splitlines()[0]}", file=sys.stderr)
    # as replay: the report is written either way, and the exit status tells a script or a CI
    # step that some case did not behave as recorded or could not be run at all
    return 1 if states["fail"] or states["error"] else 0
