"""How fast the Hypothesis property runs compared with bare generation and with a campaign.

    python benchmarks/hypothesis_rate.py [--examples N] [--programs N]

Prints programs per second of four loops over the default strategy:

* bare generation, seeded (`generate(RandomChoices(k))`, the campaign's source);
* bare generation under Hypothesis (the property's `@given(programs())` with the default
  profile's settings, derandomized, the test body empty);
* the property (the same examples, each checked: `check(program, worker)`);
* a campaign (seeded programs, each checked), the same work without Hypothesis;

and the ratios between them. Measurements only: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import importlib
import time

import torch
from hypothesis import HealthCheck, given, settings
from rss import mib, self_peak

from difftest.exec.burn_worker import BurnWorker
from difftest.oracle.check import check
from difftest.program.ir import Program
from difftest.strategies import programs
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate


def _settings(n: int) -> settings:
    return settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


def hypothesis_loop(n: int, body: object) -> tuple[int, float]:
    count = [0]

    @_settings(n)
    @given(programs())
    def run(program: Program) -> None:
        count[0] += 1
        body(program)  # type: ignore[operator]

    start = time.perf_counter()
    run()
    return count[0], time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=1000, help="Hypothesis examples (the property's count)")
    ap.add_argument("--programs", type=int, default=2000, help="seeded programs")
    args = ap.parse_args()
    torch.set_num_threads(1)
    importlib.import_module("torch._dynamo")  # PyTorch imports it on the first optimizer (~1 s): not timed
    cfg = GenConfig()
    rows: list[tuple[str, int, float]] = []

    start = time.perf_counter()
    for k in range(args.programs):
        generate(RandomChoices(k), cfg)
    rows.append(("bare generation (RandomChoices)", args.programs, time.perf_counter() - start))

    n, secs = hypothesis_loop(args.examples, lambda p: None)
    rows.append(("bare generation (Hypothesis)", n, secs))

    with BurnWorker() as worker:
        worker.run(generate(RandomChoices(-1), cfg))  # warm up
        n, secs = hypothesis_loop(args.examples, lambda p: check(p, worker))
        rows.append(("property (Hypothesis + check)", n, secs))
        start = time.perf_counter()
        for k in range(args.programs):
            check(generate(RandomChoices(k), cfg), worker)
        rows.append(("campaign (RandomChoices + check)", args.programs, time.perf_counter() - start))

    rate = {name: count / secs for name, count, secs in rows}
    print(f"{'loop':<34} {'programs':>8} {'seconds':>8} {'programs/s':>11}")
    for name, count, secs in rows:
        print(f"{name:<34} {count:8d} {secs:8.2f} {count / secs:11.1f}")
    bare_r, bare_h = rate["bare generation (RandomChoices)"], rate["bare generation (Hypothesis)"]
    prop, camp = rate["property (Hypothesis + check)"], rate["campaign (RandomChoices + check)"]
    print(f"property / bare seeded generation:    {prop / bare_r:6.1%}")
    print(f"property / bare Hypothesis generation: {prop / bare_h:6.1%}")
    print(f"property / campaign:                   {prop / camp:6.1%}")
    print(f"Hypothesis / seeded bare generation:   {bare_h / bare_r:6.1%}")
    print(f"peak resident set of this process: {mib(self_peak())}")


if __name__ == "__main__":
    main()
