"""Calls burn answers with its input tensor itself, not a new node (found by running).

For these the `noop-returns-input` rule (rules.py) predicts burn's result to be its input: a
require-grad leaf stays a require-grad leaf and receives the gradient directly. PyTorch always
records a new node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from difftest.divergences.knowledge import Knowledge, burn_source

_TENSOR_API = burn_source("burn-tensor", "src/tensor/api/base.rs")
_AUTODIFF_OPS = burn_source("burn-autodiff", "src/ops/tensor.rs")
_BACKEND_OPS = burn_source("burn-backend", "src/backend/ops/tensor.rs")


@dataclass(frozen=True)
class NoOp:
    knowledge: Knowledge
    op: str
    applies: Callable[[dict[str, Any]], bool]  # the call's attributes make it a no-op

    @property
    def name(self) -> str:
        return self.knowledge.name


def _noop(name: str, op: str, applies: Callable[[dict[str, Any]], bool], reason: str, *evidence: str) -> NoOp:
    return NoOp(Knowledge(name, "no-op", "burn", reason, ("docs/semantics.md#divergences", *evidence)), op, applies)


NOOPS: tuple[NoOp, ...] = (
    _noop("permute-identity-returns-input", "permute", lambda a: list(a["axes"]) == list(range(len(a["axes"]))),
          "Tensor::permute with the identity order returns self (`if no_op { self }`).", _TENSOR_API),
    _noop("swap-dims-same-returns-input", "swap_dims", lambda a: a["dim1"] == a["dim2"],
          "Tensor::swap_dims(d, d) returns self (`if dim1 == dim2 { self }`).", _TENSOR_API),
    _noop("powi-scalar-one-returns-input", "powi_scalar", lambda a: a["exponent"] == 1,
          "burn-autodiff's float_powi_scalar answers an exponent of 1 with its input (`1 => lhs`).", _AUTODIFF_OPS),
    _noop("powf-scalar-one-returns-input", "powf_scalar", lambda a: a["exponent"] == 1.0,
          "float_powf_scalar dispatches an integral exponent to float_powi_scalar, so powf_scalar(x, 1.0) "
          "is x itself too (measured: powf_scalar(x, 1.0) of a require-grad leaf reports true true true).",
          _BACKEND_OPS, _AUTODIFF_OPS),
)

NOOPS_BY_OP: dict[str, NoOp] = {n.op: n for n in NOOPS}
