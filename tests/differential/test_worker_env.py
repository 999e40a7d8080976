"""The environment a burn worker starts in."""

from __future__ import annotations

import shlex
import stat
from pathlib import Path

import pytest

from difftest.exec.burn_worker import BurnWorker, find_binary


def _worker_threads(tmp_path: Path) -> str:
    """OMP_NUM_THREADS as a worker sees it (a wrapper records it, then runs the interpreter)."""
    seen = tmp_path / "omp"
    script = tmp_path / "difftest-burn"
    script.write_text(f'#!/bin/sh\nprintf %s "${{OMP_NUM_THREADS-unset}}" > {shlex.quote(str(seen))}\n'
                      f'exec {shlex.quote(find_binary())} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    worker = BurnWorker(binary=str(script))
    try:
        assert worker.version()["burn"]
    finally:
        worker.close()
    return seen.read_text()


def test_a_worker_runs_one_openmp_thread_unless_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the jobs fill the cores; a backend's OpenMP pool in each worker would oversubscribe them
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert _worker_threads(tmp_path) == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert _worker_threads(tmp_path) == "3"
