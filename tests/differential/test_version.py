"""The burn version difftest-burn reports comes from the build (Cargo.lock), not a literal."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

from difftest.exec.burn_worker import BurnWorker, find_binary

CARGO_LOCK = Path(__file__).resolve().parents[2] / "rust" / "Cargo.lock"


def _locked_burn_version() -> str:
    with CARGO_LOCK.open("rb") as f:
        lock = tomllib.load(f)
    versions = [p["version"] for p in lock["package"] if p["name"] == "burn"]
    assert len(versions) == 1, f"expected one burn entry in {CARGO_LOCK}, found {versions}"
    return str(versions[0])


def test_version_flag_reports_locked_burn() -> None:
    out = subprocess.run([find_binary(), "--version"], capture_output=True, text=True, timeout=60, check=True)
    m = re.search(r"\(burn ([^,)\s]+)", out.stdout)
    assert m, f"no burn version in {out.stdout!r}"
    assert m.group(1) == _locked_burn_version()


def test_version_request_reports_locked_burn() -> None:
    with BurnWorker() as w:
        v = w.version()
    assert v["burn"] == _locked_burn_version()
