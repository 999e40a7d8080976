"""Small files by concern: no Python module of the package or the generator over 500 lines, no
Rust source file of the interpreter over 600 (CONTRIBUTING.md). A file that grows past its limit
is split by concern, not trimmed to fit."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMITS = {"py": 500, "rs": 600}


def _over(paths: list[Path], limit: int) -> list[str]:
    out = []
    for path in sorted(paths):
        n = len(path.read_text().splitlines())
        if n > limit:
            out.append(f"{path.relative_to(ROOT)}: {n} lines (limit {limit})")
    return out


def test_python_modules_are_at_most_500_lines() -> None:
    paths = [*(ROOT / "difftest").rglob("*.py"), *(ROOT / "strategies").rglob("*.py")]
    assert paths and not _over(paths, LIMITS["py"]), _over(paths, LIMITS["py"])


def test_rust_sources_are_at_most_600_lines() -> None:
    paths = list((ROOT / "rust" / "src").rglob("*.rs"))
    assert paths and not _over(paths, LIMITS["rs"]), _over(paths, LIMITS["rs"])
