"""The workers of one difftest-burn binary, one per backend compiled into it: where a case
that names its backend is replayed (`difftest replay`, `difftest report`)."""

from __future__ import annotations

from difftest.exec.backends import DEFAULT_BACKEND, binary_backends
from difftest.exec.burn_worker import BurnWorker


def backend_workers(worker: BurnWorker) -> dict[str, BurnWorker]:
    """`worker` under its backend's name, and one on each other backend its binary has (started
    on first use). RuntimeError when the binary does not say which it has (it does not start)."""
    own = worker.backend or DEFAULT_BACKEND
    others = {b: BurnWorker(worker.binary, timeout=worker.timeout, inflight_dir=worker.inflight_dir, backend=b)
              for b in binary_backends(worker.binary) if b != own}
    return {own: worker, **others}
