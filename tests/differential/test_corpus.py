"""Corpus files: atomic no-clobber writes, statuses, corrupt files, collection."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.findings.corpus import Case, CorpusError, load_case, program_hash
from difftest.findings.saving import save_case
from tests.programs import backward, leaf, op, program

PROG = program(leaf("x", [1.0, 2.0], rg=True), op("y", "exp", "x"), op("s", "sum", "y"), backward("s"))


def _save(directory: str, reason: str) -> str:
    return str(save_case(Case(PROG, "pass", reason, record={"pad": "x" * 200_000}), Path(directory)).path)


def test_same_program_is_one_file(tmp_path: Path) -> None:
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        paths = pool.starmap(_save, [(str(tmp_path), f"writer {i}") for i in range(8)])
    assert len(set(paths)) == 1
    files = list(tmp_path.iterdir())
    assert [f.name for f in files] == [f"{program_hash(PROG)}.json"]
    doc = json.loads(files[0].read_text())  # complete, parseable
    assert doc["reason"].startswith("writer ")


def test_killed_writer_leaves_no_partial_case(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path\n"
        "import difftest.findings.corpus as c\nimport difftest.findings.saving as s\n"
        "from tests.differential.test_corpus import PROG\n"
        "real = s.os.fsync\n"
        "s.os.fsync = lambda fd: (real(fd), print('writing', flush=True), time.sleep(30))\n"
        f"s.save_case(c.Case(PROG, 'bug', 'x'), Path({str(tmp_path)!r}))\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=root)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not list(tmp_path.glob("*.json")), "a partial case is visible"
    leftovers = [p.name for p in tmp_path.iterdir()]
    assert all(n.startswith(".") and n.endswith(".tmp") for n in leftovers)  # hidden, never collected


def test_corrupt_and_invalid_files_are_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(CorpusError, match=r"bad\.json: malformed JSON"):
        load_case(bad)
    path = save_case(Case(PROG, "bug", "r"), tmp_path).path
    doc = json.loads(path.read_text())
    doc["status"] = "divergence:no-such-rule"
    path.write_text(json.dumps(doc))
    with pytest.raises(CorpusError, match="names no declared rule"):
        load_case(path)
    doc["status"] = "pass"
    doc["program"]["statements"][1]["op"] = "frobnicate"
    path.write_text(json.dumps(doc))
    with pytest.raises(CorpusError):
        load_case(path)


@pytest.mark.parametrize(("name", "text", "message"), [
    ("broken.json", "{", "broken.json: malformed JSON"),
    # nested 1000 deep: it raised RecursionError while pytest collected the corpus, and no case ran
    ("deep.json", "[" * 1000 + "]" * 1000, "deep.json: malformed JSON: nested more than 100 levels deep"),
], ids=["truncated", "deeply-nested"])
def test_collector_reports_a_corrupt_case_as_one_failure_and_runs_the_others(
        name: str, text: str, message: str, tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    corpus = tmp_path / "corpus"
    (corpus / "findings").mkdir(parents=True)
    (corpus / "findings" / name).write_text(text)
    save_case(Case(PROG, "pass", "regression"), corpus / "findings")
    env = {**os.environ, "DIFFTEST_CORPUS": str(corpus)}
    res = subprocess.run(
        [sys.executable, "-m", "pytest", str(corpus), "-p", "no:xdist", "-q", "--rootdir", str(root),
         "-c", str(root / "pyproject.toml")],
        capture_output=True, text=True, env=env, cwd=root, timeout=300,
    )
    assert "1 failed, 1 passed" in res.stdout, res.stdout[-2000:]
    assert message in res.stdout, res.stdout[-2000:]


def test_replay_and_report_name_a_deeply_nested_case_and_run_the_others(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from difftest.cli import main

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    deep = corpus / "deep.json"
    deep.write_text("[" * 1000 + "]" * 1000)
    save_case(Case(PROG, "pass", "regression"), corpus)
    assert main(["replay", str(corpus)]) == 1
    out = capsys.readouterr().out
    assert f"CORRUPT: {deep}: malformed JSON: nested more than 100 levels deep" in out, out
    assert "1 passed, 1 failed" in out, out
    assert main(["report", str(corpus), "-o", str(tmp_path / "r.html")]) == 1
    out = "".join(capsys.readouterr())  # the progress on stderr, the count on stdout
    assert f"{deep}: error ({deep}: malformed JSON: nested more than 100 levels deep)" in out, out
    assert "1 ok, 0 failed, 1 cannot run" in out, out


def test_bug_case_that_passes_fails_loudly(tmp_path: Path) -> None:
    from difftest.exec.burn_worker import BurnWorker
    from difftest.findings.corpus import judge
    from difftest.oracle.check import check

    with BurnWorker() as w:
        outcome = judge(Case(PROG, "bug", "pretend"), check(PROG, w))
    assert not outcome.ok and "now passes" in outcome.message


def test_the_repository_corpus_holds_each_bug_once() -> None:
    """Each `bug` signature has one case in corpus/ per burn backend it was found on (a case's
    `backend`, Flex by default): a finding that matches a known bug is counted, not saved again
    (difftest/pytest_plugin.py), so a second file with the signature on the same backend is a
    duplicate that slipped in and would replay the same bug twice. The same signature on another
    backend is another site (hard_sigmoid in float64: on Flex on the autodiff device only, on
    NdArray on the plain device too)."""
    from difftest.findings.signature import case_signature

    corpus = Path(__file__).resolve().parents[2] / "corpus"
    seen: dict[tuple[str, str], Path] = {}
    duplicates = []
    for path in sorted(corpus.rglob("*.json")):
        sig, status = case_signature(path)
        if status != "bug" or sig is None:
            continue
        key = (sig, json.loads(path.read_text()).get("backend", "flex"))
        if key in seen:
            duplicates.append(f"{path.relative_to(corpus)} repeats {seen[key].relative_to(corpus)} ({sig} on {key[1]})")
        else:
            seen[key] = path
    assert not duplicates, "\n".join(duplicates)


def test_every_bug_case_records_where_it_stands_upstream_and_its_root() -> None:
    """Every bug case says where it is upstream (a URL, or "not reported" with the searches made
    in its note), and a shared root cause names an existing bug case: the two unit-swap panics of
    burn-flex's reduce.rs are one report."""
    folder = Path(__file__).resolve().parents[2] / "corpus" / "bugs"
    bugs = {p.stem: load_case(p) for p in sorted(folder.glob("*.json"))}
    for name, case in bugs.items():
        up = case.record.get("upstream")
        assert up is not None, f"{name}: no upstream record"
        if up == "not reported":
            assert case.record.get("upstream_note"), f"{name}: 'not reported' without the searches made"
        assert case.root in bugs and bugs[case.root].status == "bug", f"{name}: root {case.root!r}"
    assert bugs["flex-sum-dim-backward-after-unit-swap-panics"].root == "flex-reduce-dim-after-unit-swap-panics"


def test_a_root_must_be_a_case_name(tmp_path: Path) -> None:
    src = Path(__file__).resolve().parents[2] / "corpus" / "bugs" / "powf-zero-base-nan-grad.json"
    doc = json.loads(src.read_text())
    doc["root"] = "Not A Name!"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(CorpusError, match="root"):
        load_case(bad)
