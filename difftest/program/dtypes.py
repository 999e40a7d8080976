"""Float dtypes of a program (docs/format.md, "Dtypes"): the program-level `dtype` every leaf,
module parameter and float value is created in, what data each can hold exactly, and the
dtype of every value.

Torch-free: representability is checked with `struct` (IEEE half for float16; bfloat16 is a
float32 whose low 16 bits are zero).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
DEFAULT_DTYPE = "float32"

# unit roundoff x 2 (the spacing of floats just above 1): the size tolerances scale with
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
# the smallest positive normal value (below it, results may be subnormal or flushed)
TINY = {"float64": 2.2250738585072014e-308, "float32": 1e-37, "float16": 6.103515625e-05,
        "bfloat16": 1.1754943508222875e-38}
# the smallest positive subnormal value (the spacing of the subnormals)
DENORM_MIN = {"float64": 5e-324, "float32": 1.401298464324817e-45, "float16": 5.960464477539063e-08,
              "bfloat16": 9.183549615799121e-41}
# the largest finite value
MAX = {"float64": 1.7976931348623157e308, "float32": 3.4028234663852886e38, "float16": 65504.0,
       "bfloat16": 3.3895313892515355e38}


def to_f32(x: float) -> float:
    """Round a Python float to the nearest float32, returned as a Python float."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", x))[0])
    except OverflowError:
        raise ValueError(f"{x!r} is beyond the float32 range") from None


def check_dtype(dtype: str, where: str = "dtype") -> str:
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"{where}: unknown dtype {dtype!r} (known: {', '.join(FLOAT_DTYPES)})")
    return dtype


def _f32_bits(x: float) -> int | None:
    try:
        return int(struct.unpack("<I", struct.pack("<f", x))[0])
    except OverflowError:
        return None


def round_to(x: float, dtype: str) -> float:
    """`x` rounded to the nearest value of `dtype` (ties to even); beyond the range: +-inf."""
    if dtype == "float64" or not math.isfinite(x):
        return x
    if dtype == "float16":
        try:
            return float(struct.unpack("<e", struct.pack("<e", x))[0])
        except OverflowError:
            return math.copysign(math.inf, x)
    bits = _f32_bits(x)
    if bits is None:
        return math.copysign(math.inf, x)
    if dtype == "bfloat16":
        # round the float32 to 16 bits, ties to even; x is first rounded to float32, which can
        # only double-round at exact bfloat16 ties (the generator's data never sit there)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        if bits & 0x7F800000 == 0x7F800000:
            return math.copysign(math.inf, x)
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


def representable(x: float, dtype: str) -> bool:
    """Whether `x` is exactly a value of `dtype` (NaN and +-inf are in every dtype)."""
    if not math.isfinite(x) or dtype == "float64":
        return True
    if dtype == "float16":
        try:
            return float(struct.unpack("<e", struct.pack("<e", x))[0]) == x
        except OverflowError:
            return False
    bits = _f32_bits(x)
    if bits is None or float(struct.unpack("<f", struct.pack("<I", bits))[0]) != x:
        return False
    return dtype == "float32" or bits & 0xFFFF == 0


def first_unrepresentable(xs: Iterable[float], dtype: str) -> tuple[int, float] | None:
    """The first (index, value) of `xs` that `dtype` cannot hold exactly, or None."""
    if dtype == "float64":
        return None
    for i, x in enumerate(xs):
        if not representable(x, dtype):
            return i, x
    return None
