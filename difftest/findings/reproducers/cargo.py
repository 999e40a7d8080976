"""A standalone cargo project around a burn reproducer (`difftest show CASE --cargo DIR`): what a
burn maintainer runs with `cargo test --release` to see the bug fail, and a fixed burn pass."""

from __future__ import annotations

from pathlib import Path

MANIFEST = """\
# Written by `difftest show --cargo`: the reproducer of one difftest case as a cargo test.
# Run it with `cargo test --release`; point `burn` at a local checkout (path = "...") to test a fix.
[package]
name = "{package}"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
burn = {{ version = "={burn}", default-features = false, features = ["std", "flex", "autodiff", "optim"] }}

[workspace]
"""


def write_cargo(directory: Path, test_name: str, test: str, burn_version: str) -> Path:
    """Write `Cargo.toml`, an empty `src/lib.rs` and `tests/<test_name>.rs` under `directory`
    (created if missing); returns the manifest's path. Existing files of the same names are
    replaced, nothing else is touched."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "src").mkdir(exist_ok=True)
    (directory / "tests").mkdir(exist_ok=True)
    package = "difftest-case-" + test_name.replace("_", "-").lower()
    manifest = directory / "Cargo.toml"
    manifest.write_text(MANIFEST.format(package=package, burn=burn_version))
    lib = directory / "src" / "lib.rs"
    if not lib.exists():
        lib.write_text("//! The reproducer is the integration test in tests/.\n")
    (directory / "tests" / f"{test_name}.rs").write_text("//! difftest reproducer (generated).\n\n" + test)
    return manifest
