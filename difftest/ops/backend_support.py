"""What each burn backend runs, as data: its float dtypes and the catalog ops it refuses.

Flex runs the whole catalog in every dtype of `program/dtypes.py` (ops/dtype_support.py says
where PyTorch or burn-nn does not). Another backend may refuse a dtype or an op outright (a
documented panic of its own, not a wrong answer), or refuse an op only for some values of one
attribute (NdArray: a cast to half precision): a campaign on that backend draws none of them
(`difftest fuzz --backend`), and the backend tier (tests/backends/) measures that each refusal
still happens, with the message recorded here. docs/backends.md

Torch-free at import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from difftest.program.dtypes import FLOAT_DTYPES
from difftest.program.ir import OpCall, Program

# burn-ndarray 0.22.1 src/backend.rs: `DType::F16 | DType::BF16 | DType::Bool(_) =>
# DTypeUsageSet::empty()`; creating a half tensor panics "not implemented: Unsupported dtype F16"
# (src/tensor.rs).
DTYPES: dict[str, tuple[str, ...]] = {
    "flex": FLOAT_DTYPES,
    "ndarray": ("float32", "float64"),
}

@dataclass(frozen=True)
class Refusal:
    """How a backend refuses an op: its panic's message, for every call of the op or, with
    `attr`, only for the values of that attribute in `by_value`, each with its own message."""

    source: str  # where burn says so
    message: str = ""
    attr: str | None = None
    by_value: Mapping[Any, str] = field(default_factory=dict)

    def message_for(self, attrs: Mapping[str, Any]) -> str | None:
        """The message of the panic a call with these attributes meets, or None: it runs."""
        if self.attr is None:
            return self.message
        return self.by_value.get(attrs.get(self.attr))


# backend -> op -> how it refuses it. A campaign on the backend leaves out an op it refuses
# outright (`refused_outright`), and draws an op it refuses for some attribute values with the
# others only: the generator redraws a call the backend refuses (GenConfig.backends).
UNSUPPORTED_OPS: dict[str, dict[str, Refusal]] = {
    "ndarray": {
        "cast": Refusal(
            "burn-ndarray 0.22.1 has no half precision (src/backend.rs supports_dtype), so a cast to float16 or "
            "bfloat16 panics (a cast to float32 or float64 runs)",
            attr="dtype",
            by_value={"float16": "Unsupported dtype: F16", "bfloat16": "Unsupported dtype: BF16"},
        ),
        "interpolate_bilinear": Refusal(
            "burn-ndarray 0.22.1 src/ops/module.rs, interpolate_backward: an explicit panic for every mode but "
            "Nearest (the forward runs)",
            "bilinear interpolation backward is not supported for ndarray backend",
        ),
    },
    "wgpu": {
        "interpolate_bilinear": Refusal(
            "burn-cubecl 0.22.1 runs interpolate_backward through cubek-interpolate 0.3.1 (src/lib.rs), which "
            "refuses every mode but Nearest: 'Bilinear interpolation backward is not supported by JIT backend' "
            "(the forward runs)",
            "interpolation backward is not supported by JIT backend",
        ),
    },
}


def dtypes(backend: str) -> tuple[str, ...]:
    """The float dtypes `backend` runs (every one for a backend not measured yet)."""
    return DTYPES.get(backend, FLOAT_DTYPES)


def unsupported_ops(backend: str) -> dict[str, Refusal]:
    return UNSUPPORTED_OPS.get(backend, {})


def refused_outright(backend: str) -> set[str]:
    """The ops `backend` refuses whatever their attributes: a campaign on it leaves them out."""
    return {op for op, r in unsupported_ops(backend).items() if r.attr is None}


def call_refusal(backend: str, op: str, attrs: Mapping[str, Any]) -> str | None:
    """The panic message `backend` refuses one call of `op` with these attributes with, or None
    when it runs it."""
    refused = unsupported_ops(backend).get(op)
    return None if refused is None else refused.message_for(attrs)


def refusal(program: Program, backend: str) -> str | None:
    """The panic message `backend` refuses `program` with (its dtype, or an op it refuses,
    backward included), or None when it runs it."""
    if program.dtype not in dtypes(backend):
        return "Unsupported dtype"
    for s in program.statements:
        if isinstance(s, OpCall):
            message = call_refusal(backend, s.op, s.attrs)
            if message is not None:
                return message
    return None
