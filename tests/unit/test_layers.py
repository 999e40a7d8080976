"""The layers of difftest/: the import contract (pyproject.toml, checked by import-linter), what
may be imported without PyTorch, and no import hidden in a function to dodge a cycle."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

CHECK_SHAPES = textwrap.dedent(
    """
    import sys

    import difftest.program
    from difftest.program.jsonio import program_from_dict
    from difftest.ops.validate import check_program, infer_shapes

    doc = {
        "format": "difftest-program",
        "version": 1,
        "statements": [
            {"id": "a", "kind": "leaf", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6], "device": "autodiff",
             "require_grad": True},
            {"id": "b", "kind": "leaf", "shape": [3, 1], "data": [1, 2, 3], "device": "plain",
             "require_grad": False},
            {"id": "m", "kind": "op", "op": "matmul", "inputs": ["a", "b"]},
            {"id": "r", "kind": "op", "op": "repeat_dim", "inputs": ["m"], "attrs": {"dim": 1, "times": 3}},
            {"id": "g", "kind": "op", "op": "gather", "inputs": ["r"],
             "attrs": {"dim": 1, "indices": {"shape": [2, 1], "data": [2, 0]}}},
            {"id": "s", "kind": "op", "op": "sum", "inputs": ["g"]},
            {"id": "bw", "kind": "backward", "input": "s"},
        ],
    }
    program = program_from_dict(doc)
    shapes = check_program(program)
    assert shapes == infer_shapes(program) == {"a": (2, 3), "b": (3, 1), "m": (2, 1), "r": (2, 3), "g": (2, 1),
                                               "s": (1,)}, shapes
    {extra}
    loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
    assert "torch" not in sys.modules, loaded[:10]
    print("ok")
    """
)


def _run(extra: str = "") -> None:
    code = CHECK_SHAPES.replace("{extra}", extra)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_program_layer_and_shape_checks_do_not_import_torch() -> None:
    _run()


def test_catalog_and_reproducers_do_not_import_torch() -> None:
    """The catalog's entries (templates, rules, domains) and the reproducers that spell them."""
    _run(
        "import difftest.ops.catalog\n"
        "from difftest.findings.reproducers import rust_test, torch_script\n"
        "assert 'torch.matmul(a, b)' in torch_script(program)\n"
        "assert 'a.clone().matmul(b.clone())' in rust_test(program, 't')"
    )


# ---------------------------------------------------------------- the import contract

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` (import-linter, the contract in pyproject.toml) on the packages under `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                           "lint_imports_command()", "--no-cache"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_layer_contract_holds() -> None:
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_upward_import_breaks_the_layer_contract(tmp_path: Path) -> None:
    """The contract is enforced, not decorative: the same tree with one upward import (the
    program layer reading the corpus) fails it, naming the import."""
    for name in ("difftest", "strategies"):
        shutil.copytree(ROOT / name, tmp_path / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shapes = tmp_path / "difftest" / "program" / "shapes.py"
    shapes.write_text(shapes.read_text() + "\n\ndef _upward() -> object:\n"
                      "    from difftest.findings import corpus\n\n    return corpus\n")
    done = _lint_imports(tmp_path)
    assert done.returncode != 0, done.stdout
    assert "BROKEN" in done.stdout and "difftest.program.shapes -> difftest.findings.corpus" in done.stdout, done.stdout


# Imports inside functions, each with its reason; any other one is an import cycle being dodged
# (the layers make those unnecessary) and fails the test below.
LAZY_IMPORTS = {
    # every subcommand imports what it needs when it runs: `difftest --help` starts without torch
    "difftest/cli/main.py": "*",
    "difftest/cli/show.py": "*",
    "difftest/cli/corpus.py": "*",
    "difftest/cli/coverage.py": "*",
    "difftest/cli/suspects.py": "*",
    "difftest/cli/versions.py": "*",
    "difftest/cli/backends.py": "*",
    "difftest/cli/merge.py": "*",
    # an op's PyTorch lowering imports torch on first use: the catalog stays torch-free at import
    "difftest/ops/spec.py": "difftest.ops",
    # the package's facade loads `difftest.check` on first use: the program layer stays torch-free
    "difftest/__init__.py": "difftest.oracle.check",
}


def test_no_function_level_import_dodges_a_cycle() -> None:
    found = []
    for path in sorted([*(ROOT / "difftest").rglob("*.py"), *(ROOT / "strategies").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in (
                        "difftest", "strategies"):
                    allowed = LAZY_IMPORTS.get(rel)
                    if allowed != "*" and allowed != node.module:
                        found.append(f"{rel}:{node.lineno}: {node.module}")
    assert not found, "imports inside functions:\n" + "\n".join(found)
