"""Coverage of burn through a coverage build of difftest-burn (exec/coverage_build.py): the
binary, the source location of each of its edges, and the edges a program hit.

The worker answers `edges` (the indices of the counters hit since the last `run` request
started: the program and any probes of it) and `coverage_map` (per edge its file, line and
function, from the binary's line tables). An edge list is exact where a hashed bitmap is not:
`difftest coverage` attributes every edge to its crate, file and line, and a program hits a
few thousand of the binary's edges, so the sorted indices are a few tens of kilobytes of JSON.
The map is the same for every run of one binary, so it is asked once and kept beside the
binary (keyed by the binary's size and modification time).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from difftest.exec import coverage_build
from difftest.exec.burn_builds import Build, BurnSpec, build_with_status, cache_dir, repository_rust_dir
from difftest.exec.burn_worker import BurnWorker, WorkerError
from difftest.program.files import read_json
from difftest.program.ir import Program

BINARY_ENV = "DIFFTEST_BURN_COVERAGE"  # a coverage binary to use instead of building one
MAP_FILE = "coverage-map.json"
MAP_FORMAT = "difftest-coverage-map"

# a burn crate's source file: a registry crate (…/burn-autodiff-0.22.1/src/…) or a checkout's
# (…/crates/burn-autodiff/src/…); group 1 the crate, group 2 the path inside it
_CRATE_FILE = re.compile(r"/(burn(?:-[a-z0-9]+)*?)(?:-\d+\.\d+\.\d+[^/]*)?/(src/.*)$")


class CoverageError(RuntimeError):
    """No coverage build, or a worker that answers no coverage."""


def crate_of(file: str) -> tuple[str, str] | None:
    """(crate, path inside the crate) of a burn source file, else None."""
    m = _CRATE_FILE.search(file)
    return (m[1], m[2]) if m else None


def default_spec() -> BurnSpec:
    """The coverage variant of the burn the repository's interpreter pins (rust/Cargo.toml)."""
    manifest = repository_rust_dir() / "Cargo.toml"
    burn = tomllib.loads(manifest.read_text())["dependencies"]["burn"]
    version = str(burn["version"]).lstrip("=")
    return BurnSpec(version=version, coverage=True)


def coverage_binary(console: Any = None) -> Path:
    """$DIFFTEST_BURN_COVERAGE, else the cached coverage build (built now if needed, with
    progress on stderr)."""
    env = os.environ.get(BINARY_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise CoverageError(f"${BINARY_ENV}={env}: no such file")
        return path
    build: Build = build_with_status(default_spec(), console)
    return build.binary


def built_binary() -> Path | None:
    """The coverage binary if it exists already (tests skip without one), never building."""
    env = os.environ.get(BINARY_ENV)
    if env:
        return Path(env) if Path(env).is_file() else None
    candidate = coverage_build.binary(cache_dir() / default_spec().label / "target")
    return candidate if candidate.is_file() else None


@dataclass
class EdgeMap:
    """Per edge of a coverage binary: its file, line and function (indices into `files` and
    `functions`, -1 unknown), and the file and line of the `backward` function it lies in
    (-1 and 0: none; a burn-autodiff node's, findings/coverage.py names the node)."""

    files: list[str]
    functions: list[str]
    file: list[int]
    line: list[int]
    function: list[int]
    backward_file: list[int]
    backward_line: list[int]
    entries: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.file)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> EdgeMap:
        m = EdgeMap(list(d["files"]), list(d["functions"]), list(d["file"]), list(d["line"]), list(d["function"]),
                    list(d["backward_file"]), list(d["backward_line"]), list(d.get("entries", [])))
        n = int(d.get("edges", len(m.file)))
        columns = (m.file, m.line, m.function, m.backward_file, m.backward_line)
        if any(len(c) != n for c in columns):
            raise CoverageError(f"coverage map: columns of unequal length for {n} edges")
        return m

    def to_dict(self) -> dict[str, Any]:
        return {"edges": len(self), "files": self.files, "functions": self.functions, "file": self.file,
                "line": self.line, "function": self.function, "backward_file": self.backward_file,
                "backward_line": self.backward_line, "entries": self.entries}

    @cached_property
    def file_crates(self) -> list[tuple[str, str] | None]:
        """Per file index: (burn crate, path inside it), or None outside burn."""
        return [crate_of(f) for f in self.files]

    @cached_property
    def edge_crate(self) -> list[str | None]:
        """Per edge: its burn crate, or None (the interpreter, std, other dependencies)."""
        crates = self.file_crates
        return [crates[f][0] if f >= 0 and crates[f] is not None else None  # type: ignore[index]
                for f in self.file]

    @cached_property
    def burn_edges(self) -> frozenset[int]:
        return frozenset(i for i, c in enumerate(self.edge_crate) if c is not None)


def _map_cache(binary: Path) -> tuple[Path, str]:
    st = binary.stat()
    return binary.parent / MAP_FILE, f"{st.st_size}:{st.st_mtime_ns}"


def load_map(worker: BurnWorker) -> EdgeMap:
    """The edge map of the worker's binary (from the file beside it when current)."""
    binary = Path(worker.binary)
    path, key = _map_cache(binary)
    if path.is_file():
        try:
            doc = read_json(path, strict=False)
            if doc.get("format") == MAP_FORMAT and doc.get("binary") == key:
                return EdgeMap.from_dict(doc["map"])
        except (OSError, ValueError, KeyError):
            pass  # rebuilt below
    answer = worker.request("coverage_map", timeout=600)
    if not answer.get("ok"):
        raise CoverageError(f"{binary}: {answer.get('error', {}).get('message', answer)}")
    m = EdgeMap.from_dict(answer["coverage_map"])
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps({"format": MAP_FORMAT, "binary": key, "map": m.to_dict()}))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only location: asked again next time
    return m


def hit_edges(worker: BurnWorker) -> frozenset[int]:
    """The edges the worker's last program (and its probes) hit, if the process that ran it still
    runs (`edges_after` makes sure of it); after a restart, its own start-up's."""
    try:
        answer = worker.request("edges")
    except (TimeoutError, EOFError, WorkerError) as e:
        raise CoverageError(f"{worker.binary}: no edges answer: {e}") from e
    if not answer.get("ok"):
        raise CoverageError(f"{worker.binary}: {answer.get('error', {}).get('message', answer)}")
    return frozenset(int(i) for i in answer["edges"])


def worker_marks(worker: BurnWorker) -> tuple[int, int]:
    """What tells whether the worker's process was replaced since (`edges_after`)."""
    return worker.restarts, worker.recycled


def edges_after(worker: BurnWorker, program: Program, marks: tuple[int, int]) -> frozenset[int]:
    """The edges `program` hit, when it was the worker's last run and `marks` were taken before
    it. A worker replaces its process right after an answer now and then (every RECYCLE_RUNS
    runs, or when its resident set grew), and the new process's counters hold its own start-up,
    not the program: the program then runs twice more in it, the first run taking the process's
    one-time initialisation. A program that takes the process down (a crash, a hang) has no
    edges to read: empty."""
    if worker_marks(worker) != marks:
        worker.run(program)
        again = worker_marks(worker)
        worker.run(program)
        if worker_marks(worker) != again:
            return frozenset()
    return hit_edges(worker)
