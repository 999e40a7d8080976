"""What a set of programs reached of burn, from a coverage build's edges (exec/coverage_map.py):
edges and source lines per burn crate and per file, and burn-autodiff's backward
implementations (the `backward` of each node type of its `ops/*.rs`) reached or not.

A node is the `impl Backward<B, N> for Type` of burn-autodiff's `src/ops/*.rs` (its source, at
the path the line tables name); an edge belongs to the node whose impl block holds the line of
the edge's backward frame (the worker's `coverage_map`: its innermost `backward` or closure
frame in `src/ops/`), or else its own line (the line tables name no function for some edges of
a backward, such as the prologue of Floor's). Nodes are split three ways
by data, not by a list: the nodes these programs reached; the nodes the catalog can reach
(`catalog_reach`: each catalog op's own programs, run under coverage) that these programs did
not; and the nodes no catalog op reaches. A node with no edge of its own cannot be measured
and is in none of these but listed apart (`no_edges`): the interpreter never compiles it
(burn-autodiff is generic: the backward of a burn op the interpreter never calls is never
monomorphised). A node whose closure LLVM merged with another's identical one (Floor, Ceil and
Round return zeros alike) is still told apart by its own backward's edges.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from difftest.exec.coverage_map import EdgeMap, crate_of
from difftest.findings import summary_fields as sf

COVERAGE_FORMAT = "difftest-coverage"
COVERAGE_VERSION = 1
AUTODIFF = "burn-autodiff"
# how `backward_nodes` attributes an edge to a node; caches of node sets (catalog reach) carry it,
# so a change of the attribution recomputes them
NODE_ATTRIBUTION = 2

# the header of a node's backward: `impl<B: Backend> Backward<B, 2> for Add {`
_IMPL = re.compile(r"^\s*impl\b.*\bBackward<[^>]*>\s+for\s+([A-Za-z_][A-Za-z0-9_]*)")


def _block_end(lines: list[str], start: int) -> int:
    """The 0-based line of the brace that closes the block opening on or after line `start`
    (braces counted outside `//` comments; the end of the file if unbalanced)."""
    depth, opened = 0, False
    for i in range(start, len(lines)):
        code = lines[i].split("//", 1)[0]
        for ch in code:
            if ch == "{":
                depth, opened = depth + 1, True
            elif ch == "}":
                depth -= 1
                if opened and depth == 0:
                    return i
    return len(lines) - 1


@cache
def source_nodes(path: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, node) of each `impl … Backward<…> for Type` block of a
    burn-autodiff `ops/` source file, in line order (1-based lines); the node is `module::Type`
    (`tensor::Add`), with `@line` when the file declares the type twice. Empty for a file that
    cannot be read."""
    where = crate_of(path)
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return ()
    module = where[1].removeprefix("src/ops/").removesuffix(".rs").replace("/", "::") if where else Path(path).stem
    found = [(i, m[1]) for i, line in enumerate(lines) if (m := _IMPL.match(line))]
    counts = Counter(name for _, name in found)
    return tuple((i + 1, _block_end(lines, i) + 1, f"{module}::{name}" + (f"@{i + 1}" if counts[name] > 1 else ""))
                 for i, name in found)


def node_at(path: str, line: int) -> str | None:
    """The node whose `impl Backward` block holds `line` of `path`."""
    nodes = source_nodes(path)
    i = bisect_right([n[0] for n in nodes], line) - 1
    return nodes[i][2] if i >= 0 and line <= nodes[i][1] else None


def all_nodes(m: EdgeMap) -> set[str]:
    """Every node declared in burn-autodiff's `src/ops/` (compiled into the interpreter or not),
    found from the crate's source directory named by the map's files."""
    roots = {f[: len(f) - len(w[1])] + "src" for f, w in zip(m.files, m.file_crates)
             if w is not None and w[0] == AUTODIFF}
    out: set[str] = set()
    for root in roots:
        for path in sorted(Path(root, "ops").rglob("*.rs")):
            out.update(name for _, _, name in source_nodes(str(path)))
    return out


@dataclass
class Tally:
    """Edges and source lines of one crate or file: reached and in total."""

    edges: int = 0
    edges_total: int = 0
    lines: int = 0
    lines_total: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"edges": self.edges, "edges_total": self.edges_total, "lines": self.lines,
                "lines_total": self.lines_total}

    @staticmethod
    def from_dict(d: dict[str, Any], where: str = "") -> Tally:
        for key in ("edges", "edges_total", "lines", "lines_total"):
            if key not in d:
                raise ValueError(f'"{where}{key}" is missing')
        return Tally(*(sf.integer(d, key, 0, where) for key in ("edges", "edges_total", "lines", "lines_total")))


@dataclass
class Coverage:
    """The reach of some programs (`source` says which)."""

    source: str
    programs: int
    crates: dict[str, Tally]
    files: dict[str, Tally]  # "crate/src/path.rs"
    nodes_reached: list[str]
    nodes_unreached: list[str]  # the catalog reaches them, these programs did not
    nodes_unreachable: list[str]  # no catalog op reaches them
    catalog_known: bool = True  # False: no catalog reach was measured (every unreached node is in nodes_unreached)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"format": COVERAGE_FORMAT, "version": COVERAGE_VERSION, "source": self.source,
                "programs": self.programs, "crates": {k: t.to_dict() for k, t in self.crates.items()},
                "files": {k: t.to_dict() for k, t in self.files.items()},
                "backward": {"reached": self.nodes_reached, "unreached": self.nodes_unreached,
                             "unreachable": self.nodes_unreachable, "catalog_known": self.catalog_known},
                **self.extra}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Coverage:
        if d.get("format") != COVERAGE_FORMAT:
            raise ValueError(f"not a coverage summary (\"format\" must be {COVERAGE_FORMAT!r})")
        for key in ("source", "programs", "crates", "files", "backward"):
            if key not in d:
                raise ValueError(f'"{key}" is missing')
        b = d["backward"]
        if not isinstance(b, dict):
            raise ValueError(f'"backward" must be an object, got {b!r}'[:200])
        known = {"format", "version", "source", "programs", "crates", "files", "backward"}
        extra = {k: v for k, v in d.items() if k not in known}
        extra["no_edges"] = sf.strings(d, "no_edges")
        return Coverage(sf.optional_str(d, "source") or "?", sf.integer(d, "programs"),
                        {k: Tally.from_dict(t, f"crates.{k}.") for k, t in sf.objects_by_name(d, "crates").items()},
                        {k: Tally.from_dict(t, f"files.{k}.") for k, t in sf.objects_by_name(d, "files").items()},
                        sf.strings(b, "reached", "backward."), sf.strings(b, "unreached", "backward."),
                        sf.strings(b, "unreachable", "backward."), bool(b.get("catalog_known", True)), extra)


def backward_nodes(m: EdgeMap, edges: Iterable[int] | None = None) -> set[str]:
    """The nodes whose backward has an edge among `edges` (all edges: every node compiled in)."""
    out: set[str] = set()
    crates = m.file_crates
    for i in range(len(m)) if edges is None else edges:
        # the edge's backward frame, else its own location: an edge whose innermost burn frame
        # lies in an `impl Backward` block is that node's code even where the line tables name
        # no function for it (the prologue of Floor's backward is such an edge: its closure body,
        # identical in Floor, Ceil and Round, is merged by LLVM into one function)
        for f, line in ((m.backward_file[i], m.backward_line[i]), (m.file[i], m.line[i])):
            where = crates[f] if f >= 0 else None
            if where is not None and where[0] == AUTODIFF and where[1].startswith("src/ops/"):
                node = node_at(m.files[f], line)
                if node is not None:
                    out.add(node)
                    break
    return out


def tally(m: EdgeMap, hit: Iterable[int]) -> tuple[dict[str, Tally], dict[str, Tally]]:
    """Per burn crate and per burn file: edges and lines, reached and in total."""
    hit_set = set(hit)
    crates: dict[str, Tally] = defaultdict(Tally)
    files: dict[str, Tally] = defaultdict(Tally)
    lines_all: dict[str, set[tuple[int, int]]] = defaultdict(set)
    lines_hit: dict[str, set[tuple[int, int]]] = defaultdict(set)
    file_lines_all: dict[str, set[int]] = defaultdict(set)
    file_lines_hit: dict[str, set[int]] = defaultdict(set)
    for i, f in enumerate(m.file):
        where = m.file_crates[f] if f >= 0 else None
        if where is None:
            continue
        crate, path = where
        key = f"{crate}/{path}"
        reached = i in hit_set
        for t in (crates[crate], files[key]):
            t.edges_total += 1
            t.edges += reached
        if m.line[i] > 0:
            lines_all[crate].add((f, m.line[i]))
            file_lines_all[key].add(m.line[i])
            if reached:
                lines_hit[crate].add((f, m.line[i]))
                file_lines_hit[key].add(m.line[i])
    for crate, t in crates.items():
        t.lines, t.lines_total = len(lines_hit[crate]), len(lines_all[crate])
    for key, t in files.items():
        t.lines, t.lines_total = len(file_lines_hit[key]), len(file_lines_all[key])
    return dict(sorted(crates.items())), dict(sorted(files.items()))


def summarise(m: EdgeMap, hit: Iterable[int], *, source: str, programs: int,
              catalog: dict[str, set[str]] | None = None) -> Coverage:
    """The coverage of `hit`; `catalog` (op -> nodes, from `catalog_reach`) splits the nodes not
    reached into those the catalog reaches and those it cannot."""
    hit = set(hit)
    crates, files = tally(m, hit)
    compiled = backward_nodes(m)
    reached = backward_nodes(m, hit)
    declared = all_nodes(m) | compiled
    missed = compiled - reached
    extra = {"no_edges": sorted(declared - compiled)}
    if catalog is None:
        return Coverage(source, programs, crates, files, sorted(reached), sorted(missed), [], catalog_known=False,
                        extra=extra)
    reachable = set().union(*catalog.values()) if catalog else set()
    return Coverage(source, programs, crates, files, sorted(reached), sorted(missed & reachable),
                    sorted(missed - reachable), extra=extra)


def nodes_line(cov: Coverage) -> str:
    n = len(cov.nodes_reached) + len(cov.nodes_unreached) + len(cov.nodes_unreachable)
    absent = len(cov.extra.get("no_edges", []))
    return (f"burn-autodiff backward nodes (impl Backward in src/ops): {n + absent} declared, {n} with edges in "
            f"the coverage build, {len(cov.nodes_reached)} reached")


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "-"


def print_coverage(cov: Coverage, console: Any, files: int = 0) -> None:
    """The crate table, the `files` least-covered files with edges (0: none), and the backward
    nodes not reached (two lists when the catalog's reach is known)."""
    from rich.table import Table

    title = f"burn coverage: {cov.source} ({cov.programs} program(s))"
    t = Table(title=title, title_justify="left")
    for col in ("crate", "edges", "of", "%", "lines", "of", "%"):
        t.add_column(col, justify="left" if col == "crate" else "right")
    total = Tally()
    for crate, c in cov.crates.items():
        t.add_row(crate, str(c.edges), str(c.edges_total), _pct(c.edges, c.edges_total), str(c.lines),
                  str(c.lines_total), _pct(c.lines, c.lines_total))
        total.edges += c.edges
        total.edges_total += c.edges_total
        total.lines += c.lines
        total.lines_total += c.lines_total
    t.add_row("all burn", str(total.edges), str(total.edges_total), _pct(total.edges, total.edges_total),
              str(total.lines), str(total.lines_total), _pct(total.lines, total.lines_total), style="bold")
    console.print(t)
    if files:
        ft = Table(title=f"the {files} files with the most edges not reached", title_justify="left")
        for col in ("file", "edges", "of", "%", "lines", "of", "%"):
            ft.add_column(col, justify="left" if col == "file" else "right")
        ranked = sorted(cov.files.items(), key=lambda kv: (-(kv[1].edges_total - kv[1].edges), kv[0]))
        for name, c in ranked[:files]:
            ft.add_row(name, str(c.edges), str(c.edges_total), _pct(c.edges, c.edges_total), str(c.lines),
                       str(c.lines_total), _pct(c.lines, c.lines_total))
        console.print(ft)
    console.print(nodes_line(cov))
    if cov.catalog_known:
        console.print(f"  the catalog reaches them, these programs did not ({len(cov.nodes_unreached)}): "
                      + (", ".join(cov.nodes_unreached) or "none"))
        console.print(f"  no catalog op reaches them ({len(cov.nodes_unreachable)}): "
                      + (", ".join(cov.nodes_unreachable) or "none"))
    else:
        console.print(f"  not reached ({len(cov.nodes_unreached)}): " + (", ".join(cov.nodes_unreached) or "none"))
    absent = cov.extra.get("no_edges", [])
    console.print(f"  no edges of their own in the coverage build, not measured ({len(absent)}): "
                  + (", ".join(absent) or "none"))
