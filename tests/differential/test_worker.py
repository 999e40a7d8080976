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
                    time.sleep(60)
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
