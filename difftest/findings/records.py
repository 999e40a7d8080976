"""The optional records a corpus case keeps about its bug's life (upstream, root cause, title,
versions and backends tested, the candidate fix difftest proved), and their validation when a
case is loaded (findings/corpus.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from difftest.divergences.host import HostCondition
from difftest.divergences.knowledge import parse_version
from difftest.exec.backends import BACKENDS
from difftest.program.schema_messages import shown


class CorpusError(ValueError):
    """A corpus file that cannot be used, with its path."""


NOT_REPORTED = "not reported"


FIX_FIELDS = ("patch", "burn", "outcome", "others", "date")
TITLE_MAX = 120


def check_records(path: Path, doc: dict[str, Any]) -> None:
    """Optional record of a case's life upstream and across burn versions (older files have
    neither): `upstream`, an https URL of the issue or pull request or "not reported";
    `upstream_note`, text; `title`, the bug report's title; `root`, the name of the bug case
    whose root cause this one shares (one report for the group); `versions_tested`, burn
    version -> {"outcome": text, "date": ISO day}
    (written by `difftest versions --record`); `fix`, the candidate fix proved on the bug
    ({"patch", "burn", "outcome", "others", "date"}, written by the same command on a
    `patch:FILE` build); `backend`, the burn backend the case runs on (default flex; a campaign
    on another backend writes it); `backends_tested`, burn backend -> {"outcome": text, "burn":
    version, "date": ISO day} (`difftest versions --backend B,B --record`; findings/backends.py);
    `host`, the machines the case reproduces on ({"cpu_flags": [...]}: a PyTorch kernel some CPUs
    pick; divergences/host.py), skipped on any other; `verdict`, the verdict the case was saved
    with ({"kind", "mismatches"}: its signature is computed from it when the case has none)."""
    up = doc.get("upstream")
    if up is not None and not (up == NOT_REPORTED or (isinstance(up, str) and up.startswith("https://"))):
        raise CorpusError(f"{path}: \"upstream\" must be an https URL or {NOT_REPORTED!r}, got {up!r}")
    given = doc.get("title")
    if given is not None and not (isinstance(given, str) and 0 < len(given.strip()) <= TITLE_MAX):
        raise CorpusError(f"{path}: \"title\" (the bug report's title) must be text of 1 to {TITLE_MAX} "
                          f"characters, got {given!r}")
    note = doc.get("upstream_note")
    if note is not None and not isinstance(note, str):
        raise CorpusError(f"{path}: \"upstream_note\" must be text")
    root = doc.get("root")
    if root is not None and not (isinstance(root, str) and re.fullmatch(r"[a-z0-9][a-z0-9-]*", root)):
        raise CorpusError(f"{path}: \"root\" must name the bug case whose root cause this one shares, got {root!r}")
    fix = doc.get("fix")
    if fix is not None and not (isinstance(fix, dict) and all(isinstance(fix.get(k), str) for k in FIX_FIELDS)):
        raise CorpusError(f"{path}: \"fix\" must be an object with text fields {', '.join(FIX_FIELDS)}, got {fix!r}")
    _check_backend_fields(path, doc)
    _check_verdict(path, doc.get("verdict"))
    _check_outcomes(path, doc, "versions_tested", "burn version", _version_problem)
    if "host" in doc:
        try:
            HostCondition.from_dict(doc["host"])
        except ValueError as e:
            raise CorpusError(f"{path}: {e}") from None


def _check_verdict(path: Path, verdict: Any) -> None:
    """A recorded verdict, when there is one, is an object with a "kind" (text) and its
    "mismatches" (a list of objects); otherwise the case's signature, which a merge or a
    campaign computes from it, cannot be read."""
    if verdict is None:
        return
    if not isinstance(verdict, dict):
        raise CorpusError(f"{path}: \"verdict\" must be an object with \"kind\" and \"mismatches\", "
                          f"got {shown(verdict)}")
    if not isinstance(verdict.get("kind"), str):
        raise CorpusError(f"{path}: \"verdict.kind\" must be text, got {shown(verdict.get('kind'))}")
    mismatches = verdict.get("mismatches")
    if not isinstance(mismatches, list) or not all(isinstance(m, dict) for m in mismatches):
        raise CorpusError(f"{path}: \"verdict.mismatches\" must be a list of objects, got {shown(mismatches)}")


def _version_problem(version: str) -> str | None:
    try:
        parse_version(version)
    except ValueError as e:
        return str(e)
    return None


def _check_outcomes(path: Path, doc: dict[str, Any], field: str, key: str,
                    problem: Callable[[str], str | None]) -> None:
    """`field`, when present, maps a `key` (`problem` says what is wrong with one, or None) to
    an object with an "outcome"."""
    tested = doc.get(field)
    if tested is None:
        return
    if not isinstance(tested, dict):
        raise CorpusError(f"{path}: \"{field}\" must be an object: {key} -> outcome")
    for k, entry in tested.items():
        wrong = problem(k)
        if wrong is not None:
            raise CorpusError(f"{path}: {field}: {wrong}")
        if not isinstance(entry, dict) or not isinstance(entry.get("outcome"), str):
            raise CorpusError(f"{path}: {field}[{k!r}] must be an object with an \"outcome\"")


def _check_backend_fields(path: Path, doc: dict[str, Any]) -> None:
    """`backend` names a burn backend; `backends_tested` maps backends to outcomes."""
    if "backend" in doc and doc["backend"] not in BACKENDS:
        raise CorpusError(f"{path}: \"backend\" must be one of {', '.join(BACKENDS)}, got {doc['backend']!r}")
    _check_outcomes(path, doc, "backends_tested", "backend",
                    lambda b: None if b in BACKENDS else f"unknown backend {b!r} (known: {', '.join(BACKENDS)})")


