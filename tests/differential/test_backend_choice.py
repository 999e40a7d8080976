"""The backend a difftest-burn worker runs on (docs/backends.md): named in `--version` and in
every answer, chosen by `--backend` or a request's `backend` field; an unknown backend, or one
the binary was built without, is refused naming what and which backends the binary has."""

from __future__ import annotations

import json
import subprocess

import pytest

from difftest.exec.backends import binary_backends
from difftest.exec.burn_worker import BurnWorker, find_binary


def test_version_names_the_backend_and_the_compiled_ones() -> None:
    binary = find_binary()
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "backend flex" in out and "compiled in: flex" in out, out
    assert binary_backends(binary)[0] == "flex"


def test_every_answer_names_its_backend() -> None:
    with BurnWorker(backend="flex") as w:
        v = w.request("version")
        assert v["backend"] == "flex" and v["version"]["backend"] == "flex"
        assert "flex" in v["version"]["backends"]
        refused = w.request("run", program={"format": "difftest-program", "version": 1, "statements": []},
                            backend="cuda")
        assert refused["ok"] is False and refused["error"]["kind"] == "invalid-request"
        assert "unknown backend \"cuda\"" in refused["error"]["message"]
        assert w.request("status")["backend"] == "flex"  # the refusal did not change the worker


def test_a_backend_not_compiled_in_is_refused() -> None:
    binary = find_binary()
    missing = [b for b in ("ndarray", "wgpu", "vulkan", "tch") if b not in binary_backends(binary)]
    if not missing:
        pytest.skip("every backend is compiled into this binary: none to refuse")
    done = subprocess.run([binary, "--backend", missing[0], "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f'backend "{missing[0]}" is not compiled into this difftest-burn' in done.stderr, done.stderr
    line = json.dumps({"request": "version", "id": 1, "backend": missing[0]}) + "\n"
    out = subprocess.run([binary, "--worker"], input=line, capture_output=True, text=True, timeout=60).stdout
    answer = json.loads(out)
    assert answer["ok"] is False and "not compiled" in answer["error"]["message"]


def test_a_case_of_another_backend_runs_there_or_is_refused(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` and `show` of a case recorded on another backend use that backend, as `replay`
    does: with the default binary (Flex only) they refuse, naming the backend and how to get it,
    where they ran it on Flex (a `bug` case's "verdict: pass", an issue whose reproducer is
    Flex's); a case of the default backend still runs, and the issue's reproducer names the
    case's devices."""
    from pathlib import Path

    from difftest.cli.common import case_worker
    from difftest.cli.main import main
    from difftest.findings.corpus import load_case

    monkeypatch.delenv("DIFFTEST_BURN_BACKEND", raising=False)
    root = Path(__file__).resolve().parents[2] / "corpus"
    other = root / "backends" / "ndarray-sigmoid-f64-in-f32.json"
    if "ndarray" in binary_backends(find_binary()):
        pytest.skip("the binary has ndarray: nothing to refuse")
    for argv in (["run", str(other)], ["show", str(other), "--issue"], ["show", str(other), "--format", "rust"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "recorded on the ndarray backend" in err and "--backend ndarray" in err, (argv, err)
    flex_case = load_case(root / "bugs" / "powi-zero-untracked.json")
    import argparse

    w = case_worker(argparse.Namespace(timeout=30, fault=None), flex_case)
    assert w.backend is None
    w.close()
    assert main(["run", str(root / "bugs" / "powi-zero-untracked.json")]) == 1  # a bug case still fails
