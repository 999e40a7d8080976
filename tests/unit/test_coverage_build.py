"""The coverage variant of the generated build (difftest/exec/coverage_build.py): its spec,
manifest and the RUSTC_WRAPPER that instruments burn's crates and the interpreter only. No
build runs here (tests/coverage/ uses a built one)."""

from __future__ import annotations

import os
import stat
import subprocess
import tomllib
from pathlib import Path

from difftest.exec import coverage_build
from difftest.exec.burn_builds import BurnSpec, generate_manifest, repository_rust_dir
from difftest.exec.coverage_map import crate_of


def test_the_default_spec_is_unchanged() -> None:
    spec = BurnSpec(version="0.22.1")
    assert spec.label == "0.22.1" and str(spec) == "0.22.1" and not spec.coverage
    doc = tomllib.loads(generate_manifest(spec, repository_rust_dir()))
    own = tomllib.loads((repository_rust_dir() / "Cargo.toml").read_text())["profile"]["release"]
    assert "features" not in doc and doc["profile"]["release"] == own  # rust/Cargo.toml's, as it is


def test_the_coverage_spec_has_its_own_directory_features_and_line_tables() -> None:
    spec = BurnSpec(version="0.22.1", coverage=True)
    assert spec.label == "0.22.1-coverage" and spec != BurnSpec(version="0.22.1")
    doc = tomllib.loads(generate_manifest(spec, repository_rust_dir()))
    assert "coverage" in doc["features"]
    assert doc["profile"]["release"]["debug"] == "line-tables-only"
    assert doc["dependencies"]["burn"]["version"] == "=0.22.1"


def _wrapped(tmp_path: Path, *args: str) -> list[str]:
    """The command line the wrapper runs for a rustc invocation with `args` (a fake rustc that
    prints its arguments)."""
    fake = tmp_path / "rustc"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = coverage_build.cargo_env(tmp_path)
    out = subprocess.run([env["RUSTC_WRAPPER"], str(fake), *args], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    return out.stdout.splitlines()


def test_the_wrapper_instruments_burn_and_the_interpreter_only(tmp_path: Path) -> None:
    flag = "passes=sancov-module"
    target = ("--target", "x86_64-unknown-linux-gnu")
    for name in ("burn_autodiff", "burn_flex", "burn_tensor", "burn_nn", "burn_optim", "burn_core", "difftest_burn"):
        assert flag in _wrapped(tmp_path, "--crate-name", name, "--crate-type", "lib", *target), name
        assert flag not in _wrapped(tmp_path, "--crate-name", name, "--crate-type", "lib"), name  # a host build
    for name in ("serde_json", "gemm", "reburn"):
        assert flag not in _wrapped(tmp_path, "--crate-name", name, "--crate-type", "lib", *target), name
    assert flag not in _wrapped(tmp_path, "--crate-name", "burn_derive", "--crate-type", "proc-macro", *target)
    assert _wrapped(tmp_path, "-vV") == ["-vV"]


def test_crate_of_burn_sources() -> None:
    reg = "/home/u/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f"
    assert crate_of(f"{reg}/burn-autodiff-0.22.1/src/ops/tensor.rs") == ("burn-autodiff", "src/ops/tensor.rs")
    assert crate_of(f"{reg}/burn-0.22.1/src/lib.rs") == ("burn", "src/lib.rs")
    assert crate_of("/src/burn/crates/burn-nn/src/loss/mse.rs") == ("burn-nn", "src/loss/mse.rs")
    assert crate_of("/work/difftest/rust/src/exec.rs") is None
    assert crate_of(f"{reg}/serde_json-1.0.1/src/de.rs") is None
