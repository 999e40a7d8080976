"""`--backend B[,B…]`: which burn backends the commands run on (main.py dispatches here).

One backend (`fuzz`, `replay`, `show`, `run`): every worker of the command and of its job
processes runs on it ($DIFFTEST_BURN_BACKEND). Several (`run`, `fuzz`, `versions`): the program,
every program of the campaign or the cases run on each, and the output says where a finding
lives (findings/backends.py). A binary
without a named backend is replaced by a build that has it (burn_builds, cached as
`<cache>/<version>+<backend>/`). docs/backends.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.exec.backends import BACKEND_ENV, BACKENDS, binary_backends, extra_features, parse_backends

if TYPE_CHECKING:
    from difftest.exec.burn_worker import BurnWorker
    from difftest.program.ir import Program


def add_backend_option(parser: argparse.ArgumentParser, *, several: bool, what: str | None = None) -> None:
    what = what or ("burn backends to run on, each compared with PyTorch; the output says which show a finding"
                    if several else "the burn backend to run on")
    parser.add_argument("--backend", default=None, metavar="B,B,..." if several else "NAME",
                        help=f"{what} ({', '.join(BACKENDS)}; default flex); a difftest-burn without it "
                        "is rebuilt with it (cached; docs/backends.md)")


def use_backends(text: str, burn: str | None, *, several: bool) -> tuple[str, ...]:
    """Points $DIFFTEST_BURN at a binary that has every backend of `text` (building one when the
    current binary lacks some) and $DIFFTEST_BURN_BACKEND at the first; returns the backends.
    Raises ValueError (bad names) or BuildError."""
    from difftest.exec.burn_builds import BurnSpec, build_with_status
    from difftest.exec.burn_worker import find_binary
    from difftest.findings.matrix import binary_burn_version

    backends = parse_backends(text)
    if len(backends) > 1 and not several:
        raise ValueError(f"--backend {text!r}: this command runs on one backend (`difftest run` and "
                         "`difftest versions` take several)")
    binary = find_binary()
    have = binary_backends(binary)
    if not set(backends) <= set(have):
        spec = BurnSpec.parse(burn) if burn else BurnSpec(version=binary_burn_version(binary))
        spec = replace(spec, backends=extra_features(backends))
        os.environ["DIFFTEST_BURN"] = str(build_with_status(spec).binary)
    os.environ[BACKEND_ENV] = backends[0]
    return backends


def fit_campaign(backend: str, ops: str, profile: str) -> tuple[str, str]:
    """A campaign's `--ops` and `--profile` on `backend`: without the ops it refuses outright
    and, when it has no half precision, the dtypes it lacks (ops/backend_support.py); a dtype it
    lacks asked for explicitly is a ValueError. The calls it refuses for some attribute values
    only are left out by the generator (GenConfig.backends), which the campaign tells it of."""
    from difftest.ops import catalog
    from difftest.ops.backend_support import dtypes, refused_outright, unsupported_ops
    from difftest.program.dtypes import FLOAT_DTYPES
    from difftest.strategies.config import GenConfig

    has = dtypes(backend)
    cfg = GenConfig.profile(profile)
    if cfg.dtype is not None and cfg.dtype not in has:
        raise ValueError(f"--dtype {cfg.dtype}: the {backend} backend runs {', '.join(has)} only "
                         "(difftest/ops/backend_support.py)")
    drawn = {d for d, w in zip(FLOAT_DTYPES, cfg.dtype_weights) if w > 0} if cfg.dtype is None else {cfg.dtype}
    if drawn - set(has):
        # a profile that keeps the default dtype mix gets it without half precision (no-half);
        # one that sets its own is refused
        if cfg.dtype_weights != GenConfig().dtype_weights or not set(has) >= {"float32", "float64"}:
            raise ValueError(f"--profile {profile} draws {', '.join(sorted(drawn - set(has)))} programs, which "
                             f"the {backend} backend does not run")
        profile = "no-half" if profile == "default" else f"{profile}+no-half"
    refused = refused_outright(backend)
    if refused:
        chosen = ops.split(",") if ops else list(catalog.CATALOG)
        ops = ",".join(op for op in chosen if op not in refused)
        print(f"{backend}: without {', '.join(sorted(refused))} (the backend refuses it: "
              "difftest/ops/backend_support.py)", file=sys.stderr)
    for op, r in sorted(unsupported_ops(backend).items()):
        if r.attr is not None and (not ops or op in ops.split(",")):
            print(f"{backend}: {op} without {r.attr} {', '.join(map(str, r.by_value))} (the backend refuses "
                  "those calls: difftest/ops/backend_support.py)", file=sys.stderr)
    return ops, profile


def _workers(backends: tuple[str, ...], timeout: float, fault: str | None = None) -> dict[str, BurnWorker]:
    from difftest.exec.burn_worker import BurnWorker

    inflight = Path(".difftest") / "inflight"
    return {b: BurnWorker(timeout=timeout, inflight_dir=inflight, backend=b, fault=fault) for b in backends}


def run_on_backends(program: Program, backends: tuple[str, ...], timeout: float, as_json: bool,
                    fault: str | None = None) -> int:
    """`difftest run FILE --backend a,b`: the verdict on each backend and where the finding lives
    (`fault`: every worker runs with that DIFFTEST_BURN_FAULT spec; `on:<backend>:<spec>` makes
    one backend faulty)."""
    from difftest.cli.common import make_console
    from difftest.findings.backends import program_cell, run_on, verdict_blames_torch, where
    from difftest.findings.table import json_rows, table

    workers = _workers(backends, timeout, fault)
    try:
        verdicts = run_on(program, workers)
    finally:
        for w in workers.values():
            w.close()
    cells = {b: program_cell(b, v) for b, v in verdicts.items()}
    located = where({b: c.fails for b, c in cells.items()},
                    any(map(verdict_blames_torch, verdicts.values())) and all(
                        v.ok or verdict_blames_torch(v) for v in verdicts.values()))
    if as_json:
        print(json.dumps({"backends": {b: {**cells[b].to_dict(), "rows": json_rows(v)} for b, v in verdicts.items()},
                          "where": located}, indent=2))
    else:
        console = make_console()
        for b, v in verdicts.items():
            console.print(f"==== backend {b}: {cells[b].outcome}")
            console.print(v.report())
            console.print(table(v))
        console.print(f"where: {located}")
    return 0 if all(v.ok for v in verdicts.values()) else 1


def cmd_backends_matrix(args: argparse.Namespace, files: list[Path]) -> int:
    """`difftest versions CASE|DIR --backend a,b`: the cases × backends matrix at one burn
    version, each bug case's layer, and (`--record`) its `backends_tested`. A cell the case's
    record does not expect is explained by what is declared for its backend (a refusal, a known
    bug: findings/backends.py judged_cell), or fails the command."""
    from rich.table import Table

    from difftest.cli.common import make_console
    from difftest.findings.backends import judged_cell, record_backends_tested, where
    from difftest.findings.corpus import CorpusError, load_case
    from difftest.oracle.check import check

    if args.burn and "," in args.burn:
        print("--backend runs the cases at one burn version: give --burn one version", file=sys.stderr)
        return 2
    from difftest.exec.burn_builds import BuildError

    try:
        backends = use_backends(args.backend, args.burn, several=True)
    except (ValueError, BuildError) as e:
        print(e, file=sys.stderr)
        return 2
    workers = _workers(backends, args.timeout)
    burn = next(iter(workers.values())).burn_version()
    failed = False
    console = make_console()
    grid = Table(title=f"corpus × burn backend (burn {burn})")
    for col in ("case", "status", *backends, "where"):
        grid.add_column(col, overflow="fold")
    out: list[dict[str, object]] = []
    try:
        for f in files:
            try:
                case = load_case(f)
            except CorpusError as e:
                failed = True
                grid.add_row(f.stem, "?", *["CORRUPT"] * len(backends), str(e))
                continue
            if case.memory is not None:
                continue  # a memory case measures RSS in fresh processes, not a program on a backend
            cells = [judged_cell(case, b, check(case.program, w), w) for b, w in workers.items()]
            failed |= not all(c.ok for c in cells)
            located = where({c.backend: c.fails for c in cells}, case.blames_torch) if case.status == "bug" else ""
            grid.add_row(case.name, case.status, *[c.shown for c in cells], located)
            out.append({"case": str(f), "status": case.status, "cells": [c.to_dict() for c in cells],
                        "where": located})
            if args.record and case.status == "bug" and record_backends_tested(f, cells, burn):
                print(f"recorded backends_tested in {f}", file=sys.stderr)
    finally:
        for w in workers.values():
            w.close()
    if args.json:
        print(json.dumps({"burn": burn, "backends": list(backends), "cases": out}, indent=2))
    else:
        console.print(grid)
    return 1 if failed else 0
