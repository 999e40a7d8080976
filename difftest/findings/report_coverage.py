"""The coverage sections of `difftest report`: a `difftest coverage --json` file given as an
input becomes a bar per burn crate (edges and lines reached) and the lists of burn-autodiff
backward nodes not reached (those the catalog reaches and those it cannot)."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from difftest.findings.coverage import COVERAGE_FORMAT, Coverage, nodes_line


def is_coverage(path: Path) -> bool:
    if path.suffix != ".json" or not path.is_file():
        return False
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(doc, dict) and doc.get("format") == COVERAGE_FORMAT


def load_coverages(paths: list[Path]) -> list[tuple[Path, Coverage]]:
    """The coverage files among `paths` (ValueError names a file that cannot be read)."""
    out = []
    for path in paths:
        if is_coverage(path):
            try:
                out.append((path, Coverage.from_dict(json.loads(path.read_text()))))
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{path}: a coverage file that cannot be read: {e!r}") from e
    return out


def _bar(part: int, whole: int, width: int = 240) -> str:
    frac = part / whole if whole else 0.0
    return (f'<span class="bar" style="width:{width * frac:.0f}px"></span>'
            f'<span class="bar" style="width:{width * (1 - frac):.0f}px;background:#ddd"></span>')


def _nodes(title: str, nodes: list[str]) -> str:
    items = ", ".join(f"<code>{escape(n)}</code>" for n in nodes) or "none"
    return f"<p><b>{escape(title)}</b> ({len(nodes)}): {items}</p>"


def coverage_section(path: Path, cov: Coverage, index: int) -> str:
    rows = []
    for crate, t in cov.crates.items():
        pct = 100 * t.edges / t.edges_total if t.edges_total else 0.0
        rows.append(f"<tr><td><code>{escape(crate)}</code></td><td>{_bar(t.edges, t.edges_total)}</td>"
                    f"<td>{t.edges:,} / {t.edges_total:,} edges ({pct:.1f}%)</td>"
                    f"<td>{t.lines:,} / {t.lines_total:,} lines</td></tr>")
    out = [f'<section class="coverage" id="coverage-{index}">', f"<h2>Coverage {escape(path.as_posix())}</h2>",
           f"<p>{escape(cov.source)}: {cov.programs:,} program(s).</p>",
           "<table><tr><th>crate</th><th>edges reached</th><th></th><th></th></tr>" + "".join(rows) + "</table>"]
    out.append(f"<p>{escape(nodes_line(cov))}.</p>")
    if cov.catalog_known:
        out.append(_nodes("Never reached, though the catalog reaches them", cov.nodes_unreached))
        out.append(_nodes("Never reached: no catalog op reaches them", cov.nodes_unreachable))
    else:
        out.append(_nodes("Never reached", cov.nodes_unreached))
    out.append(_nodes("No edges of their own in the coverage build (not compiled into the interpreter, or too small "
                      "to begin a basic block): not measured", list(cov.extra.get("no_edges", []))))
    out.append("</section>")
    return "\n".join(out)
