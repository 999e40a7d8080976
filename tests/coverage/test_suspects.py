"""`difftest suspects` on the coverage build (difftest/findings/suspects.py, suspects_run.py):
real cases of burn 0.22.1's corpus, run with a passing sample, are placed where their faults
are in burn's source.

Marked `coverage`: skipped unless the coverage build exists (docs/coverage.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from difftest.campaign.loop import program_at
from difftest.cli.main import main
from difftest.divergences.rules import rules_for
from difftest.exec.burn_worker import BurnWorker
from difftest.exec.coverage_map import built_binary, load_map
from difftest.findings.corpus import load_case
from difftest.findings.suspects import group
from difftest.findings.suspects_run import Runner, line_table, run_all, sample_programs

pytestmark = pytest.mark.coverage

BINARY = built_binary()
if BINARY is None:
    pytest.skip("the coverage build of difftest-burn is not built: `difftest coverage --programs 1` builds it "
                "(docs/coverage.md)", allow_module_level=True)

BUGS = Path(__file__).parents[2] / "corpus" / "bugs"
SWAP = ("flex-reduce-dim-after-unit-swap-panics", "flex-sum-dim-backward-after-unit-swap-panics")
CHUNK = "chunk-uneven-pieces-panics"
PASSING = Path(__file__).parents[2] / "corpus" / "findings" / "0bcec6e32a56c911.json"  # status pass


@pytest.fixture(scope="module")
def runner() -> Iterator[Runner]:
    with BurnWorker(str(BINARY)) as w:
        yield Runner(w, line_table(load_map(w)), rules_for(w.burn_version()))


def test_two_faces_of_one_fault_are_one_place_and_another_bug_is_another(runner: Runner) -> None:
    """The two unit-swap panics (a mean_dim forward and a sum_dim backward) are one fault of
    burn-flex's dim reduction; the uneven chunk panics in burn-tensor's narrow check."""
    cases = [load_case(BUGS / f"{name}.json") for name in (*SWAP, CHUNK)]
    campaign = [(f"program {k}", program_at(0, k)) for k in range(10)]
    out = run_all(runner, cases, sample_programs(campaign, per_op=1))
    assert sorted(r.finding or "" for r in out.finding_runs) == sorted((*SWAP, CHUNK))
    assert out.spectrum.n_passing > 150
    groups, unplaced = group(out.spectrum, out.finding_runs)
    assert unplaced == []
    by = {tuple(g.findings): g for g in groups}
    assert set(by) == {SWAP, (CHUNK,)}
    swap = by[SWAP]
    assert swap.strict
    assert {(s.line.crate, s.line.path) for s in swap.site} == {("burn-flex", "src/ops/reduce.rs")}
    assert all(s.failing == 2 and s.passing == 0 for s in swap.site)
    assert {s.line.crate for s in by[(CHUNK,)].site} == {"burn-tensor"}


def test_the_command_writes_groups_and_says_which_cases_it_could_not_run(tmp_path: Path) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    for name in (*SWAP, "powi-zero-untracked"):
        (cases / f"{name}.json").write_text((BUGS / f"{name}.json").read_text())
    backend = Path(__file__).parents[2] / "corpus" / "backends" / "wgpu-bfloat16-wrong.json"
    (cases / backend.name).write_text(backend.read_text())
    out = tmp_path / "suspects.json"
    assert main(["suspects", str(cases), "--programs", "5", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["format"] == "difftest-suspects"
    assert sorted(g["findings"] for g in doc["groups"]) == [list(SWAP), ["powi-zero-untracked"]]
    assert set(doc["skipped"]) == {"wgpu-bfloat16-wrong"}


def test_a_corrupt_case_stops_the_command_before_any_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["suspects", str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err


def test_a_programs_lines_do_not_depend_on_its_being_a_process_first() -> None:
    """A new worker process runs burn's one-time initialisation with its first program; the
    runner warms every new process up, so that code is not counted as the program's (it would
    be a finding's own lines, never executed by a passing run)."""
    program = load_case(BUGS / f"{CHUNK}.json").program
    with BurnWorker(str(BINARY)) as w:
        r = Runner(w, line_table(load_map(w)), rules_for(w.burn_version()))
        first, second = r.run("first", program).lines, r.run("second", program).lines
    assert len(first) > 100
    assert len(first ^ second) <= 0.02 * len(first), sorted(ln.where for ln in first ^ second)[:20]


def test_a_case_that_passes_as_recorded_is_neither_a_finding_nor_reported_as_passing(runner: Runner) -> None:
    """A `pass` case is a regression test that passes: part of the spectrum, not of the report;
    only a case recorded failing that passes here is named (fixed on this build)."""
    fixed = load_case(BUGS / f"{CHUNK}.json")
    fixed.program = load_case(PASSING).program  # recorded as a bug, passes: "fixed here"
    out = run_all(runner, [load_case(PASSING), fixed], [])
    assert out.finding_runs == [] and out.spectrum.n_passing == 2
    assert out.not_failing == [CHUNK]
