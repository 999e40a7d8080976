"""Campaign throughput with a per-stage breakdown, and the campaign against its ceiling.

    python benchmarks/throughput.py [--programs N] [--seed K]

Pass 1 times each stage of checking a generated program one after the other — generation
(including the generator's concrete evaluation), the semantic model, the PyTorch executor, the
burn worker round trip (JSON encode, pipe, interpreter, decode), the comparison (arbitration
included) and, for a program that passes, its root probes (the model's predictions, burn's
`probe` request with the probes' gradients, the screen of those gradients against PyTorch's
runs of the probes, then the full check of each suspect: a probe whose outcome differs from the
prediction or whose gradients fail the screen; difftest/oracle/probe_run.py) — and prints
absolute times, each stage's share, and the ratio burn/PyTorch executor time. The
execution-only ceiling is the rate if a campaign did nothing but run both executors one after
the other: programs / (PyTorch time + burn time).

Pass 2 generates and checks the same programs the way a campaign does
(`difftest.oracle.probe_run.check_with_probes`: burn works in its process while PyTorch runs here,
then the probes; each program kept in flight on disk while it is checked, as `difftest fuzz`
keeps it: exec/inflight.py) and prints its rate as a ratio of that ceiling, and the rate without
probes (`difftest fuzz --no-probes`). On a machine shared with other work the wall-clock rates move
with the load; the CPU time each side used per program (this process, and the burn workers, read
from /proc) moves much less, and is printed too.

Memory: every `--rss-every` programs of pass 2, the resident set of this process and of the
burn worker (which is replaced every RECYCLE_RUNS runs, burn_worker.py) is sampled; the samples,
and the peaks of both, are printed, so a leak shows as a resident set that grows along the run.
Measurements only: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from rss import children_cpu_seconds, cpu_seconds, mib, self_peak, status

from difftest.divergences.rules import rules_for
from difftest.exec.burn_worker import BurnWorker
from difftest.exec.inflight import in_flight
from difftest.ops.validate import infer_shapes
from difftest.oracle.check import check
from difftest.oracle.compare import compare
from difftest.oracle.model import predict
from difftest.oracle.numerics import arbitrate
from difftest.oracle.probe_run import check_with_probes, disagrees, screen
from difftest.oracle.probes import root_probes
from difftest.oracle.pytorch import run as run_torch
from difftest.program.observation import Observation
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate


def burn_cpu(worker: BurnWorker) -> float:
    """CPU seconds every burn worker of this process has used so far: the recycled ones (waited
    for) and the live one."""
    return children_cpu_seconds() + (cpu_seconds(worker.pid) if worker.pid else 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rss-every", type=int, default=100, help="sample resident sets every N programs of pass 2")
    args = ap.parse_args()
    torch.set_num_threads(1)
    importlib.import_module("torch._dynamo")  # PyTorch imports it on the first optimizer (~1 s): not timed
    stages: dict[str, float] = defaultdict(float)
    statements = n_probes = n_screened = n_screen_failed = n_checked = 0
    with BurnWorker() as worker:
        rules = rules_for(worker.burn_version())
        worker.run(generate(RandomChoices(-1)))  # warm the worker up
        start = time.perf_counter()
        for k in range(args.programs):
            t0 = time.perf_counter()
            program = generate(RandomChoices(args.seed * 1_000_003 + k), GenConfig())
            t1 = time.perf_counter()
            shapes = infer_shapes(program)
            prediction = predict(program)
            t2 = time.perf_counter()
            torch_obs = run_torch(program)
            t3 = time.perf_counter()
            burn_obs = worker.run(program)
            t4 = time.perf_counter()
            verdict = compare(program, shapes, prediction, torch_obs, burn_obs, arbiter=arbitrate)
            t5 = time.perf_counter()
            probes = root_probes(program, rules) if verdict.ok else []
            t6 = time.perf_counter()
            answer = worker.probe_grads(program, [(p.index, p.root) for p in probes]) if probes else []
            t7 = time.perf_counter()
            suspects = list(probes) if isinstance(answer, Observation) else []
            if not isinstance(answer, Observation):
                items = [(p, bw) for p, (outcome, bw) in zip(probes, answer, strict=True)
                         if bw is not None and not disagrees(p, outcome)]
                suspects = [p for p, (outcome, bw) in zip(probes, answer, strict=True)
                            if disagrees(p, outcome) or (outcome is None and bw is None)]
                n_screened += len(items)
                passed = screen(program, items, prediction.nondet, rules)
                n_screen_failed += passed.count(False)
                suspects += [p for (p, _), ok in zip(items, passed, strict=True) if not ok]
            t8 = time.perf_counter()
            for p in suspects:  # each suspect's full check, as a campaign makes it (probe_run.run_probes)
                check(p.program(program), worker, rules=rules)
            t9 = time.perf_counter()
            n_probes += len(probes)
            n_checked += len(suspects)
            for name, a, b in (("generate", t0, t1), ("model", t1, t2), ("torch", t2, t3),
                               ("burn", t3, t4), ("compare", t4, t5), ("probe model", t5, t6),
                               ("probe burn", t6, t7), ("probe screen", t7, t8), ("probe checks", t8, t9)):
                stages[name] += b - a
            statements += len(program)
        total = time.perf_counter() - start
        samples: list[tuple[int, int, int | None, int, int]] = []  # (k, own RSS, worker pid, its RSS, its peak)
        worker_peak = 0
        # the campaign passes keep each program in flight on disk, as `difftest fuzz` does
        worker.inflight_dir = Path(tempfile.mkdtemp(prefix="difftest-inflight-"))
        start, cpu0, burn0 = time.perf_counter(), time.process_time(), burn_cpu(worker)
        for k in range(args.programs):
            program = generate(RandomChoices(args.seed * 1_000_003 + k), GenConfig())
            with in_flight([worker], program):
                check_with_probes(program, worker)
            w_rss, w_hwm = status(worker.pid) if worker.pid else (0, 0)  # each worker's peak before it is recycled
            worker_peak = max(worker_peak, w_hwm)
            if (k + 1) % args.rss_every == 0 or k + 1 == args.programs:
                samples.append((k + 1, status()[0], worker.pid, w_rss, w_hwm))
        campaign = time.perf_counter() - start
        campaign_cpu, campaign_burn = time.process_time() - cpu0, burn_cpu(worker) - burn0
        start = time.perf_counter()
        for k in range(args.programs):
            program = generate(RandomChoices(args.seed * 1_000_003 + k), GenConfig())
            with in_flight([worker], program):
                check(program, worker)
        unprobed = time.perf_counter() - start
        shutil.rmtree(worker.inflight_dir, ignore_errors=True)
    n = args.programs
    print(f"pass 1, stage by stage: {n} programs ({statements / n:.1f} statements on average) in {total:.1f}s: "
          f"{n / total:.0f} programs/s")
    print(f"{'stage':<12} {'total s':>8} {'ms/program':>11} {'share':>6}")
    for name, secs in stages.items():
        print(f"{name:<12} {secs:8.2f} {1000 * secs / n:11.3f} {100 * secs / total:5.1f}%")
    print(f"root probes: {n_probes / n:.1f} a program, {1000 * stages['probe burn'] / max(n_probes, 1):.3f} ms "
          f"each on burn; {n_screened / n:.1f} a program screened against PyTorch, "
          f"{1000 * stages['probe screen'] / max(n_screened, 1):.3f} ms each ({n_screen_failed} failed the screen); "
          f"{n_checked} suspects checked in full, {1000 * stages['probe checks'] / max(n_checked, 1):.1f} ms each")
    print(f"burn/PyTorch executor time ratio: {stages['burn'] / stages['torch']:.2f}")
    ceiling = n / (stages["torch"] + stages["burn"])
    rate = n / campaign
    print(f"execution-only ceiling: {ceiling:.0f} programs/s")
    print(f"pass 2, campaign (generate + check, burn overlapped with PyTorch, then the probes): {rate:.0f} "
          f"programs/s = {rate / ceiling:.2f} x the ceiling; without probes {n / unprobed:.0f} programs/s "
          f"(probes cost {100 * (1 - unprobed / campaign):.0f}% of the campaign's time)")
    print(f"pass 2 CPU: {1000 * campaign_cpu / n:.2f} ms a program here (Python, PyTorch), "
          f"{1000 * campaign_burn / n:.2f} ms in burn workers")
    print(f"resident sets every {args.rss_every} programs of pass 2 (program: this process / burn worker pid: "
          "its resident set, its peak):")
    print("  " + "; ".join(f"{k}: {mib(own)} / {pid}: {mib(w)}, {mib(h)}" for k, own, pid, w, h in samples))
    print(f"peak resident set: this process {mib(self_peak())}, a burn worker {mib(worker_peak)} (the largest "
          f"peak read after any program of pass 2)")


if __name__ == "__main__":
    main()
