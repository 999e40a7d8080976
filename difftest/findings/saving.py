"""Saving a case into a corpus directory, as `<name>.json` (a campaign's and the pytest plugin's
findings are named by a hash of the program, so the same finding found twice is one file).

Writes are atomic and never clobber (program/files.py). A file already under the name is kept
when it is a case of the same program; any other file there (one that cannot be read as a case,
a truncated one, or a case of another program) would otherwise stand in for the new case forever,
so it is moved aside under a name no reader collects (`<name>.json.corrupt`, `.corrupt-2`, ...),
and the caller is told both paths."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from difftest.findings.corpus import Case, CorpusError, case_to_dict, load_case, program_hash
from difftest.program.files import write_atomic
from difftest.program.jsonio import dumps

ASIDE_SUFFIX = ".corrupt"  # after ".json": iter_case_files and the pytest plugin collect *.json only


@dataclass(frozen=True)
class SavedCase:
    path: Path
    created: bool  # False: a case of the same program was there already, and is kept
    moved_aside: Path | None = None  # where the file that held the name went
    why: str = ""  # why that file could not stay

    @property
    def warning(self) -> str | None:
        """What the caller tells the user when a file was moved aside, naming both paths."""
        if self.moved_aside is None:
            return None
        return (f"{self.path} was not a readable case of this program ({self.why}); moved it to "
                f"{self.moved_aside} and saved the new case as {self.path}")


def save_case(case: Case, directory: Path) -> SavedCase:
    """Writes `case` as `directory/<name>.json` (name: the case's, else the program's hash)."""
    directory.mkdir(parents=True, exist_ok=True)
    name = case.name or program_hash(case.program)
    final = directory / f"{name}.json"
    text = dumps(case_to_dict(case), indent=2) + "\n"
    aside: Path | None = None
    why = ""
    if os.path.lexists(final):
        why = _why_not_kept(final, case)
        if not why:
            return SavedCase(final, False)
        aside = _move_aside(final, case)
        if aside is None:  # another writer moved it first, or saved this program's case since
            why = ""
    created = write_atomic(final, text, replace=False)
    return SavedCase(final, created, aside, why)


def _why_not_kept(path: Path, case: Case) -> str:
    """Why the file at `path` cannot stand for `case` ("" when it is a case of its program)."""
    try:
        there = load_case(path)
    except CorpusError as e:
        return str(e)
    if there.memory is not None or case.memory is not None:  # a memory case's program is a stand-in
        return "" if there.memory == case.memory else "it holds another case"
    if program_hash(there.program) != program_hash(case.program):
        return "it holds another program"
    return ""


def _move_aside(path: Path, case: Case) -> Path | None:
    """Moves `path` to the first free `<path>.corrupt[-n]` and returns where; None when another
    writer (pytest-xdist's workers save concurrently) moved it first, or saved a case of `case`'s
    program under the name since it was read, which is left in place. A file is hard-linked to
    the new name (which never overwrites), checked again there, then unlinked."""
    n = 1
    while True:
        target = path.with_name(path.name + ASIDE_SUFFIX + (f"-{n}" if n > 1 else ""))
        n += 1
        if os.path.lexists(target):
            continue
        if path.is_dir() and not path.is_symlink():
            os.rename(path, target)  # a directory under the name; lexists just found the target free
            return target
        try:
            os.link(path, target, follow_symlinks=False)
        except FileExistsError:
            continue
        except FileNotFoundError:  # another writer moved it aside first
            return None
        if not _why_not_kept(target, case):
            os.unlink(target)
            return None
        try:
            os.unlink(path)
        except FileNotFoundError:  # another writer moved it aside too: two names for the one file
            pass
        return target
