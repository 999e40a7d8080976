"""Campaign throughput with 1 job and with J jobs (`difftest fuzz -j`), and the speed-up.

    python benchmarks/parallel.py [--programs N] [--jobs J] [--seed K] [--backend NAME] [--repeat R]

Runs the same campaign (seed, programs) with -j 1 and with -j J, without shrinking and into a
throw-away corpus, and prints programs/s of each: over the whole run, and after start-up (the
time until the first job reports: fork, burn worker start; the forkserver that imports torch
once is started by a warm-up run first). The programs are the
same in both runs, so the ratio is the parallel speed-up. Each run also prints the peak
resident set of its job processes and of their burn workers (sampled from /proc twice a second:
benchmarks/rss.py). Measurements only: nothing here asserts a speed (on a machine shared with
other work the ratio is noisy). `--repeat R` runs R pairs in alternating order (1, J, J, 1, 1, J,
…, so that a drift of the machine's load weighs on both alike) and prints the speed-up of the
mean rates with the range of the pairs' own ratios: one pair of short runs varies by ±0.1.
`--backend NAME`: the campaign `difftest fuzz --backend NAME` runs (a build with that backend,
made or found in the cache; the ops and dtypes it runs), so the rate per burn backend is
measured the same way.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from rich.console import Console
from rss import Sampler

from difftest.campaign.parallel import FuzzOptions, fuzz
from difftest.cli.backends import fit_campaign, use_backends
from difftest.findings.summary import Summary


def run(jobs: int, programs: int, seed: int, corpus: Path, ops: str = "", profile: str = "default") -> Summary:
    opts = FuzzOptions(seed=seed, programs=programs, jobs=jobs, corpus=corpus, shrink=False, inflight_dir=None,
                       live=False, progress_every=1e9, ops=tuple(ops.split(",")) if ops else None, profile=profile)
    return fuzz(opts, Console(quiet=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=3000)
    ap.add_argument("--jobs", type=int, default=2, help="the parallel run's jobs (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default=None, help="the burn backend (default: the binary's, flex)")
    ap.add_argument("--repeat", type=int, default=1, help="pairs of runs, in alternating order (default 1)")
    args = ap.parse_args()
    ops, profile = "", "default"
    if args.backend:  # as `difftest fuzz --backend` does: the build, then the ops and dtypes it runs
        use_backends(args.backend, None, several=False)
        ops, profile = fit_campaign(args.backend, ops, profile)
    print(f"{os.cpu_count()} cores; {args.programs} programs, seed {args.seed}, backend {args.backend or 'flex'}")
    order = [jobs for r in range(max(1, args.repeat)) for jobs in ((1, args.jobs) if r % 2 == 0 else (args.jobs, 1))]
    runs: dict[int, list[Summary]] = {1: [], args.jobs: []}
    with tempfile.TemporaryDirectory() as tmp:
        run(1, 1, args.seed, Path(tmp) / "warm-up", ops, profile)  # starts the forkserver (imports torch once)
        for n, jobs in enumerate(order):
            with Sampler() as sampler:
                s = run(jobs, args.programs, args.seed, Path(tmp) / f"corpus-{n}", ops, profile)
            runs[jobs].append(s)
            print(f"-j {jobs}: {s.programs} programs in {s.seconds:.1f}s: {s.rate:.0f} programs/s "
                  f"({s.steady_rate:.0f}/s after {s.startup:.1f}s start-up); peak resident sets: "
                  f"{sampler.line()}", flush=True)
    one, many = runs[1], runs[args.jobs]
    if any(s.verdicts != one[0].verdicts for s in one + many):
        print(f"WARNING: verdicts differ: {[dict(s.verdicts) for s in one + many]}")

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    overall = mean([s.rate for s in many]) / mean([s.rate for s in one])
    steady = mean([s.steady_rate for s in many]) / mean([s.steady_rate for s in one])
    pairs = [m.rate / o.rate for o, m in zip(one, many, strict=True)]
    spread = f"; the {len(pairs)} pairs' ratios {min(pairs):.2f} to {max(pairs):.2f}" if len(pairs) > 1 else ""
    print(f"speed-up -j {args.jobs} / -j 1: {overall:.2f} overall, {steady:.2f} after start-up{spread}")

if __name__ == "__main__":
    main()
