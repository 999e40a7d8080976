"""What the worker's answers to `run` and `probe` requests say, read as the protocol defines them
(docs/format.md#worker-protocol-difftest-burn---worker). A JSON answer of another shape raises
(KeyError, TypeError, ValueError or AttributeError: `MALFORMED`); the worker treats that as a
crash of the process, never as burn's result."""

from __future__ import annotations

from typing import Any

from difftest.program.observation import BackwardObs, ErrorObs, Observation

MALFORMED = (KeyError, TypeError, ValueError, AttributeError)


def error_of(answer: dict[str, Any]) -> ErrorObs:
    """The error of a refused request (`"ok": false`)."""
    err = answer.get("error") or {}
    if not isinstance(err, dict):
        raise TypeError(f"\"error\" must be an object, got {type(err).__name__}")
    return ErrorObs(err.get("kind", "invalid"), err.get("message", ""), err.get("index"), err.get("statement"))


def run_observation(answer: dict[str, Any]) -> Observation:
    """burn's observation of a program from the answer to its `run` request."""
    if not answer.get("ok"):
        return Observation("burn", error=error_of(answer))
    return Observation.from_dict(answer["result"], "burn")


def check_probe_answer(answer: dict[str, Any], n: int) -> dict[str, Any] | Observation:
    """The answer to a `probe` request of `n` probes, checked entry by entry as
    PendingProbes.result reads it, or the error of a refused request."""
    if not answer.get("ok"):
        return Observation("burn", error=error_of(answer))
    outcomes, grads = answer["outcomes"], answer.get("grads", [None] * n)
    if not (isinstance(outcomes, list) and isinstance(grads, list) and len(outcomes) == len(grads) == n):
        raise ValueError(f"{n} probes asked; \"outcomes\" and \"grads\" must be lists of {n}")
    for o, g in zip(outcomes, grads, strict=True):
        if o is not None:
            ErrorObs.from_dict(o)
        if g is not None:  # a probe's gradients: those of a backward's report
            BackwardObs.from_dict({"id": "probe", "grads": g})
    return answer
