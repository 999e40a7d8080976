"""Program values spelled as Python and Rust source: float literals that keep every bit, lists,
line wrapping. Shared by the op spellings (difftest/ops/spelling.py) and the reproducers."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from difftest.program.jsonio import to_f32


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
