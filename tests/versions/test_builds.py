"""difftest-burn built against each burn of --run-versions reports, in `--version` and the
`version` request, the burn of its build's lock file (or of the checkout's Cargo.toml).

Marked `versions`: skipped unless `pytest --run-versions 0.22.0,0.23.0-pre.1,path:DIR`. Each
version builds once (minutes) into the cache outside the repository; later runs find it.
"""

from __future__ import annotations

import re
import subprocess
import tomllib

import pytest

from difftest.exec.burn_builds import BurnSpec, build, locked_burn_version
from difftest.exec.burn_worker import BurnWorker

pytestmark = pytest.mark.versions


def test_built_binary_reports_the_burn_of_its_lock(burn_spec: str) -> None:
    spec = BurnSpec.parse(burn_spec)
    built = build(spec)
    if spec.path is not None:
        expected = tomllib.loads((spec.path / "Cargo.toml").read_text())["package"]["version"]
        lock_entries = tomllib.loads((built.directory / "Cargo.lock").read_text())["package"]
        assert next(p for p in lock_entries if p["name"] == "burn").get("source") is None  # the path, not crates.io
    else:
        expected = locked_burn_version(built.directory / "Cargo.lock")
        assert expected == spec.version
    out = subprocess.run([str(built.binary), "--version"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    m = re.search(r"\(burn ([^,)\s]+)", out)
    assert m is not None and m.group(1) == expected, out
    with BurnWorker(str(built.binary)) as w:
        assert w.burn_version() == expected
