"""`difftest memory`: the seed's memory table and the session experiment, measured in both
frameworks and checked against the memory model (docs/semantics.md#golden-memory,
#golden-memory-session)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from difftest.memory.model import Row
from difftest.memory.server import ALLOCATOR_ENV, torch_mode_child
from difftest.memory.session import SESSION_FULL, format_session_table, run_session_table
from difftest.memory.table import MAX_ITERS, MAX_N, SEED_ITERS, SEED_N, format_table, run_table

DESCRIPTION = ("Measure RSS growth of repeated forwards without backward in PyTorch and burn, and "
               "RSS during a training session (docs/semantics.md, section 3.4), and check both "
               "against the semantic model.")
EXPERIMENTS = ("seed", "session", "all")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=SEED_N,
                        help=f"parameter is n x n (1..{MAX_N}; default %(default)s)")
    parser.add_argument("--iters", type=int, default=SEED_ITERS,
                        help=f"forwards per row (1..{MAX_ITERS}; default %(default)s)")
    parser.add_argument(
        "--default-malloc",
        action="store_true",
        help=f"do not fix glibc's mmap threshold in the children ({', '.join(ALLOCATOR_ENV)}); noisier",
    )
    parser.add_argument(
        "--experiment",
        choices=EXPERIMENTS,
        default="all",
        help="the seed's table, the training-session table or both (default %(default)s); "
        "--n and --iters size the seed's table",
    )
    parser.add_argument("--torch-mode", help=argparse.SUPPRESS)  # one PyTorch mode, in this process


def run(args: argparse.Namespace) -> int:
    # burn's side refuses a table beyond its bounds, after PyTorch's side ran at that size
    for name, value, most in (("--n", args.n, MAX_N), ("--iters", args.iters, MAX_ITERS)):
        if not 1 <= value <= most:
            print(f"difftest memory: {name} must be in 1..{most} (difftest-burn's bound), got {value}", file=sys.stderr)
            return 2
    if args.torch_mode:
        print(json.dumps(torch_mode_child(args.torch_mode, args.n, args.iters)))
        return 0
    fixed = not args.default_malloc
    rows: list[Row] = []
    try:
        if args.experiment in ("seed", "all"):
            seed_rows = run_table(args.n, args.iters, fixed_malloc=fixed)
            print(format_table(seed_rows, args.n, args.iters, fixed_malloc=fixed), flush=True)
            rows += seed_rows
        if args.experiment in ("session", "all"):
            session_rows = run_session_table(SESSION_FULL, fixed_malloc=fixed)
            if rows:
                print()
            print(format_session_table(session_rows, SESSION_FULL, fixed_malloc=fixed))
            rows += session_rows
    except (ValueError, RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"difftest memory: {e}", file=sys.stderr)
        return 2
    return 0 if all(r.ok for r in rows) else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="difftest memory", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
