"""The coverage sections of `difftest report`: a `difftest coverage --json` file given as an
input becomes a bar per burn crate (edges and lines reached) and the lists of burn-autodiff
backward nodes not reached (those the catalog reaches and those it cannot); a `difftest
suspects --json` file, the places in burn its cases point to, each with its lines and cases
(linked to their sections when the report has them)."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from difftest.findings.coverage import COVERAGE_FORMAT, Coverage, nodes_line
from difftest.findings.suspects import SUSPECTS_FORMAT
from difftest.program.files import JsonFileError, read_json


def _format(path: Path) -> object:
    if path.suffix != ".json" or not path.is_file():
        return None
    try:
        doc = read_json(path, strict=False)
    except JsonFileError:
        return None  # not one of these: read as a case, which names what is wrong
    return doc.get("format") if isinstance(doc, dict) else None


def is_coverage(path: Path) -> bool:
    return _format(path) == COVERAGE_FORMAT


def is_suspects(path: Path) -> bool:
    return _format(path) == SUSPECTS_FORMAT


def load_suspects(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """The `difftest suspects --json` files among `paths` (ValueError names one that cannot be read)."""
    out = []
    for path in paths:
        if is_suspects(path):
            doc = read_json(path, strict=False)
            groups = doc.get("groups")
            if not isinstance(groups, list) or not all(isinstance(g, dict) and isinstance(g.get("findings"), list)
                                                       and isinstance(g.get("site"), list) for g in groups):
                raise ValueError(f"{path}: a suspects file whose \"groups\" are not a list of places")
            out.append((path, doc))
    return out


def load_coverages(paths: list[Path]) -> list[tuple[Path, Coverage]]:
    """The coverage files among `paths` (ValueError names a file that cannot be read)."""
    out = []
    for path in paths:
        if is_coverage(path):
            try:
                out.append((path, Coverage.from_dict(read_json(path, strict=False))))
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


def suspects_section(path: Path, doc: dict[str, Any], index: int, anchors: dict[str, str]) -> str:
    """`anchors`: resolved case path -> the anchor of its section in this report."""
    cases = doc.get("cases") or {}
    groups = doc["groups"]
    n = sum(len(g["findings"]) for g in groups)
    burn = escape(str(doc.get("burn") or "the repository's burn"))
    out = [f'<section class="coverage" id="suspects-{index}">', f"<h2>Where in burn {escape(path.as_posix())}</h2>",
           f"<p>{n} failing case(s) in {len(groups)} place(s) of burn ({burn}); "
           f"spectrum of {doc.get('failing_runs', '?')} failing and {doc.get('passing_runs', '?')} passing runs "
           "(docs/coverage.md).</p>"]
    for k, g in enumerate(groups, 1):
        rows = "".join(
            f"<tr><td><code>{escape(s['crate'])}/{escape(s['path'])}:{s['line']}</code></td>"
            f"<td>{s['score']:.2f}</td><td>{s['failing']} / {g.get('failing_runs', '?')}</td><td>{s['passing']}</td>"
            f"<td><code>{escape(str(s.get('text', '')))}</code></td></tr>" for s in g["site"][:5])
        links = []
        for name in g["findings"]:
            info = cases.get(name) or {}
            label = escape(str(info.get("label", name)))
            target = anchors.get(str(Path(info["path"]).resolve())) if info.get("path") else None
            links.append(f'<li><a href="#{target}">{label}</a></li>' if target else f"<li>{label}</li>")
        strength = "no passing run executes it" if g.get("strict") else "passing runs execute it too"
        node = f" in the backward of burn-autodiff's <code>{escape(str(g['node']))}</code>" if g.get("node") else ""
        out += [f"<h3>Place {k}{node}: {len(g['findings'])} case(s) ({strength})</h3>",
                "<table><tr><th>line</th><th>score</th><th>failing runs</th><th>passing runs</th><th>source</th></tr>"
                + rows + "</table>", "<ul>" + "".join(links) + "</ul>"]
    if doc.get("unplaced"):
        out.append(f"<p>No burn line to blame: {escape(', '.join(map(str, doc['unplaced'])))}</p>")
    out.append("</section>")
    return "\n".join(out)
