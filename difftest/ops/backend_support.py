"""What each burn backend runs, as data: its float dtypes and the catalog ops it refuses.

Flex runs the whole catalog in every dtype of `program/dtypes.py` (ops/dtype_support.py says
where PyTorch or burn-nn does not). Another backend may refuse a dtype or an op outright (a
documented panic of its own, not a wrong answer): a campaign on that backend draws neither
(`difftest fuzz --backend`), and the backend tier (tests/backends/) measures that each refusal
still happens, with the message recorded here. docs/backends.md

Torch-free at import.
"""

from __future__ import annotations

from difftest.program.dtypes import FLOAT_DTYPES
from difftest.program.ir import OpCall, Program

# burn-ndarray 0.22.1 src/backend.rs: `DType::F16 | DType::BF16 | DType::Bool(_) =>
# DTypeUsageSet::empty()`; creating a half tensor panics "not implemented: Unsupported dtype F16"
# (src/tensor.rs).
DTYPES: dict[str, tuple[str, ...]] = {
    "flex": FLOAT_DTYPES,
    "ndarray": ("float32", "float64"),
}

# backend -> op -> (the message of its panic, where burn says so)
UNSUPPORTED_OPS: dict[str, dict[str, tuple[str, str]]] = {
    "ndarray": {
        # refused for a float16 / bfloat16 target only; a campaign leaves it out whole (the op's
        # dtype attribute is drawn from every float dtype: ops/sampling.py)
        "cast": (
            "Unsupported dtype: BF16",
            "burn-ndarray 0.22.1 has no half precision (src/backend.rs supports_dtype), so a cast to float16 or "
            "bfloat16 panics",
        ),
        "interpolate_bilinear": (
            "bilinear interpolation backward is not supported for ndarray backend",
            "burn-ndarray 0.22.1 src/ops/module.rs, interpolate_backward: an explicit panic for every mode but "
            "Nearest (the forward runs)",
        ),
    },
    "wgpu": {
        "interpolate_bilinear": (
            "interpolation backward is not supported by JIT backend",
            "burn-cubecl 0.22.1 runs interpolate_backward through cubek-interpolate 0.3.1 (src/lib.rs), which "
            "refuses every mode but Nearest: 'Bilinear interpolation backward is not supported by JIT backend' "
            "(the forward runs)",
        ),
    },
}


def dtypes(backend: str) -> tuple[str, ...]:
    """The float dtypes `backend` runs (every one for a backend not measured yet)."""
    return DTYPES.get(backend, FLOAT_DTYPES)


def unsupported_ops(backend: str) -> dict[str, tuple[str, str]]:
    return UNSUPPORTED_OPS.get(backend, {})


def refusal(program: Program, backend: str) -> str | None:
    """The panic message `backend` refuses `program` with (its dtype, or an op it refuses,
    backward included), or None when it runs it."""
    if program.dtype not in dtypes(backend):
        return "Unsupported dtype"
    refused = unsupported_ops(backend)
    ops = [s.op for s in program.statements if isinstance(s, OpCall) and s.op in refused]
    return refused[ops[0]][0] if ops else None
