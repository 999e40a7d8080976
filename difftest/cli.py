"""The `difftest` command line: fuzz campaigns, corpus replay, reproducers, catalog listings."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import __version__
from .burn_worker import BurnWorker


def _worker(args: argparse.Namespace) -> BurnWorker:
    from .burn_worker import BurnWorker

    state = Path(".difftest")
    return BurnWorker(timeout=args.timeout, inflight_dir=state / "inflight", fault=getattr(args, "fault", None))


def cmd_fuzz(args: argparse.Namespace) -> int:
    import torch

    from .campaign import CampaignStats, run_campaign
    from .compare import Verdict
    from .corpus import case_from_verdict, save_case
    from .runner import check
    from .shrink import shrink

    torch.set_num_threads(1)
    ops = tuple(args.ops.split(",")) if args.ops else None
    corpus = Path(args.corpus) / "findings"
    worker = _worker(args)
    worker.start()
    version = worker.version()
    fault = f", FAULT {version.get('fault')}" if version.get("fault") else ""
    budget = f"{args.time:.0f}s" if args.time else f"{args.programs} programs"
    print(f"difftest {__version__} fuzz: burn {version.get('burn')} (difftest-burn {version.get('difftest_burn')}"
          f"{fault}), torch {torch.__version__}, seed {args.seed}, {budget}", flush=True)
    new_files: list[Path] = []

    def on_finding(verdict: Verdict) -> None:
        kind = verdict.kind
        small = shrink(verdict.program, lambda p: check(p, worker).kind == kind)
        final = check(small, worker)
        case = case_from_verdict(final, source=f"difftest fuzz --seed {args.seed}", burn_version=version)
        path, created = save_case(case, corpus)
        if created:
            new_files.append(path)
        note = "" if created else " (already in the corpus)"
        print(f"  finding ({kind}, shrunk {len(verdict.program)} -> {len(small)} statements): {path}{note}",
              flush=True)
        if args.verbose:
            print(final.report(), flush=True)

    def on_progress(stats: CampaignStats) -> None:
        rate = stats.programs / max(stats.seconds, 1e-9)
        print(f"  {stats.programs} programs, {rate:.0f}/s, {len(stats.findings)} finding(s)", flush=True)

    try:
        stats = run_campaign(
            worker, seed=args.seed, programs=args.programs, seconds=args.time, ops=ops,
            max_statements=args.max_statements, on_finding=on_finding, on_progress=on_progress,
            progress_every=args.progress,
        )
    finally:
        worker.close()
    n, elapsed = stats.programs, stats.seconds
    print(f"\n{n} programs in {elapsed:.1f}s ({n / max(elapsed, 1e-9):.0f}/s)")
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in stats.verdicts.most_common()))
    print("rules fired: " + (", ".join(f"{k} {v}" for k, v in stats.rules.most_common()) or "none"))
    least = sorted(stats.ops.items(), key=lambda kv: kv[1])[:5]
    print(f"ops generated: {len(stats.ops)} distinct; least: " + ", ".join(f"{k} {v}" for k, v in least))
    if new_files:
        print(f"{len(new_files)} new finding(s) saved under {corpus}/ (triage: corpus/README.md)")
        return 1
    if stats.findings:
        print(f"{len(stats.findings)} finding(s), all already in the corpus")
        return 1
    print("no findings")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from .corpus import CorpusError, iter_case_files, judge, load_case
    from .runner import check

    files = iter_case_files([Path(p) for p in (args.paths or [args.corpus])])
    if not files:
        print("no corpus cases found", file=sys.stderr)
        return 2
    worker = _worker(args)
    failures = 0
    width = max(len(str(f)) for f in files)
    print(f"{'case':<{width}}  {'status':<34}  outcome")
    try:
        for f in files:
            try:
                case = load_case(f)
            except CorpusError as e:
                failures += 1
                print(f"{f!s:<{width}}  {'?':<34}  CORRUPT: {e}")
                continue
            verdict = check(case.program, worker)
            outcome = judge(case, verdict)
            failures += not outcome.ok
            head = outcome.message.splitlines()[0]
            print(f"{f!s:<{width}}  {case.status:<34}  {'ok' if outcome.ok else 'FAIL'}: {head}")
    finally:
        worker.close()
    print(f"\n{len(files) - failures} passed, {failures} failed")
    return 1 if failures else 0


def cmd_show(args: argparse.Namespace) -> int:
    from .corpus import load_case
    from .render import program_text

    case = load_case(Path(args.case))
    print(f"# {case.name} [{case.status}] {case.reason}\n")
    print(program_text(case.program))
    try:
        from . import reproducers
    except ImportError:
        return 0
    if args.format in ("all", "torch"):
        print("\n# ---- PyTorch reproducer ----")
        print(reproducers.torch_script(case.program))
    if args.format in ("all", "rust"):
        print("\n// ---- burn reproducer (Rust #[test]) ----")
        print(reproducers.rust_test(case.program, case.name.replace("-", "_")))
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    from .catalog import OPS

    if args.json:
        print(json.dumps([{"name": o.name, "family": o.family, "arity": o.arity,
                           "attrs": [a.name for a in o.attrs], "domain": o.domain.name,
                           "tolerance": o.tolerance.name} for o in OPS], indent=2))
        return 0
    print(f"{'op':<14} {'family':<10} {'arity':>5}  {'attrs':<22} {'domain':<15} tolerance")
    for o in OPS:
        arity = "n" if o.arity < 0 else str(o.arity)
        print(f"{o.name:<14} {o.family:<10} {arity:>5}  {','.join(a.name for a in o.attrs) or '-':<22} "
              f"{o.domain.name:<15} {o.tolerance.name}")
    print(f"\n{len(OPS)} ops")
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    from .known_bugs import KNOWN_BUGS
    from .rules import RULES

    for r in RULES:
        where = f"DESIGN.md section {r.section}" if r.section[:1].isdigit() else r.section
        print(f"{r.name} [{r.framework}] (evidence: {where})\n    {r.reason}\n")
    for b in KNOWN_BUGS:
        print(f"known bug {b.name} -> {b.case}\n    {b.summary}\n")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .ir import ProgramError
    from .jsonio import program_from_dict
    from .runner import check

    try:
        doc = json.loads(Path(args.file).read_text())
        if isinstance(doc, dict) and doc.get("format") == "difftest-case":
            doc = doc["program"]
        program = program_from_dict(doc)
    except (OSError, json.JSONDecodeError, ProgramError) as e:
        print(f"{args.file}: {e}", file=sys.stderr)
        return 2
    worker = _worker(args)
    try:
        verdict = check(program, worker)
    finally:
        worker.close()
    print(verdict.report())
    return 0 if verdict.ok else 1


def cmd_memory(args: argparse.Namespace) -> int:
    from . import memory

    return int(memory.main(args.rest))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="difftest", description=__doc__)
    p.add_argument("--version", action="version", version=f"difftest {__version__}")
    p.add_argument("--timeout", type=float, default=60.0, help="per-program burn timeout in seconds")
    sub = p.add_subparsers(dest="command", required=True)

    f = sub.add_parser("fuzz", help="run a campaign on the built-in op set")
    f.add_argument("--programs", type=int, default=2000, help="number of programs (default 2000)")
    f.add_argument("--time", type=float, default=0.0, help="run for this many seconds instead")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--ops", default="", help="comma-separated ops to restrict to (see `difftest ops`)")
    f.add_argument("--max-statements", type=int, default=10)
    f.add_argument("--corpus", default="corpus", help="where findings are saved (under findings/)")
    f.add_argument("--progress", type=float, default=10.0, help="seconds between progress lines")
    f.add_argument("-v", "--verbose", action="store_true", help="print each finding's report")
    f.add_argument("--fault", default=None, help="run against a deliberately faulty interpreter "
                   "(DIFFTEST_BURN_FAULT spec, docs/format.md) to measure detection power")
    f.set_defaults(func=cmd_fuzz)

    r = sub.add_parser("replay", help="replay corpus cases and print a table")
    r.add_argument("paths", nargs="*")
    r.add_argument("--corpus", default="corpus")
    r.set_defaults(func=cmd_replay)

    s = sub.add_parser("show", help="print a case and its PyTorch / Rust reproducers")
    s.add_argument("case")
    s.add_argument("--format", choices=["all", "torch", "rust", "text"], default="all")
    s.set_defaults(func=cmd_show)

    o = sub.add_parser("ops", help="list the op catalog")
    o.add_argument("--json", action="store_true")
    o.set_defaults(func=cmd_ops)

    sub.add_parser("rules", help="list declared divergences and known bugs").set_defaults(func=cmd_rules)

    rn = sub.add_parser("run", help="run one program (or case) file through both frameworks")
    rn.add_argument("file")
    rn.set_defaults(func=cmd_run)

    m = sub.add_parser("memory", help="the seed's memory experiment, both frameworks")
    m.add_argument("rest", nargs=argparse.REMAINDER)
    m.set_defaults(func=cmd_memory)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
