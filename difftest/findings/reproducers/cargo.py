"""A standalone cargo project around a burn reproducer (`difftest show CASE --cargo DIR`): what a
burn maintainer runs with `cargo test --release` to see the bug fail, and a fixed burn pass."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

# the first line of each file difftest writes: what tells its files from the user's
MANIFEST_MARK = "# Written by `difftest show --cargo`: the reproducer of one difftest case as a cargo test."
LIB_MARK = "//! The reproducer is the integration test in tests/."
TEST_MARK = "//! difftest reproducer (generated)."
# what `cargo test` adds to the project: rewriting the project keeps them
CARGO_OUTPUTS = ("Cargo.lock", "target")
# a test file's name and the package's are cut to this many characters (a case's name may be
# longer than a file name can be; cargo also names its build outputs after the package)
MAX_STEM = 64

MANIFEST = MANIFEST_MARK + """
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


def file_stem(test_name: str) -> str:
    """The name of the test's file and package: the test's name, or past MAX_STEM characters its
    start and a digest of the whole (distinct names stay distinct)."""
    if len(test_name) <= MAX_STEM:
        return test_name
    digest = hashlib.sha256(test_name.encode()).hexdigest()[:12]
    return f"{test_name[:MAX_STEM - 13]}_{digest}"


def _first_line(path: Path) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return f.readline().rstrip("\n")
    except OSError:
        return ""


def foreign_files(directory: Path) -> list[Path]:
    """The files under an existing `directory` that neither difftest's `write_cargo` nor `cargo
    test` wrote (a project of the user's, files that `write_cargo` would replace or mix with)."""
    marks = {Path("Cargo.toml"): MANIFEST_MARK, Path("src/lib.rs"): LIB_MARK}
    out: list[Path] = []
    for root, dirs, files in os.walk(directory):
        here = Path(root).relative_to(directory)
        if here == Path("."):
            dirs[:] = [d for d in dirs if d not in CARGO_OUTPUTS]  # cargo's build tree: not walked
        for name in files:
            rel = here / name
            if rel in (Path(n) for n in CARGO_OUTPUTS):
                continue
            mark = marks.get(rel, TEST_MARK if here == Path("tests") and rel.suffix == ".rs" else None)
            if mark is None or _first_line(directory / rel) != mark:
                out.append(rel)
    return sorted(out)


def write_cargo(directory: Path, test_name: str, test: str, burn_version: str) -> Path:
    """Write `Cargo.toml`, an empty `src/lib.rs` and `tests/<stem>.rs` (`file_stem`) under
    `directory` (created if missing); returns the manifest's path. Existing files of the same
    names are replaced, nothing else is touched: the caller checks first that `directory` holds
    none of the user's files (`foreign_files`)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "src").mkdir(exist_ok=True)
    (directory / "tests").mkdir(exist_ok=True)
    stem = file_stem(test_name)
    package = "difftest-case-" + stem.replace("_", "-").lower()
    manifest = directory / "Cargo.toml"
    manifest.write_text(MANIFEST.format(package=package, burn=burn_version))
    lib = directory / "src" / "lib.rs"
    if not lib.exists():
        lib.write_text(LIB_MARK + "\n")
    (directory / "tests" / f"{stem}.rs").write_text(TEST_MARK + "\n\n" + test)
    return manifest
