"""The files difftest shares with its user: every JSON file it is given is read by `read_json`,
and every file it writes for the user whole-or-not-at-all goes through `write_atomic`.

Reading fails one way: a `JsonFileError` naming the file and what is wrong (it cannot be read,
it is not UTF-8, it starts with a byte-order mark, it is not JSON, it nests deeper than any
document difftest writes), never a traceback from the parser (a RecursionError on `[[[[...`).
Writing leaves either the old content or the new one, and the new file gets the permissions any
file the user creates gets (0666 less the umask), not the owner-only mode of a temporary file."""

from __future__ import annotations

import os
import tempfile
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


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (setting it to read it
    back would briefly change it for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str, *, replace: bool = True) -> bool:
    """Writes `text` to `path` through a hidden temporary file in the same directory (fsynced,
    then renamed into place, or with `replace=False` hard-linked, which never clobbers). Returns
    whether `path` now holds `text`: False only when `replace` is False and `path` existed. A
    new file gets 0666 less the umask; a file rewritten keeps its mode."""
    try:
        mode = os.stat(path).st_mode & 0o7777 if replace else None
    except FileNotFoundError:
        mode = None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask() if mode is None else mode)  # mkstemp makes it 0600
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
