"""What installs: one top-level package, `difftest`, whose generator `difftest.strategies` is the
folder strategies/ at the root (pyproject.toml's package-dir); the link difftest/strategies makes
the source tree import the same way; and the public API is a small facade."""

from __future__ import annotations

import tomllib
from pathlib import Path

import difftest
import difftest.strategies
from difftest.oracle.check import check

ROOT = Path(__file__).resolve().parents[2]


def _packages(folder: Path, name: str) -> set[str]:
    """The packages of the folder `folder` installed as `name`: every folder with Python or data files."""
    out = set()
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir() and path.name != "__pycache__" and any(p.is_file() for p in path.iterdir()):
            out.add(".".join([name, *path.relative_to(folder).parts]))
    return out


def test_the_listed_packages_are_the_folders() -> None:
    """pyproject.toml lists the packages (discovery cannot add one that package-dir maps): every
    folder of difftest/ and of strategies/, the latter under difftest.strategies."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {"difftest.strategies": "strategies"}
    want = _packages(ROOT / "difftest", "difftest") | _packages(ROOT / "strategies", "difftest.strategies")
    assert sorted(config["packages"]) == sorted(want)


def test_the_source_tree_imports_as_installed() -> None:
    """difftest/strategies links to strategies/, so a checkout on PYTHONPATH, mypy and
    import-linter see the generator where an install puts it."""
    link = ROOT / "difftest" / "strategies"
    assert link.is_symlink() and link.resolve() == (ROOT / "strategies").resolve()
    assert Path(difftest.strategies.__file__).resolve() == (ROOT / "strategies" / "__init__.py").resolve()


def test_the_public_api_is_the_facade() -> None:
    assert difftest.__all__ == ["check"] and difftest.check is check
    assert difftest.strategies.__all__ == ["programs"]
