"""Which catalog ops run in which dtype, as data (measured on both sides by
tests/differential/test_dtype_support.py: each op in each dtype, forward and backward, on Flex
and on PyTorch CPU).

Every op runs in float32. `UNSUPPORTED[dtype][op]` says why an op does not run in float64,
float16 or bfloat16 on one side or both (the error it raises, measured); the generator draws
only supported ops in a dtype, and a program that uses an unsupported one is refused before it
runs (validate.check_program), naming the statement.

Torch-free at import.
"""

from __future__ import annotations

from difftest.program.modules import MODULE_KINDS

_BCE = ("burn-nn 0.22.1's BinaryCrossEntropyLoss::forward converts the Int targets with `.float()`, "
        "which makes them the device's default float dtype (float32), and combines them with the {d} "
        "input: Flex panics 'storage: dtype mismatch (expected {D}, got F32)' "
        "(burn-nn-0.22.1/src/loss/binary_cross_entropy.rs:103); PyTorch runs it")

UNSUPPORTED: dict[str, dict[str, str]] = {
    "float32": {},
    "float64": {
        "binary_cross_entropy": _BCE.format(d="float64", D="F64"),
        "binary_cross_entropy_with_logits": _BCE.format(d="float64", D="F64"),
    },
    "float16": {
        "binary_cross_entropy": _BCE.format(d="float16", D="F16"),
        "binary_cross_entropy_with_logits": _BCE.format(d="float16", D="F16"),
    },
    "bfloat16": {
        "binary_cross_entropy": _BCE.format(d="bfloat16", D="BF16"),
        "binary_cross_entropy_with_logits": _BCE.format(d="bfloat16", D="BF16"),
    },
}


_HALF = ("PyTorch CPU computes {op} of {d} tensors with float32 intermediates (opmath); burn-flex "
         "computes in {d} itself, so an intermediate rounded at the inputs' scale cancels ({example}). "
         "The noise model measures each op's own rounding with PyTorch's kernels and cannot see it, so "
         "results are not comparable element by element: the generator keeps the op out of {d} programs "
         "(found by difftest fuzz --seed 7 --dtype {d})")
_LOG_SOFTMAX = "log_softmax([1.024, 8.92]) in float16: burn 0.0 (logsumexp rounds to 8.92), PyTorch -0.00037"
_VAR = "var_bias([-2.265625, -2.25]) in bfloat16: burn 1.22e-4 (the mean rounds to -2.25), PyTorch 6.1e-5"

# ops that run in a dtype but whose results there are not comparable with the noise model (the
# generator does not draw them in that dtype; a program may still use them)
IMPRECISE: dict[str, dict[str, str]] = {
    d: {
        "log_softmax": _HALF.format(op="log_softmax", d=d, example=_LOG_SOFTMAX),
        **{op: _HALF.format(op=op, d=d, example=_VAR) for op in ("var", "var_bias", "var_mean")},
    }
    for d in ("float16", "bfloat16")
}
# module kinds (drawn by the generator's module()) declare their own, in their entries
# (difftest/program/modules/: the normalisations are imprecise in half precision)
for _kind in MODULE_KINDS.values():
    for _d, _why in _kind.unsupported.items():
        UNSUPPORTED[_d][_kind.name] = _why
    for _d, _why in _kind.imprecise.items():
        IMPRECISE[_d][_kind.name] = _why


# an op (or module) whose inputs are in different dtypes (after a `cast`), measured: PyTorch
# promotes them to the more precise one, burn-flex refuses them
MIXED = ("PyTorch promotes inputs of different float dtypes (float16 + float32 is float32); burn-flex 0.22.1 "
         "panics 'storage: dtype mismatch (expected F32, got F16)' (burn-flex-0.22.1/src/tensor.rs:154, "
         "measured with add(cast(x, float16), x)): not comparable, so the generator never mixes dtypes "
         "and a program that does is refused")


def supported(op: str, dtype: str) -> bool:
    """Whether the generator draws `op` (a catalog op or a module kind) in `dtype`: it runs on both
    sides, comparably."""
    return op not in UNSUPPORTED.get(dtype, {}) and op not in IMPRECISE.get(dtype, {})


def why_unsupported(op: str, dtype: str) -> str | None:
    """The measured reason `op` does not run in `dtype`, or None when it does."""
    return UNSUPPORTED.get(dtype, {}).get(op)
