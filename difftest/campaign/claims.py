"""What a campaign job does with a finding it claimed (parallel.py): re-check it in a fresh
worker (a finding that does not reproduce there is flaky), then shrink it."""

from __future__ import annotations

from typing import Any

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.shrink import shrink
from difftest.findings.signature import signature
from difftest.findings.triage import triage
from difftest.oracle.check import check
from difftest.oracle.compare import Verdict

KNOWN_PREFIX = "known-bug:"  # a campaign's key for findings a known bug explains (by its name)


def shrunk(verdict: Verdict, sig: str, worker: Any, stop: Any) -> Verdict:
    """The smallest program found with the same finding (stops early, keeping the best so far,
    once `stop` is set); the original verdict when the shrunk program's triage signature is not
    `sig`. Candidates are compared by the finding as the program shows it (signature.py), which
    needs no localisation; the smallest one is then triaged once."""

    shown = signature(verdict)

    def same(p: Any) -> bool:
        if stop.is_set():
            return False
        v = check(p, worker)
        return not v.ok and signature(v) == shown

    small = shrink(verdict.program, same)
    if small == verdict.program:
        return verdict
    final = check(small, worker)
    if final.ok or triage(final, worker).signature != sig:
        return verdict
    return final


def recheck(verdict: Verdict, binary: str | None, timeout: float, fault: str | None) -> str:
    """The finding `verdict`'s program gives in a fresh worker: its triage key (as the job keys
    findings), or `pass`. A finding that depends on what the job's worker ran before is flaky."""

    with BurnWorker(binary, timeout=timeout, fault=fault) as fresh:
        again = check(verdict.program, fresh)
        if again.ok:
            return "pass"
        t = triage(again, fresh)
        return f"{KNOWN_PREFIX}{t.known.name}" if t.known is not None else t.signature
