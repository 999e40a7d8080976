"""The numbers the command line takes are checked before anything runs: a timeout or a budget
that would fail at once, wait forever or test nothing is a usage error (exit 2) naming the
option."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from difftest.cli import main

CASE = Path(__file__).parents[2] / "corpus/bugs/chunk-uneven-pieces-panics.json"


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "soon"])
def test_timeout_must_be_a_positive_finite_number(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """0 and -1 were tracebacks from the first request, inf an OverflowError, nan a wait forever."""
    err = _usage_error(["--timeout", value, "run", str(CASE)], capsys)
    assert "argument --timeout: " in err and repr(value) in err, err


def test_a_worker_that_never_answers_is_named_with_its_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A TimeoutError traceback before."""
    silent = tmp_path / "difftest-burn"
    silent.write_text("#!/usr/bin/env python3\nimport time\ntime.sleep(60)\n")
    silent.chmod(0o755)
    monkeypatch.setenv("DIFFTEST_BURN", str(silent))
    assert main(["--timeout", "0.5", "run", str(CASE)]) == 2
    err = capsys.readouterr().err
    assert f"the burn worker {silent} did not answer its version request within 0.5 s" in err, err
    assert "Traceback" not in err
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _runs(p, str(silent))], "the worker was left running"


def _runs(pid: str, binary: str) -> bool:
    try:
        return binary in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


@pytest.mark.parametrize(("argv", "message"), [
    (["--time", "nan"], "argument --time: must be a positive finite number of seconds, got 'nan'"),  # ran forever
    (["--time", "inf"], "argument --time: must be a positive finite number of seconds, got 'inf'"),  # ran forever
    (["--time", "-5"], "argument --time: must be a positive finite number of seconds, got '-5'"),
    (["--programs", "0"], "argument --programs: must be at least 1, got 0"),  # tested nothing, exit 0
    (["--programs", "-1"], "argument --programs: must be at least 1, got -1"),
    (["--max-statements", "0"], "argument --max-statements: must be at least 1, got 0"),  # tested nothing, exit 0
    (["--max-statements", "-5"], "argument --max-statements: must be at least 1, got -5"),
    (["--known-sites", "1.5"], "argument --known-sites: must be a share in [0, 1], got '1.5'"),
    (["--known-sites", "nan"], "argument --known-sites: must be a share in [0, 1], got 'nan'"),
    (["--known-sites", "half"], "argument --known-sites: not a number: 'half'"),
], ids=["time-nan", "time-inf", "time-negative", "programs-0", "programs-negative", "statements-0",
        "statements-negative", "known-sites-above-1", "known-sites-nan", "known-sites-word"])
def test_fuzz_refuses_a_budget_that_tests_nothing_or_never_ends(argv: list[str], message: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert message in _usage_error(["fuzz", *argv], capsys)


@pytest.mark.parametrize(("argv", "message"), [
    (["--programs", "5", "--time", "10"], "give --programs N or --time S, not both"),  # --time won silently
    (["--programs", "5", "--guided-share", "0.25"],
     "--guided-share is the share of a guided campaign: give --guided too"),
], ids=["programs-and-time", "guided-share-without-guided"])
def test_fuzz_refuses_options_that_would_be_ignored(argv: list[str], message: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", *argv, "--corpus", str(tmp_path / "corpus")]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err, captured.err
    assert captured.out == "", "the campaign started"


@pytest.mark.parametrize(("argv", "message"), [
    (["--n", "9000"], "--n must be in 1..8192 (difftest-burn's bound), got 9000"),
    (["--n", "0"], "--n must be in 1..8192 (difftest-burn's bound), got 0"),
    (["--iters", "10001"], "--iters must be in 1..10000 (difftest-burn's bound), got 10001"),
], ids=["n-beyond-burns-bound", "n-0", "iters-beyond-burns-bound"])
def test_memory_refuses_a_size_burn_refuses_before_pytorch_measures(
        argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """--n 9000 ran PyTorch's modes at 9000 x 9000, then burn's refused the size."""
    from difftest.memory import cli

    measured: list[object] = []
    def run_table(*args: object, **kwargs: object) -> list[object]:
        measured.append(args)
        return []

    monkeypatch.setattr(cli, "run_table", run_table)
    assert main(["memory", "--experiment", "seed", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not measured


def test_the_memory_bounds_are_burns() -> None:
    """The Python bounds are the Rust worker's (rust/src/memory.rs), which refuses past them."""
    import re

    from difftest.memory.table import MAX_ITERS, MAX_N

    rust = (Path(__file__).parents[2] / "rust/src/memory.rs").read_text()
    found = re.findall(r"const (MAX_\w+): u64 = ([\d_]+);", rust)
    bounds = {name: int(value.replace("_", "")) for name, value in found}
    assert bounds == {"MAX_N": MAX_N, "MAX_ITERS": MAX_ITERS}
