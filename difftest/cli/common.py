"""What every subcommand shares: the burn worker from the common options, the console."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from difftest.exec.burn_worker import BurnWorker

if TYPE_CHECKING:
    from rich.console import Console


def make_worker(args: argparse.Namespace) -> BurnWorker:
    state = Path(".difftest")
    return BurnWorker(timeout=args.timeout, inflight_dir=state / "inflight", fault=getattr(args, "fault", None))


def make_console() -> Console:
    from rich.console import Console

    tty = sys.stdout.isatty()
    return Console(markup=False, highlight=False, soft_wrap=not tty, width=None if tty else 160)
