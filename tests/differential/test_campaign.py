"""Campaigns: finding signatures, dedup against the corpus, parallel jobs, shards and merge.

Nothing here depends on timing: campaigns are sized in programs, and program k of a seed is the
same program however the campaign is split among jobs and shards.
"""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from difftest.campaign.parallel import FuzzOptions, fuzz, job_programs, job_slice, parse_shard
from difftest.cli import main
from difftest.exec.burn_worker import find_binary
from difftest.findings.corpus import load_case
from difftest.findings.signature import case_signature, corpus_signatures, normalize, signature_of_mismatch
from difftest.findings.summary import Summary, merge
from difftest.oracle.compare import Mismatch
from difftest.program.ir import Backward
from difftest.program.jsonio import program_from_dict
from tests.programs import cut, leaf, op, program

PROG = program(
    leaf("x0", [1.0, 2.0], rg=True),
    op("v0", "cosh", "x0"),
    op("v1", "cosh", "v0"),
    op("v2", "exp", "v1"),
    cut("c0", "detach", "v2"),
)


def _quiet() -> Console:
    return Console(file=io.StringIO(), markup=False, width=160)


# ---------------------------------------------------------------------- signatures

def test_signature_strips_numbers_ids_and_addresses() -> None:
    a = Mismatch("outcome", "v0", 1, "burn", "no error", "panic at statement 1",
                 "index 7 out of bounds for NodeId(3) at 0x7ffe12ab, shape [2, 3]")
    b = Mismatch("outcome", "v1", 2, "burn", "no error", "panic at statement 2",
                 "index 12 out of  bounds for NodeId(41) at 0x55aa01,\n shape [4, 1]")
    assert signature_of_mismatch(a, PROG) == signature_of_mismatch(b, PROG)  # same op, other data
    other_op = Mismatch("outcome", "v2", 3, "burn", "no error", "panic at statement 3", a.detail)
    assert signature_of_mismatch(a, PROG) != signature_of_mismatch(other_op, PROG)
    other_msg = Mismatch("outcome", "v0", 1, "burn", "no error", "panic at statement 1", "division by zero")
    assert signature_of_mismatch(a, PROG) != signature_of_mismatch(other_msg, PROG)
    sig = signature_of_mismatch(a, PROG)
    assert sig.startswith("outcome:burn:cosh:outcome ") and len(sig.rsplit("#", 1)[1]) == 12
    assert normalize("x0 v12 1.5e-06 -3 0xdeadbeef 36741a6241759adc") == "xN vN N N ADDR HASH"


def test_crash_signature_ignores_earlier_stderr() -> None:
    """A crash's message carries the worker's stderr tail, which also holds earlier (caught)
    panics and arrives racily: only the exit status counts."""
    a = Mismatch("crash", None, None, "burn", "an answer", "crash",
                 "worker exited with status 134\ndifftest-burn: caught panic: at NodeId(2): tape consumed")
    b = Mismatch("crash", None, None, "burn", "an answer", "crash", "worker exited with status 134")
    c = Mismatch("crash", None, None, "burn", "an answer", "crash", "worker exited with status -11")
    assert signature_of_mismatch(a, PROG) == signature_of_mismatch(b, PROG)
    assert signature_of_mismatch(a, PROG) != signature_of_mismatch(c, PROG)
    assert signature_of_mismatch(a, PROG).startswith("crash:burn:program:crash exit 134 #")


def test_where_names_cuts_and_flags() -> None:
    m = Mismatch("flags", "c0", 4, "burn", {"is_autodiff": True, "is_tracked": False},
                 {"is_autodiff": True, "is_tracked": True}, "rules fired here: none")
    assert signature_of_mismatch(m, PROG).startswith("flags:burn:cut:detach:flags is_tracked=True #")
    # the recorded form (a case file's verdict.mismatches) gives the same signature
    assert signature_of_mismatch(m.to_dict(), PROG) == signature_of_mismatch(m, PROG)


def test_a_wrong_gradient_is_placed_at_the_leafs_reader() -> None:
    """Gradients are observed at leaves: "leaf" would make every gradient bug one signature."""
    p = program(leaf("x0", [1.0, 2.0], rg=True), leaf("x1", [1.0, 2.0], rg=True), op("v0", "cosh", "x0"),
                op("v1", "exp", "x1"), op("v2", "mul", "v0", "v1"), op("v3", "sum", "v2"), Backward("bw", "v3"))

    def grad(ident: str) -> Mismatch:
        return Mismatch("grad", ident, 0, None, "torch.grad[0]=1.0", "burn.grad[0]=1.5", "at backward bw",
                        "burn-wrong", backward="bw")

    assert signature_of_mismatch(grad("x0"), p).startswith("burn-wrong:-:cosh:grad #")
    assert signature_of_mismatch(grad("x1"), p).startswith("burn-wrong:-:exp:grad #")


# ---------------------------------------------------------------------- partition

@pytest.mark.parametrize("shards,jobs,programs", [(1, 1, 7), (1, 3, 10), (2, 2, 9), (3, 4, 25)])
def test_shards_and_jobs_partition_the_indices(shards: int, jobs: int, programs: int) -> None:
    seen: list[int] = []
    for i in range(shards):
        for j in range(jobs):
            start, stride = job_slice(i, shards, j, jobs)
            seen.extend(start + stride * t for t in range(job_programs(programs, j, jobs)))
    assert sorted(seen) == list(range(shards * programs))  # disjoint, and together the full run
    assert parse_shard("1/4") == (1, 4)
    with pytest.raises(ValueError):
        parse_shard("4/4")


# ---------------------------------------------------------------------- campaigns

def _stub(tmp: Path) -> str:
    """An interpreter that aborts on every program using cosh: a proxy to the real one (started
    only when a request is to be forwarded, so an abort costs one small Python start)."""
    real = find_binary()
    path = tmp / "difftest-burn-aborts-on-cosh"
    path.write_text(f"""#!{sys.executable} -S
import os, subprocess, sys
REAL = {real!r}
if sys.argv[1:] != ["--worker"]:
    os.execv(REAL, [REAL, *sys.argv[1:]])
child = None
for line in sys.stdin.buffer:
    if b'"cosh"' in line:
        os._exit(134)
    if child is None:
        child = subprocess.Popen([REAL, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    child.stdin.write(line)
    child.stdin.flush()
    sys.stdout.buffer.write(child.stdout.readline())
    sys.stdout.buffer.flush()
""")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_an_abort_is_one_finding_however_often_it_happens(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    # cosh in about a quarter of the programs: each of those aborts the worker
    ops = ("cosh", "exp", "sum", "add", "mul", "tanh", "sin", "neg", "abs", "sub", "square", "sigmoid")
    opts = FuzzOptions(seed=3, programs=200, ops=ops, max_statements=4, jobs=2, corpus=corpus,
                       binary=_stub(tmp_path), inflight_dir=tmp_path / "inflight", timeout=30)
    s = fuzz(opts, _quiet())
    assert s.programs == 200 and not s.errors and not s.interrupted
    crashes = [f for f in s.findings.values() if f.signature.startswith("crash:")]
    assert len(crashes) == 1, [f.signature for f in s.findings.values()]
    crash = crashes[0]
    assert crash.count > 1 and crash.count == s.verdicts["crash"] and not crash.known
    assert s.restarts >= crash.count  # every crash restarts the worker (and so does shrinking)
    assert len(s.saved) == len(s.findings)  # one case per distinct signature, none known before
    assert crash.path is not None and crash.path in s.saved
    saved = json.loads(Path(crash.path).read_text())
    assert saved["signature"] == crash.signature
    assert '"cosh"' in json.dumps(saved["program"])
    assert crash.shrunk is not None and len(saved["program"]["statements"]) == crash.shrunk[1] <= crash.shrunk[0]
    # without the stored field, the signature is recomputed from the recorded verdict
    del saved["signature"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(saved))
    assert case_signature(bare) == (crash.signature, "new")
    assert corpus_signatures(corpus)[crash.signature] == Path(crash.path)

    # the same campaign again: everything is known, nothing is saved
    again = fuzz(FuzzOptions(**{**opts.__dict__, "programs": 30, "jobs": 1}), _quiet())
    assert not again.saved and again.findings
    assert all(f.known for f in again.findings.values())
    assert again.findings[crash.signature].path == crash.path


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory: pytest.TempPathFactory) -> Summary:
    return fuzz(FuzzOptions(seed=5, programs=200, jobs=1, shrink=False, corpus=tmp_path_factory.mktemp("corpus"),
                            inflight_dir=None), _quiet())


def test_jobs_do_not_change_the_campaign(serial_run: Summary, tmp_path: Path) -> None:
    two = fuzz(FuzzOptions(seed=5, programs=200, jobs=2, shrink=False, corpus=tmp_path, inflight_dir=None),
               _quiet())
    assert serial_run.programs == two.programs == 200
    assert serial_run.verdicts == two.verdicts
    assert serial_run.ops == two.ops and serial_run.rules == two.rules
    assert {f.signature: (f.count, f.first) for f in serial_run.findings.values()} == {
        f.signature: (f.count, f.first) for f in two.findings.values()}


def test_shards_merge_to_the_full_run(serial_run: Summary, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jsons = []
    for i in range(2):
        s = fuzz(FuzzOptions(seed=5, programs=100, jobs=1, shard=i, shards=2, shrink=False, corpus=tmp_path,
                             inflight_dir=None), _quiet())
        assert s.programs == 100
        path = tmp_path / f"shard{i}.json"
        path.write_text(json.dumps(s.to_dict()))
        jsons.append(str(path))
    out = tmp_path / "merged.json"
    assert main(["merge", *jsons, str(tmp_path), "--json", str(out)]) == 0
    merged = Summary.from_dict(json.loads(out.read_text()))
    assert merged.programs == serial_run.programs == 200
    assert merged.verdicts == serial_run.verdicts and merged.ops == serial_run.ops
    assert merged.probes == serial_run.probes > 0 and merged.probes_checked == serial_run.probes_checked
    assert {f.signature: (f.count, f.first) for f in merged.findings.values()} == {
        f.signature: (f.count, f.first) for f in serial_run.findings.values()}
    assert merge([Path(j) for j in jsons]).to_dict()["verdicts"] == dict(serial_run.verdicts.most_common())
    assert "200 programs" in capsys.readouterr().out


def test_no_probes_is_part_of_the_campaigns_command(tmp_path: Path) -> None:
    opts = FuzzOptions(seed=5, programs=20, jobs=1, shrink=False, corpus=tmp_path, inflight_dir=None, probes=False)
    assert opts.source() == "difftest fuzz --seed 5 --no-probes"
    s = fuzz(opts, _quiet())
    assert s.programs == 20 and s.probes == 0 and "probes" in s.to_dict()


def test_the_known_site_share_is_part_of_the_campaigns_command() -> None:
    """`--known-sites` changes the programs of a seed where a trigger is met, so a campaign's
    command names it unless it is the default; program_at regenerates either campaign's programs."""
    from difftest.campaign.loop import program_at
    from difftest.strategies.config import DEFAULT_KNOWN_SITES

    assert "--known-sites" not in FuzzOptions(seed=5).source()
    assert FuzzOptions(seed=5, known_sites=0.0).source() == "difftest fuzz --seed 5 --known-sites 0"
    kept = [program_at(5, k, profile="float64", known_sites=1.0) for k in range(60)]
    avoided = [program_at(5, k, profile="float64", known_sites=0.0) for k in range(60)]
    assert kept != avoided  # some of them meet a trigger in 60 float64 programs
    assert [program_at(5, k, profile="float64") for k in range(60)] == [
        program_at(5, k, profile="float64", known_sites=DEFAULT_KNOWN_SITES) for k in range(60)]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_the_jobs_and_prints_the_summary(sig: signal.Signals, tmp_path: Path) -> None:
    """A terminal's Ctrl-C and the SIGTERM of `timeout` or a CI runner reach the whole process
    group: the parent stops the jobs after their current program; no job and no burn worker
    dies of it (a SIGTERM once killed both jobs, reported as crashes of the jobs themselves)."""
    summary = tmp_path / "s.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from difftest.cli import main; sys.exit(main())", "fuzz",
         "--programs", "1000000", "-j", "2", "--seed", "9", "--corpus", str(tmp_path / "corpus"),
         "--progress", "0.2", "--json", str(summary)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, start_new_session=True,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # wait until programs are running
        lines.append(line)
        if line.strip().endswith("worker restart(s)") and not line.strip().startswith("0 programs"):
            break
    os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C does: to the whole process group
    rest, _ = proc.communicate(timeout=120)
    text = "".join(lines) + rest
    assert "INTERRUPTED" in text, text
    assert "Traceback" not in text, text
    s = Summary.from_dict(json.loads(summary.read_text()))
    assert s.interrupted and 0 < s.programs < 1000000
    assert sum(s.verdicts.values()) == s.programs
    assert not s.verdicts.get("crash"), f"{sig.name} reached a burn worker"
    assert not s.errors, s.errors  # no job died of it
    assert proc.returncode == 130  # interrupted, whatever it found


def test_a_job_that_crashes_is_restarted_after_its_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A native crash of the job process itself (PyTorch, not the burn worker) loses nothing
    but the one program, which is kept under .difftest/crashes/ and named in the summary; the
    job is started again after it and the rest of its slice runs."""
    monkeypatch.setenv("DIFFTEST_JOB_CRASH_AT", "6")
    inflight = tmp_path / "state" / "inflight"
    s = fuzz(FuzzOptions(seed=5, programs=40, jobs=2, shrink=False, corpus=tmp_path / "corpus",
                         inflight_dir=inflight), _quiet())
    assert s.programs == 39, s.programs  # every program but the one it died on
    assert len(s.errors) == 1 and "running program 6" in s.errors[0] and "restarted after it" in s.errors[0], s.errors
    # it died while reporting program 6, after burn had answered: the program is kept all the same
    kept = list((tmp_path / "state" / "crashes").glob("program-6-*.json"))
    assert len(kept) == 1 and f"its program: {kept[0]}" in s.errors[0], s.errors
    assert program_from_dict(json.loads(kept[0].read_text())).statements  # a program `difftest run` replays
    assert not list(inflight.glob("*.json"))  # nothing else left in flight


def test_the_program_a_dead_job_had_in_flight_is_kept(tmp_path: Path) -> None:
    from difftest.campaign.parallel import _keep_crashed

    inflight = tmp_path / "inflight"
    inflight.mkdir()
    (inflight / "abc-4242.json").write_text("{}")
    (inflight / "def-7.json").write_text("{}")  # another job's
    kept = _keep_crashed(inflight, 4242, 17)
    assert kept == tmp_path / "crashes" / "program-17-abc-4242.json" and kept.is_file()
    assert not (inflight / "abc-4242.json").exists() and (inflight / "def-7.json").exists()


def test_a_campaign_says_which_corpus_cases_it_cannot_read(tmp_path: Path) -> None:
    """A case file that cannot be read is not counted as known (its findings would show as new):
    the campaign says so before it starts, rather than leaving it out silently."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "cut.json").write_text('{"format": "difftest-case", "version": 1, "status": "bug", "prog')
    console = _quiet()
    fuzz(FuzzOptions(seed=5, programs=2, jobs=1, shrink=False, corpus=corpus, inflight_dir=None), console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert f"warning: a corpus case that cannot be read is not counted as known: {corpus / 'cut.json'}: " in text, text


def test_a_later_campaign_runs_the_interpreter_difftest_burn_names_now(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The jobs fork from a forkserver that keeps the environment of the process's first campaign:
    a campaign after $DIFFTEST_BURN changed (a test, or a script running two builds) must still
    run the binary it names now, resolved before the jobs start."""
    fuzz(FuzzOptions(seed=0, programs=4, jobs=1, corpus=tmp_path / "first", inflight_dir=None), _quiet())
    faulty = tmp_path / "difftest-burn-faulty"
    faulty.write_text(f"#!/bin/sh\nDIFFTEST_BURN_FAULT=grad-scale:exp:0.5 exec {find_binary()} \"$@\"\n")
    faulty.chmod(faulty.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("DIFFTEST_BURN", str(faulty))
    s = fuzz(FuzzOptions(seed=0, programs=40, ops=("exp", "sum"), max_statements=3, jobs=1, shrink=False,
                         corpus=tmp_path / "second", inflight_dir=None), _quiet())
    assert any(":exp:grad:" in sig for sig in s.findings), list(s.findings)


def test_a_corrupt_case_under_a_findings_name_is_moved_aside_and_the_finding_saved(tmp_path: Path) -> None:
    """A truncated case file stood for its finding forever: found again, the finding was
    "already in the corpus" and only the corrupt file was kept."""
    opts = FuzzOptions(seed=0, programs=30, ops=("exp", "sum", "mul"), jobs=1, corpus=tmp_path / "corpus",
                       inflight_dir=None, fault="grad-scale:exp:1e-2")
    first = fuzz(opts, _quiet())
    assert len(first.saved) == 1, first.saved
    path = Path(first.saved[0])
    cut = path.read_bytes()[:200]
    path.write_bytes(cut)
    console = _quiet()
    again = fuzz(opts, console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    aside = path.with_name(path.name + ".corrupt")
    assert again.saved == [str(path)] and load_case(path).record["signature"] in again.findings
    assert aside.read_bytes() == cut  # kept, under a name no reader collects
    assert f"warning: {path} was not a readable case of this program" in text and str(aside) in text, text


def test_a_time_budget_shorter_than_the_start_up_tests_nothing_and_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--time` counts from the command's start, so a budget the jobs' start-up uses up runs no
    program: that is exit 2 and a line saying so, not exit 0 as if the campaign had passed."""
    from difftest.cli.main import main

    assert main(["fuzz", "--time", "0.001", "-j", "1", "--corpus", str(tmp_path / "corpus")]) == 2
    captured = capsys.readouterr()
    assert "0 programs in" in captured.out and "no program ran within --time 0.001s" in captured.err
