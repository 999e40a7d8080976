"""What every subcommand shares: the burn worker from the common options, the console."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.exec.backends import DEFAULT_BACKEND, binary_backends
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import CorpusError

if TYPE_CHECKING:
    from rich.console import Console

    from difftest.findings.corpus import Case


def make_worker(args: argparse.Namespace) -> BurnWorker:
    state = Path(".difftest")
    return BurnWorker(timeout=args.timeout, inflight_dir=state / "inflight", fault=getattr(args, "fault", None))


def case_worker(args: argparse.Namespace, case: Case) -> BurnWorker:
    """The worker to run `case` on: the backend it was recorded on (its `backend`, as `replay`
    runs it), unless `--backend` (or $DIFFTEST_BURN_BACKEND) chose one. CorpusError when the
    binary lacks that backend: a case of another backend run on Flex would say nothing of it."""
    worker = make_worker(args)
    if worker.backend is not None or case.backend == worker_backend(worker):
        return worker
    where = case.path if case.path is not None else case.name
    if case.backend != DEFAULT_BACKEND and case.backend not in binary_backends(worker.binary):
        raise CorpusError(f"{where}: recorded on the {case.backend} backend, which {worker.binary} does not have "
                          f"(--backend {case.backend} builds one)")
    return BurnWorker(worker.binary, timeout=worker.timeout, inflight_dir=worker.inflight_dir,
                      fault=getattr(args, "fault", None), backend=case.backend)


def worker_backend(worker: BurnWorker) -> str:
    return worker.backend or DEFAULT_BACKEND


def make_console() -> Console:
    from rich.console import Console

    tty = sys.stdout.isatty()
    return Console(markup=False, highlight=False, soft_wrap=not tty, width=None if tty else 160)
