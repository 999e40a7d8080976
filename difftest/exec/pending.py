"""Requests sent to a burn worker whose answers have not been read yet (burn_worker.py).

A caller may send several requests before reading any answer (a campaign sends a program's
run and, right behind it, its root probes, then runs PyTorch while burn works through both).
The worker answers in the order it was asked; `BurnWorker` reads the answers in that order and
keeps each for its reader. A request remembers the worker process it went to: when that process
was replaced before answering (an earlier request crashed or hung it), the request is sent again
to the new one when its answer is asked for. A request is its fields, so its answer there is the
one a first sending to a fresh process would have had.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from difftest.program.ir import Program
from difftest.program.observation import BackwardObs, ErrorObs, Observation

if TYPE_CHECKING:
    from difftest.exec.burn_worker import BurnWorker


class Pending:
    """One request (`kind`, `fields`) and where it went: the request id and the worker process
    (`incarnation`) it was sent to, or, when sending it failed, that failure's observation."""

    def __init__(self, worker: BurnWorker, kind: str, fields: dict[str, Any], timeout: float | None,
                 inflight: Path | None) -> None:
        self.worker, self.kind, self.fields = worker, kind, fields
        self.timeout, self.inflight = timeout, inflight
        self.rid = 0
        self.incarnation = -1  # the worker process it was sent to (BurnWorker.incarnation)
        self.started = 0.0  # time.monotonic() when it was last sent
        self.failed: Observation | None = None  # sending it failed: the crash observation
        worker._dispatch(self)

    def sent(self, rid: int, incarnation: int) -> None:
        self.rid, self.incarnation, self.started = rid, incarnation, time.monotonic()

    @property
    def lost(self) -> bool:
        """Whether the process it was sent to has been replaced before it was answered."""
        return self.failed is None and self.incarnation != self.worker.incarnation


class PendingRun(Pending):
    """A program sent to the worker whose answer has not been read yet."""

    def __init__(self, worker: BurnWorker, doc: dict[str, Any], timeout: float | None,
                 inflight: Path | None) -> None:
        self._result: Observation | None = None
        super().__init__(worker, "run", {"program": doc}, timeout, inflight)

    def result(self) -> Observation:
        if self._result is None:
            self._result = self.worker._finish_run(self)
        return self._result


class PendingProbes(Pending):
    """A `probe` request sent to the worker whose answer has not been read yet."""

    def __init__(self, worker: BurnWorker, program: Program, probes: Sequence[tuple[int, str]],
                 fields: dict[str, Any], timeout: float | None, inflight: Path | None) -> None:
        self.program, self.probes = program, list(probes)
        self._answer: dict[str, Any] | Observation | None = None
        super().__init__(worker, "probe", fields, timeout, inflight)

    def answer(self) -> dict[str, Any] | Observation:
        """The worker's answer, or the observation of its crash, hang or refusal."""
        if self._answer is None:
            self._answer = self.worker._finish_probe(self)
        return self._answer

    def discard(self) -> None:
        """The answer is not wanted: read it if the process it went to is still working on it
        (the worker answers in order), never send it again."""
        if self._answer is None and not self.lost and self.failed is None:
            self.answer()

    def result(self) -> list[tuple[ErrorObs | None, BackwardObs | None]] | Observation:
        """(outcome, backward) per probe (BurnWorker.probe_grads)."""
        answer = self.answer()
        if isinstance(answer, Observation):
            return answer
        if "grads" not in answer:
            return Observation("burn", error=ErrorObs(
                "invalid-request", "the probe answer has no \"grads\" (a difftest-burn built before probes "
                "reported gradients)"))
        out: list[tuple[ErrorObs | None, BackwardObs | None]] = []
        for (i, _), e, g in zip(self.probes, answer["outcomes"], answer["grads"], strict=True):
            bw = self.program.statements[i].id
            out.append((None if e is None else ErrorObs.from_dict(e),
                        None if g is None else BackwardObs.from_dict({"id": bw, "grads": g})))
        return out
