"""Schema errors as difftest reports them: brief, naming where in the document and what type was
expected and came, and quoting the user's document only in part (a whole program quoted back is
unreadable, and a list of a million numbers would fill the terminal)."""

from __future__ import annotations

from typing import Any

import jsonschema

SHOWN_CHARS = 100  # of a piece of the user's document quoted in an error
_TYPE_NAMES = {"object": "a JSON object", "array": "an array", "string": "a string", "integer": "an integer",
               "number": "a number", "boolean": "a boolean (true or false)", "null": "null"}


def cut(text: str, n: int = SHOWN_CHARS) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def shown_number(x: int | float) -> str:
    """A number as an error quotes it: itself, or for an integer too long to read, its length."""
    text = repr(x)
    return text if len(text) <= 24 or not isinstance(x, int) else f"an integer of {len(str(abs(x)))} digits"


def shown(x: Any) -> str:
    """`x` as an error quotes it, cut to SHOWN_CHARS characters."""
    return cut(repr(x))


def _json_type(x: Any) -> str:
    """What `x` is in JSON terms; a scalar with its value (cut short)."""
    if isinstance(x, dict):
        return "an object"
    if isinstance(x, list):
        return "an array"
    if x is None:
        return "null"
    kind = "a boolean" if isinstance(x, bool) else "a string" if isinstance(x, str) else \
        "an integer" if isinstance(x, int) else "a number" if isinstance(x, float) else type(x).__name__
    return f"{kind} ({shown(x)})"


def _field(path: list[Any]) -> str:
    """A document path as an error names it: `shape[1]` within a statement (the error's prefix
    names the statement), `dtype` at the top, the program or the statement themselves."""
    if not path:
        return "the program"
    if len(path) >= 2 and path[0] == "statements" and isinstance(path[1], int):
        path = path[2:]
        if not path:
            return "the statement"
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else f".{p}" if out else str(p)
    return out


def schema_message(err: jsonschema.ValidationError) -> str:
    """The error's message, brief: a type error says what was expected where and what came; any
    other keeps jsonschema's wording with the quoted document cut short."""
    if err.validator == "type":
        value = err.validator_value
        wanted = [str(w) for w in (value if isinstance(value, list) else [value])]
        expected = " or ".join(_TYPE_NAMES.get(w, w) for w in wanted)
        got = _json_type(err.instance)
        if "integer" in wanted and isinstance(err.instance, float) and err.instance.is_integer():
            got += f": write it without the fraction ({int(err.instance)})"
        return f"{cut(_field(list(err.absolute_path)))} must be {expected}, got {got}"
    text = err.message
    whole = repr(err.instance)
    if len(whole) > SHOWN_CHARS:
        text = text.replace(whole, shown(err.instance))
    return cut(text, 2 * SHOWN_CHARS)  # jsonschema's words around what it quotes
