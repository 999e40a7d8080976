"""The files difftest shares with its user: every JSON file it is given is read by `read_json`.

Reading fails one way: a `JsonFileError` naming the file and what is wrong (it cannot be read,
it is not UTF-8, it starts with a byte-order mark, it is not JSON, it nests deeper than any
document difftest writes), never a traceback from the parser (a RecursionError on `[[[[...`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from difftest.program.jsonio import loads, loads_lenient

BOM = b"\xef\xbb\xbf"


class JsonFileError(ValueError):
    """A JSON file that cannot be used, with its path and why."""


def read_json(path: Path | str, *, strict: bool = True) -> Any:
    """The document in `path`. `strict` (programs and cases): bare NaN/Infinity and numbers
    beyond float64 are errors, as in `jsonio.loads`; otherwise (summaries and other reports
    difftest wrote) Python's own reading of them is kept. Either way a byte-order mark is an
    error: difftest-burn, which runs the same files, rejects it too."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise JsonFileError(f"{path}: cannot read: {e}") from e
    return parse_json(data, str(path), strict=strict)


def parse_json(data: bytes, where: str, *, strict: bool = True) -> Any:
    """`read_json` on bytes already read; `where` names them in an error."""
    if data.startswith(BOM):
        raise JsonFileError(f"{where}: the file starts with a UTF-8 byte-order mark, which JSON does not allow "
                            "and difftest-burn rejects: save it without one")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JsonFileError(f"{where}: not UTF-8: {e}") from e
    try:
        return loads(text) if strict else loads_lenient(text)
    except ValueError as e:  # malformed, nested too deeply, a bare NaN, a number beyond float64
        raise JsonFileError(f"{where}: malformed JSON: {e}") from e
