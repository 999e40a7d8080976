"""The README's public-API example, run as a user would run it: copied into a test file of a
directory outside this repository (none of the suite's conftest or Hypothesis profile applies)
and run by pytest there, with the plugin the package installs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    examples = [b for b in blocks if "@given" in b and "burn_worker" in b]
    assert len(examples) == 1, "the README should hold one Hypothesis example with the burn_worker fixture"
    return str(examples[0])


def test_the_readme_example_passes_in_a_project_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "test_readme_example.py").write_text(readme_example())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_XDIST_WORKER", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "--rootdir", str(tmp_path), str(tmp_path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "1 passed" in r.stdout
