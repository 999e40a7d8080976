"""`difftest versions`: corpus cases × burn versions, each cell judged against the knowledge
declared for that version (difftest/findings/across.py).

Each version's binary is the default build when it reports that version, else a build of the
one interpreter source against it (difftest/exec/burn_builds.py, cached). Memory cases measure
their table with fresh processes of `$DIFFTEST_BURN`, which is set to the version's binary
while its column runs.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from difftest.divergences.knowledge import parse_version
from difftest.exec.burn_builds import BuildError, BurnSpec, build_with_status
from difftest.exec.burn_worker import BurnWorker, WorkerError, find_binary
from difftest.exec.libtorch import worker_env
from difftest.exec.sibling_workers import backend_workers
from difftest.findings.across import Cell, judge_on
from difftest.findings.corpus import Case, CorpusError, load_case
from difftest.program.files import read_json, write_atomic
from difftest.program.jsonio import dumps

_REPORTED = re.compile(r"\(burn ([^,)\s]+)")


def binary_burn_version(binary: str) -> str:
    """The burn version a difftest-burn binary reports (`--version`)."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60, check=True,
                             env=worker_env(binary)).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise WorkerError(f"{binary} --version: {e}") from e
    m = _REPORTED.search(out)
    if m is None:
        raise WorkerError(f"{binary} --version names no burn version: {out.strip()!r}")
    return m.group(1)


@dataclass
class Column:
    spec: BurnSpec
    binary: str | None = None
    burn: str | None = None  # the version the binary reports
    source: str = ""  # "default build" / "built in 212s" / "cached"
    error: str | None = None  # the build failed

    @property
    def label(self) -> str:
        if self.spec.path is not None:
            return f"path ({self.burn or '?'})"
        if self.spec.patch is not None:
            return f"{self.spec.version}+{self.spec.patch.stem}"
        return str(self.spec.version)

    def to_dict(self) -> dict[str, Any]:
        return {"spec": str(self.spec), "burn": self.burn, "binary": self.binary, "source": self.source,
                "error": self.error}


@dataclass
class Row:
    path: Path
    case: Case | None
    error: str | None = None  # a corrupt case
    cells: dict[str, Cell] = field(default_factory=dict)  # column label -> cell

    @property
    def status(self) -> str:
        return self.case.status if self.case is not None else "?"


@contextmanager
def _binary_env(binary: str) -> Iterator[None]:
    before = os.environ.get("DIFFTEST_BURN")
    os.environ["DIFFTEST_BURN"] = binary
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("DIFFTEST_BURN", None)
        else:
            os.environ["DIFFTEST_BURN"] = before


def resolve_column(spec: BurnSpec, default_binary: str | None, default_version: str | None, console: Any) -> Column:
    """Finds or builds the binary of one version (the default build when it is that version)."""
    col = Column(spec)
    if spec.is_release and spec.version == default_version and default_binary is not None:
        col.binary, col.burn, col.source = default_binary, default_version, "default build"
        return col
    try:
        built = build_with_status(spec, console)
    except BuildError as e:
        col.error = str(e)
        return col
    col.binary = str(built.binary)
    col.burn = binary_burn_version(col.binary)
    col.source = f"{built.directory} ({built.seconds:.0f}s)"
    return col


def load_rows(files: list[Path]) -> list[Row]:
    rows = []
    for f in files:
        try:
            rows.append(Row(f, load_case(f)))
        except CorpusError as e:
            rows.append(Row(f, None, str(e)))
    return rows


def run_column(col: Column, rows: list[Row], *, timeout: float, inflight: Path, console: Any) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    assert col.binary is not None and col.burn is not None
    bar = Progress(TextColumn(f"burn {col.label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, transient=True, disable=not console.is_terminal)
    # a worker on each backend the binary has, started when a case needs it
    workers = backend_workers(BurnWorker(col.binary, timeout=timeout, inflight_dir=inflight))
    try:
        with _binary_env(col.binary), bar:
            task = bar.add_task("cases", total=len(rows))
            for row in rows:
                bar.advance(task)
                if row.case is None:
                    continue
                why = not_run_here(row.case, tuple(workers))
                if why is not None:
                    row.cells[col.label] = Cell("not run", True, "not run", why)
                    continue
                patch = col.spec.patch.stem if col.spec.patch is not None else None
                row.cells[col.label] = judge_on(row.case, workers[row.case.backend], col.burn, patch=patch)
    finally:
        for w in workers.values():
            w.close()


def not_run_here(case: Case, built_with: tuple[str, ...]) -> str | None:
    """Why `case` is not replayed by a build with the backends `built_with`, or None: a case is
    judged on the backend it was recorded on (a Wgpu bug replayed on Flex would read as fixed),
    and only on a machine it reproduces on."""
    if case.backend not in built_with:
        return (f"a {case.backend} case, and this build has {', '.join(built_with)} only "
                f"(`difftest versions --backend {case.backend}` runs it; docs/backends.md)")
    return case.not_here()


def build_matrix(specs: list[BurnSpec], files: list[Path], *, timeout: float, console: Any
                 ) -> tuple[list[Column], list[Row]]:
    try:
        default_binary: str | None = find_binary()
        default_version: str | None = binary_burn_version(default_binary) if default_binary else None
    except WorkerError:
        default_binary = default_version = None
    columns = [resolve_column(s, default_binary, default_version, console) for s in specs]
    rows = load_rows(files)
    inflight = Path(".difftest") / "inflight"
    for col in columns:
        if col.error is None:
            run_column(col, rows, timeout=timeout, inflight=inflight, console=console)
    return columns, rows


# ------------------------------------------------------------------ output


def matrix_ok(columns: list[Column], rows: list[Row]) -> bool:
    return all(c.error is None for c in columns) and all(
        r.error is None and all(cell.ok for cell in r.cells.values()) for r in rows)


def to_json(columns: list[Column], rows: list[Row]) -> dict[str, Any]:
    return {
        "versions": [c.to_dict() for c in columns],
        "cases": [
            {"case": str(r.path), "status": r.status, "error": r.error,
             "cells": {label: cell.to_dict() for label, cell in r.cells.items()}}
            for r in rows
        ],
        "ok": matrix_ok(columns, rows),
    }


def render(columns: list[Column], rows: list[Row], console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="corpus × burn version", show_lines=False)
    table.add_column("case", overflow="fold")
    table.add_column("status", overflow="fold")
    for c in columns:
        table.add_column(c.label, overflow="fold")
    notes: list[str] = []
    for r in rows:
        name = r.case.name if r.case is not None else r.path.stem
        cells: list[Text | str] = []
        for c in columns:
            if r.error is not None:
                cells.append(Text("CORRUPT", style="red"))
                continue
            if c.error is not None:
                cells.append(Text("build failed", style="red"))
                continue
            cell = r.cells[c.label]
            mark = "" if cell.ok else f" [{len(notes) + 1}]"
            if not cell.ok:
                notes.append(f"[{len(notes) + 1}] {name} on {c.label}: {cell.detail}")
            cells.append(Text(cell.text + mark, style="" if cell.ok else "bold red"))
        table.add_row(name, r.status, *cells)
    console.print(table)
    for c in columns:
        where = c.error.splitlines()[0] if c.error else c.source
        console.print(f"{c.label}: burn {c.burn or '?'}, {c.binary or 'no binary'} — {where}", markup=False,
                      highlight=False)
    for r in rows:
        if r.error is not None:
            console.print(f"CORRUPT {r.path}: {r.error}", markup=False, highlight=False)
    for n in notes:
        console.print(n, markup=False, highlight=False)
    for c in columns:
        if c.error is not None:
            console.print(f"build of burn {c.spec} failed:\n{c.error}", markup=False, highlight=False)


def record_versions_tested(columns: list[Column], rows: list[Row]) -> list[Path]:
    """Writes each bug case's outcome per version into its `versions_tested` (the file is
    rewritten in the corpus' own formatting); returns the files changed."""
    today = _dt.datetime.now(_dt.UTC).date().isoformat()
    changed = []
    for r in rows:
        if r.case is None or r.case.status != "bug" or not r.cells:
            continue
        doc = read_json(r.path)  # read as a case before the run; a JsonFileError names it
        tested = dict(doc.get("versions_tested") or {})
        for c in columns:
            cell = r.cells.get(c.label)
            if cell is not None and cell.outcome != "not run" and c.burn is not None and c.spec.is_release:
                tested[c.burn] = {"outcome": cell.text, "date": today}
        if tested != doc.get("versions_tested"):
            doc["versions_tested"] = dict(sorted(tested.items(), key=lambda kv: _version_key(kv[0])))
            write_atomic(r.path, dumps(doc, indent=2) + "\n")
            changed.append(r.path)
    return changed


def record_fixes(columns: list[Column], rows: list[Row]) -> list[Path]:
    """For each column built with a candidate fix (`patch:FILE`), writes into the bug cases it
    is meant for (the case named like the patch, and the cases whose `root` that is) a `fix`
    record: the patch, the release it was applied to, whether the case passes with it, and
    what it did to every other case of the run; returns the files changed."""
    today = _dt.datetime.now(_dt.UTC).date().isoformat()
    changed = []
    for c in columns:
        if c.spec.patch is None or c.burn is None:
            continue
        stem = c.spec.patch.stem
        ran = [r for r in rows if c.label in r.cells and r.cells[c.label].outcome != "not run"]
        targets = [r for r in ran if r.case is not None and r.case.status == "bug"
                   and stem in (r.case.name, r.case.root)]
        others = [r for r in ran if r not in targets]
        moved = [r.case.name for r in others if r.case is not None and not r.cells[c.label].ok]
        for r in targets:
            doc = read_json(r.path)
            cell = r.cells[c.label]
            doc["fix"] = {
                "patch": _shown_path(c.spec.patch), "burn": c.burn,
                "outcome": "fixed" if cell.ok else cell.text,
                "others": (f"{len(others)} other cases as on {c.burn}" if not moved
                           else f"{len(moved)} of {len(others)} other cases changed: {', '.join(moved)}"),
                "date": today,
            }
            write_atomic(r.path, dumps(doc, indent=2) + "\n")
            changed.append(r.path)
    return changed


def _shown_path(path: Path) -> str:
    """A path relative to the working directory when it is below it (how the repository
    names its own files), else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _version_key(text: str) -> Any:

    return parse_version(text)
