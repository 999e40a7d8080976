"""difftest-burn built against a chosen burn: a crates.io release (`0.22.0`), a local
checkout (`path:DIR`: the `burn` crate, a workspace root, or one burn crate such as a copy of
burn-autodiff, which then replaces that crate of its release), or a release with a candidate
fix applied (`patch:FILE`, see `difftest.exec.burn_patches`), from the one interpreter source
in `rust/`.

For each requested burn, a build directory outside the repository (`<cache>/<label>/`, the
cache being $DIFFTEST_BURN_VERSIONS_DIR or ~/.cache/difftest/burn-versions) holds a generated
Cargo.toml whose `[[bin]] path` and `build` script are the repository's `rust/src/main.rs` and
`rust/build.rs` (absolute paths), whose `burn` dependency is `=V` (or `{ path = DIR }`) with
the features of `rust/Cargo.toml`, its own Cargo.lock and its own target directory, so builds
of different versions never fight over one binary. build.rs reads the burn version from that
lock (or DIR's Cargo.toml), so `--version` names the burn the binary was built with.

burn's own crates depend on each other with caret requirements (`burn-core = "^0.22.0"`), so
`burn = "=0.22.0"` alone resolves burn 0.22.0 over burn-core 0.22.1. The generated manifest
therefore pins every registry crate of the burn family to the same release with optional
dependencies (`burn-core = { version = "=0.22.0", optional = true }`): an optional dependency
takes part in resolution but is never built. The pins are found by resolving, reading the lock
and resolving again until every burn crate is at the release.

cargo is the cache: a second request runs `cargo build`, which finds nothing to do.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any

from difftest.divergences.knowledge import parse_version
from difftest.exec import coverage_build, libtorch
from difftest.exec.burn_patches import BurnPatch, PatchError, prepare

CACHE_ENV = "DIFFTEST_BURN_VERSIONS_DIR"
BINARY = "difftest-burn"
DEFAULT_VERSIONS = ("0.22.0", "0.22.1", "0.23.0-pre.1")
LOG_TAIL = 25  # lines of cargo's output a failed build shows
PIN_ROUNDS = 4  # resolve, pin what is off the release, resolve again


class BuildError(RuntimeError):
    """A burn version that cannot be built, with what cargo said and where its full log is."""


@dataclass(frozen=True)
class BurnSpec:
    """One requested burn: a crates.io version, or a local checkout (`path:DIR`)."""

    version: str | None = None  # a crates.io version (exact)
    path: Path | None = None  # the directory of the `burn` crate, or of one burn crate
    patch: Path | None = None  # a candidate fix applied to `version`'s released crates
    coverage: bool = False  # the SanitizerCoverage variant (exec/coverage_build.py)
    # extra burn backends compiled in next to Flex: cargo features of rust/Cargo.toml
    # (`ndarray`, `wgpu`, `vulkan`, `tch`), sorted; () is the plain Flex build
    backends: tuple[str, ...] = ()

    @staticmethod
    def parse(text: str) -> BurnSpec:
        text = text.strip()
        if text.startswith("path:"):
            raw = text[len("path:"):].strip()
            if not raw:
                raise ValueError("--burn path: needs a directory (path:DIR)")
            return BurnSpec(path=_burn_crate_dir(Path(raw).expanduser()))
        if text.startswith("patch:"):
            raw = text[len("patch:"):].strip()
            if not raw:
                raise ValueError("--burn patch: needs a patch file (patch:FILE)")
            try:
                patch = BurnPatch.read(Path(raw))
            except PatchError as e:
                raise ValueError(str(e)) from None
            return BurnSpec(version=patch.release, patch=patch.file)
        try:
            parse_version(text)
        except ValueError as e:
            raise ValueError(f"--burn {text!r}: {e}; or path:DIR for a local burn checkout, patch:FILE for a "
                             "fix applied to a release") from None
        return BurnSpec(version=text)

    @property
    def is_release(self) -> bool:
        """A crates.io release as published and built as usual (no local source, no patch, no
        instrumentation, no extra backend)."""
        return self.path is None and self.patch is None and not self.coverage and not self.backends

    @property
    def label(self) -> str:
        """The build directory's name under the cache (`0.22.1`, `0.22.1+ndarray`)."""
        extra = "".join(f"+{b}" for b in self.backends) + (coverage_build.LABEL_SUFFIX if self.coverage else "")
        if self.path is not None:
            digest = sha256(str(self.path).encode()).hexdigest()[:10]
            return f"path-{self.path.name}-{digest}{extra}"
        if self.patch is not None:  # by content: one build for one patch wherever it lies (clones, copies)
            try:
                digest = sha256(self.patch.read_bytes()).hexdigest()[:10]
            except OSError:  # gone since it was parsed: the build step says so
                digest = sha256(str(self.patch).encode()).hexdigest()[:10]
            return f"patch-{self.patch.stem}-{digest}{extra}"
        assert self.version is not None
        return self.version + extra

    @property
    def crate_name(self) -> str | None:
        """The package name of a `path:` source (`burn`, or the burn crate it replaces)."""
        return _package_name(self.path / "Cargo.toml") if self.path is not None else None

    def __str__(self) -> str:
        extra = "".join(f"+{b}" for b in self.backends) + (coverage_build.LABEL_SUFFIX if self.coverage else "")
        if self.path is not None:
            text = f"path:{self.path}"
        else:
            text = f"patch:{self.patch}" if self.patch is not None else str(self.version)
        return text + extra


def parse_specs(text: str) -> list[BurnSpec]:
    """`0.22.0,0.23.0-pre.1,path:DIR` -> specs (duplicates dropped, order kept)."""
    specs: list[BurnSpec] = []
    for part in text.split(","):
        if not part.strip():
            continue
        spec = BurnSpec.parse(part)
        if spec not in specs:
            specs.append(spec)
    if not specs:
        raise ValueError(f"--burn {text!r} names no version")
    return specs


def _burn_crate_dir(d: Path) -> Path:
    """The crate a `path:` names: DIR itself when it is `burn` or another burn crate (a
    patched copy of burn-autodiff, say), or DIR/crates/burn for a workspace root."""
    d = d.resolve()
    for candidate in (d, d / "crates" / "burn"):
        manifest = candidate / "Cargo.toml"
        name = _package_name(manifest) if manifest.is_file() else None
        if name is not None and (name == "burn" or (candidate == d and name.startswith("burn-"))):
            return candidate
    raise ValueError(f"path:{d}: no Cargo.toml of the `burn` crate (or of one burn-* crate) there or in "
                     f"{d / 'crates' / 'burn'}")


def _package_name(manifest: Path) -> str | None:
    try:
        doc = tomllib.loads(manifest.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    name = doc.get("package", {}).get("name")
    return name if isinstance(name, str) else None


def _package_version(manifest: Path) -> str:
    doc = tomllib.loads(manifest.read_text())
    version = doc.get("package", {}).get("version")
    if isinstance(version, dict) and version.get("workspace"):
        # `version.workspace = true`: the version is the workspace's
        for parent in manifest.parents[1:]:
            ws = parent / "Cargo.toml"
            if ws.is_file():
                wdoc = tomllib.loads(ws.read_text())
                v = wdoc.get("workspace", {}).get("package", {}).get("version")
                if isinstance(v, str):
                    return v
    if not isinstance(version, str):
        raise BuildError(f"{manifest}: no [package] version")
    return version


def repository_rust_dir() -> Path:
    """The `rust/` directory of the difftest source this module belongs to."""
    rust = Path(__file__).resolve().parents[2] / "rust"
    if not (rust / "Cargo.toml").is_file() or not (rust / "src" / "main.rs").is_file():
        raise BuildError(f"{rust}: not the difftest-burn crate (building another burn needs the repository's "
                         "rust/ sources; an installed difftest without them can only use its own binary)")
    return rust


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "difftest" / "burn-versions"


# ------------------------------------------------------------------ the generated manifest


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise BuildError(f"cannot write {v!r} into a generated Cargo.toml")


def _table(name: str, entries: dict[str, Any]) -> list[str]:
    return [f"[{name}]", *(f"{k} = {_toml_value(v)}" for k, v in entries.items()), ""]


def generate_manifest(spec: BurnSpec, rust: Path, pins: dict[str, str] | None = None,
                      replaced: dict[str, Path] | None = None) -> str:
    """The Cargo.toml of `spec`'s build: rust/Cargo.toml's package, dependencies and release
    profile, with burn replaced and the sources referenced by absolute path. `replaced` are
    burn crates taken from local copies instead of the registry (`[patch.crates-io]`)."""
    doc = tomllib.loads((rust / "Cargo.toml").read_text())
    package = dict(doc["package"])
    package["build"] = str(rust / "build.rs")
    package.pop("description", None)
    bins = doc.get("bin", [])
    if len(bins) != 1 or bins[0].get("name") != BINARY:
        raise BuildError(f"{rust / 'Cargo.toml'}: expected one [[bin]] named {BINARY}")
    deps = dict(doc["dependencies"])
    burn = deps.get("burn")
    if not isinstance(burn, dict):
        raise BuildError(f"{rust / 'Cargo.toml'}: the burn dependency must be a table (version and features)")
    burn = {k: v for k, v in burn.items() if k not in ("version", "path", "git", "branch", "tag", "rev")}
    replaced = dict(replaced or {})
    if spec.path is not None and spec.crate_name == "burn":
        deps["burn"] = {"path": str(spec.path), **burn}
    elif spec.path is not None:
        replaced[str(spec.crate_name)] = spec.path
        deps["burn"] = {"version": f"={_package_version(spec.path / 'Cargo.toml')}", **burn}
    else:
        deps["burn"] = {"version": f"={spec.version}", **burn}
    lines = [
        f"# Generated by difftest ({__name__}) for burn {spec}: the sources are {rust}.",
        "# Regenerated on every build; edit rust/Cargo.toml instead.",
        "",
        *_table("package", package),
        "[[bin]]",
        f"name = {_toml_value(BINARY)}",
        f"path = {_toml_value(str(rust / 'src' / 'main.rs'))}",
        "",
        *_table("dependencies", deps)[:-1],
    ]
    if pins:
        lines += ["# the burn family at one release (optional: resolved, never built)"]
        lines += [f"{name} = {_toml_value({'version': f'={v}', 'optional': True})}" for name, v in sorted(pins.items())]
    lines.append("")
    if replaced:
        lines += _table("patch.crates-io", {name: {"path": str(d)} for name, d in sorted(replaced.items())})
    profiles = doc.get("profile", {})
    if (spec.backends or spec.coverage) and "features" in doc:  # what `cargo build --features` names
        lines += _table("features", doc["features"])
    if spec.coverage:
        profiles = coverage_build.profiles(profiles)
    for name, profile in profiles.items():
        lines += _table(f"profile.{name}", profile)
    lines += ["[workspace]", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ the lock


_REGISTRY = "registry+"


def lock_packages(lock: Path) -> list[dict[str, Any]]:
    with lock.open("rb") as f:
        packages: list[dict[str, Any]] = tomllib.load(f).get("package", [])
    return packages


def locked_burn_version(lock: Path) -> str:
    """The version of `burn` in a Cargo.lock (what build.rs hands the binary)."""
    versions = [str(p["version"]) for p in lock_packages(lock) if p.get("name") == "burn"]
    if len(versions) != 1:
        raise BuildError(f"{lock}: expected one burn entry, found {versions}")
    return versions[0]


def _off_release(lock: Path, release: str) -> dict[str, str]:
    """Registry crates of the burn family (`burn`, `burn-*`) not at `release`: name -> version."""
    return {
        str(p["name"]): str(p["version"]) for p in lock_packages(lock)
        if (p.get("name") == "burn" or str(p.get("name", "")).startswith("burn-"))
        and str(p.get("source", "")).startswith(_REGISTRY) and p.get("version") != release
    }


# ------------------------------------------------------------------ building


@dataclass(frozen=True)
class Build:
    spec: BurnSpec
    directory: Path
    binary: Path
    burn_version: str  # what the lock (or the path's Cargo.toml) says
    seconds: float
    log: Path


Progress = Callable[[str], None]  # the current line of cargo's output


def _run_cargo(args: list[str], cwd: Path, log: Path, on_line: Progress | None,
               extra_env: dict[str, str] | None = None) -> None:
    cargo = shutil.which("cargo")
    if cargo is None:
        raise BuildError("cargo not found on PATH: building difftest-burn against another burn needs a Rust "
                         "toolchain (https://rustup.rs)")
    tail: deque[str] = deque(maxlen=LOG_TAIL)
    env = {k: v for k, v in os.environ.items() if k != "CARGO_TARGET_DIR"} | (extra_env or {})
    with log.open("a") as out:
        out.write(f"$ cargo {' '.join(args)}   (in {cwd})\n")
        out.flush()
        proc = subprocess.Popen([cargo, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                out.write(line)
                out.flush()  # the log is the progress for whoever tails it
                tail.append(line.rstrip())
                if on_line is not None and line.strip():
                    on_line(line.strip())
            code = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if code != 0:
        shown = "\n".join("    " + t for t in tail)
        raise BuildError(f"`cargo {' '.join(args)}` failed (exit {code}) in {cwd}; the last lines:\n{shown}\n"
                         f"full log: {log}")


def _resolve(spec: BurnSpec, rust: Path, directory: Path, log: Path, on_line: Progress | None,
             replaced: dict[str, Path] | None = None) -> str:
    """Writes the manifest and a lock with the whole burn family at spec's release; returns
    the release."""
    lock = directory / "Cargo.lock"
    release = _package_version(spec.path / "Cargo.toml") if spec.path is not None else str(spec.version)
    if not lock.exists():
        shutil.copyfile(rust / "Cargo.lock", lock)  # the default build's resolution for everything else
    pins: dict[str, str] = {}
    manifest = directory / "Cargo.toml"
    previous = manifest.read_text() if manifest.exists() else None
    if previous is not None:  # the pins of the last build: usually one round
        pins = {m[1]: release for m in re.finditer(r'^(burn[a-z0-9-]*) = \{ version = "=[^"]+", optional = true',
                                                   previous, re.MULTILINE)}
    unchanged = previous is not None and generate_manifest(spec, rust, pins, replaced) == previous
    if unchanged and not _off_release(lock, release):
        return release  # resolved by an earlier build: nothing to ask the registry
    for _ in range(PIN_ROUNDS):
        text = generate_manifest(spec, rust, pins, replaced)
        if text != previous:
            manifest.write_text(text)
            previous = text
        _run_cargo(["update", "--workspace"], directory, log, on_line)
        off = _off_release(lock, release)
        if not off:
            return release
        if all(pins.get(n) == release for n in off):
            break
        pins.update({n: release for n in off})
    off = _off_release(lock, release)
    raise BuildError(f"cannot resolve the burn family at {release} for {spec}: still off the release: "
                     + ", ".join(f"{n} {v}" for n, v in sorted(off.items())) + f" (see {lock}, log {log})")


def _seed_target(target: Path, rust: Path, release: str, log: Path) -> None:
    """A patched build starts from a copy of the default build's target directory when that
    build is of the same release: cargo then compiles only the patched crates and what depends
    on them (about half of a full build). The default build's directory is $CARGO_TARGET_DIR,
    else rust/target."""
    env = os.environ.get("CARGO_TARGET_DIR")
    default = Path(env).expanduser() if env else rust / "target"
    if not (default / "release").is_dir() or locked_burn_version(rust / "Cargo.lock") != release:
        return
    with log.open("a") as out:
        out.write(f"seeding {target} from the default build's {default} (burn {release})\n")
    try:
        shutil.copytree(default, target, symlinks=True)
    except OSError as e:  # a half-copied artifact could look fresh to cargo: start from nothing
        shutil.rmtree(target, ignore_errors=True)
        with log.open("a") as out:
            out.write(f"seeding failed ({e}); building from nothing\n")


def build(spec: BurnSpec, *, on_line: Progress | None = None, cache: Path | None = None) -> Build:
    """Builds (or finds up to date) difftest-burn against `spec`; raises BuildError."""
    rust = repository_rust_dir()
    directory = (cache or cache_dir()) / spec.label
    log = directory / "build.log"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        log.write_text(f"difftest-burn against burn {spec}, sources {rust}\n")
    except OSError as e:  # the cache is not a writable directory (${CACHE_ENV} names another file?)
        raise BuildError(f"cannot write the build directory {directory} (the build cache: ${CACHE_ENV} or "
                         f"~/.cache/difftest/burn-versions): {e}") from None
    start = time.monotonic()
    replaced = None
    if spec.patch is not None:
        try:
            replaced = prepare(BurnPatch.read(spec.patch), directory,
                               lambda args, cwd: _run_cargo(args, cwd, log, on_line))
        except PatchError as e:
            raise BuildError(str(e)) from None
    release = _resolve(spec, rust, directory, log, on_line, replaced)
    target = directory / "target"
    if spec.patch is not None and not target.exists():
        _seed_target(target, rust, release, log)
    features = ["--features", ",".join(spec.backends)] if spec.backends else []
    args, env = ["build", "--release", *features, "--target-dir", str(target)], None
    if spec.coverage:
        args, env = args + coverage_build.cargo_args(), coverage_build.cargo_env(directory)
    if "tch" in spec.backends and not libtorch.caller_provides():  # torch-sys needs PyTorch 2.9.0
        try:
            env = (env or {}) | libtorch.build_env(libtorch.ensure(on_line))
        except (libtorch.LibTorchError, OSError) as e:
            raise BuildError(f"the LibTorch a tch build needs (PyTorch {libtorch.TORCH_FOR_TCH}): {e}") from None
    _run_cargo(args, directory, log, on_line, env)
    binary = coverage_build.binary(target) if spec.coverage else target / "release" / BINARY
    if not binary.is_file():
        raise BuildError(f"cargo finished but {binary} does not exist (log: {log})")
    locked = release if spec.path is not None else locked_burn_version(directory / "Cargo.lock")
    return Build(spec, directory, binary, locked, time.monotonic() - start, log)


def build_with_status(spec: BurnSpec, console: Any = None) -> Build:
    """`build` with a live status on a terminal (elapsed time and cargo's current line);
    elsewhere a line when it starts and one when it ends."""
    from rich.console import Console
    from rich.progress import Progress as Bar
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

    console = console or Console(stderr=True)
    if not console.is_terminal:
        print(f"building difftest-burn against burn {spec} (log: {(cache_dir() / spec.label / 'build.log')})",
              file=sys.stderr, flush=True)
        result = build(spec)
        print(f"burn {spec}: {result.binary} ({result.seconds:.0f}s)", file=sys.stderr, flush=True)
        return result
    interesting = re.compile(r"^(Compiling|Downloading|Downloaded|Updating|Locking|Adding|Finished|Building)\b")
    with Bar(SpinnerColumn(), TextColumn(f"burn {spec}: "), TextColumn("{task.description}"), TimeElapsedColumn(),
             console=console, transient=True) as bar:
        task = bar.add_task("resolving", total=None)

        def on_line(line: str) -> None:
            if interesting.match(line):
                bar.update(task, description=line[:100])

        result = build(spec, on_line=on_line)
    console.print(f"burn {spec}: {result.binary} ({result.seconds:.0f}s)", markup=False, highlight=False)
    return result
