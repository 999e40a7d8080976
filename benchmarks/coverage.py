"""Coverage measurements on the coverage build of difftest-burn (docs/coverage.md).

    python benchmarks/coverage.py overhead [--programs N] [--seed K]
    python benchmarks/coverage.py guided [--programs N,N,...] [--seed K] [--share P] [--svg FILE]
    python benchmarks/coverage.py attrs [--programs N] [--seed K] [--ops OP,OP,...]

`overhead`: the same seeded campaign (one job, root probes, PyTorch and the comparison
included, nothing saved) on the default binary and on the coverage build, the coverage run
also asking each program's edges as a guided campaign does; programs per second of each and
their ratio. Then the burn round trips alone (each program run on burn, nothing else), which
isolate the instrumented binary's own cost. The order alternates (default, coverage, coverage,
default) and each rate is the mean of its two runs, so a load change on a shared machine
weighs on both alike.

`guided`: edges of burn-autodiff and burn-flex reached over programs by the random campaign
(program k of the seed) and by the guided one (the same seed, `share` of the programs mutations
of frontier entries, the frontier in a fresh temporary directory), the same budget, run in step
on one worker; each program run on burn only (no PyTorch, no probes: the campaigns differ only
in which programs they run). Prints both at each checkpoint, and the edges either reached (a
lower bound of what the catalog reaches: where it barely exceeds each, the two searches found
about the same set), and the table at the end; with --svg, writes the plot.

`attrs`: what the attribute boundary values add (strategies/boundary.py `snap_attrs`): the same
seeded programs generated twice, with the snapping and with it off (`ATTR_SNAP` 0), which differ
in the snapped attributes alone; each run on burn under coverage; the burn edges each reached,
per crate, and the files of the edges only one of them reached.
Measurements only: nothing here asserts a figure.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console

from difftest.campaign.guided import Frontier, Guide
from difftest.campaign.loop import program_at, program_seed, run_campaign
from difftest.exec.burn_worker import BurnWorker, find_binary
from difftest.exec.coverage_map import EdgeMap, coverage_binary, edges_after, hit_edges, load_map, worker_marks
from difftest.findings.report_svg import Series, line_plot
from difftest.program.ir import Program
from difftest.strategies import boundary
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate

CRATES = ("burn-autodiff", "burn-flex")


class EdgesAsked:
    """Steering that generates the random campaign's programs and asks each one's edges (the
    guided campaign's extra request, without its frontier)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def choices(self, k: int) -> RandomChoices:
        return RandomChoices(program_seed(self.seed, k))

    def observe(self, program: Program, worker: BurnWorker, before: tuple[int, int] | None = None) -> bool:
        hit_edges(worker)
        return False


def _campaign_rate(binary: str, programs: int, seed: int, ask_edges: bool) -> float:
    with BurnWorker(binary) as worker:
        worker.version()
        steering = EdgesAsked(seed) if ask_edges else None
        stats = run_campaign(worker, seed=seed, programs=programs, keep_findings=False, steering=steering)
    return stats.programs / stats.seconds


def _burn_rate(binary: str, programs: int, seed: int) -> float:
    docs = [program_at(seed, k) for k in range(programs)]
    with BurnWorker(binary) as worker:
        worker.version()
        start = time.monotonic()
        for p in docs:
            worker.run(p)
        return programs / (time.monotonic() - start)


def overhead(programs: int, seed: int) -> None:
    default, cov = find_binary(), str(coverage_binary(Console(stderr=True)))
    print(f"default {default}\ncoverage {cov}\n{programs} programs, seed {seed}, one job")
    for what, fn in (("campaign (PyTorch, comparison, probes)", _campaign_rate), ("burn round trips alone", None)):
        rates: dict[str, list[float]] = {"default": [], "coverage": []}
        for name in ("default", "coverage", "coverage", "default"):
            binary = default if name == "default" else cov
            if fn is None:
                rates[name].append(_burn_rate(binary, programs, seed))
            else:
                rates[name].append(fn(binary, programs, seed, name == "coverage"))
        d, c = (sum(rates[n]) / 2 for n in ("default", "coverage"))
        print(f"{what}: default {d:.1f} programs/s {rates['default']}, coverage {c:.1f} programs/s "
              f"{rates['coverage']}; coverage/default {c / d:.3f}")


def _crate_counts(m: EdgeMap, hit: set[int]) -> dict[str, int]:
    crates = m.edge_crate
    out = dict.fromkeys(CRATES, 0)
    for i in hit:
        c = crates[i]
        if c in out:
            out[c] += 1
    return out


def guided(checkpoints: list[int], seed: int, share: float, svg: Path | None) -> None:
    binary = str(coverage_binary(Console(stderr=True)))
    budget = max(checkpoints)
    every = max(budget // 40, 1)
    # "either": the edges one campaign or the other reached; where it barely exceeds each, two
    # different searches have found about the same set (a lower bound of what the catalog reaches)
    points: dict[str, list[tuple[int, dict[str, int]]]] = {"random": [], "guided": [], "either": []}
    with BurnWorker(binary) as worker, tempfile.TemporaryDirectory() as tmp:
        m = load_map(worker)
        totals = _crate_counts(m, set(range(len(m))))
        guide = Guide(Frontier.load(Path(tmp) / "frontier"), GenConfig(), seed, share, m.burn_edges)
        seen: set[int] = set()
        start = time.monotonic()
        # both campaigns in step, one program each in turn, on one worker (its counters are
        # reset at every run): a load change on the machine weighs on both alike
        for k in range(budget):
            worker.run(program_at(seed, k))
            seen |= hit_edges(worker) & m.burn_edges
            program = guide.program(k)
            worker.run(program)
            guide.observe(program, worker)
            n = k + 1
            if n in checkpoints or n % every == 0:
                points["random"].append((n, _crate_counts(m, seen)))
                points["guided"].append((n, _crate_counts(m, guide.frontier.edges)))
                points["either"].append((n, _crate_counts(m, seen | guide.frontier.edges)))
            if n in checkpoints:
                for mode in ("random", "guided", "either"):
                    print(f"{mode:>6} {n:>6} programs: " + ", ".join(
                        f"{c} {v} / {totals[c]}" for c, v in points[mode][-1][1].items())
                        + f"  ({time.monotonic() - start:.0f}s)", flush=True)
        print(f"guided: {guide.stats()}, frontier {len(guide.frontier.entries)} entries")
    print("\n| programs | " + " | ".join(f"{c} random | {c} guided | {c} either" for c in CRATES) + " |")
    print("|---:|" + "---:|" * (3 * len(CRATES)))
    by = {mode: dict(p) for mode, p in points.items()}
    for n in checkpoints:
        print(f"| {n:,} | " + " | ".join(f"{by['random'][n][c]:,} | {by['guided'][n][c]:,} | {by['either'][n][c]:,}"
                                         for c in CRATES) + " |")
    if svg is not None:
        series = [Series(f"{c} {mode}", tuple((float(n), float(v[c])) for n, v in points[mode]))
                  for c in CRATES for mode in ("random", "guided")]
        svg.write_text(line_plot(series, title=f"burn edges reached, seed {seed}, guided share {share}",
                                 x_label="programs", y_label="edges") + "\n")
        print(f"wrote {svg}")


def attrs(programs: int, seed: int, ops: tuple[str, ...] | None) -> None:
    binary = str(coverage_binary(Console(stderr=True)))
    snap = boundary.ATTR_SNAP
    reached: dict[str, set[int]] = {}
    with BurnWorker(binary) as worker:
        m = load_map(worker)
        for mode, within in (("snapping", snap), ("without", 0.0)):
            boundary.ATTR_SNAP = within
            seen: set[int] = set()
            try:
                for k in range(programs):
                    program = generate(RandomChoices(program_seed(seed, k)), GenConfig(ops=ops))
                    marks = worker_marks(worker)
                    worker.run(program)
                    seen |= edges_after(worker, program, marks) & m.burn_edges
            finally:
                boundary.ATTR_SNAP = snap
            reached[mode] = seen
            counts = Counter(m.edge_crate[i] for i in seen)
            print(f"{mode:>8}: {len(seen):,} burn edges; " + ", ".join(f"{c} {n:,}" for c, n in sorted(counts.items())),
                  flush=True)
    files = m.file_crates
    for mode, other in (("snapping", "without"), ("without", "snapping")):
        only = reached[mode] - reached[other]
        where = Counter(" ".join(files[m.file[i]] or ("?",)) for i in only)
        print(f"only {mode}: {len(only)} edges; " + ", ".join(f"{f} {n}" for f, n in where.most_common(8)))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    o = sub.add_parser("overhead")
    o.add_argument("--programs", type=int, default=300)
    o.add_argument("--seed", type=int, default=0)
    g = sub.add_parser("guided")
    g.add_argument("--programs", default="500,2000")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--share", type=float, default=0.5)
    g.add_argument("--svg", default=None)
    a = sub.add_parser("attrs")
    a.add_argument("--programs", type=int, default=2000)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--ops", default=None, help="comma-separated catalog ops (default: the whole catalog)")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.what == "overhead":
        overhead(args.programs, args.seed)
    elif args.what == "attrs":
        attrs(args.programs, args.seed, tuple(args.ops.split(",")) if args.ops else None)
    else:
        guided(sorted(int(x) for x in args.programs.split(",")), args.seed, args.share,
               Path(args.svg) if args.svg else None)


if __name__ == "__main__":
    main()
