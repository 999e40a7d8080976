"""The generated build of difftest-burn against another burn (difftest/exec/burn_builds.py):
specs, the manifest, the lock reading. No build runs here (tests/versions/ builds, with
--run-versions)."""

from __future__ import annotations

import re
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
from difftest.exec.burn_patches import BurnPatch, PatchError, prepare

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


# ------------------------------------------------------------------ candidate fixes (patch:FILE)

PATCH_TEXT = """A fix, with its release named before the diff
burn: 0.22.1

diff --git a/crates/burn-foo/src/lib.rs b/crates/burn-foo/src/lib.rs
--- a/crates/burn-foo/src/lib.rs
+++ b/crates/burn-foo/src/lib.rs
@@ -1,3 +1,3 @@
 pub fn one() -> u32 {
-    2
+    1
 }
"""


def _fake_registry(home: Path, name: str, version: str, body: str) -> Path:
    crate = home / "registry" / "src" / "index.crates.io-test" / f"{name}-{version}"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text(f'[package]\nname = "{name}"\nversion = "{version}"\n')
    (crate / "src" / "lib.rs").write_text(body)
    return crate


def test_a_patch_names_its_release_and_only_burn_crates(tmp_path: Path) -> None:
    good = tmp_path / "fix.patch"
    good.write_text(PATCH_TEXT)
    patch = BurnPatch.read(good)
    assert (patch.release, patch.crates) == ("0.22.1", ("burn-foo",))
    spec = BurnSpec.parse(f"patch:{good}")
    assert (spec.version, spec.patch, spec.is_release) == ("0.22.1", good.resolve(), False)
    assert spec.label.startswith("patch-fix-") and str(spec) == f"patch:{good.resolve()}"
    copy = tmp_path / "elsewhere" / "fix.patch"  # one build per patch text, wherever the file lies
    copy.parent.mkdir()
    copy.write_text(PATCH_TEXT)
    assert BurnSpec.parse(f"patch:{copy}").label == spec.label
    copy.write_text(PATCH_TEXT + "\n")
    assert BurnSpec.parse(f"patch:{copy}").label != spec.label
    assert BurnSpec(version="0.22.1").is_release
    bad = {  # what is wrong -> (the patch, what the error says)
        "no release": (PATCH_TEXT.replace("burn: 0.22.1\n", ""), "no `burn: VERSION` line"),
        "bad release": (PATCH_TEXT.replace("burn: 0.22.1", "burn: 0.22.x"), "not a version"),
        "no diff": ("burn: 0.22.1\njust text\n", "no `diff --git` section"),
        "outside the crates": (PATCH_TEXT.replace("crates/burn-foo/src/lib.rs", "README.md"),
                               "touches README.md, outside burn's crates"),
        "another crate": (PATCH_TEXT.replace("crates/burn-foo", "crates/serde"),
                          "touches crates/serde/src/lib.rs, outside burn's crates"),
        "a move between crates": (PATCH_TEXT.replace("b/crates/burn-foo", "b/crates/burn-bar", 1),
                                  "moves a file from crates/burn-foo to crates/burn-bar"),
    }
    for what, (text, says) in bad.items():
        f = tmp_path / f"{what.replace(' ', '-')}.patch"
        f.write_text(text)
        with pytest.raises(ValueError, match=re.escape(str(f)) + ".*" + re.escape(says)):
            BurnSpec.parse(f"patch:{f}")
    with pytest.raises(ValueError, match="cannot read"):
        BurnSpec.parse(f"patch:{tmp_path / 'missing.patch'}")


def test_a_patch_is_applied_to_a_copy_of_the_released_crate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "cargo"))
    released = _fake_registry(tmp_path / "cargo", "burn-foo", "0.22.1", "pub fn one() -> u32 {\n    2\n}\n")
    (tmp_path / "fix.patch").write_text(PATCH_TEXT)
    patch = BurnPatch.read(tmp_path / "fix.patch")

    def no_cargo(args: list[str], cwd: Path) -> None:
        raise AssertionError(f"cargo {args} should not run: the crate is in the registry")

    build_dir = tmp_path / "build"
    crates = prepare(patch, build_dir, no_cargo)
    assert crates == {"burn-foo": build_dir / "patched" / "crates" / "burn-foo"}
    assert (crates["burn-foo"] / "src" / "lib.rs").read_text() == "pub fn one() -> u32 {\n    1\n}\n"
    assert "2" in (released / "src" / "lib.rs").read_text()  # the registry's copy is untouched
    stamp = (crates["burn-foo"] / "src" / "lib.rs").stat().st_mtime_ns
    assert prepare(patch, build_dir, no_cargo) == crates  # made once per patch text: cargo's cache holds
    assert (crates["burn-foo"] / "src" / "lib.rs").stat().st_mtime_ns == stamp
    doc = tomllib.loads(generate_manifest(BurnSpec(version="0.22.1", patch=patch.file), repository_rust_dir(),
                                          replaced=crates))
    assert doc["dependencies"]["burn"]["version"] == "=0.22.1"
    assert doc["patch"]["crates-io"] == {"burn-foo": {"path": str(crates["burn-foo"])}}


def test_a_patch_that_does_not_apply_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "cargo"))
    _fake_registry(tmp_path / "cargo", "burn-foo", "0.22.1", "pub fn one() -> u32 {\n    3\n}\n")
    (tmp_path / "fix.patch").write_text(PATCH_TEXT)
    with pytest.raises(PatchError, match=r"does not apply to burn 0\.22\.1's released crates \(burn-foo\)"):
        prepare(BurnPatch.read(tmp_path / "fix.patch"), tmp_path / "build", lambda args, cwd: None)
    with pytest.raises(PatchError, match=r"has no burn-bar-0\.22\.1 even after `cargo fetch`"):
        (tmp_path / "bar.patch").write_text(PATCH_TEXT.replace("burn-foo", "burn-bar"))
        prepare(BurnPatch.read(tmp_path / "bar.patch"), tmp_path / "build2", lambda args, cwd: None)


def test_a_path_to_one_burn_crate_replaces_that_crate_of_its_release(tmp_path: Path) -> None:
    (tmp_path / "Cargo.toml").write_text('[package]\nname = "burn-autodiff"\nversion = "0.22.1"\n')
    spec = BurnSpec.parse(f"path:{tmp_path}")
    doc = tomllib.loads(generate_manifest(spec, repository_rust_dir()))
    assert doc["dependencies"]["burn"]["version"] == "=0.22.1"
    assert doc["patch"]["crates-io"] == {"burn-autodiff": {"path": str(tmp_path.resolve())}}


@pytest.mark.parametrize("patch_file", sorted((ROOT / "upstream").glob("*.patch")), ids=lambda p: p.stem)
def test_the_upstream_patches_apply_to_their_release(patch_file: Path, tmp_path: Path) -> None:
    """Each candidate fix in upstream/ names a bug case and applies to the released crates
    (when cargo's registry here has them; the default build downloads them)."""
    from difftest.exec.burn_patches import registry_crate

    patch = BurnPatch.read(patch_file)
    assert (ROOT / "corpus" / "bugs" / f"{patch_file.stem}.json").is_file()
    if any(registry_crate(c, patch.release) is None for c in patch.crates):
        pytest.skip(f"cargo's registry has not downloaded {patch.crates} {patch.release} "
                    "(https://doc.rust-lang.org/cargo/commands/cargo-fetch.html)")
    crates = prepare(patch, tmp_path, lambda args, cwd: None)
    assert set(crates) == set(patch.crates)


def test_a_patched_build_starts_from_the_default_build_of_its_release(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from difftest.exec.burn_builds import _seed_target

    default = tmp_path / "default"
    (default / "release" / "deps").mkdir(parents=True)
    (default / "release" / "deps" / "libserde.rlib").write_text("compiled")
    monkeypatch.setenv("CARGO_TARGET_DIR", str(default))
    log = tmp_path / "build.log"
    log.write_text("")
    release = locked_burn_version(RUST / "Cargo.lock")
    _seed_target(tmp_path / "other-release", RUST, "0.0.1", log)
    assert not (tmp_path / "other-release").exists()  # another release shares nothing worth copying
    _seed_target(tmp_path / "patched", RUST, release, log)
    assert (tmp_path / "patched" / "release" / "deps" / "libserde.rlib").read_text() == "compiled"
    assert "seeding" in log.read_text()


def test_a_changed_patch_is_applied_afresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "cargo"))
    _fake_registry(tmp_path / "cargo", "burn-foo", "0.22.1", "pub fn one() -> u32 {\n    2\n}\n")
    fix = tmp_path / "fix.patch"
    fix.write_text(PATCH_TEXT)
    crates = prepare(BurnPatch.read(fix), tmp_path / "build", lambda args, cwd: None)
    fix.write_text(PATCH_TEXT.replace("+    1", "+    7"))
    assert prepare(BurnPatch.read(fix), tmp_path / "build", lambda args, cwd: None) == crates
    assert (crates["burn-foo"] / "src" / "lib.rs").read_text() == "pub fn one() -> u32 {\n    7\n}\n"


def test_a_proved_fix_is_recorded_in_the_cases_it_is_for(tmp_path: Path) -> None:
    """`versions --record` on a patch column: the case named like the patch and the cases whose
    root it is get a `fix` record; the others' outcome is summarised there, not written."""
    import json
    import shutil

    from difftest.findings.across import Cell
    from difftest.findings.corpus import load_case
    from difftest.findings.matrix import Column, Row, record_fixes

    bugs = ROOT / "corpus" / "bugs"
    names = ["flex-reduce-dim-after-unit-swap-panics", "flex-sum-dim-backward-after-unit-swap-panics",
             "powi-zero-untracked"]
    for n in names:
        shutil.copy(bugs / f"{n}.json", tmp_path / f"{n}.json")
    patch = tmp_path / f"{names[0]}.patch"
    patch.write_text(PATCH_TEXT)
    col = Column(BurnSpec(version="0.22.1", patch=patch), binary="b", burn="0.22.1")
    rows = [Row(tmp_path / f"{n}.json", load_case(tmp_path / f"{n}.json")) for n in names]
    rows[0].cells[col.label] = rows[1].cells[col.label] = Cell("fixed", True, "fixed by it", "")
    rows[2].cells[col.label] = Cell("fails as recorded", False, "fails as recorded", "")
    changed = record_fixes([col], rows)
    assert changed == [rows[0].path, rows[1].path]  # the root's case and the one sharing it
    fix = json.loads(rows[1].path.read_text())["fix"]
    assert (fix["outcome"], fix["burn"]) == ("fixed", "0.22.1")
    assert fix["others"] == "1 of 1 other cases changed: powi-zero-untracked"
    assert "fix" not in json.loads(rows[2].path.read_text())
