"""The asserting burn reproducers (difftest/findings/reproducers/expect.py): every bug case's
test fails on the released burn and every passing case's test passes (a bug of PyTorch's too: burn
gets it right), compiled and run for
real against burn (the crate of tests/rust_repro, sharing the interpreter's CARGO_TARGET_DIR).
That is what makes a reproducer something burn can merge as a regression test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from difftest.exec.backends import DEFAULT_BACKEND
from difftest.exec.burn_worker import BurnWorker, WorkerError
from difftest.findings.corpus import Case, load_case
from difftest.findings.reproducers import expected, rust_test, rust_test_file
from difftest.findings.reproducers import test_name as rust_name
from difftest.findings.reproducers.cargo import write_cargo
from difftest.oracle.check import check

ROOT = Path(__file__).resolve().parents[2]
REPRO_CRATE = ROOT / "tests" / "rust_repro"
DEFAULT_TARGET = Path.home() / ".cache" / "difftest" / "target"


def _cases() -> dict[str, Case]:
    out = {}
    for path in sorted((ROOT / "corpus").glob("*/*.json")):
        case = load_case(path)
        # the reproducers are compiled against Flex (tests/rust_repro); a case found on another
        # backend is replayed there by the backends tier (pytest --run-backends, docs/backends.md)
        if case.memory is None and case.status != "new" and case.backend == DEFAULT_BACKEND:
            out[rust_name(case.name or path.stem)] = case
    return out


CASES = _cases()


@pytest.fixture(scope="module")
def executable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.skip("cargo is not on PATH: the asserting burn tests cannot be compiled")
    try:
        worker = BurnWorker()
        worker.start()
    except WorkerError as e:
        pytest.skip(f"difftest-burn is not available: {e}")
    try:
        tests = [(c.program, n) for n, c in CASES.items()]
        verdicts = {n: check(c.program, worker) for n, c in CASES.items()}
    finally:
        worker.close()
    crate = tmp_path_factory.mktemp("asserting_repro")
    shutil.copy(REPRO_CRATE / "Cargo.toml", crate / "Cargo.toml")
    shutil.copytree(REPRO_CRATE / "src", crate / "src")
    if (ROOT / "rust" / "Cargo.lock").is_file():
        shutil.copy(ROOT / "rust" / "Cargo.lock", crate / "Cargo.lock")
    (crate / "tests").mkdir()
    text = rust_test_file(tests, lambda p, n: rust_test(p, n, expected(verdicts[n])))
    (crate / "tests" / "asserting.rs").write_text(text)
    env = {**os.environ}
    env.setdefault("CARGO_TARGET_DIR", str(DEFAULT_TARGET))
    command = [cargo, "test", "--release", "--no-run", "--message-format=json"]
    done = subprocess.run([*command, "--offline"], cwd=crate, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0 and "offline" in done.stderr:
        done = subprocess.run(command, cwd=crate, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        rendered = [json.loads(line).get("message", {}).get("rendered") or "" for line in done.stdout.splitlines()
                    if line.startswith("{") and '"compiler-message"' in line]
        pytest.fail("the asserting burn tests do not compile:\n" + "".join(rendered)[-6000:] + done.stderr[-3000:])
    exe = next(json.loads(line).get("executable") for line in done.stdout.splitlines()
               if line.startswith("{") and '"compiler-artifact"' in line
               and json.loads(line)["target"]["name"] == "asserting")
    yield Path(exe)


@pytest.mark.parametrize("name", list(CASES))
def test_a_bug_case_fails_on_burn_and_a_passing_case_passes(name: str, executable: Path) -> None:
    case = CASES[name]
    done = subprocess.run([str(executable), "--exact", name, "--test-threads=1"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "RUST_BACKTRACE": "0"})
    if case.status == "bug" and not case.blames_torch:
        assert done.returncode != 0, f"{name}: the bug's test passes on this burn\n{done.stdout[-2000:]}"
    else:  # a passing case, or a bug of PyTorch's: burn gets it right
        assert done.returncode == 0, f"{name} ({case.status}) fails:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"


def test_show_cargo_writes_a_project_that_pins_burn(tmp_path: Path) -> None:
    manifest = write_cargo(tmp_path / "p", "powf_zero_base_nan_grad", "#[test]\nfn powf_zero_base_nan_grad() {}\n",
                           "0.22.1")
    assert 'version = "=0.22.1"' in manifest.read_text()
    assert (tmp_path / "p" / "tests" / "powf_zero_base_nan_grad.rs").read_text().endswith("{}\n")
    assert (tmp_path / "p" / "src" / "lib.rs").is_file()
