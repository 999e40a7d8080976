"""What a campaign job does with a finding it claimed (parallel.py): re-check it in fresh
workers (a finding that does not reproduce there is flaky), then shrink it. On several backends
(`fuzz --backend flex,ndarray`) the finding is one backend's (findings/backends.py `Shown`): both
keep which backends show it, so its key, with its layer class, stays the same."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import Any

from difftest.exec.backends import DEFAULT_BACKEND
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.backends import Shown, triangulate
from difftest.findings.hangs import HANG_KINDS, shorter_timeouts
from difftest.findings.shrink import shrink
from difftest.findings.signature import signature
from difftest.findings.triage import KNOWN_PREFIX
from difftest.oracle.check import check_on
from difftest.oracle.compare import Verdict

__all__ = ["KNOWN_PREFIX", "recheck", "shrunk"]


def shrunk(shown: Shown, verdicts: Mapping[str, Verdict], workers: Mapping[str, BurnWorker], stop: Any) -> Verdict:
    """The smallest program found with the same finding on `shown.backend` (stops early, keeping
    the best so far, once `stop` is set); the original verdict when the shrunk program's key
    (triage and layer class) is not `shown.key`. `verdicts`: the program's on each backend of
    `workers`. A candidate is compared by the finding as the program shows it (signature.py),
    which needs no localisation: the same on each backend that showed it, not shown on the
    others; the smallest one is then triaged once on each backend."""

    looks = {b: signature(verdicts[b]) for b in shown.backends}
    others = [b for b in workers if b not in shown.backends]

    def same(p: Any) -> bool:
        if stop.is_set():
            return False
        vs = check_on(p, workers)
        return (all(not vs[b].ok and signature(vs[b]) == looks[b] for b in shown.backends)
                and all(vs[b].ok or signature(vs[b]) not in looks.values() for b in others))

    # a hang's candidates wait a short timeout each; the shrunk program is confirmed below with
    # the workers' own (findings/hangs.py)
    hangs = any(m.kind in HANG_KINDS for m in shown.verdict.findings)
    with shorter_timeouts(workers.values()) if hangs else nullcontext():
        small = shrink(shown.verdict.program, same)
    if small == shown.verdict.program:
        return shown.verdict
    final = check_on(small, workers)
    again = triangulate(final, workers).get(shown.backend)
    if again is None or again.key != shown.key:
        return shown.verdict
    return final[shown.backend]


def recheck(verdict: Verdict, backend: str, backends: Sequence[str | None], binary: str | None, timeout: float,
            fault: str | None) -> str:
    """The key the finding `verdict` (on `backend`) gives in fresh workers, one on each of
    `backends` as the job started its own (None: $DIFFTEST_BURN_BACKEND's; the layer class needs
    them all): as the job keys findings, or `pass`. A finding that depends on what the job's
    workers ran before is flaky."""

    fresh = {}
    for b in backends:
        w = BurnWorker(binary, timeout=timeout, fault=fault, backend=b)
        fresh[w.backend or DEFAULT_BACKEND] = w
    try:
        again = triangulate(check_on(verdict.program, fresh), fresh).get(backend)
        return "pass" if again is None else again.key
    finally:
        for w in fresh.values():
            w.close()
