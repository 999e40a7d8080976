"""burn backends: which one a difftest-burn worker runs on, and a binary that has it.

burn 0.22 chooses the backend at run time from the device (`Device::flex()`,
`Device::ndarray()`, …), so one difftest-burn binary runs any backend compiled into it; its
cargo features (`ndarray`, `wgpu`, `vulkan`, `tch`; Flex always) decide which. A worker runs on
the backend `difftest-burn --backend NAME` names: BurnWorker's `backend`, else
$DIFFTEST_BURN_BACKEND (how the CLI hands it to campaign jobs and fresh memory processes), else
Flex. A binary with extra backends is built like another burn version (burn_builds: the
`backends` of a BurnSpec, cached as `<cache>/0.22.1+ndarray/`). docs/backends.md
"""

from __future__ import annotations

import re
import subprocess

from difftest.exec.libtorch import worker_env

BACKEND_ENV = "DIFFTEST_BURN_BACKEND"
DEFAULT_BACKEND = "flex"
BACKENDS = ("flex", "ndarray", "wgpu", "vulkan", "tch")  # rust/src/backend.rs, in its order

# the crate whose kernels a backend runs (a bug on that backend alone lives there)
KERNEL_CRATES = {
    "flex": "burn-flex",
    "ndarray": "burn-ndarray",
    "wgpu": "burn-cubecl (CubeCL kernels, WGSL via naga)",
    "vulkan": "burn-cubecl (CubeCL kernels, SPIR-V)",
    "tch": "burn-tch (LibTorch)",
}

_COMPILED = re.compile(r"compiled in: ([a-z ]+)")


def parse_backends(text: str) -> tuple[str, ...]:
    """`flex,ndarray` -> ("flex", "ndarray") (order kept, duplicates dropped); an unknown name
    is a ValueError naming the known ones."""
    names: list[str] = []
    for part in text.split(","):
        name = part.strip().lower()
        if not name:
            continue
        if name not in BACKENDS:
            raise ValueError(f"--backend {text!r}: unknown backend {name!r} (known: {', '.join(BACKENDS)})")
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError(f"--backend {text!r} names no backend (known: {', '.join(BACKENDS)})")
    return tuple(names)


def extra_features(backends: tuple[str, ...]) -> tuple[str, ...]:
    """The cargo features a build needs for `backends` (Flex is always in), sorted: the
    `backends` of a BurnSpec."""
    return tuple(sorted(b for b in set(backends) if b != DEFAULT_BACKEND))


def binary_backends(binary: str) -> tuple[str, ...]:
    """The backends compiled into a difftest-burn binary, as its `--version` lists them; a
    binary from before backends were selectable has Flex alone."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60, check=True,
                             env=worker_env(binary)).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(f"{binary} --version: {e}") from e
    m = _COMPILED.search(out)
    return tuple(m.group(1).split()) if m else (DEFAULT_BACKEND,)
