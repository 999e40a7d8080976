"""Candidate fixes to burn, as patches applied to the released crates for a build.

A patch is a unified diff in burn's repository layout (`crates/burn-autodiff/src/...`), the
form a fix takes in a pull request, after free text that names the release it applies to on a
line of its own (`burn: 0.22.1`); `git apply` skips that text, so the same file applies in a
burn checkout. `--burn patch:FILE` copies each crate the patch touches from cargo's registry
(the released sources, which are the repository's at that tag), applies the patch there with
`git apply`, and builds difftest-burn with those crates in `[patch.crates-io]`
(`difftest.exec.burn_builds`). The copies are kept beside the build and remade only when the
patch changes, so a second build of the same patch finds nothing to do.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

from difftest.divergences.knowledge import parse_version

_RELEASE = re.compile(r"^burn:\s*(\S+)\s*$", re.MULTILINE)
_TOUCHED = re.compile(r"^diff --git a/crates/([^/\s]+)/\S+ b/crates/([^/\s]+)/", re.MULTILINE)
_ANY_DIFF = re.compile(r"^diff --git a/(\S+)", re.MULTILINE)
STAMP = ".difftest-patch"  # the digest of the patch a copy was made with


class PatchError(ValueError):
    """A patch difftest cannot use, naming the file and what is wrong with it."""


@dataclass(frozen=True)
class BurnPatch:
    file: Path
    release: str  # the burn release the patch applies to
    crates: tuple[str, ...]  # the burn crates it touches (`burn-autodiff`, ...)
    digest: str  # of the patch's text: a changed patch is a different build

    @staticmethod
    def read(file: Path) -> BurnPatch:
        file = file.expanduser().resolve()
        try:
            text = file.read_text()
        except OSError as e:
            raise PatchError(f"patch:{file}: cannot read it ({e.strerror or e})") from None
        release = _RELEASE.search(text.split("\ndiff --git ", 1)[0])
        if release is None:
            raise PatchError(f"patch:{file}: no `burn: VERSION` line before the diff names the release it "
                             "applies to")
        try:
            parse_version(release.group(1))
        except ValueError as e:
            raise PatchError(f"patch:{file}: `burn: {release.group(1)}`: {e}") from None
        touched = _ANY_DIFF.findall(text)
        if not touched:
            raise PatchError(f"patch:{file}: no `diff --git` section (a patch in burn's repository layout, "
                             "as `git diff` writes it, is expected)")
        outside = [p for p in touched if not p.startswith("crates/burn")]
        if outside:
            raise PatchError(f"patch:{file}: touches {', '.join(outside)}, outside burn's crates "
                             "(crates/burn*/...); only burn's own crates can be patched")
        crates: list[str] = []
        for a, b in _TOUCHED.findall(text):
            if a != b:
                # each crate is copied from the registry and patched in place: a file cannot move
                # from one crate's copy into another's
                raise PatchError(f"patch:{file}: moves a file from crates/{a} to crates/{b}; a patch may change "
                                 "files within a crate, not move them between crates")
            if a not in crates:
                crates.append(a)
        return BurnPatch(file, release.group(1), tuple(crates), sha256(text.encode()).hexdigest())


def cargo_home() -> Path:
    env = os.environ.get("CARGO_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cargo"


def registry_crate(name: str, version: str) -> Path | None:
    """The unpacked released source of `name` `version` in cargo's registry, unpacking the
    downloaded `.crate` when only that is there; None when cargo has not downloaded it."""
    registry = cargo_home() / "registry"
    for unpacked in sorted(registry.glob(f"src/*/{name}-{version}")):
        if (unpacked / "Cargo.toml").is_file():
            return unpacked
    for archive in sorted(registry.glob(f"cache/*/{name}-{version}.crate")):
        target = registry / "src" / archive.parent.name
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(target, filter="data")
        if (target / f"{name}-{version}" / "Cargo.toml").is_file():
            return target / f"{name}-{version}"
    return None


def _fetch(patch: BurnPatch, directory: Path, run_cargo: Callable[[list[str], Path], None]) -> None:
    """Has cargo download the released crates the patch touches (a throwaway manifest that
    depends on each at the release)."""
    fetch = directory / "fetch"
    (fetch / "src").mkdir(parents=True, exist_ok=True)
    (fetch / "src" / "lib.rs").write_text("")
    deps = "\n".join(f'{c} = "={patch.release}"' for c in patch.crates)
    (fetch / "Cargo.toml").write_text(f'[package]\nname = "difftest-fetch"\nversion = "0.0.0"\nedition = "2021"\n'
                                      f"\n[dependencies]\n{deps}\n\n[workspace]\n")
    run_cargo(["fetch"], fetch)


def prepare(patch: BurnPatch, directory: Path, run_cargo: Callable[[list[str], Path], None]) -> dict[str, Path]:
    """Copies the released crates the patch touches under `directory/crates/` and applies the
    patch there (once per patch text); returns crate name -> patched copy."""
    root = directory / "patched"
    crates = {c: root / "crates" / c for c in patch.crates}
    stamp = root / STAMP
    if stamp.is_file() and stamp.read_text().strip() == patch.digest and all(d.is_dir() for d in crates.values()):
        return crates
    sources = {c: registry_crate(c, patch.release) for c in patch.crates}
    if any(s is None for s in sources.values()):
        _fetch(patch, directory, run_cargo)
        sources = {c: registry_crate(c, patch.release) for c in patch.crates}
    missing = [c for c, s in sources.items() if s is None]
    if missing:
        raise PatchError(f"patch:{patch.file}: cargo's registry ({cargo_home() / 'registry'}) has no "
                         f"{', '.join(f'{c}-{patch.release}' for c in missing)} even after `cargo fetch`")
    shutil.rmtree(root, ignore_errors=True)
    for name, source in sources.items():
        assert source is not None
        shutil.copytree(source, crates[name])
    # git looks for a repository above `root` unless told not to, and would then apply the
    # patch relative to that repository's top level
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(root.parent)}
    if shutil.which("git") is None:
        raise PatchError(f"patch:{patch.file}: applying a patch needs git on PATH")
    done = subprocess.run(["git", "apply", "--whitespace=nowarn", str(patch.file)], cwd=root, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise PatchError(f"patch:{patch.file} does not apply to burn {patch.release}'s released crates "
                         f"({', '.join(patch.crates)}):\n{done.stderr.strip()}")
    stamp.write_text(patch.digest + "\n")
    return crates
