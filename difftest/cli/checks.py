"""What the commands check before their work starts: the numbers their options take (argparse
types), the files and directories they will write (so that a campaign or a build never runs only
to fail at its last step and lose what it computed), and the case paths they read."""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path
from typing import Any

from difftest.strategies.config import CLI_PROFILES, PROFILES

# the attribute of a command's namespace listing its options whose values are files it writes:
# (dest, option as the user spells it), filled in by `output_option`
OUTPUTS = "output_files"


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0 and finite (0 would time out at once, nan
    and inf would wait forever)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number of seconds, got {text!r}")
    return value


def profile_name(text: str) -> str:
    """An argparse type: a generator profile, or profiles joined by "+" (GenConfig.profile; a
    dtype is one too, `--dtype`'s)."""
    parts = text.split("+")
    unknown = [p for p in parts if p not in PROFILES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown profile {unknown[0]!r}: choose from {', '.join(CLI_PROFILES)}, "
                                         f"or join several with + (sessions+checkpointing)")
    return text


def at_least_one(text: str) -> int:
    """An argparse type: a count of 1 or more (a budget of 0 tests nothing and says it passed)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def share(text: str) -> float:
    """An argparse type: a probability, in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:  # nan fails both comparisons
        raise argparse.ArgumentTypeError(f"must be a share in [0, 1], got {text!r}")
    return value


def output_option(parser: argparse.ArgumentParser, *flags: str, **kwargs: Any) -> None:
    """An option whose value is a file the command writes: `main` checks it can be written before
    the command runs."""
    action = parser.add_argument(*flags, **kwargs)
    known: tuple[tuple[str, str], ...] = parser.get_default(OUTPUTS) or ()
    parser.set_defaults(**{OUTPUTS: (*known, (action.dest, action.option_strings[-1]))})


def writable_dir(path: Path) -> str | None:
    """Why files cannot be written in directory `path` (created if missing), or None when they can."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".difftest-write-check-"):
            pass
    except OSError as e:
        return f"cannot write in {path}: {e.strerror or e}"
    return None


def writable_file(path: Path) -> str | None:
    """Why file `path` cannot be written (its directory is created if missing), or None when it
    can. Nothing is left behind: an existing file is opened for appending without a byte
    written, a new one is created and removed (which also catches a name too long)."""
    problem = writable_dir(path.parent)
    if problem is not None:
        return problem
    try:  # a name too long is an OSError even from is_dir
        if path.is_dir():
            return f"{path} is a directory"
        if path.exists():
            with path.open("ab"):
                pass
        else:
            with path.open("xb"):
                pass
            path.unlink()
    except OSError as e:
        return f"cannot write {path}: {e.strerror or e}"
    return None


def unwritable_output(args: argparse.Namespace) -> str | None:
    """The first output file (an `output_option`) given to the command that cannot be written,
    with why; None when each can be."""
    for dest, flag in getattr(args, OUTPUTS, ()):
        value = getattr(args, dest, None)
        if value is not None:
            problem = writable_file(Path(value))
            if problem is not None:
                return f"{flag} {value}: {problem}"
    return None


def bad_case_paths(paths: list[Path]) -> str | None:
    """Why some of the case paths a command is given cannot be read as cases (they do not exist,
    or are files that are not `.json` cases); None when each is a directory or a `.json` file.
    Those paths were left out silently before, and the command ran on the rest."""
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        return f"not found: {', '.join(missing)}"
    other = [str(p) for p in paths if not p.is_dir() and p.suffix != ".json"]
    if other:
        return f"not a case (*.json) or a directory of cases: {', '.join(other)}"
    return None
