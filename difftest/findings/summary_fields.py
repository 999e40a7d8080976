"""Typed readers of the fields of a campaign summary (`Summary.from_dict`) and of a coverage
summary (`Coverage.from_dict`): a field of the wrong type is a ValueError naming it
("findings[].count", "guided.mutations", "crates.burn-nn.edges"), never a TypeError later in
`merge` or `report`. Each takes the object, the key and where the object is in the summary."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any


def field(d: Any, key: str, where: str = "") -> Any:
    if not isinstance(d, dict):
        raise ValueError(f"{where.rstrip('.') or 'the summary'} must be an object, got {d!r}"[:200])
    return d.get(key)


def integer(d: Any, key: str, default: int = 0, where: str = "") -> int:
    v = field(d, key, where)
    if v is None and key not in d:
        return default
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f'"{where}{key}" must be a count (an integer >= 0), got {v!r}'[:200])
    return v


def optional_int(d: Any, key: str, where: str = "") -> int | None:
    v = field(d, key, where)
    if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
        raise ValueError(f'"{where}{key}" must be an integer or null, got {v!r}'[:200])
    return v


def optional_str(d: Any, key: str, where: str = "") -> str | None:
    v = field(d, key, where)
    if v is not None and not isinstance(v, str):
        raise ValueError(f'"{where}{key}" must be a string or null, got {v!r}'[:200])
    return v


def seconds(d: Any, key: str, where: str = "") -> float:
    v = field(d, key, where)
    if v is None and key not in d:
        return 0.0
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= 0 or v == float("inf"):
        raise ValueError(f'"{where}{key}" must be a number of seconds >= 0, got {v!r}'[:200])
    return float(v)


def counts(d: Any, key: str, where: str = "") -> Counter[str]:
    """A {name: count} field (verdicts, rules, ops, …)."""
    v = field(d, key, where)
    if v is None and key not in d:
        return Counter()
    if not isinstance(v, dict) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                          for n in v.values()):
        raise ValueError(f'"{where}{key}" must map names to counts (integers >= 0), got {v!r}'[:200])
    return Counter(v)


def _list_of(d: Any, key: str, where: str, fits: Callable[[Any], bool], what: str) -> list[Any]:
    v = field(d, key, where)
    if v is None and key not in d:
        return []
    if not isinstance(v, list) or not all(fits(x) for x in v):
        raise ValueError(f'"{where}{key}" must be a list of {what}, got {v!r}'[:200])
    return list(v)


def strings(d: Any, key: str, where: str = "") -> list[str]:
    return _list_of(d, key, where, lambda x: isinstance(x, str), "strings")


def objects(d: Any, key: str, where: str = "") -> list[Any]:
    return _list_of(d, key, where, lambda x: isinstance(x, dict), "objects")


def objects_by_name(d: Any, key: str, where: str = "") -> dict[str, Any]:
    """A {name: object} field (a coverage summary's crates and files)."""
    v = field(d, key, where)
    if not isinstance(v, dict) or not all(isinstance(x, dict) for x in v.values()):
        raise ValueError(f'"{where}{key}" must map names to objects, got {v!r}'[:200])
    return v


def guided(g: Any) -> dict[str, Any]:
    """A guided campaign's record (Summary.guided), its fields checked as `add_guided` and the
    report read them."""
    at = "guided."
    out: dict[str, Any] = dict(g) if isinstance(g, dict) else {}
    if not isinstance(g, dict):
        raise ValueError(f'"guided" must be an object, got {g!r}'[:200])
    for key in ("fresh", "added", "unread", "entries", "edges"):
        if key in g:
            out[key] = integer(g, key, 0, at)
    if "mutations" in g:
        out["mutations"] = dict(counts(g, "mutations", at))
    if "frontier" in g:
        out["frontier"] = optional_str(g, "frontier", at)
    if "frontiers" in g and (not isinstance(g["frontiers"], list)
                             or not all(f is None or isinstance(f, str) for f in g["frontiers"])):
        raise ValueError(f'"guided.frontiers" must be a list of directories, got {g["frontiers"]!r}'[:200])
    return out
