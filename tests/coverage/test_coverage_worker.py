"""The coverage build's worker (rust/src/coverage/, difftest/exec/coverage_map.py): its edges
answer is stable, a new op reaches new edges, its map attributes edges to burn's crates.

Marked `coverage`: skipped unless the coverage build exists (`difftest coverage --programs 1`
builds it once, 15-30 minutes on 2 cores, into the cache outside the repository; or
$DIFFTEST_BURN_COVERAGE names one). The default run never builds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from difftest.campaign.guided import Frontier, Guide
from difftest.campaign.loop import run_campaign
from difftest.exec.burn_worker import BurnWorker
from difftest.exec.coverage_map import EdgeMap, built_binary, hit_edges, load_map
from difftest.findings.coverage import backward_nodes
from difftest.program.ir import Program
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate

pytestmark = pytest.mark.coverage

BINARY = built_binary()
if BINARY is None:
    pytest.skip("the coverage build of difftest-burn is not built: `difftest coverage --programs 1` builds it "
                "(docs/coverage.md)", allow_module_level=True)


@pytest.fixture(scope="module")
def worker() -> Iterator[BurnWorker]:
    with BurnWorker(str(BINARY)) as w:
        yield w


@pytest.fixture(scope="module")
def edge_map(worker: BurnWorker) -> EdgeMap:
    return load_map(worker)


def _programs(op: str, n: int, seed: int = 11) -> list[Program]:
    cfg = replace(GenConfig(module_weight=0.0), ops=(op,))
    return [generate(RandomChoices(seed * 1000 + k), cfg) for k in range(n)]


def _edges(worker: BurnWorker, program: Program) -> frozenset[int]:
    worker.run(program)
    return hit_edges(worker)


def test_the_edges_of_a_program_are_stable_across_runs_and_workers(worker: BurnWorker, edge_map: EdgeMap) -> None:
    """The same program hits the same burn edges in every run and worker, up to a handful: a
    worker's first program also runs burn's one-time initialisation (the device registry, the
    config), which is why the program runs once before it is measured, and burn-autodiff keeps
    its graph in std HashMaps, whose per-process random seeds make a few edges of their probing
    vary (measured: 0 to 7 of about 750 edges). Guided campaigns count such an edge as new
    once, like any other."""
    burn = edge_map.burn_edges
    for op in ("matmul", "softmax", "conv2d"):
        program = _programs(op, 1)[0]
        _edges(worker, program)  # one-time initialisation, if this worker has not run it yet
        runs = [_edges(worker, program) & burn for _ in range(3)]
        with BurnWorker(str(BINARY)) as other:
            _edges(other, program)
            runs += [_edges(other, program) & burn for _ in range(3)]
        common = frozenset.intersection(*runs)
        assert len(common) > 100, op
        for run in runs:
            assert len(run - common) <= 0.02 * len(common), (op, sorted(run - common))


def test_counters_are_reset_between_programs(worker: BurnWorker, edge_map: EdgeMap) -> None:
    """A program run after a larger one hits none of the larger one's own burn edges (counters
    not reset would carry all of them over). Edges outside burn are left out: std's collections
    and atomics take other paths with the state earlier programs left (measured: 27 of the
    larger program's 1,324 own edges, none of them burn's, where a reset-less worker carries
    1,324)."""
    big, small = _programs("conv2d", 1)[0], _programs("exp", 1)[0]
    _edges(worker, small)
    alone = _edges(worker, small)
    big_only = (_edges(worker, big) - alone) & edge_map.burn_edges
    after_big = _edges(worker, small)
    assert len(big_only) > 100
    assert len(after_big & big_only) <= 0.02 * len(big_only), sorted(after_big & big_only)


def test_an_op_no_earlier_program_called_reaches_new_edges(worker: BurnWorker, edge_map: EdgeMap) -> None:
    seen: set[int] = set()
    for p in _programs("exp", 8):
        seen |= _edges(worker, p) & edge_map.burn_edges
    new = (_edges(worker, _programs("cumsum", 1)[0]) & edge_map.burn_edges) - seen
    assert new
    assert any(edge_map.edge_crate[i] == "burn-autodiff" for i in new)


def test_the_map_attributes_edges_to_burns_crates(edge_map: EdgeMap) -> None:
    crates = {c for c in edge_map.edge_crate if c is not None}
    assert {"burn-autodiff", "burn-flex", "burn-tensor", "burn-nn", "burn-optim", "burn-core"} <= crates
    assert len(backward_nodes(edge_map)) > 50  # burn-autodiff's node types compiled into the interpreter
    assert sum(c is None for c in edge_map.edge_crate) > 0  # the interpreter's own edges, not counted as burn


def test_a_default_binary_answers_no_edges() -> None:
    with BurnWorker() as w:
        answer = w.request("edges")
    assert not answer["ok"] and "not a coverage build" in answer["error"]["message"]


def test_a_guided_campaign_grows_its_frontier_and_resumes_it(worker: BurnWorker, edge_map: EdgeMap,
                                                            tmp_path: Path) -> None:
    d = tmp_path / "frontier"
    first = Guide(Frontier.load(d), GenConfig(), seed=9, share=0.5, burn_edges=edge_map.burn_edges)
    stats = run_campaign(worker, seed=9, programs=40, probes=False, steering=first, keep_findings=False)
    assert stats.programs == 40 and first.frontier.entries and sum(first.mutations.values()) > 0
    reached = set(first.frontier.edges)
    assert reached and reached <= edge_map.burn_edges
    again = Frontier.load(d)  # a later campaign starts from what the first reached
    assert again.edges == reached and len(again.entries) == len(first.frontier.entries)
    second = Guide(again, GenConfig(), seed=10, share=0.5, burn_edges=edge_map.burn_edges)
    run_campaign(worker, seed=10, programs=20, probes=False, steering=second, keep_findings=False)
    assert second.frontier.edges >= reached


def test_a_program_after_which_the_worker_recycles_keeps_its_edges(monkeypatch: pytest.MonkeyPatch,
                                                                    edge_map: EdgeMap) -> None:
    """A worker replaces its process right after every RECYCLE_RUNS-th answer; the new process's
    counters hold its own start-up, not the program, so the edges of that run are asked of a
    run in the new process. Burn's edges compared, within the 2% HashMap probing varies by."""
    from difftest.exec import burn_worker
    from difftest.exec.coverage_map import edges_after, worker_marks

    burn = edge_map.burn_edges
    program = _programs("exp", 1)[0]
    with BurnWorker(str(BINARY)) as w:
        w.run(program)  # one-time initialisation out of the way
        expected = _edges(w, program) & burn
        assert len(expected) > 100
        monkeypatch.setattr(burn_worker, "RECYCLE_RUNS", 1)
        w.run(program)
        assert w.recycled == 1
        assert len((hit_edges(w) & burn) ^ expected) > 0.1 * len(expected)  # what a caller that does not check gets
        marks = worker_marks(w)
        w.run(program)
        assert w.recycled == 2
        monkeypatch.setattr(burn_worker, "RECYCLE_RUNS", 1000)
        assert len((edges_after(w, program, marks) & burn) ^ expected) <= 0.02 * len(expected)
