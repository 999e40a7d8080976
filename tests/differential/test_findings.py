"""End to end: an injected interpreter fault becomes exactly one minimal corpus case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import judge, load_case
from difftest.findings.reproducers import torch_script
from difftest.oracle.check import check
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import OpCall, Program
from difftest.pytest_plugin import assert_agrees
from difftest.strategies import programs


def test_injected_fault_leaves_one_minimal_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIFFTEST_CORPUS", str(tmp_path))
    faulty = BurnWorker(fault="grad-sign:exp")
    faulty.start()

    # over a few ops, so that the shrinker starts from a program of those (from the whole catalog
    # it spends most of a minute shrinking module weights away)
    @settings(max_examples=1500, derandomize=True, database=None)
    @given(program=programs(ops=["exp", "tanh", "sin", "add", "mul", "matmul", "sum"]))
    def prop(program: Program) -> None:
        assert_agrees(check(program, faulty), "tests/differential/test_findings.py (fault grad-sign:exp)", faulty)

    try:
        with pytest.raises(AssertionError, match="saved as"):
            prop()
    finally:
        faulty.close()
    files = list((tmp_path / "findings").glob("*.json"))
    assert len(files) == 1, files
    case = load_case(files[0])
    ops = [s.op for s in case.program.statements if isinstance(s, OpCall)]
    assert "exp" in ops and len(case.program) <= 6, case.program
    doc = json.loads(files[0].read_text())
    assert doc["status"] == "new" and doc["verdict"]["kind"] == "burn-wrong"
    assert doc["triage"]["localisation"]["where"] == "exp", doc["triage"]  # named by the faulty op
    assert doc["versions"]["burn"] == "0.22.1" and doc["observations"]["burn"]["backwards"]

    # the emitted PyTorch script prints the gradient PyTorch computes, which the case records
    out = subprocess.run([sys.executable, "-c", torch_script(case.program)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    torch_obs = run_torch(case.program)
    for ident, g in torch_obs.backwards[0].grads.items():
        if g is not None:
            values = ", ".join(repr(x) for x in g.data)
            assert f"grad {ident} = [{values}]" in out.stdout

    # without the fault, the case passes once re-classified
    with BurnWorker() as good:
        verdict = check(case.program, good)
    case.status = "pass"
    assert judge(case, verdict).ok, verdict.report()


def test_known_bugs_are_known_by_their_record_whatever_the_corpus(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A known bug is recognised by its record's site and effect (divergences/known_bugs.py),
    not by a corpus file: with an empty corpus in use, the used-leaf bug is still known (counted,
    not saved)."""
    from difftest.pytest_plugin import _KNOWN_BUGS, assert_agrees

    monkeypatch.setenv("DIFFTEST_CORPUS", str(tmp_path))
    case = load_case(Path(__file__).resolve().parents[2] / "corpus" / "bugs" / "backward-of-used-leaf-panics.json")
    with BurnWorker() as w:
        before = _KNOWN_BUGS["backward-of-used-leaf-panics"]
        assert_agrees(check(case.program, w), "test", w)
        assert _KNOWN_BUGS["backward-of-used-leaf-panics"] == before + 1
        assert not (tmp_path / "findings").exists()


def test_a_pytorch_result_a_second_run_does_not_repeat_is_flaky_and_burns_never_is(burn_worker: BurnWorker
                                                                                  ) -> None:
    """assert_agrees excuses a verdict only when every finding says PyTorch is wrong and the
    program agrees when run again (PyTorch's own nondeterminism); a burn-side finding, or a
    finding that repeats, is never excused (assert_agrees then saves and fails it)."""
    import dataclasses

    from difftest.oracle.compare import Mismatch
    from difftest.pytest_plugin import _FLAKY_TORCH, _torch_only_and_flaky

    case = load_case(Path(__file__).resolve().parents[2] / "corpus" / "seed" / "side-branch-detach.json")
    passing = check(case.program, burn_worker)
    assert passing.ok

    def claimed(verdict_text: str) -> object:
        m = Mismatch("grad", "x", 0, None, "torch.grad[0]=1.0", "burn.grad[0]=0.0", "a claim for the test",
                     verdict=verdict_text)
        return dataclasses.replace(passing, mismatches=[m])

    torch_wrong, burn_wrong = claimed("torch-wrong"), claimed("burn-wrong")
    assert _torch_only_and_flaky(torch_wrong, burn_worker)  # type: ignore[arg-type]
    assert not _torch_only_and_flaky(burn_wrong, burn_worker)  # type: ignore[arg-type]
    before = len(_FLAKY_TORCH)
    assert_agrees(torch_wrong, "a test", burn_worker)  # type: ignore[arg-type]
    assert len(_FLAKY_TORCH) == before + 1
    del _FLAKY_TORCH[before:]  # the claim was made up: keep it out of the run's summary
    powi = load_case(Path(__file__).resolve().parents[2] / "corpus" / "bugs" / "powf-zero-base-nan-grad.json")
    repeats = check(powi.program, burn_worker)
    assert not repeats.ok and not _torch_only_and_flaky(repeats, burn_worker)


def test_a_finding_the_corpus_cannot_take_is_kept_in_the_state_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$DIFFTEST_CORPUS naming a file (or any unwritable corpus) once replaced the finding's
    assertion by a NotADirectoryError and lost the case; now the case is kept beside the state
    and a warning says where."""
    import difftest.pytest_plugin as plugin
    from tests.programs import backward, leaf, op, program

    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    monkeypatch.setenv("DIFFTEST_CORPUS", str(not_a_dir))
    monkeypatch.setattr(plugin, "state_dir", lambda: tmp_path / "state")
    with BurnWorker(fault="grad-sign:exp") as faulty:
        verdict = check(program(leaf("x", [0.5, -1.0], rg=True), op("y", "exp", "x"), op("s", "sum", "y"),
                                backward("s")), faulty)
    assert not verdict.ok
    with pytest.warns(UserWarning, match="cannot save the finding under .*file/findings"):
        path = plugin.record_finding(verdict, "tests/differential/test_findings.py")
    assert path is not None and path.parent == tmp_path / "state" / "unsaved-findings"
    assert load_case(path).status == "new"
