"""`difftest merge`: shard summaries (`fuzz --json`) and corpus directories combined by signature
(main.py dispatches here). It exits as a campaign does: 1 when the merged result holds a finding
no known bug explains, 2 on input it cannot merge (nothing merged then), else 0."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.cli.checks import output_option
from difftest.cli.common import make_console

if TYPE_CHECKING:
    from difftest.findings.summary import Finding, Summary


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mg = sub.add_parser("merge", help="merge shard summaries (--json files) and corpus directories by signature")
    mg.add_argument("paths", nargs="+", metavar="DIR_OR_JSON")
    output_option(mg, "--json", default=None, metavar="FILE", help="also write the merged summary as JSON")
    mg.add_argument("--frontier", default="frontier", metavar="DIR", help="where frontier directories merge to")
    mg.set_defaults(func=cmd_merge)


def input_problem(paths: list[Path]) -> str | None:
    """Why `paths` cannot be merged as given: one does not exist, is a file of no bytes, is given
    twice, or inside a directory also given (its summary or cases would count twice), or every
    one is a directory without a `*.json` file (nothing to merge); None when they can. A
    directory without cases among others is a shard's corpus that found nothing: merged as
    nothing, and `empty_directories` names it."""

    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        return f"not found: {', '.join(missing)}"
    if all(p in empty_directories(paths) for p in paths):
        return f"{', '.join(map(str, paths))}: no case (*.json) or frontier entry in any: nothing to merge"
    for p in paths:
        if not p.is_dir() and p.stat().st_size == 0:
            return f"{p}: an empty file, not a campaign summary"
    seen: dict[Path, Path] = {}
    for p in paths:
        real = p.resolve()
        if real in seen:
            return f"{p} is given twice (as {seen[real]} and {p}): it would count twice"
        inside = next((q for r, q in seen.items() if (r in real.parents and not _summary_file(p))
                       or (real in r.parents and not _summary_file(q))), None)
        if inside is not None:
            outer, inner = (inside, p) if inside.resolve() in real.parents else (p, inside)
            return f"{inner} is inside {outer}, given too: its cases would count twice"
        seen[real] = p
    return None


def _summary_file(p: Path) -> bool:
    """Whether `p` is a campaign summary: a directory's scan reads cases, never summaries, so a
    shard's summary inside a corpus directory given too counts once."""
    from difftest.findings.summary import SUMMARY_FORMAT
    from difftest.program.files import JsonFileError, read_json

    try:
        doc = read_json(p, strict=False) if p.is_file() else None
    except JsonFileError:
        return False
    return isinstance(doc, dict) and doc.get("format") == SUMMARY_FORMAT


def empty_directories(paths: list[Path]) -> list[Path]:
    from difftest.findings.corpus import iter_case_files

    return [p for p in paths if p.is_dir() and not iter_case_files([p])]


def unexplained(summary: Summary, paths: list[Path]) -> list[Finding]:
    """The merged findings no known bug explains that fail a campaign (Summary.failing): a
    summary's, as its campaign judged them, and those only cases of the directories given
    record, unless a case of status `bug` (a triaged, recorded bug) has its signature."""
    from difftest.findings.signature import scan_corpus
    from difftest.findings.summary import read_summary

    in_summaries = {sig for p in paths if not p.is_dir() for sig in read_summary(p).findings}
    recorded = {sig for p in paths if p.is_dir() for sig, _ in scan_corpus(p).signatures(("bug",))}
    return [f for f in summary.failing() if f.signature in in_summaries or f.signature not in recorded]


def cmd_merge(args: argparse.Namespace) -> int:
    from difftest.cli.coverage import split_frontiers
    from difftest.findings.summary import merge, print_summary, write_json

    given = [Path(p) for p in args.paths]
    problem = input_problem(given)
    if problem is not None:
        print(f"difftest merge: {problem}", file=sys.stderr)
        return 2
    for p in empty_directories(given):
        print(f"difftest merge: {p}: no case (*.json) in it, nothing merged from it (a shard that found nothing)",
              file=sys.stderr)
    paths = split_frontiers(given, Path(args.frontier))  # guided campaigns' frontiers
    try:
        summary = merge(paths)
    except (OSError, ValueError, KeyError) as e:
        print(f"cannot merge: {e}", file=sys.stderr)
        return 2
    print_summary(summary, make_console())
    if args.json:
        write_json(summary, Path(args.json))
    return 1 if unexplained(summary, paths) else 0
