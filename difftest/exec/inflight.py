"""Programs in flight, on disk, so that a job process that dies (a native crash in PyTorch, an
out-of-memory kill, a broken pipe to its burn worker) loses nothing: each program a burn worker
is asked about is written to the in-flight directory first, as `<digest>-<pid>.json`, and
removed once answered; the campaign's parent moves what a dead job left behind to
`.difftest/crashes/` (campaign/parallel.py).

A campaign holds each program it checks (`in_flight`): the program is written once for all the
requests about it (its run and its root probes, on every backend) and stays on disk while the
job checks it, PyTorch's side included; requests about other programs (a suspect probe's program,
a shrink step) write their own file. One compact JSON text is both the file and its digest."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from difftest.program.ir import Program
from difftest.program.jsonio import dumps, program_to_dict

if TYPE_CHECKING:
    from difftest.exec.burn_worker import BurnWorker


def program_digest(doc: dict[str, Any]) -> str:
    """A program's (JSON document's) short content digest."""
    return _digest(dumps(doc))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_program(directory: Path, doc: dict[str, Any]) -> Path:
    """`doc` written to `directory` as `<digest>-<this process's pid>.json`, atomically (a
    reader never sees half a file)."""
    directory.mkdir(parents=True, exist_ok=True)
    text = dumps(doc)
    path = directory / f"{_digest(text)}-{os.getpid()}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


@contextmanager
def in_flight(workers: Iterable[BurnWorker], program: Program) -> Iterator[None]:
    """`program` on disk while the block runs, written once for every request `workers` are
    sent about it (their own requests about it write nothing), removed after the block, whether
    it returns or raises."""
    held = list(workers)
    dirs = {w.inflight_dir for w in held if w.inflight_dir is not None}
    if not dirs:
        yield
        return
    doc = program_to_dict(program)
    paths = [write_program(d, doc) for d in sorted(dirs)]
    for w in held:
        w.held = program
    try:
        yield
    finally:
        for w in held:
            w.held = None
        for p in paths:
            p.unlink(missing_ok=True)
