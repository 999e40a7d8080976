"""Where burn's worker hangs or dies on a program, and shrinking such a program in minutes.

A hang (no answer within the worker's timeout) or a crash (the process gone) is observed for
the whole program: the worker answers nothing, so the finding names no statement, and every
hang of a campaign had one signature (`timeout:burn:program:...`), whichever op never returned:
two hanging ops were one case, the second masked by the first. The statement is found by
running prefixes of the program, each the program's statements up to one of them (a prefix
of a valid program is one: every statement reads earlier ones), bisecting for the first prefix
that fails the same way (`failing_site`); the finding is then signed by that statement's op.
A hang whose stack was read names the burn function it never returned from (exec/stacks.py),
which signs it better: ops sharing a hung kernel are one finding. The bisection is for hangs
without one (no gdb, a hang outside burn) and for crashes, whose process is gone.

Each prefix that still hangs costs a timeout, and so does each shrinking candidate that still
hangs. A campaign's programs run in milliseconds, and the full timeout (60 s by default) is for
the first observation only: these re-runs wait `PROBE_TIMEOUT` (`shorter_timeouts`), and the
shrunk program is confirmed with the full timeout before it replaces the original
(campaign/claims.py), so a slow program is never mistaken for a hanging one in what is saved.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

from difftest.findings.signature import signature_of_mismatch
from difftest.oracle.compare import Mismatch, Verdict

if TYPE_CHECKING:
    from difftest.exec.burn_worker import BurnWorker

PROBE_TIMEOUT = 5.0  # seconds: a hang's re-runs; a program of the catalog runs in milliseconds
HANG_KINDS = ("timeout", "crash")


@contextmanager
def shorter_timeouts(workers: Iterable[BurnWorker], seconds: float = PROBE_TIMEOUT) -> Iterator[None]:
    """Each worker waits at most `seconds` for an answer while the block runs (never longer
    than its own timeout), its own timeout again after."""
    held = [(w, w.timeout) for w in workers]
    for w, own in held:
        w.timeout = min(own, seconds)
    try:
        yield
    finally:
        for w, own in held:
            w.timeout = own


def failing_site(verdict: Verdict, worker: BurnWorker, m: Mismatch) -> str | None:
    """The statement whose prefix of the program first hangs or crashes burn's worker as `m`
    says the program does; None when `m` is no such finding or the program does not fail that
    way within `PROBE_TIMEOUT` (a slow program rather than a hung one)."""
    if m.kind not in HANG_KINDS or m.framework != "burn" or m.statement is not None:
        return None
    statements = verdict.program.statements

    def fails(k: int) -> bool:
        error = worker.run(verdict.program.with_statements(statements[: k + 1])).error
        return error is not None and error.kind == m.kind

    lo, hi = 0, len(statements) - 1
    # the bisection reads only whether a prefix fails: no stack (seconds a run with gdb)
    held, worker.stacks = worker.stacks, False
    try:
        with shorter_timeouts([worker]):
            if not fails(hi):
                return None
            while lo < hi:
                mid = (lo + hi) // 2
                if fails(mid):
                    hi = mid
                else:
                    lo = mid + 1
    finally:
        worker.stacks = held
    return statements[lo].id


def hang_signature(verdict: Verdict, worker: BurnWorker, m: Mismatch) -> str | None:
    """The signature of a hang or crash of burn's worker: by the burn function a hang was stopped
    in when its stack was read, else by the op it happens at (`failing_site`); None when it is no
    such finding or no site is found (it keeps the program-wide signature)."""
    if m.kind in HANG_KINDS and m.framework == "burn" and m.evidence.get("site"):
        return signature_of_mismatch(m, verdict.program)  # by the burn function it was stopped in
    site = failing_site(verdict, worker, m)
    return signature_of_mismatch(replace(m, statement=site), verdict.program) if site is not None else None
