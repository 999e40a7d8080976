"""`difftest coverage`: which of burn's code some programs reach, through a coverage build of
the interpreter (built and cached on first use; difftest/exec/coverage_build.py).

Lazy imports, as in main.py: `difftest --help` must not load torch."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.cli.checks import bad_case_paths, output_option, profile_name, share
from difftest.cli.common import make_console

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from difftest.program.ir import Program


GUIDED_SHARE = 0.5  # of a guided campaign's programs, mutations of frontier entries (--guided-share)


def _advance(bar: Progress, task: TaskID, done: int) -> None:
    bar.update(task, completed=done)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = sub.add_parser("coverage", help="edges and lines of burn reached by cases, a campaign's programs or N "
                       "generated programs (a SanitizerCoverage build of difftest-burn; docs/coverage.md)")
    c.add_argument("paths", nargs="*", metavar="CASE|DIR", help="corpus cases or directories")
    c.add_argument("--programs", type=int, default=0, help="N generated programs of a campaign (with --seed)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--profile", default="default", type=profile_name,
                   help="the generator's distribution for --programs (as fuzz --profile; continuous: without "
                   "boundary leaf values)")
    c.add_argument("--campaign", default=None, metavar="JSON",
                   help="the programs of a campaign summary (fuzz --json): regenerated from its seed and shard "
                   "(with the default generator options), or a guided campaign's frontier")
    c.add_argument("--files", type=int, default=15, metavar="N", help="list the N files with most edges not reached")
    c.add_argument("--no-catalog", action="store_true",
                   help="do not measure the catalog's reach (each op's own programs; cached once per binary)")
    output_option(c, "--json", default=None, metavar="FILE",
                  help="write the coverage as JSON (difftest report reads it)")
    c.set_defaults(func=cmd_coverage)


def add_guided_options(f: argparse.ArgumentParser) -> None:
    f.add_argument("--guided", action="store_true",
                   help="steer by burn coverage (a coverage build of difftest-burn): keep programs that reach new "
                   "edges in --frontier and spend part of the budget mutating them (docs/coverage.md)")
    f.add_argument("--frontier", default="frontier", metavar="DIR",
                   help="the guided campaign's frontier directory (resumed if it exists; default frontier)")
    f.add_argument("--guided-share", type=share, default=None, metavar="P",
                   help=f"with --guided: of the programs, mutations of frontier entries once there are entries "
                   f"(default {GUIDED_SHARE})")


def guided_setup(args: argparse.Namespace) -> tuple[Path | None, float]:
    """`fuzz --guided`: points $DIFFTEST_BURN at the coverage build (building it if needed) and
    computes its edge map once (the jobs read it from the cache); the frontier and the share.
    Raises ValueError on bad options."""
    if not args.guided:
        if args.guided_share is not None:  # it steers nothing without --guided: not silently ignored
            raise ValueError("--guided-share is the share of a guided campaign: give --guided too")
        return None, GUIDED_SHARE
    mutated = GUIDED_SHARE if args.guided_share is None else args.guided_share
    import os

    from rich.console import Console

    from difftest.campaign.guided import Frontier, FrontierError
    from difftest.exec.burn_builds import BuildError
    from difftest.exec.burn_worker import BurnWorker
    from difftest.exec.coverage_map import CoverageError, coverage_binary, load_map

    if args.burn or args.fault:
        raise ValueError("--guided runs the coverage build of the repository's burn: not with --burn or --fault")
    frontier = Path(args.frontier)
    try:
        Frontier.load(frontier)  # a bad frontier fails here, not in every job
        binary = coverage_binary(Console(stderr=True))
        with BurnWorker(str(binary), timeout=args.timeout) as worker:
            load_map(worker)
    except (FrontierError, BuildError, CoverageError) as e:
        raise ValueError(f"--guided: {e}") from e
    os.environ["DIFFTEST_BURN"] = str(binary)
    return frontier, mutated


def split_frontiers(paths: list[Path], out: Path) -> list[Path]:
    """`merge`: the frontier directories among `paths` (guided campaigns', campaign/guided.py)
    copied into `out`; the other paths."""
    from difftest.campaign.guided import is_frontier, merge_frontiers

    frontiers = [p for p in paths if is_frontier(p) and p.resolve() != out.resolve()]
    if frontiers:
        n = merge_frontiers(frontiers, out)
        print(f"frontier {out}: {n} entr(ies) added from {', '.join(map(str, frontiers))}", file=sys.stderr)
    return [p for p in paths if p not in frontiers]


def _campaign_programs(path: Path) -> tuple[str, Iterator[Program], int]:
    from difftest.campaign.loop import program_at
    from difftest.findings.summary import read_summary

    summary = read_summary(path)  # ValueError naming the file and the field
    frontier_dir = summary.guided.get("frontier")
    if frontier_dir:
        from difftest.campaign.guided import Frontier

        where = Path(frontier_dir)
        if not where.is_absolute() and not where.exists():
            where = path.parent / where
        frontier = Frontier.load(where)
        return f"the frontier {where} of {path}", (e.program() for e in frontier.entries), len(frontier.entries)
    if summary.shards_merged:
        raise ValueError(f"{path}: a merged summary; give the shards' summaries one at a time")
    try:
        shard, shards = (int(x) for x in summary.shard.split("/"))
    except ValueError:
        raise ValueError(f"{path}: \"shard\" must be I/N, got {summary.shard!r}") from None
    seed, n = summary.seed or 0, summary.programs
    return (f"campaign {path} (seed {seed}, shard {shard}/{shards})",
            (program_at(seed, shard + shards * j) for j in range(n)), n)


def cmd_coverage(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from difftest.campaign.loop import program_at
    from difftest.exec.burn_builds import BuildError
    from difftest.exec.burn_worker import BurnWorker
    from difftest.exec.coverage_map import CoverageError, coverage_binary, load_map
    from difftest.findings.corpus import CorpusError, read_cases
    from difftest.findings.coverage import print_coverage, summarise
    from difftest.findings.coverage_run import catalog_reach, run_programs

    if args.programs < 0:
        print(f"difftest coverage: --programs must not be negative, got {args.programs}", file=sys.stderr)
        return 2
    sources: list[tuple[str, Iterator[Program], int]] = []
    if args.paths:
        problem = bad_case_paths([Path(p) for p in args.paths])  # such a path was left out silently
        if problem is not None:
            print(f"difftest coverage: {problem}", file=sys.stderr)
            return 2
        try:  # read before the (long, first-time) coverage build: a bad file stops us here
            loaded = [c.program for c in read_cases([Path(p) for p in args.paths])]
        except CorpusError as e:
            print(f"difftest coverage: {e}", file=sys.stderr)
            return 2
        sources.append((f"cases {', '.join(args.paths)}", iter(loaded), len(loaded)))
    if args.programs:
        profile = "" if args.profile == "default" else f", profile {args.profile}"
        sources.append((f"{args.programs} programs of seed {args.seed}{profile}",
                        (program_at(args.seed, k, profile=args.profile) for k in range(args.programs)),
                        args.programs))
    if args.campaign:
        try:
            sources.append(_campaign_programs(Path(args.campaign)))
        except (OSError, ValueError, KeyError) as e:
            print(f"difftest coverage: --campaign {args.campaign}: {e}", file=sys.stderr)
            return 2
    if not sources:
        print("difftest coverage: give cases, --programs N or --campaign JSON", file=sys.stderr)
        return 2
    err = Console(stderr=True, markup=False, highlight=False)
    try:
        binary = coverage_binary(err)
    except (BuildError, CoverageError, RuntimeError) as e:
        print(f"difftest coverage: {e}", file=sys.stderr)
        return 2
    console = make_console()
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=err, transient=True, disable=not err.is_terminal)
    with BurnWorker(str(binary), timeout=args.timeout) as worker, bar:
        try:
            edge_map = load_map(worker)
            catalog = None
            if not args.no_catalog:
                task = bar.add_task("catalog reach", total=None)
                catalog = catalog_reach(worker, edge_map, lambda op, i, n: bar.update(task, completed=i, total=n))
            hit: set[int] = set()
            total = 0
            for what, programs, n in sources:
                task = bar.add_task(what[:60], total=n)
                got, count = run_programs(worker, programs, partial(_advance, bar, task))
                hit |= got
                total += count
        except CoverageError as e:
            print(f"difftest coverage: {e}", file=sys.stderr)
            return 2
    cov = summarise(edge_map, hit, source="; ".join(s[0] for s in sources), programs=total, catalog=catalog)
    print_coverage(cov, console, files=args.files)
    if args.json:
        Path(args.json).write_text(json.dumps(cov.to_dict(), indent=1) + "\n")
    return 0
