"""`difftest suspects`: where in burn the findings' faults lie, by the burn lines failing runs
execute and passing runs do not (findings/suspects.py), on a coverage build of the burn they
were found on (built and cached on first use, as `difftest coverage` builds it).

Lazy imports, as in main.py: `difftest --help` must not load torch."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.cli.checks import bad_case_paths, output_option
from difftest.cli.common import make_console

if TYPE_CHECKING:
    from rich.console import Console

    from difftest.findings.corpus import Case
    from difftest.findings.suspects import Group, Suspect
    from difftest.findings.suspects_run import Outcome


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("suspects", help="where in burn the findings' faults lie: the burn lines their failing runs "
                       "execute and passing programs do not, one group per place (a coverage build; docs/coverage.md)")
    s.add_argument("paths", nargs="+", metavar="CASE|DIR", help="corpus cases or directories (a campaign's findings)")
    s.add_argument("--burn", dest="suspects_burn", default=None, metavar="SPEC",
                   help="the burn the cases were found on (a version, path:DIR or patch:FILE, as fuzz --burn); "
                   "its coverage variant is built. Default: the repository's burn")
    s.add_argument("--programs", type=int, default=1000,
                   help="programs of a campaign in the passing sample, besides each catalog op's own (default 1000)")
    s.add_argument("--seed", type=int, default=0, help="that campaign's seed (default 0)")
    s.add_argument("--top", type=int, default=5, help="ranked lines shown per group (default 5)")
    output_option(s, "--json", default=None, metavar="FILE", help="write the groups as JSON")
    s.set_defaults(func=cmd_suspects)


def _binary(args: argparse.Namespace, err: Console) -> Path:
    from dataclasses import replace

    from difftest.exec.burn_builds import BurnSpec, build_with_status
    from difftest.exec.coverage_map import coverage_binary

    if args.suspects_burn is None:
        return coverage_binary(err)
    spec = replace(BurnSpec.parse(args.suspects_burn), coverage=True)
    return build_with_status(spec, err).binary


def _source(s: Suspect) -> str:
    try:
        return Path(s.line.source).read_text().splitlines()[s.line.line - 1].strip()
    except (OSError, IndexError):
        return ""


def _node(g: Group) -> str | None:
    """The burn-autodiff backward node (`tensor::Mul`) whose `impl Backward` holds the place's
    best line, if one does: the name a maintainer knows the code by."""
    from difftest.findings.coverage import node_at

    return node_at(g.site[0].line.source, g.site[0].line.line) if g.site and g.site[0].line.source else None


def _describe(s: Suspect, failing: int, passing: int, first: bool) -> str:
    fn = f" in {s.line.function}" if s.line.function else ""
    of = f"{failing} failing runs" if first else f"the {failing} failing runs earlier places do not explain"
    return (f"{s.line.where}{fn}: score {s.score:.2f}, executed by {s.failing} of {of} and {s.passing} of "
            f"{passing} passing")


def _label(case: Case) -> str:
    sig = case.record.get("signature") or (case.record.get("triage") or {}).get("signature")
    return f"{case.name} ({str(sig).split(' #')[0]})" if sig else case.name


def print_groups(console: Console, groups: list[Group], unplaced: list[str], out: Outcome,
                 labels: dict[str, str]) -> None:
    sp = out.spectrum
    n = sum(len(g.findings) for g in groups)
    console.print(f"{n} failing case(s) in {len(groups)} place(s) of burn; spectrum of {sp.n_failing} failing and "
                  f"{sp.n_passing} passing runs ({out.sample_failing} of the sample's programs failed too)")
    for i, g in enumerate(groups, 1):
        console.print()
        strength = ("no passing run executes it" if g.strict else
                    f"{g.site[0].passing} passing run(s) execute it too: where it did not change a result beyond "
                    "tolerance, or the fault is near it")
        node = _node(g)
        within = f" in the backward of burn-autodiff's {node}" if node else ""
        console.print(f"{i}. {len(g.findings)} case(s); the place{within} ({strength}):")
        for s in g.site[:3]:
            console.print(f"     {_describe(s, g.failing_runs, sp.n_passing, i == 1)}")
            if text := _source(s):
                console.print(f"       | {text}")
        if len(g.site) > 3:
            console.print(f"     and {len(g.site) - 3} more line(s) of the same score")
        rest = [s for s in g.ranked if s not in g.site]
        if rest:
            console.print("   next lines every one of its runs executes:")
            for s in rest:
                console.print(f"     {_describe(s, g.failing_runs, sp.n_passing, i == 1)}")
        console.print("   cases:")
        for f in g.findings:
            console.print(f"     {labels.get(f, f)}")
    if unplaced:
        console.print("\nno burn line to blame (none of the lines their runs executed raises the failure rate "
                      f"enough, or the program takes the worker down): {', '.join(unplaced)}")
    if out.not_failing:
        console.print("\nrecorded failing but passing on this build (fixed here, or a bug of PyTorch's that burn gets "
                      f"right): {', '.join(out.not_failing)}")
    reasons: dict[str, list[str]] = {}
    for name, why in out.skipped.items():
        reasons.setdefault(why, []).append(name)
    for why, names in reasons.items():
        console.print(f"skipped, {why}: {', '.join(names)}")


def cmd_suspects(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from difftest.campaign.loop import program_at
    from difftest.divergences.rules import rules_for
    from difftest.exec.burn_builds import BuildError
    from difftest.exec.burn_worker import BurnWorker
    from difftest.exec.coverage_map import CoverageError, load_map
    from difftest.findings.corpus import CorpusError, read_cases
    from difftest.findings.suspects import SUSPECTS_FORMAT, group
    from difftest.findings.suspects_run import Runner, line_table, run_all, sample_programs

    if args.programs < 0 or args.top < 1:
        print("difftest suspects: --programs must not be negative and --top must be positive", file=sys.stderr)
        return 2
    problem = bad_case_paths([Path(p) for p in args.paths])  # such a path was left out silently
    if problem is not None:
        print(f"difftest suspects: {problem}", file=sys.stderr)
        return 2
    try:  # read before the (long, first-time) coverage build: a bad file stops us here
        cases = read_cases([Path(p) for p in args.paths])
    except CorpusError as e:
        print(f"difftest suspects: {e}", file=sys.stderr)
        return 2
    err = Console(stderr=True, markup=False, highlight=False)
    try:
        binary = _binary(args, err)
    except (BuildError, CoverageError, ValueError, RuntimeError) as e:
        print(f"difftest suspects: {e}", file=sys.stderr)
        return 2
    campaign = ((f"program {k} of seed {args.seed}", program_at(args.seed, k)) for k in range(args.programs))
    sample = sample_programs(campaign)
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=err, transient=True, disable=not err.is_terminal)
    with BurnWorker(str(binary), timeout=args.timeout) as worker, bar:
        try:
            runner = Runner(worker, line_table(load_map(worker)), rules_for(worker.burn_version()))
            task = bar.add_task("cases and the passing sample", total=len(cases) + len(sample))
            out = run_all(runner, cases, sample, lambda n: bar.update(task, completed=n))
        except CoverageError as e:
            print(f"difftest suspects: {e}", file=sys.stderr)
            return 2
    groups, unplaced = group(out.spectrum, out.finding_runs, top=args.top)
    print_groups(make_console(), groups, unplaced, out, {c.name: _label(c) for c in cases})
    if args.json:
        docs = [g.to_dict() for g in groups]
        for g, d in zip(groups, docs):
            d["node"] = _node(g)
            for s, entry in zip(g.site, d["site"]):
                entry["text"] = _source(s)
        doc = {"format": SUSPECTS_FORMAT, "binary": str(binary), "burn": args.suspects_burn,
               "failing_runs": out.spectrum.n_failing, "passing_runs": out.spectrum.n_passing,
               "sample_failing": out.sample_failing, "groups": docs, "unplaced": unplaced,
               "not_failing": out.not_failing, "skipped": out.skipped,
               "cases": {c.name: {"path": str(c.path), "label": _label(c)} for c in cases}}
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0
