"""Program values spelled as Python and Rust source (float literals that keep every bit, lists,
line wrapping, burn's tensors of a program's dtype) and as display text (fmt_data). Shared by
the op spellings (difftest/ops/spelling.py), the module kinds' spellings
(difftest/program/modules/), the reproducers and the program's text (text.py)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from difftest.program.dtypes import to_f32


def fmt_float(x: float) -> str:
    """A float as display text (not source: nan, inf)."""
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    r = repr(float(x))
    return r


def fmt_data(data: tuple[float, ...], limit: int = 12) -> str:
    items = [fmt_float(x) for x in data[:limit]]
    more = f", … ({len(data)} values)" if len(data) > limit else ""
    return "[" + ", ".join(items) + more + "]"


def _literal(s: str) -> str:
    """A float literal valid in Python and Rust: always a '.' in the mantissa."""
    mant, _, exp = s.partition("e")
    if "." not in mant:
        mant += ".0"
    return f"{mant}e{int(exp)}" if exp else mant


def shortest_f32(x: float) -> str:
    """The shortest decimal that reads back (rounded to f32) as the f32 `x` (finite)."""
    for digits in range(1, 10):
        s = f"{x:.{digits}g}"
        if to_f32(float(s)) == x:
            return _literal(s)
    return _literal(repr(x))


def _special(x: float, nan: str, inf: str, ninf: str) -> str | None:
    if math.isnan(x):
        return nan
    if math.isinf(x):
        return inf if x > 0 else ninf
    return None


def py_float(x: float) -> str:
    """A Python float literal of the double `x`, every bit kept."""
    return _special(x, "float('nan')", "float('inf')", "float('-inf')") or _literal(repr(float(x)))


def py_f32(x: float) -> str:
    """A Python float literal that float32 reads back as the f32 `x`."""
    return _special(x, "float('nan')", "float('inf')", "float('-inf')") or shortest_f32(x)


def rust_f64(x: float) -> str:
    return _special(x, "f64::NAN", "f64::INFINITY", "f64::NEG_INFINITY") or _literal(repr(float(x)))


def rust_f32(x: float) -> str:
    return _special(x, "f32::NAN", "f32::INFINITY", "f32::NEG_INFINITY") or shortest_f32(x)


def number(v: Any) -> float | int:
    """`v` if it is a number (an int or a float, not a bool); else TypeError."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"not a number: {v!r}")
    return v


def py_scalar(v: Any) -> str:
    """A numeric attribute as the Python object the program holds: ints stay ints, floats keep
    every bit."""
    return str(v) if isinstance(number(v), int) else py_float(v)


def py_value(v: Any) -> str:
    """A JSON value (number, bool, list of those) as the Python literal of the same object."""
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(py_value(x) for x in v) + "]"
    if isinstance(v, float):
        return py_float(v)
    if isinstance(v, (bool, int)) or v is None:
        return repr(v)
    raise TypeError(f"no literal for {v!r}")


def list_literal(items: Iterable[Any]) -> str:
    return "[" + ", ".join(str(i) for i in items) + "]"


def wrap(items: list[str], indent: str, width: int = 100) -> str:
    """Comma-separated items, broken into lines of at most `width` characters."""
    lines: list[str] = []
    cur = ""
    for it in items:
        piece = it if not cur else f"{cur}, {it}"
        if cur and len(indent) + len(piece) > width:
            lines.append(cur + ",")
            cur = it
        else:
            cur = piece
    lines.append(cur)
    return f"\n{indent}".join(lines)


def rust_f64_items(data: Iterable[float]) -> list[str]:
    """f64 literals of a Rust `vec![...]` (every bit kept), the first one typed (`f64` suffix)."""
    items = [rust_f64(x) for x in data]
    if items and not items[0].startswith("f64::"):
        items[0] += "f64"
    return items


def rust_f32_items(data: Iterable[float]) -> list[str]:
    """f32 literals of a Rust `vec![...]`, the first one typed (`f32` suffix)."""
    items = [rust_f32(x) for x in data]
    if items and not items[0].startswith("f32::"):
        items[0] += "f32"
    return items


# a program's dtype as burn's DType (float32 programs use the device's default, F32)
BURN_DTYPE = {"float64": "DType::F64", "float16": "DType::F16", "bfloat16": "DType::BF16"}


def rust_items(data: Iterable[float], dtype: str) -> list[str]:
    """Data literals of a program of `dtype`: f32 for float32 programs, else f64 (exact; burn
    converts to the dtype)."""
    return rust_f32_items(data) if dtype == "float32" else rust_f64_items(data)


def burn_options(dev: str, dtype: str) -> str:
    """The creation options of a tensor on the device `dev` (a Rust variable) in `dtype`."""
    return f"&{dev}" if dtype == "float32" else f"(&{dev}, {BURN_DTYPE[dtype]})"


def burn_tensor(data: Sequence[float], shape: Sequence[int], dtype: str, dev: str = "device") -> str:
    """A float tensor of `shape` on `dev` in the program's `dtype`."""
    items = wrap(rust_items(data, dtype), " " * 8)
    return (f"Tensor::<{len(shape)}>::from_data(TensorData::new(vec![{items}], {list_literal(shape)}), "
            f"{burn_options(dev, dtype)})")


def burn_vector(data: Sequence[float], dtype: str) -> str:
    """A rank-1 float tensor on `device` in the program's `dtype` (a module's vector parameter)."""
    return burn_tensor(data, [len(data)], dtype)
