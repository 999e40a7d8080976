"""difftest-burn built against each burn of --run-versions reports, in `--version` and the
`version` request, the burn of its build's lock file (or of the checkout's Cargo.toml).

Marked `versions`: skipped unless `pytest --run-versions 0.22.0,0.23.0-pre.1,path:DIR`. Each
version builds once (minutes) into the cache outside the repository; later runs find it.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from difftest.exec.burn_builds import BurnSpec, build, locked_burn_version
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import iter_case_files
from difftest.findings.matrix import build_matrix

pytestmark = pytest.mark.versions
ROOT = Path(__file__).resolve().parents[2]


def test_built_binary_reports_the_burn_of_its_lock(burn_spec: str) -> None:
    spec = BurnSpec.parse(burn_spec)
    built = build(spec)
    if spec.path is not None:
        expected = tomllib.loads((spec.path / "Cargo.toml").read_text())["package"]["version"]
        lock_entries = tomllib.loads((built.directory / "Cargo.lock").read_text())["package"]
        local = next(p for p in lock_entries if p["name"] == spec.crate_name)
        assert local.get("source") is None  # the path, not crates.io
    else:
        expected = locked_burn_version(built.directory / "Cargo.lock")
        assert expected == spec.version
    out = subprocess.run([str(built.binary), "--version"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    m = re.search(r"\(burn ([^,)\s]+)", out)
    assert m is not None and m.group(1) == expected, out
    with BurnWorker(str(built.binary)) as w:
        assert w.burn_version() == expected


def test_a_candidate_fix_fixes_its_bug_and_nothing_else(burn_spec: str, tmp_path: Path) -> None:
    """`--run-versions patch:upstream/<bug>.patch`: with the fix applied, the bug case it is
    named after (and the cases whose root that is) passes and every other case of the corpus
    does what it does on the release."""
    spec = BurnSpec.parse(burn_spec)
    if spec.patch is None:
        pytest.skip(f"{burn_spec} is not a candidate fix (patch:FILE)")
    from rich.console import Console

    columns, rows = build_matrix([spec], iter_case_files([ROOT / "corpus"]), timeout=120.0,
                                 console=Console(file=(tmp_path / "console.txt").open("w")))
    (col,) = columns
    assert col.error is None, col.error
    targets = [r for r in rows if r.case is not None and spec.patch.stem in (r.case.name, r.case.root)]
    assert targets, f"no bug case is named {spec.patch.stem} or has it as its root"
    for r in rows:
        cell = r.cells[col.label]
        assert cell.ok, f"{r.path}: {cell.text} ({cell.detail})"
        if r in targets:
            assert cell.outcome == "fixed", f"{r.path}: {cell.text}"
