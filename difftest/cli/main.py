"""The `difftest` command line: fuzz campaigns, corpus replay, reproducers, catalog listings.

Each subcommand imports what it needs when it runs, so that `difftest --help`, `ops` and `rules`
start without loading torch (seconds); these imports are downward (this is the top layer)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from difftest import __version__
from difftest.cli.backends import use_backends
from difftest.cli.checks import (
    at_least_one,
    output_option,
    positive_seconds,
    profile_name,
    share,
    unwritable_output,
    writable_dir,
)
from difftest.cli.common import case_worker, fault_from_environment, make_console, make_worker
from difftest.cli.corpus import cmd_replay, cmd_report
from difftest.cli.coverage import add_guided_options, guided_setup
from difftest.cli.coverage import add_parser as add_coverage
from difftest.cli.merge import add_parser as add_merge
from difftest.cli.suspects import add_parser as add_suspects
from difftest.cli.versions import add_parser as add_versions
from difftest.cli.versions import burn_option, use_burn
from difftest.exec.backends import BACKEND_ENV
from difftest.strategies.config import DEFAULT_KNOWN_SITES

if TYPE_CHECKING:

    from difftest.exec.burn_worker import BurnWorker
    from difftest.oracle.compare import Verdict

DEFAULT_PROGRAMS = 2000  # a campaign's budget when neither --programs nor --time is given


def cmd_fuzz(args: argparse.Namespace) -> int:
    import torch

    from difftest.campaign.job import crash_at
    from difftest.campaign.parallel import FuzzOptions, fuzz, parse_shard
    from difftest.findings.summary import print_summary, write_json

    try:
        shard, shards = parse_shard(args.shard)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    if jobs < 1:
        print("-j must be at least 1", file=sys.stderr)
        return 2
    if args.programs is not None and args.time is not None:  # one would silently override the other
        print("difftest fuzz: give --programs N or --time S, not both", file=sys.stderr)
        return 2
    programs = DEFAULT_PROGRAMS if args.programs is None else args.programs
    # where findings go: checked now, not after a campaign whose findings would be lost (the
    # summary's --json file is checked by `main`, as every command's output files are)
    unwritable = writable_dir(Path(args.corpus) / "findings")
    if unwritable is not None:
        print(f"difftest fuzz: {unwritable}", file=sys.stderr)
        return 2
    if args.dtype is not None:
        # a dtype is a profile of the generator (difftest.strategies.config.PROFILES), last: it wins
        args.profile = args.dtype if args.profile == "default" else f"{args.profile}+{args.dtype}"
    backends: tuple[str, ...] = getattr(args, "backends", None) or ()
    if os.environ.get(BACKEND_ENV):  # --backend: only the dtypes and ops every backend named runs
        from difftest.cli.backends import fit_campaign

        try:
            for b in backends or (os.environ[BACKEND_ENV],):
                args.ops, args.profile = fit_campaign(b, args.ops, args.profile)
        except ValueError as e:
            print(e, file=sys.stderr)
            return 2
    if len(backends) > 1 and args.guided:
        print("--guided steers by one coverage build's edges: give --backend one backend", file=sys.stderr)
        return 2
    opts = FuzzOptions(
        seed=args.seed, programs=programs, seconds=args.time or 0.0,
        ops=tuple(args.ops.split(",")) if args.ops else None, max_statements=args.max_statements, jobs=jobs,
        shard=shard, shards=shards, corpus=Path(args.corpus), timeout=args.timeout, fault=args.fault,
        progress_every=args.progress, verbose=args.verbose, profile=args.profile, probes=not args.no_probes,
        backends=backends, known_sites=args.known_sites,
    )
    from difftest.strategies.config import GenConfig

    try:
        GenConfig(ops=opts.ops).op_specs()  # unknown ops: fail here, not in every job
        crash_at()  # the tests' fault injection, when set, is a program index
        opts.frontier, opts.guided_share = guided_setup(args)  # --guided: a coverage build, its edge map
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        with make_worker(args) as worker:  # the interpreter's version, and a check that it starts
            version = worker.version()
    except KeyboardInterrupt:
        print("interrupted before the campaign started", file=sys.stderr)
        return 130
    console = make_console()
    fault = f", FAULT {version.get('fault')}" if version.get("fault") else ""
    budget = f"{args.time:g}s" if args.time else f"{programs} programs"
    where = f", shard {shard}/{shards}" if shards > 1 else ""
    # --burn names the build (a patched or local burn reports only its release): say which
    build = f" ({args.burn})" if getattr(args, "burn", None) else ""
    on = ",".join(backends) if len(backends) > 1 else version.get("backend", "flex")
    print(f"difftest {__version__} fuzz: burn {version.get('burn')}{build} on {on} "
          f"(difftest-burn {version.get('difftest_burn')}"
          f"{fault}), torch {torch.__version__}, seed {args.seed}, {budget}{where}, {jobs} job(s)", flush=True)
    summary = fuzz(opts, console)
    summary.versions = {"burn": version.get("burn"), "difftest_burn": version.get("difftest_burn"),
                        "torch": torch.__version__, "difftest": __version__, "fault": version.get("fault"),
                        "backend": on, "build": getattr(args, "burn", None)}
    print_summary(summary, console)
    if len(summary.saved) > 1 and not version.get("fault") and on == "flex":
        # several findings may be one fault that many ops reach (docs/coverage.md)
        import shlex

        words = sorted({str(Path(f).parent) for f in summary.saved}) + (["--burn", args.burn] if build else [])
        print(f"where in burn they lie, one place per fault: difftest suspects {shlex.join(words)}", flush=True)
    if args.json:
        write_json(summary, Path(args.json))
    if summary.interrupted:  # stopped early: its findings are saved and its summary says so
        return 130
    if summary.saved or summary.failing():
        return 1  # a finding no known bug explains: saved now, or saved before and still untriaged
    if summary.programs == 0:  # --time shorter than the jobs' start-up: nothing was tested
        print(f"difftest fuzz: no program ran within --time {args.time:g}s (the jobs' start-up took "
              f"{summary.seconds:.1f}s); give more time", file=sys.stderr)
        return 2
    return 2 if summary.errors else 0


def _cmd_show(args: argparse.Namespace) -> int:
    from difftest.cli.show import cmd_show

    return cmd_show(args)


def cmd_ops(args: argparse.Namespace) -> int:
    from difftest.ops import listing

    if args.json:
        print(json.dumps(listing.json_rows(), indent=2))
    elif args.markdown:
        print(listing.markdown(), end="")
    else:
        print(listing.text(), end="")
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    from rich.table import Table

    from difftest.divergences.known_bugs import KNOWN_BUGS
    from difftest.divergences.listing import backends_text
    from difftest.divergences.registry import KNOWLEDGE

    bugs = {b.name: b for b in KNOWN_BUGS}
    if args.json:  # a known bug's record also says the backends it shows on (null: every backend)
        rows = [k.to_dict() for k in KNOWLEDGE]
        for row in rows:
            if row["name"] in bugs:
                shown = bugs[row["name"]].backends
                row["backends"] = list(shown) if shown is not None else None
        print(json.dumps(rows, indent=2))
        return 0
    if args.markdown:
        from difftest.divergences.listing import markdown

        print(markdown(), end="")
        return 0
    table = Table(title="declared knowledge (docs/semantics.md)", show_lines=True)
    for column in ("kind", "framework", "name", "burn versions", "backends", "evidence", "reason"):
        table.add_column(column, overflow="fold")
    for k in KNOWLEDGE:
        table.add_row(k.kind, k.framework, k.name, k.burn_versions, backends_text(bugs.get(k.name)),
                      "\n".join(k.evidence), k.reason)
    console = make_console()
    console.print(table)
    counts = Counter(k.kind for k in KNOWLEDGE)
    console.print(f"{len(KNOWLEDGE)} records: " + ", ".join(f"{n} {kind}" for kind, n in counts.items()))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from difftest.findings.corpus import CorpusError, load_case
    from difftest.ops.validate import check_program
    from difftest.oracle.check import check
    from difftest.program.files import JsonFileError, read_json
    from difftest.program.ir import ProgramError
    from difftest.program.jsonio import program_from_dict

    try:
        doc = read_json(Path(args.file))
        case = None
        if isinstance(doc, dict) and doc.get("format") == "difftest-case":
            case = load_case(Path(args.file))  # every field checked, naming what and where
            if case.memory is not None:
                raise CorpusError(f"{args.file}: a memory case has no program to run (`difftest replay` measures it)")
            program = case.program
        else:
            program = program_from_dict(doc)
        check_program(program)  # ops, attributes, shapes and bounds, before a worker starts
    except (CorpusError, JsonFileError) as e:  # its message names the file
        print(e, file=sys.stderr)
        return 2
    except (OSError, ValueError, ProgramError) as e:
        print(f"{args.file}: {e}", file=sys.stderr)
        return 2
    if len(getattr(args, "backends", ())) > 1:
        from difftest.cli.backends import run_on_backends

        return run_on_backends(program, args.backends, args.timeout, args.json, args.fault)
    worker = make_worker(args) if case is None else case_worker(args, case)  # a case: on its backend
    told = None  # the text output also says what triage makes of a failing verdict
    try:
        verdict = check(program, worker)
        if not verdict.ok and not (args.dot or args.svg or args.json):
            told = _triage_line(verdict, worker)
    finally:
        worker.close()
    if args.dot or args.svg:
        return _picture(args, verdict)
    if args.json:
        from difftest.findings.table import json_rows

        print(json.dumps(json_rows(verdict), indent=2))
        return 0 if verdict.ok else 1
    from difftest.findings.table import table

    console = make_console()
    console.print(verdict.report())
    console.print(table(verdict))
    if told is not None:
        console.print(told, markup=False, highlight=False)
    return 0 if verdict.ok else 1


def _triage_line(verdict: Verdict, worker: BurnWorker) -> str:
    """What triage makes of a failing verdict, as a campaign would key it: the known bug that
    explains every finding (and its case), or news, signed and localised."""
    from difftest.findings.triage import triage

    t = triage(verdict, worker)
    cases = [ref for ref in t.known.knowledge.evidence if ref.startswith("corpus/")] if t.known else []
    return f"triage: {t.describe()}" + (f" (its case: {cases[0]})" if cases else "")


def _picture(args: argparse.Namespace, verdict: Verdict) -> int:
    from difftest.findings.picture import DotMissing, dot, svg

    text = dot(verdict)
    if args.dot:
        print(text, end="")
    if args.svg:
        try:
            Path(args.svg).write_text(svg(text))
        except DotMissing as e:
            print(e, file=sys.stderr)
            return 2
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"cannot write {args.svg}: {e}", file=sys.stderr)
            return 2
        print(f"wrote {args.svg}", file=sys.stderr)
    return 0 if verdict.ok else 1


def cmd_memory(args: argparse.Namespace) -> int:
    from difftest.memory.cli import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="difftest", description=__doc__)
    p.add_argument("--version", action="version", version=f"difftest {__version__}")
    p.add_argument("--timeout", type=positive_seconds, default=60.0,
                   help="per-program burn timeout in seconds (a positive number; default 60)")
    sub = p.add_subparsers(dest="command", required=True)

    f = sub.add_parser("fuzz", help="run a campaign on the built-in op set (in parallel jobs)")
    f.add_argument("--programs", type=at_least_one, default=None,
                   help=f"number of programs (default {DEFAULT_PROGRAMS}; with --shard, of this shard)")
    f.add_argument("--time", type=positive_seconds, default=None,
                   help="run for this many seconds instead (not with --programs)")
    f.add_argument("-j", "--jobs", type=int, default=None,
                   help="job processes, each with its own burn worker (default: all cores)")
    f.add_argument("--shard", default="0/1", metavar="I/N",
                   help="run the I-th (0-based) of N disjoint slices of the campaign (program k with k = I mod N)")
    output_option(f, "--json", default=None, metavar="FILE", help="also write the summary as JSON")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--ops", default="", help="comma-separated ops to restrict to (see `difftest ops`)")
    f.add_argument("--max-statements", type=at_least_one, default=10,
                   help="the most statements a generated program has (default 10)")
    f.add_argument("--profile", default="default", type=profile_name,
                   help="the generator's distribution: sessions makes most programs sessions (several "
                        "backwards, gradient reads, SGD training loops); checkpointing runs every program "
                        "on burn's balanced gradient checkpointing (by default a quarter of them); kinks "
                        "puts a quarter of the calls of relu, abs, hard_sigmoid, clamp, floor, ... on a "
                        "fresh input with elements exactly at their kinks; join several with + "
                        "(sessions+checkpointing)")
    f.add_argument("--dtype", default=None, choices=["float32", "float64", "float16", "bfloat16"],
                   help="every program in this dtype (the default distribution otherwise; by default "
                        "80%% float32, 10%% float64, 5%% float16, 5%% bfloat16)")
    f.add_argument("--known-sites", type=share, default=DEFAULT_KNOWN_SITES, metavar="P",
                   help="the share of known bugs' triggers the generator keeps (GenConfig.p_known_site): at 0 a "
                        "known bug's site is never generated, so a new bug there is never found; a kept site is "
                        f"explained by its record (default {DEFAULT_KNOWN_SITES:g})")
    f.add_argument("--no-probes", action="store_true",
                   help="do not probe a passing program at the other roots its backwards could have had "
                        "(root probes: burn alone, judged by the model's prediction; difftest/oracle/probes.py)")
    f.add_argument("--corpus", default="corpus", help="where findings are saved (under findings/)")
    f.add_argument("--progress", type=float, default=10.0,
                   help="seconds between progress lines (when stdout is not a terminal)")
    f.add_argument("-v", "--verbose", action="store_true", help="print each finding's report")
    f.add_argument("--fault", default=None, help="run against a deliberately faulty interpreter "
                   "(DIFFTEST_BURN_FAULT spec, docs/format.md) to measure detection power; "
                   "on:<backend>:<spec> makes one backend faulty")
    burn_option(f, several_backends=True, backends_help=(
        "burn backends to run on; several (a triangulated campaign): each program runs in PyTorch once and "
        "on each, each judged as alone; a finding records the backends that show it and the layer that "
        "points to (one backend alone: its own code path; all: shared code), and counts are given per backend"))
    add_guided_options(f)
    f.set_defaults(func=cmd_fuzz)

    add_merge(sub)

    r = sub.add_parser("replay", help="replay corpus cases and print a table")
    r.add_argument("paths", nargs="*")
    r.add_argument("--corpus", default="corpus")
    r.add_argument("-v", "--verbose", action="store_true", help="print each case's per-statement table")
    burn_option(r)
    r.set_defaults(func=cmd_replay)

    s = sub.add_parser("show", help="print a case and its PyTorch / Rust reproducers")
    s.add_argument("case")
    s.add_argument("--format", choices=["all", "torch", "rust", "text"], default="all")
    s.add_argument("--issue", action="store_true",
                   help="print a Markdown bug report for burn's tracker (runs the case now)")
    s.add_argument("--suspects", default=None, metavar="JSON",
                   help="with --issue: say where in burn the fault lies, and which other cases show it, from a "
                   "`difftest suspects --json` file")
    s.add_argument("--cargo", metavar="DIR", default=None,
                   help="write the asserting burn test as a cargo project in DIR: a new or empty directory, or "
                        "one an earlier --cargo wrote (runs the case now); `--format rust` prints that test")
    s.add_argument("--fault", default=None,
                   help="run against a deliberately faulty interpreter (DIFFTEST_BURN_FAULT spec, docs/format.md), "
                   "e.g. the one a `fuzz --fault` campaign found the case with (its `source` names it)")
    burn_option(s)
    s.set_defaults(func=_cmd_show)

    o = sub.add_parser("ops", help="list the op catalog")
    o.add_argument("--json", action="store_true")
    o.add_argument("--markdown", action="store_true", help="the table of docs/format.md")
    o.set_defaults(func=cmd_ops)

    ru = sub.add_parser("rules", help="list the declared knowledge: divergences, no-op calls, memory rules, "
                        "conventions, known bugs")
    ru.add_argument("--json", action="store_true")
    ru.add_argument("--markdown", action="store_true", help="the tables of docs/knowledge.md")
    ru.set_defaults(func=cmd_rules)

    rn = sub.add_parser("run", help="run one program (or case) file through both frameworks")
    rn.add_argument("file")
    rn.add_argument("--json", action="store_true", help="print the per-statement rows as JSON")
    rn.add_argument("--dot", action="store_true", help="print the program and its verdict as Graphviz DOT text")
    output_option(rn, "--svg", default=None, metavar="FILE",
                  help="write the program and its verdict as an SVG picture (runs Graphviz's `dot -Tsvg`)")
    rn.add_argument("--fault", default=None,
                    help="run against a deliberately faulty interpreter (DIFFTEST_BURN_FAULT spec, docs/format.md; "
                    "on:<backend>:<spec> makes one backend faulty)")
    burn_option(rn, several_backends=True)
    rn.set_defaults(func=cmd_run)

    rp = sub.add_parser("report", help="one self-contained HTML report of corpora, cases and campaign summaries")
    rp.add_argument("paths", nargs="*", metavar="PATH",
                    help="corpus directories, case files, campaign summaries (fuzz/merge --json); default: corpus")
    output_option(rp, "-o", "--output", default="report.html", metavar="FILE",
                  help="the HTML file (default report.html)")
    rp.add_argument("--fault", default=None,
                    help="replay against a deliberately faulty interpreter (DIFFTEST_BURN_FAULT spec, docs/format.md), "
                    "e.g. the one a `fuzz --fault` campaign ran against")
    burn_option(rp)  # the report of a branch, or of a campaign run on another backend
    rp.set_defaults(func=cmd_report)


    add_versions(sub)

    from difftest.memory.cli import DESCRIPTION, add_arguments

    m = sub.add_parser("memory", help="the seed's memory table, both frameworks", description=DESCRIPTION)
    add_arguments(m)
    m.set_defaults(func=cmd_memory)
    add_coverage(sub)
    add_suspects(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except KeyboardInterrupt:  # Ctrl-C: each command's own cleanup (its workers, a build) ran on the way out
        print(f"\ndifftest {args.command}: interrupted", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    notice = fault_from_environment(args)
    if notice is not None:
        print(f"difftest {args.command}: {notice}", file=sys.stderr)
    unwritable = unwritable_output(args)  # before any build or run: what it computes must not be lost
    if unwritable is not None:
        print(f"difftest {args.command}: {unwritable}", file=sys.stderr)
        return 2
    if args.command != "versions" and (getattr(args, "burn", None) or getattr(args, "backend", None)):
        from difftest.exec.burn_builds import BuildError

        try:
            use_burn(args.burn)
            if getattr(args, "backend", None):
                args.backends = use_backends(args.backend, args.burn, several=args.command in ("run", "fuzz"))
        except (ValueError, BuildError) as e:
            print(e, file=sys.stderr)
            return 2
    from difftest.exec.burn_worker import WorkerError
    from difftest.findings.corpus import CorpusError
    from difftest.program.ir import ProgramError

    try:
        return int(args.func(args))
    except (CorpusError, ProgramError) as e:  # bad input: its message names what and where
        print(f"difftest {args.command}: {e}", file=sys.stderr)
        return 2
    except WorkerError as e:  # the interpreter does not start or answer (a bad --fault, a broken build)
        print(f"difftest {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
