"""Bad input in general, not case by case: the corpus's programs and cases and a campaign summary,
mutated one or two fields at a time (a field deleted, or replaced by a value of another type, an
out-of-range number, an empty or nested container), must be read as what they are or refused
with the reader's own error, which names the field: ValueError (ProgramError is one) for
programs and summaries, CorpusError for cases. Any other exception (a TypeError, an
AttributeError, PyTorch's RuntimeError, an OverflowError) is a traceback a user would see.
Seeded: the same mutations every run. `test_cli_bad_input.py` keeps the ones this found, by name."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from difftest.findings.corpus import CorpusError, load_case
from difftest.findings.summary import Finding, Summary, merge, print_summary, read_summary
from difftest.ops.validate import check_program
from difftest.oracle.model import predict
from difftest.oracle.pytorch import run as run_torch
from difftest.program.jsonio import program_from_dict

CORPUS = Path(__file__).parents[2] / "corpus"
# what a field becomes: other types, numbers past every bound, empty and nested containers
REPLACEMENTS: list[Any] = [None, -1, 0, 1, 2.5, 1e308, 10**12, "x", "", "NaN", True, [], {}, [1], [[1]], [-1, 2],
                           {"a": 1}, [None]]
_DELETE = object()
MUTANTS = 400


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if prefix:
        yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:8]):
            yield from _paths(v, (*prefix, i))


def _mutants(docs: list[Any], seed: int, n: int = MUTANTS) -> Iterator[tuple[Any, list[tuple[Any, ...]]]]:
    """`n` mutants of the documents, each with the paths it changed."""
    rng = random.Random(seed)
    for _ in range(n):
        doc = copy.deepcopy(rng.choice(docs))
        changed = []
        for _ in range(rng.randint(1, 2)):
            paths = list(_paths(doc))
            if not paths:
                break
            path = rng.choice(paths)
            value = _DELETE if rng.random() < 0.2 else copy.deepcopy(rng.choice(REPLACEMENTS))
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            if value is _DELETE:
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
            changed.append(path)
        yield doc, changed


def _corpus_docs() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(CORPUS.rglob("*.json"))]


def test_mutated_programs_are_read_or_refused_with_a_value_error() -> None:
    programs = [d["program"] for d in _corpus_docs() if isinstance(d.get("program"), dict)]
    assert len(programs) > 30
    refused = 0
    for doc, changed in _mutants(programs, seed=1):
        try:
            program = program_from_dict(doc)
            check_program(program)
            predict(program)
            run_torch(program)  # PyTorch's own errors become the observation's error, not raised
        except ValueError:
            refused += 1
        except Exception as e:  # any other exception is what this test looks for
            pytest.fail(f"{type(e).__name__}: {e} (a corpus program with {changed} changed)")
    assert refused > MUTANTS // 2  # most mutants are malformed: the readers were exercised


def _read_or_refused(read: Callable[[Path], Any], path: Path, error: type[Exception], what: str) -> bool:
    """Whether `read(path)` refused the file with `error` naming it (False: it was read); any
    other exception fails the test."""
    try:
        read(path)
    except error as e:
        assert str(path) in str(e), e
        return True
    except Exception as e:
        pytest.fail(f"{type(e).__name__}: {e} ({what})")
    return False


def test_mutated_cases_are_read_or_refused_with_a_corpus_error_and_what_is_read_shows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from difftest.cli import main

    refused = shown = 0
    path = tmp_path / "case.json"
    for doc, changed in _mutants(_corpus_docs(), seed=2):
        path.write_text(json.dumps(doc))
        if _read_or_refused(load_case, path, CorpusError, f"a corpus case with {changed} changed"):
            refused += 1
        elif shown < 60:  # `difftest show` renders what was read (the reproducers included)
            shown += 1
            try:
                main(["show", str(path)])
            except Exception as e:
                pytest.fail(f"{type(e).__name__}: {e} (difftest show of a corpus case with {changed} changed)")
            assert "Traceback" not in capsys.readouterr().err
    assert refused > MUTANTS // 4 and shown == 60


def test_mutated_summaries_are_read_or_refused_and_what_is_read_merges_and_prints(tmp_path: Path) -> None:
    from rich.console import Console

    s = Summary(programs=20, seconds=2.0, seed=3)
    s.verdicts.update({"pass": 19, "value": 1})
    s.ops.update({"add": 5, "exp": 3})
    s.findings["value:exp"] = Finding("value:exp", "value", 1, 7, "corpus/x.json")
    s.errors.append("job 0: boom")
    s.add_guided({"fresh": 3, "added": 1, "mutations": {"replace": 2}})
    refused = 0
    path = tmp_path / "summary.json"
    for mutant, changed in _mutants([s.to_dict()], seed=3, n=MUTANTS // 2):
        path.write_text(json.dumps(mutant))
        if _read_or_refused(read_summary, path, ValueError, f"a summary with {changed} changed"):
            refused += 1
            continue
        try:  # read: it merges with itself and prints
            with open(tmp_path / "out.txt", "w") as out:
                print_summary(merge([path, path]), Console(file=out))
        except Exception as e:
            pytest.fail(f"{type(e).__name__}: {e} (a summary with {changed} changed, read, then merged)")
    assert refused > MUTANTS // 8
