"""`difftest versions`: the corpus on several burn versions (a matrix case x version), or with
`--backend B,B` on several burn backends at one version; and the `--burn` / `--backend` options
every running command takes (main.py dispatches here). Imports wait until the command runs:
`difftest --help` starts without loading torch."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from difftest.cli.backends import add_backend_option
from difftest.cli.checks import bad_case_paths
from difftest.cli.common import make_console


def cmd_versions(args: argparse.Namespace) -> int:
    if args.recorded:  # what the records say, nothing run
        from difftest.findings.versions_table import recorded_markdown

        bugs = Path(args.corpus) / "bugs"
        if not any(bugs.glob("*.json")):  # an empty table would replace docs/versions.md
            why = ("holds no bug case (*.json)" if bugs.is_dir() else "is not a directory" if bugs.exists()
                   else "does not exist")
            print(f"difftest versions: --recorded reads the bug cases of {bugs}, which {why}", file=sys.stderr)
            return 2
        print(recorded_markdown(Path(args.corpus)), end="")
        return 0
    from difftest.exec.burn_builds import DEFAULT_VERSIONS, parse_specs
    from difftest.findings.corpus import iter_case_files
    from difftest.findings.matrix import build_matrix, matrix_ok, record_fixes, record_versions_tested, render, to_json

    try:
        specs = parse_specs(args.burn or ",".join(DEFAULT_VERSIONS))
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    given = [Path(p) for p in (args.paths or [args.corpus])]
    problem = bad_case_paths(given)  # such a path was left out silently
    if problem is not None:
        print(f"difftest versions: {problem}", file=sys.stderr)
        return 2
    files = iter_case_files(given)
    if not files:
        print(f"no corpus cases found in {', '.join(args.paths or [args.corpus])}", file=sys.stderr)
        return 2
    if args.backend:
        from difftest.cli.backends import cmd_backends_matrix

        return cmd_backends_matrix(args, files)
    console = make_console()
    from rich.console import Console

    status_console = Console(stderr=True)
    columns, rows = build_matrix(specs, files, timeout=args.timeout, console=status_console)
    if args.json:
        print(json.dumps(to_json(columns, rows), indent=2))
    else:
        render(columns, rows, console)
    if args.record:
        for path in record_versions_tested(columns, rows):
            print(f"recorded versions_tested in {path}", file=sys.stderr)
        for path in record_fixes(columns, rows):
            print(f"recorded the candidate fix in {path}", file=sys.stderr)
    if any(c.error for c in columns):
        return 2
    return 0 if matrix_ok(columns, rows) else 1


def use_burn(spec_text: str | None) -> None:
    """`--burn V` / `--burn path:DIR` / `--burn patch:FILE`: points $DIFFTEST_BURN (read by
    every worker this process and its job processes start) at that build's binary, building it
    if needed."""
    from difftest.exec.burn_builds import BurnSpec, build_with_status
    from difftest.exec.burn_worker import find_binary
    from difftest.findings.matrix import binary_burn_version

    if not spec_text:
        return
    spec = BurnSpec.parse(spec_text)
    if spec.is_release:
        try:
            default = find_binary()
            if binary_burn_version(default) == spec.version:
                os.environ["DIFFTEST_BURN"] = default
                return
        except RuntimeError:
            pass
    os.environ["DIFFTEST_BURN"] = str(build_with_status(spec).binary)


def burn_option(parser: argparse.ArgumentParser, several_backends: bool = False,
                backends_help: str | None = None) -> None:
    add_backend_option(parser, several=several_backends, what=backends_help)
    parser.add_argument("--burn", default=None, metavar="V|path:DIR|patch:FILE",
                        help="run against burn V (a crates.io version), a local burn checkout or one burn crate "
                        "(path:DIR), or a release with a candidate fix applied (patch:FILE, see "
                        "docs/contributing-to-burn.md), building difftest-burn for it if needed (cached)")


def add_parser(sub: Any) -> None:
    v = sub.add_parser("versions", help="replay corpus cases on several burn versions (building each once) and "
                       "print the matrix case x version")
    v.add_argument("paths", nargs="*", metavar="CASE|DIR")
    v.add_argument("--corpus", default="corpus")
    v.add_argument("--burn", default=None, metavar="V,V,...",
                   help="versions: crates.io versions, path:DIR (a local burn checkout or one burn crate) and/or "
                   "patch:FILE (a candidate fix applied to a release); default 0.22.0,0.22.1,0.23.0-pre.1")
    v.add_argument("--json", action="store_true", help="print the matrix as JSON")
    add_backend_option(v, several=True)  # with it: the cases x backends matrix at one burn version
    v.add_argument("--record", action="store_true",
                   help="write each bug case's outcome per version into its versions_tested")
    v.add_argument("--recorded", action="store_true",
                   help="print the bug cases' recorded versions_tested as Markdown (docs/versions.md); runs nothing")
    v.set_defaults(func=cmd_versions)
