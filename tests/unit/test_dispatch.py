"""Statement kinds are dispatched once per concern: each concern (the JSON form, the text, the
structure checks, shapes, dtypes, the model, the PyTorch executor, the reproducers, the tables,
signatures and pictures) has one `ByKind` table with a handler for every statement kind. Adding
a kind to difftest/program/statements.py without a handler in every table fails here."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any

import pytest

import difftest
from difftest.program import statements
from difftest.program.statements import DISPATCH_TABLES, KIND_NAMES, STATEMENT_KINDS, ByKind

# every concern that dispatches over the statement kinds, by its table's name
CONCERNS = {
    "references", "JSON", "text", "structure checks", "shapes", "value dtypes", "model", "PyTorch executor",
    "PyTorch reproducer", "burn reproducer", "table", "signature", "picture",
}


def _declared_kinds() -> set[type]:
    """Every statement kind statements.py declares: a dataclass with a fixed `kind` field."""
    out: set[type] = set()
    for value in vars(statements).values():
        if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == statements.__name__:
            kind = {f.name: f for f in dataclasses.fields(value)}.get("kind")
            if kind is not None and not kind.init:
                out.add(value)
    return out


def _all_tables() -> list[ByKind[Any]]:
    """The tables of every module of the package (each registers itself when it is built)."""
    for info in pkgutil.walk_packages(difftest.__path__, "difftest."):
        importlib.import_module(info.name)
    return list(DISPATCH_TABLES)


def test_every_declared_kind_is_a_statement() -> None:
    declared = _declared_kinds()
    assert declared == set(STATEMENT_KINDS), declared ^ set(STATEMENT_KINDS)
    assert set(KIND_NAMES) == {k.kind for k in STATEMENT_KINDS}  # type: ignore[attr-defined]
    assert len(KIND_NAMES) == len(STATEMENT_KINDS)  # no two kinds share a JSON name


def test_every_concern_has_one_table_that_handles_every_kind() -> None:
    tables = _all_tables()
    names = [t.concern for t in tables]
    assert sorted(set(names)) == sorted(names), "two tables for one concern"
    assert set(names) >= CONCERNS, CONCERNS - set(names)
    for table in tables:
        missing = _declared_kinds() - set(table.handlers)
        assert not missing, f"{table.concern}: no handler for {sorted(k.__name__ for k in missing)}"


def test_a_table_without_a_kind_is_refused() -> None:
    first, *rest = KIND_NAMES
    handlers = {name: str for name in rest}
    with pytest.raises(TypeError, match=first):
        ByKind("incomplete", **handlers)
    with pytest.raises(TypeError, match="not statement kinds"):
        ByKind("extra", **handlers, **{first: str, "nop": str})
