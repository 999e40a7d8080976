"""`difftest show CASE`: the case's program, the localised fault alone, its reproducers, or
(`--issue`) a Markdown bug report (main.py dispatches here). Its imports wait until the
command runs, as main.py's do: `difftest --help` starts without loading torch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.cli.common import case_worker

if TYPE_CHECKING:
    from difftest.findings.corpus import Case
    from difftest.program.ir import Program


def cmd_show(args: argparse.Namespace) -> int:
    from difftest.findings.corpus import load_case
    from difftest.program.text import program_text

    case = load_case(Path(args.case))
    if args.issue:
        return _show_issue(args, case)
    from difftest.findings import reproducers

    if args.format == "torch":  # only the script: `difftest show CASE --format torch > repro.py`
        print(reproducers.torch_script(case.program, case.name), end="")
        return 0
    if args.format == "rust" or args.cargo:
        return _show_rust(args, case)
    print(f"# {case.name} [{case.status}] {case.reason}")
    from difftest.findings.backends import recorded_where

    located = recorded_where(case)
    print(f"# where: {located} (recorded: backends_tested)\n" if located else "")
    print(program_text(case.program))
    one_op = _localised_program(case)
    if one_op is not None:
        print("\n# ---- the localised fault alone (triage.localisation.program) ----")
        print(program_text(one_op))
    if args.format == "all":
        print("\n# ---- PyTorch reproducer ----")
        print(reproducers.torch_script(case.program))
        from difftest.findings.backends import rust_on_backend

        print("\n// ---- burn reproducer (Rust #[test]) ----")
        print(rust_on_backend(reproducers.rust_test(case.program, reproducers.test_name(case.name)), case.backend))
    return 0


def _localised_program(case: Case) -> Program | None:
    """The one-op program a campaign localised the case's finding to, if it recorded one."""
    from difftest.program.ir import ProgramError
    from difftest.program.jsonio import program_from_dict

    triage = case.record.get("triage")
    loc = triage.get("localisation") if isinstance(triage, dict) else None
    raw = loc.get("program") if isinstance(loc, dict) else None
    if raw is None:
        return None
    try:
        return program_from_dict(raw)
    except (ProgramError, ValueError):
        return None  # a record written by another version: the case's program still shows it


def _show_rust(args: argparse.Namespace, case: Case) -> int:
    """The asserting burn test of the case (it runs the case now for what a correct burn gives),
    printed, or (`--cargo DIR`) written as a cargo project."""
    from difftest.findings.backends import rust_on_backend
    from difftest.findings.reproducers import expected, rust_test, test_name
    from difftest.findings.reproducers.cargo import write_cargo
    from difftest.oracle.check import check

    if args.cargo:  # before the case runs: a directory it cannot or must not write in
        problem = _cargo_dir_problem(Path(args.cargo))
        if problem is not None:
            print(f"difftest show: --cargo {args.cargo}: {problem}", file=sys.stderr)
            return 2
    worker = case_worker(args, case)
    try:
        burn = str(worker.version().get("burn", "0.22.1"))
        verdict = check(case.program, worker)
    finally:
        worker.close()
    name = test_name(case.name)
    test = rust_on_backend(rust_test(case.program, name, expected(verdict)), case.backend)
    if not args.cargo:
        print(test, end="")
        return 0
    try:
        manifest = write_cargo(Path(args.cargo), name, test, burn)
    except OSError as e:
        print(f"difftest show: --cargo {args.cargo}: cannot write the project: {e}", file=sys.stderr)
        return 2
    print(f"wrote {manifest.parent}: run `cargo test --release --manifest-path {manifest}` "
          f"(burn {burn}; it fails while the bug is there)")
    return 0


def _cargo_dir_problem(directory: Path) -> str | None:
    """Why `show --cargo` must not write its project in `directory`: it is not a directory, it
    cannot be created or written in, or it holds files difftest did not write there (a project
    of the user's whose Cargo.toml it would replace); None when it may."""
    from difftest.cli.checks import writable_dir
    from difftest.findings.reproducers.cargo import foreign_files

    try:
        if directory.exists() and not directory.is_dir():
            return "not a directory"
        theirs = foreign_files(directory) if directory.is_dir() else []
    except OSError as e:
        return f"cannot read it: {e.strerror or e}"
    if theirs:
        shown = ", ".join(map(str, theirs[:5])) + (f" and {len(theirs) - 5} more" if len(theirs) > 5 else "")
        return (f"holds files difftest did not write ({shown}); give an empty or new directory, or one an "
                "earlier `difftest show --cargo` wrote")
    return writable_dir(directory)


def _show_issue(args: argparse.Namespace, case: Case) -> int:
    """One report per root cause: the cases beside this one that share its root are checked
    and reported with it."""
    from difftest.findings.corpus import same_root
    from difftest.findings.issue import issue_markdown
    from difftest.oracle.check import check

    others, problems = same_root(case)
    for problem in problems:
        print(f"warning: not read while looking for cases of the same root cause: {problem}", file=sys.stderr)
    place = None
    if args.suspects:
        from difftest.findings.suspects import SUSPECTS_FORMAT, place_of
        from difftest.program.files import JsonFileError, read_json

        try:
            doc = read_json(args.suspects, strict=False)
        except JsonFileError as e:  # its message names the file
            print(f"difftest show: --suspects {e}", file=sys.stderr)
            return 2
        if not isinstance(doc, dict) or doc.get("format") != SUSPECTS_FORMAT:
            print(f"difftest show: --suspects {args.suspects}: not a `difftest suspects --json` file", file=sys.stderr)
            return 2
        place = place_of(doc, case.name)
        if place is None:
            print(f"warning: {args.suspects} gives {case.name} no place in burn", file=sys.stderr)
    one_op = _localised_program(case)
    worker = case_worker(args, case)
    try:
        burn_versions = worker.version()
        verdict = check(case.program, worker)
        group = [(other, check(other.program, worker)) for other in others]
        alone = (one_op, check(one_op, worker)) if one_op is not None else None
    finally:
        worker.close()
    print(issue_markdown(case, verdict, burn_versions, group, alone, place), end="")
    return 0
