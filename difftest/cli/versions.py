"""`difftest versions`: the corpus on several burn versions (a matrix case x version), or with
`--backend B,B` on several burn backends at one version (main.py dispatches here)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from difftest.cli.common import make_console


def cmd_versions(args: argparse.Namespace) -> int:
    if args.recorded:  # what the records say, nothing run
        from difftest.findings.versions_table import recorded_markdown

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
    files = iter_case_files([Path(p) for p in (args.paths or [args.corpus])])
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
