"""Where the difftest-burn binary is, and the address-space limit its workers run under
(burn_worker.py); apart so that what finds and bounds a worker reads on its own."""

from __future__ import annotations

import os
import shutil
import sysconfig
from pathlib import Path

# The worker's address-space limit (RLIMIT_AS), in bytes. Address space is not memory: glibc
# reserves 64 MiB per malloc arena (up to 8 per core) and every thread its stack, so the limit
# must leave room for reservations that never become resident. An idle worker maps ~10 MiB and
# the test suite runs under 512 MiB (tests/differential/test_bounds.py); 8 GiB leaves that headroom many
# times over while still stopping a runaway program long before it takes a large machine down.
DEFAULT_MEMORY_LIMIT = 8 << 30
MEMORY_LIMIT_ENV = "DIFFTEST_BURN_MEMORY_LIMIT"  # bytes; overrides the default; 0 = unlimited


class WorkerError(RuntimeError):
    """The worker could not be started or answered something that is not the protocol."""


def find_binary() -> str:
    """Where difftest-burn is: $DIFFTEST_BURN if set; otherwise the most recently built of the
    installed copy (next to the `difftest` script) and the cargo target directories, so a
    `cargo build --release` during development is picked up without reinstalling."""
    env = os.environ.get("DIFFTEST_BURN")
    if env:
        if not Path(env).is_file():
            raise WorkerError(f"DIFFTEST_BURN={env} does not exist")
        return env
    here = Path(__file__).resolve().parent.parent
    candidates = [
        Path(sysconfig.get_path("scripts")) / "difftest-burn",
        here / "rust" / "target" / "release" / "difftest-burn",
        Path.home() / ".cache" / "difftest" / "target" / "release" / "difftest-burn",
    ]
    if os.environ.get("CARGO_TARGET_DIR"):
        candidates.append(Path(os.environ["CARGO_TARGET_DIR"]) / "release" / "difftest-burn")
    existing = [c for c in candidates if c.is_file()]
    if existing:
        return str(max(existing, key=lambda c: c.stat().st_mtime))
    found = shutil.which("difftest-burn")
    if found:
        return found
    raise WorkerError("difftest-burn not found: install the project (`pip install -e .` builds it), "
                      "or set DIFFTEST_BURN to the binary")


def default_memory_limit() -> int | None:
    """$DIFFTEST_BURN_MEMORY_LIMIT (bytes, 0 = unlimited) if set, else DEFAULT_MEMORY_LIMIT; None: unlimited."""
    text = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
    if not text:
        return DEFAULT_MEMORY_LIMIT
    try:
        limit = int(text)
    except ValueError:
        raise WorkerError(f"{MEMORY_LIMIT_ENV}={text!r} is not a number of bytes") from None
    if limit < 0:
        raise WorkerError(f"{MEMORY_LIMIT_ENV}={text!r} is negative")
    return limit or None
