"""Ctrl-C stops every command cleanly: exit 130, a line saying so, no traceback (each of these
was a KeyboardInterrupt traceback and exit -2). `replay` tallies the cases that ran; an
interrupted campaign exits 130 whatever it found, its findings saved and its summary marked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import pytest

from difftest.cli import main

ROOT = Path(__file__).parents[2]
CASE = ROOT / "corpus/bugs/chunk-uneven-pieces-panics.json"

# A difftest-burn that answers as the real one until its `run`-th run request, which it leaves
# unanswered after writing the marker file: the command is then waiting on burn, as in a long
# program. It ignores SIGINT (the test sends it to the whole process group, as a terminal does)
# and exits when its input closes.
STALLING = """\
import json, signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
real, marker, stall_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
if "--worker" not in sys.argv:
    sys.exit(subprocess.call([real, *sys.argv[4:]]))
burn = subprocess.Popen([real, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
runs = 0
for line in sys.stdin:
    if json.loads(line).get("request") == "run":
        runs += 1
        if runs == stall_at:
            open(marker, "w").close()
            continue
    burn.stdin.write(line)
    burn.stdin.flush()
    sys.stdout.write(burn.stdout.readline())
    sys.stdout.flush()
"""


def _stalling_worker(tmp_path: Path, stall_at: int) -> tuple[Path, Path]:
    from difftest.exec.burn_worker import find_binary

    marker = tmp_path / "stalled"
    script = tmp_path / "stalling.py"
    script.write_text(STALLING)
    wrapper = tmp_path / "difftest-burn"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {script} {find_binary()} {marker} {stall_at} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, marker


def _interrupt_when_stalled(argv: list[str], wrapper: Path, marker: Path, cwd: Path) -> tuple[int, str, str]:
    env = {**os.environ, "DIFFTEST_BURN": str(wrapper), "PYTHONPATH": str(ROOT)}
    # the command as a terminal starts it, SIGINT at its default, whatever this test run inherited
    # (a shell without job control starts a background job with SIGINT ignored, and an ignored
    # signal stays ignored across fork and exec)
    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from difftest.cli import main; sys.exit(main())")
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), proc.communicate(timeout=10)
    before = _sigint_state(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C does: to the whole process group
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the command went on after Ctrl-C; its SIGINT before it was sent: {before}; "
                    f"its output: {out!r} {err!r}")
    return proc.returncode, out, err


def _sigint_state(pid: int) -> str:
    """Whether the process `pid` ignores, blocks or catches SIGINT (/proc/PID/status): a command
    started with SIGINT ignored (inherited from whatever started it) cannot see a Ctrl-C."""
    bit = 1 << (signal.SIGINT - 1)
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("SigIgn", "SigBlk", "SigCgt"):
            fields[key] = bool(int(value.strip(), 16) & bit)
    return ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in fields.items())


def test_ctrl_c_during_replay_prints_the_tally_of_the_cases_that_ran(tmp_path: Path) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    for name in ("a.json", "b.json", "c.json"):  # one program case three times: the second stalls
        (cases / name).write_text((ROOT / "corpus/seed/flags-of-w.json").read_text())
    wrapper, marker = _stalling_worker(tmp_path, stall_at=2)
    code, out, err = _interrupt_when_stalled(["replay", str(cases)], wrapper, marker, tmp_path)
    assert code == 130, (out, err)
    assert "1 passed, 0 failed, interrupted after 1 of 3 cases" in out, out
    assert "Traceback" not in err + out and "difftest replay: interrupted" not in err, err


def test_ctrl_c_during_run_stops_it_cleanly(tmp_path: Path) -> None:
    wrapper, marker = _stalling_worker(tmp_path, stall_at=1)
    code, out, err = _interrupt_when_stalled(["run", str(CASE)], wrapper, marker, tmp_path)
    assert code == 130, (out, err)
    assert "difftest run: interrupted" in err and "Traceback" not in err, err


def _interrupted(*args: Any, **kwargs: Any) -> NoReturn:
    raise KeyboardInterrupt


@pytest.mark.parametrize(("target", "argv"), [
    ("difftest.findings.report.build", ["report", str(CASE), "-o", "{tmp}/r.html"]),
    ("difftest.findings.matrix.build_matrix", ["versions", str(CASE), "--burn", "0.22.1"]),
    ("difftest.oracle.check.check", ["run", str(CASE)]),
    ("difftest.findings.versions_table.recorded_markdown",
     ["versions", "--recorded", "--corpus", str(ROOT / "corpus")]),
], ids=["report", "versions-build", "run", "versions-recorded"])
def test_every_command_stops_with_130_when_interrupted(target: str, argv: list[str], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(target, _interrupted)
    try:
        code = main([a.format(tmp=tmp_path) for a in argv])
    except KeyboardInterrupt:
        pytest.fail("the KeyboardInterrupt left main: a traceback")
    assert code == 130
    err = capsys.readouterr().err
    assert f"difftest {argv[0]}: interrupted" in err, err
    assert not (tmp_path / "r.html").exists()


def test_an_interrupted_campaign_exits_130_even_without_findings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """It exited 0, as a campaign that ran its whole budget and found nothing does."""
    from difftest.campaign import parallel
    from difftest.findings.summary import Summary

    monkeypatch.setattr(parallel, "fuzz", lambda opts, console: Summary(programs=7, interrupted=True))
    summary = tmp_path / "s.json"
    assert main(["fuzz", "--programs", "100", "-j", "1", "--corpus", str(tmp_path / "corpus"),
                 "--json", str(summary)]) == 130
    assert "INTERRUPTED" in capsys.readouterr().out
    assert json.loads(summary.read_text())["interrupted"] is True
