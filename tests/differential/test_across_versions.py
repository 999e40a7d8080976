"""Judging a case on a burn version against the knowledge declared for that version
(difftest/findings/across.py): stale rules, rules outside their range, bugs fixed in a version.

These run on the default build only: the version is the one the worker reports, or one passed
explicitly, and burn's behaviour is changed with the worker's deliberate faults where a test
needs a version that behaves differently.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from difftest.divergences.knowledge import Knowledge
from difftest.divergences.known_bugs import KnownBug
from difftest.divergences.rules import RULES, Rule, rules_for
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.across import judge_on, known_bug_of
from difftest.findings.corpus import Case, load_case

ROOT = Path(__file__).resolve().parents[2]
NO_GRAD = ROOT / "corpus" / "seed" / "side-branch-no-grad.json"  # divergence:region-off-autodiff
MODES = ROOT / "corpus" / "seed" / "pytorch-modes.json"  # divergence:leaf-detach
PASSES = ROOT / "corpus" / "seed" / "side-branch-detach.json"  # pass
POWI = ROOT / "corpus" / "bugs" / "powi-zero-untracked.json"  # bug


def _restricted(name: str, spec: str) -> tuple[Rule, ...]:
    """RULES with rule `name` declared for `spec` only."""
    return tuple(dataclasses.replace(r, knowledge=dataclasses.replace(r.knowledge, burn_versions=spec))
                 if r.name == name else r for r in RULES)


def test_rules_for_drops_a_rule_outside_its_range() -> None:
    rules = _restricted("leaf-detach", "<0.22.0")
    assert "leaf-detach" not in {r.name for r in rules_for("0.22.1", rules)}
    assert "leaf-detach" in {r.name for r in rules_for("0.21.0", rules)}


def test_a_rule_restricted_to_a_range_is_stale_on_a_version_outside_it(burn_worker: BurnWorker) -> None:
    case = load_case(NO_GRAD)
    rule = case.expected_rule()
    assert rule is not None
    version = burn_worker.burn_version()
    in_range = judge_on(case, burn_worker)
    assert (in_range.outcome, in_range.ok, in_range.text) == ("explained", True, f"explained by {rule}")
    cell = judge_on(case, burn_worker, rules=_restricted(rule, f"<{version}"))
    assert (cell.outcome, cell.ok, cell.text) == ("stale", False, f"{rule} stale")
    assert f"<{version}" in cell.detail and "widen" in cell.detail and f"explained by {rule}" in cell.detail
    assert rule not in cell.rules_fired  # not applied outside its range


def test_a_version_passed_explicitly_selects_the_rules(burn_worker: BurnWorker) -> None:
    """The declared ranges start at the version the records were measured on: a version
    before it (passed explicitly, the binary is the default build) gets no rule, and the
    divergence the default build still shows makes the rule stale there."""
    case = load_case(NO_GRAD)
    rule = case.expected_rule()
    declared = next(r for r in RULES if r.name == rule)
    older = "0.0.1"
    assert not declared.knowledge.holds_for(older)
    cell = judge_on(case, burn_worker, older)
    assert (cell.outcome, cell.ok) == ("stale", False)
    assert older in cell.detail


def test_a_rule_whose_prediction_fails_is_stale() -> None:
    """leaf-detach declared for the version, on a burn whose detach behaves like PyTorch's (a
    deliberate fault): the prediction fails there."""
    case = load_case(MODES)
    with BurnWorker(fault="detach-like-torch") as w:
        cell = judge_on(case, w)
    assert (cell.outcome, cell.ok, cell.text) == ("stale", False, "leaf-detach stale")
    assert "prediction fails" in cell.detail


def test_a_rule_outside_its_range_is_not_needed_where_burn_agrees() -> None:
    case = load_case(MODES)
    with BurnWorker(fault="detach-like-torch") as w:
        cell = judge_on(case, w, rules=_restricted("leaf-detach", f"<{w.burn_version()}"))
    assert (cell.outcome, cell.ok, cell.text) == ("not needed", True, "leaf-detach not needed")


def _as_bug(path: Path, burn_versions: str | None) -> tuple[Case, tuple[KnownBug, ...]]:
    case = load_case(path)
    case.status = "bug"
    if burn_versions is None:
        return case, ()
    record = Knowledge(case.name, "known-bug", "burn", "a bug declared for a test", ("README.md",), burn_versions)
    return case, (KnownBug(record, None),)


def test_a_bug_case_that_passes_is_fixed_in_that_version(burn_worker: BurnWorker) -> None:
    version = burn_worker.burn_version()
    case, bugs = _as_bug(PASSES, f"<{version}")  # declared fixed by this version
    cell = judge_on(case, burn_worker, bugs=bugs)  # type: ignore[arg-type]
    assert (cell.outcome, cell.ok, cell.text) == ("fixed", True, f"fixed in {version}")
    case, bugs = _as_bug(PASSES, f">={version}")  # declared to hold here: the range is stale
    cell = judge_on(case, burn_worker, bugs=bugs)  # type: ignore[arg-type]
    assert (cell.outcome, cell.ok) == ("fixed", False)
    assert "narrow" in cell.detail


def test_a_bug_case_still_failing_where_declared_fixed_is_flagged(burn_worker: BurnWorker) -> None:
    case = load_case(POWI)
    bug = known_bug_of(case)
    assert bug is not None and bug.name == case.name
    cell = judge_on(case, burn_worker)
    assert (cell.outcome, cell.ok) == ("fails as recorded", bug.knowledge.holds_for(burn_worker.burn_version()))
    fixed = (KnownBug(dataclasses.replace(bug.knowledge, burn_versions=f"<{burn_worker.burn_version()}"), None),)
    cell = judge_on(case, burn_worker, bugs=fixed)
    assert (cell.outcome, cell.ok) == ("fails as recorded", False)
    assert "excludes" in cell.detail


def test_a_candidate_fix_must_fix_its_own_bug_and_only_it(burn_worker: BurnWorker) -> None:
    """Judged as if the worker's burn had the patch `name` applied: the released burn still
    fails the patch's own case (not fixed), fails another bug as recorded, and a bug case that
    passes with a patch meant for another bug is a side effect to look at."""
    case = load_case(POWI)
    cell = judge_on(case, burn_worker, patch=case.name)
    assert (cell.outcome, cell.ok, cell.text) == ("not fixed", False, "NOT fixed")
    cell = judge_on(case, burn_worker, patch="another-bug")
    assert (cell.outcome, cell.ok) == ("fails as recorded", True)
    version = burn_worker.burn_version()
    passing, bugs = _as_bug(PASSES, f"<{version}")
    cell = judge_on(passing, burn_worker, bugs=bugs, patch=passing.name)  # type: ignore[arg-type]
    assert (cell.outcome, cell.ok, cell.text) == ("fixed", True, f"fixed by {passing.name}")
    cell = judge_on(passing, burn_worker, bugs=bugs, patch="another-bug")  # type: ignore[arg-type]
    assert (cell.outcome, cell.ok) == ("fixed", False) and "side effect" in cell.detail


def test_versions_command_on_the_default_build(capsys: pytest.CaptureFixture[str], burn_worker: BurnWorker) -> None:
    from difftest.cli import main

    version = burn_worker.burn_version()
    code = main(["versions", str(NO_GRAD), str(POWI), "--burn", version, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == (0 if doc["ok"] else 1)
    assert [v["burn"] for v in doc["versions"]] == [version]
    assert doc["versions"][0]["source"] == "default build"
    cells = {Path(c["case"]).name: c["cells"][version] for c in doc["cases"]}
    assert cells["side-branch-no-grad.json"]["text"] == "explained by region-off-autodiff"
    assert cells["powi-zero-untracked.json"]["outcome"] in ("fails as recorded", "fixed")


def test_versions_command_refuses_a_malformed_version(capsys: pytest.CaptureFixture[str]) -> None:
    from difftest.cli import main

    assert main(["versions", str(NO_GRAD), "--burn", "v0.22"]) == 2
    assert "not a version" in capsys.readouterr().err


def test_a_case_of_a_backend_the_build_lacks_is_not_run_nor_recorded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], burn_worker: BurnWorker) -> None:
    """A bug case recorded on another backend is judged there or not at all: replayed on Flex a
    Wgpu bug would read as fixed, and `--record` would write that into the case."""
    from difftest.cli import main
    from difftest.exec.backends import BACKENDS, binary_backends

    missing = [b for b in BACKENDS if b not in binary_backends(burn_worker.binary)]
    if not missing:
        pytest.skip("the default build has every backend")
    doc = json.loads(POWI.read_text())
    doc["backend"] = missing[0]
    case = tmp_path / "powi-zero-untracked.json"  # a Flex bug: on Flex it fails as recorded
    case.write_text(json.dumps(doc))
    version = burn_worker.burn_version()
    code = main(["versions", str(case), "--burn", version, "--json", "--record"])
    out = json.loads(capsys.readouterr().out)
    cell = out["cases"][0]["cells"][version]
    assert (cell["outcome"], cell["ok"]) == ("not run", True), cell
    assert f"a {missing[0]} case" in cell["detail"]
    assert code == 0
    assert json.loads(case.read_text()).get("versions_tested") == doc.get("versions_tested")  # nothing recorded
