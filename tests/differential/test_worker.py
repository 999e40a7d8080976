"""The difftest-burn worker: protocol errors, panics, crashes and hangs never lose a case."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from difftest.exec import burn_worker
from difftest.exec.burn_worker import BurnWorker
from difftest.program.ir import Backward, OpCall, Program
from difftest.program.jsonio import dumps, program_to_dict
from difftest.program.observation import Observation
from tests.programs import leaf, op, program

SEED = program(leaf("w", [3.0, 4.0], rg=True), op("y", "tanh", "w"))


def _run_line(worker: BurnWorker, doc: object) -> dict[str, object]:
    return worker.send_line(dumps({"request": "run", "id": 7, "program": doc}))


def test_version_and_protocol(burn_worker: BurnWorker) -> None:
    v = burn_worker.version()
    assert v["burn"] == "0.22.1" and v["protocol"] == 1


def test_malformed_json_then_keeps_serving(burn_worker: BurnWorker) -> None:
    ans = burn_worker.send_line('{"request": "run", "id": 1, "program": ')
    assert ans["ok"] is False and ans["error"]["kind"] == "invalid-json"  # type: ignore[index]
    assert burn_worker.run(SEED).outcome == "ok"


def test_unknown_op_names_the_statement(burn_worker: BurnWorker) -> None:
    doc = program_to_dict(SEED)
    doc["statements"][1]["op"] = "frobnicate"
    ans = _run_line(burn_worker, doc)
    err = ans["error"]
    assert ans["ok"] is False
    assert err["kind"] == "invalid-program" and err["index"] == 1 and err["statement"] == "y"  # type: ignore[index]
    assert "frobnicate" in err["message"]  # type: ignore[index]
    assert burn_worker.run(SEED).outcome == "ok"


def test_shape_mismatch_is_a_structured_panic(burn_worker: BurnWorker) -> None:
    bad = program(leaf("a", [1.0, 2.0]), leaf("b", [1.0, 2.0, 3.0]), op("c", "add", "a", "b"))
    obs = burn_worker.run(bad)
    assert obs.outcome == "error"
    assert obs.error is not None and obs.error.kind == "panic" and obs.error.index == 2
    assert obs.error.statement == "c" and obs.error.message
    assert [v.id for v in obs.values] == ["a", "b"]
    assert burn_worker.run(SEED).outcome == "ok"


def test_data_is_rounded_to_f32_and_overflow_rejected(burn_worker: BurnWorker) -> None:
    doc = program_to_dict(SEED)
    doc["statements"][0]["data"] = [0.1, 4.0]
    ans = _run_line(burn_worker, doc)
    assert ans["ok"] is True
    assert ans["result"]["values"][0]["data"][0] == 0.10000000149011612  # type: ignore[index]
    doc["statements"][0]["data"] = [1e39, 4.0]
    ans = _run_line(burn_worker, doc)
    assert ans["ok"] is False and ans["error"]["index"] == 0  # type: ignore[index]


def _fake_worker(tmp_path: Path, behaviour: str) -> str:
    """A stand-in binary that speaks the protocol but crashes or hangs on `run`."""
    script = tmp_path / "fake-burn"
    script.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(
            f"""
            import json, os, sys, time
            for line in sys.stdin:
                req = json.loads(line)
                if req.get("request") == "run":
                    if {behaviour!r} == "crash":
                        os._exit(3)
                    if {behaviour!r} == "cut":  # dies while writing its answer (killed mid-line)
                        sys.stdout.write('{{"id": ' + str(req.get("id")) + ', "ok": true, "result": {{"val')
                        sys.stdout.flush()
                        os._exit(9)
                    if {behaviour!r} == "bytes":  # a line that is not UTF-8 (a stray print of raw bytes)
                        sys.stdout.buffer.write(b"\\x80 not text\\n")
                        sys.stdout.flush()
                        continue
                    if {behaviour!r} == "shape":  # valid JSON, not a run's answer
                        print(json.dumps({{"id": req.get("id"), "ok": True, "result": {{"values": 5}}}}), flush=True)
                        continue
                    time.sleep(60)
                if req.get("request") == "probe":  # each probe ran without error, no gradients
                    n = len(req["probes"]) - ({behaviour!r} == "shape")  # "shape": one outcome short
                    print(json.dumps({{"id": req.get("id"), "ok": True, "outcomes": [None] * n,
                                      "grads": [None] * n}}), flush=True)
                    continue
                print(json.dumps({{"id": req.get("id"), "ok": True, "version": {{}}}}), flush=True)
            """
        )
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_crash_keeps_the_case_and_restarts(tmp_path: Path) -> None:
    inflight = tmp_path / "inflight"
    w = BurnWorker(_fake_worker(tmp_path, "crash"), inflight_dir=inflight, timeout=10)
    obs = w.run(SEED)
    assert obs.outcome == "crash" and "status 3" in obs.error.message  # type: ignore[union-attr]
    kept = list(inflight.glob("*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == program_to_dict(SEED)
    assert w.restarts == 1 and w.version() == {}
    w.close()


def test_a_worker_that_dies_mid_answer_is_a_crash_not_a_bad_answer(tmp_path: Path) -> None:
    # a worker killed while it writes (SIGKILL, the OOM killer) leaves half a line: that is its
    # exit, reported with its status like any crash, not "non-JSON" with the fragment in the
    # finding's signature
    w = BurnWorker(_fake_worker(tmp_path, "cut"), inflight_dir=tmp_path / "inflight", timeout=10)
    obs = w.run(SEED)
    assert obs.outcome == "crash" and obs.error is not None
    assert "status 9 in the middle of an answer" in obs.error.message and "non-JSON" not in obs.error.message
    assert w.restarts == 1 and w.version() == {}
    w.close()


def test_an_answer_of_the_wrong_shape_is_a_crash_that_keeps_the_case(tmp_path: Path) -> None:
    """Valid JSON that is not a run's (or a probe's) answer: the process broke the protocol, so
    it is a crash observation naming the answer, the worker restarts and the program stays on
    disk, as for any crash; never a Python traceback out of the campaign."""
    inflight = tmp_path / "inflight"
    w = BurnWorker(_fake_worker(tmp_path, "shape"), inflight_dir=inflight, timeout=10)
    obs = w.run(SEED)
    assert obs.outcome == "crash" and obs.error is not None
    assert "malformed answer to a 'run' request" in obs.error.message and "'values': 5" in obs.error.message
    assert len(list(inflight.glob("*.json"))) == 1 and w.restarts == 1
    answer = w.probe_grads(SEED, [(0, "y"), (0, "w")])  # two probes asked, one outcome answered
    assert isinstance(answer, Observation) and answer.outcome == "crash"
    assert answer.error is not None and "malformed answer to a 'probe' request" in answer.error.message
    assert w.restarts == 2 and w.version() == {}
    w.close()


def test_an_answer_that_is_not_utf8_is_a_crash_that_keeps_the_case(tmp_path: Path) -> None:
    inflight = tmp_path / "inflight"
    w = BurnWorker(_fake_worker(tmp_path, "bytes"), inflight_dir=inflight, timeout=10)
    obs = w.run(SEED)
    assert obs.outcome == "crash" and obs.error is not None
    assert "non-JSON" in obs.error.message and "x80" in obs.error.message
    assert len(list(inflight.glob("*.json"))) == 1 and w.restarts == 1 and w.version() == {}
    w.close()


def test_hang_times_out_and_restarts(tmp_path: Path) -> None:
    inflight = tmp_path / "inflight"
    w = BurnWorker(_fake_worker(tmp_path, "hang"), inflight_dir=inflight, timeout=1.0)
    first = w.pid
    obs = w.run(SEED)
    assert obs.outcome == "timeout"
    assert w.pid != first and len(list(inflight.glob("*.json"))) == 1
    w.kill()


def test_answered_case_leaves_no_inflight_file(tmp_path: Path) -> None:
    w = BurnWorker(os.environ.get("DIFFTEST_BURN") or None, inflight_dir=tmp_path)
    assert w.run(SEED).outcome == "ok"
    assert list(tmp_path.glob("*.json")) == []
    w.close()


def test_a_worker_is_recycled_after_its_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """burn's graph locator is process-global and slows every backward as it fills: a fresh
    worker every RECYCLE_RUNS programs run, a probe request counting each of its probes; a
    scheduled recycle is not a restart (restarts count crashes, hangs and memory)."""
    monkeypatch.setattr(burn_worker, "RECYCLE_RUNS", 3)
    with BurnWorker(os.environ.get("DIFFTEST_BURN") or None) as w:
        first = w.pid
        assert w.run(SEED).outcome == "ok" and w.run(SEED).outcome == "ok" and w.pid == first
        assert w.run(SEED).outcome == "ok"
        assert w.recycled == 1 and w.restarts == 0 and w.pid != first
        second = w.pid
        session = Program((*SEED.statements, OpCall("s", "sum", ("y",)), Backward("bw", "s")))
        assert w.probe(session, [(3, "w"), (3, "y"), (3, "w")]) == [None, None, None]
        assert w.recycled == 2 and w.pid != second and w.run(SEED).outcome == "ok"


SESSION = Program((*SEED.statements, OpCall("s", "sum", ("y",)), Backward("bw", "s")))


def test_requests_queued_behind_a_run_are_answered_in_order_whatever_order_they_are_read() -> None:
    """A campaign sends a program's run and its probe batch before reading either (probe_run.py):
    each answer reaches its own request, whichever is read first, and equals a lone request's."""
    with BurnWorker(os.environ.get("DIFFTEST_BURN") or None) as w:
        alone_run, alone_probes = w.run(SESSION), w.probe_grads(SESSION, [(3, "w"), (3, "y")])
        run, probes = w.submit(SESSION), w.submit_probe_grads(SESSION, [(3, "w"), (3, "y")])
        assert probes.result() == alone_probes  # read first: the run's answer is read and kept for it
        assert run.result().values == alone_run.values and run.result().backwards == alone_run.backwards
        assert w.restarts == 0 and w.run(SEED).outcome == "ok"


def test_a_request_queued_behind_a_crash_is_sent_again_to_the_new_worker(tmp_path: Path) -> None:
    """The run crashes the worker with a probe batch queued behind it: the batch is answered by
    the restarted worker when its answer is asked for, not lost to a timeout; one that is not
    wanted is never sent again."""
    w = BurnWorker(_fake_worker(tmp_path, "crash"), inflight_dir=tmp_path / "inflight", timeout=10)
    run, wanted = w.submit(SEED), w.submit_probe_grads(SESSION, [(3, "w")])
    unwanted = w.submit_probe_grads(SESSION, [(3, "y")])
    assert run.result().outcome == "crash" and w.restarts == 1
    assert wanted.lost and unwanted.lost
    answer = wanted.answer()
    assert isinstance(answer, dict) and answer["ok"] is True and answer["id"] == wanted.rid
    assert w.restarts == 1 and not wanted.lost
    sent = w._next_id
    unwanted.discard()
    assert w._next_id == sent and w.version() == {}
    w.close()


def test_a_worker_is_not_recycled_under_a_queued_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """A recycle due after a run waits for the requests queued behind it, so none is lost (or
    run twice) to a scheduled restart."""
    monkeypatch.setattr(burn_worker, "RECYCLE_RUNS", 1)
    with BurnWorker(os.environ.get("DIFFTEST_BURN") or None) as w:
        first = w.pid
        run, probes = w.submit(SESSION), w.submit_probe_grads(SESSION, [(3, "w"), (3, "y")])
        assert run.result().outcome == "ok" and w.pid == first and w.recycled == 0
        answers = probes.result()
        assert not isinstance(answers, Observation) and [outcome for outcome, _ in answers] == [None, None]
        assert all(bw is not None and set(bw.grads) == {"w", "y", "s"} for _, bw in answers)
        assert w.recycled == 1 and w.pid != first and w.restarts == 0


@pytest.mark.parametrize("fault, said", [("bogus", 'unknown fault spec "bogus"'),
                                         ("grad-drop:batch_norm", 'grad-drop op "batch_norm" is not a catalog op')])
def test_a_bad_fault_spec_is_a_clear_error_not_a_traceback(fault: str, said: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The interpreter refuses the spec at startup and exits: the command says so, with the
    interpreter's own message, and exits 2."""
    from difftest.cli import main

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "p.json"
    path.write_text(dumps(program_to_dict(program(leaf("x", [1.0, 2.0], rg=True), op("y", "exp", "x")))))
    for argv in (["fuzz", "--programs", "3", "-j", "1", "--fault", fault, "--corpus", str(tmp_path / "c")],
                 ["run", "--fault", fault, str(path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "exited with status 2 before answering" in err and said in err and "Traceback" not in err, err
        assert err.count(said) == 1, err
