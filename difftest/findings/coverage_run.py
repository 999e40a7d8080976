"""Running programs on a coverage build for `difftest coverage`: the union of the edges they
hit, and the catalog's reach (which burn-autodiff backward nodes each catalog op's own programs
reach), kept beside the coverage binary's edge map because it depends on nothing else."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from difftest.exec.burn_worker import BurnWorker
from difftest.exec.coverage_map import EdgeMap, edges_after, worker_marks
from difftest.findings.coverage import NODE_ATTRIBUTION, backward_nodes
from difftest.ops.catalog import OPS
from difftest.program.files import read_json
from difftest.program.ir import Program
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate

REACH_FILE = "catalog-reach.json"
REACH_FORMAT = "difftest-catalog-reach"
PROGRAMS_PER_OP = 12  # generated programs of each op alone (no nn modules)
MODULE_PROGRAMS = 60  # programs that favour nn modules (any op)
MODULES = "(nn modules)"
REACH_SEED = 7_000_003

OnProgram = Callable[[int], None]


def run_programs(worker: BurnWorker, programs: Iterable[Program], on_program: OnProgram | None = None) -> tuple[
        set[int], int]:
    """The union of the edges `programs` hit in burn (each run alone, no PyTorch), and their count."""
    hit: set[int] = set()
    n = 0
    for program in programs:
        marks = worker_marks(worker)
        worker.run(program)
        hit |= edges_after(worker, program, marks)
        n += 1
        if on_program is not None:
            on_program(n)
    return hit, n


def reach_programs(per_op: int = PROGRAMS_PER_OP) -> dict[str, list[Program]]:
    """For each catalog op, `per_op` generated programs of it alone; and programs rich in nn
    modules. Seeded: the same programs every time."""
    base = GenConfig(module_weight=0.0)
    out: dict[str, list[Program]] = {}
    for j, spec in enumerate(OPS):
        cfg = replace(base, ops=(spec.name,))
        out[spec.name] = [generate(RandomChoices(REACH_SEED + 1000 * j + k), cfg) for k in range(per_op)]
    modules = GenConfig(module_weight=20.0)
    out[MODULES] = [generate(RandomChoices(REACH_SEED - 1 - k), modules) for k in range(MODULE_PROGRAMS)]
    return out


def catalog_reach(worker: BurnWorker, m: EdgeMap, on_op: Callable[[str, int, int], None] | None = None,
                  per_op: int = PROGRAMS_PER_OP) -> dict[str, set[str]]:
    """op -> the backward nodes its programs reach; cached beside the binary (its edge map's key)."""
    path = Path(worker.binary).parent / REACH_FILE
    st = Path(worker.binary).stat()
    key = f"{st.st_size}:{st.st_mtime_ns}:{per_op}:{NODE_ATTRIBUTION}:{','.join(s.name for s in OPS)}"
    if path.is_file():
        try:
            doc = read_json(path, strict=False)
            if doc.get("format") == REACH_FORMAT and doc.get("key") == key:
                return {op: set(nodes) for op, nodes in doc["reach"].items()}
        except (OSError, ValueError, KeyError):
            pass
    reach: dict[str, set[str]] = {}
    groups = reach_programs(per_op)
    for i, (op, programs) in enumerate(groups.items()):
        hit, _ = run_programs(worker, programs)
        reach[op] = backward_nodes(m, hit)
        if on_op is not None:
            on_op(op, i + 1, len(groups))
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps({"format": REACH_FORMAT, "key": key,
                                   "reach": {op: sorted(n) for op, n in reach.items()}}, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass
    return reach
