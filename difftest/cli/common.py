"""What every subcommand shares: the burn worker from the common options, the console."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.exec.backends import DEFAULT_BACKEND, binary_backends
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import CorpusError

if TYPE_CHECKING:
    from rich.console import Console

    from difftest.findings.corpus import Case


FAULT_ENV = "DIFFTEST_BURN_FAULT"
BURN_COMMANDS = ("replay", "versions", "memory", "coverage", "suspects")  # run burn, take no --fault


def fault_from_environment(args: argparse.Namespace) -> str | None:
    """Apply $DIFFTEST_BURN_FAULT to a command's arguments and say what became of it (None:
    unset, or nothing to say). The interpreter reads that variable itself, but the workers
    difftest starts get only the fault asked of them (BurnWorker: a library caller or a test
    never inherits one by accident), so without this a fault set in the shell would be dropped
    in silence. A command with --fault takes it as that option's default; a --fault given on
    the command line wins; a command without the option runs burn unfaulted and says so."""
    spec = os.environ.get(FAULT_ENV, "")
    if not spec:
        return None
    if hasattr(args, "fault"):
        if args.fault is None:
            args.fault = spec
            return f"running against the fault ${FAULT_ENV}={spec} (as --fault {spec})"
        if args.fault != spec:
            return f"--fault {args.fault} given: ${FAULT_ENV}={spec} is not used"
        return None
    if args.command in BURN_COMMANDS:
        return f"${FAULT_ENV}={spec} is not used: `difftest {args.command}` runs burn without faults"
    return None


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
