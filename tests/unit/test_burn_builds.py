"""The generated build of difftest-burn against another burn (difftest/exec/burn_builds.py):
specs, the manifest, the lock reading. No build runs here (tests/versions/ builds, with
--run-versions)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from difftest.exec.burn_builds import (
    BurnSpec,
    _off_release,
    generate_manifest,
    locked_burn_version,
    parse_specs,
    repository_rust_dir,
)

ROOT = Path(__file__).resolve().parents[2]
RUST = ROOT / "rust"


def test_specs_parse() -> None:
    assert parse_specs("0.22.0, 0.23.0-pre.1,0.22.0") == [BurnSpec(version="0.22.0"),
                                                          BurnSpec(version="0.23.0-pre.1")]
    for bad in ("", ",", "v0.22", "0.22.x", "path:"):
        with pytest.raises(ValueError):
            parse_specs(bad)


def test_a_path_spec_names_the_burn_crate(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no Cargo\.toml of the `burn` crate"):
        BurnSpec.parse(f"path:{tmp_path}")
    (tmp_path / "crates" / "burn").mkdir(parents=True)
    (tmp_path / "crates" / "burn" / "Cargo.toml").write_text('[package]\nname = "burn"\nversion = "9.1.0"\n')
    spec = BurnSpec.parse(f"path:{tmp_path}")  # a workspace root: its crates/burn
    assert spec.path == (tmp_path / "crates" / "burn").resolve()
    assert spec.label.startswith("path-burn-") and str(spec) == f"path:{spec.path}"
    assert BurnSpec.parse(f"path:{tmp_path / 'crates' / 'burn'}") == spec


def test_generated_manifest_builds_the_repository_sources_against_the_version() -> None:
    rust = repository_rust_dir()
    assert rust == RUST.resolve()
    ours = tomllib.loads((RUST / "Cargo.toml").read_text())
    doc = tomllib.loads(generate_manifest(BurnSpec(version="0.22.0"), rust, {"burn-core": "0.22.0"}))
    assert doc["package"]["name"] == ours["package"]["name"]
    assert Path(doc["package"]["build"]) == RUST / "build.rs"
    assert [Path(b["path"]) for b in doc["bin"]] == [RUST / "src" / "main.rs"]
    burn = doc["dependencies"]["burn"]
    assert burn["version"] == "=0.22.0"
    assert {k: v for k, v in burn.items() if k != "version"} == {
        k: v for k, v in ours["dependencies"]["burn"].items() if k != "version"}
    assert doc["dependencies"]["burn-core"] == {"version": "=0.22.0", "optional": True}
    assert doc["profile"] == ours["profile"]
    assert doc["workspace"] == {}


def test_generated_manifest_for_a_checkout_uses_a_path_dependency(tmp_path: Path) -> None:
    (tmp_path / "Cargo.toml").write_text('[package]\nname = "burn"\nversion = "0.22.1"\n')
    doc = tomllib.loads(generate_manifest(BurnSpec.parse(f"path:{tmp_path}"), repository_rust_dir()))
    burn = doc["dependencies"]["burn"]
    assert burn["path"] == str(tmp_path.resolve()) and "version" not in burn


def test_lock_reading(tmp_path: Path) -> None:
    reg = 'source = "registry+https://github.com/rust-lang/crates.io-index"'
    lock = tmp_path / "Cargo.lock"
    lock.write_text(
        "version = 4\n\n"
        f'[[package]]\nname = "burn"\nversion = "0.22.0"\n{reg}\n\n'
        f'[[package]]\nname = "burn-core"\nversion = "0.22.1"\n{reg}\n\n'
        '[[package]]\nname = "burn-flex"\nversion = "0.22.0"\n\n'  # a path crate: not pinned
        f'[[package]]\nname = "burnish"\nversion = "1.0.0"\n{reg}\n'
    )
    assert locked_burn_version(lock) == "0.22.0"
    assert _off_release(lock, "0.22.0") == {"burn-core": "0.22.1"}
    assert locked_burn_version(RUST / "Cargo.lock") == "0.22.1"  # the default build
