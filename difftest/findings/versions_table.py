"""The known burn bugs across burn versions, as recorded in the bug cases (`versions_tested`,
written by `difftest versions --record`): `difftest versions --recorded` prints it, and
docs/versions.md is that output (tests/unit/test_docs_current.py keeps it current). Nothing is
run: the table restates the records."""

from __future__ import annotations

from pathlib import Path

from difftest.divergences.knowledge import parse_version
from difftest.findings.corpus import load_case

DOC = "docs/versions.md"
REGENERATE = "difftest versions --recorded > docs/versions.md"


def recorded_markdown(corpus: Path) -> str:
    """A Markdown table: each bug case of `corpus/bugs/` by each burn version its record was
    tested on, the cell being the recorded outcome ("-" where that version was not tested)."""
    cases = [load_case(p) for p in sorted((corpus / "bugs").glob("*.json"))]
    cases = [c for c in cases if c.status == "bug"]
    versions = sorted({v for c in cases for v in (c.record.get("versions_tested") or {})}, key=parse_version)
    lines = [
        "# Known burn bugs across burn versions",
        "",
        f"Generated from the bug cases' `versions_tested` records by `{REGENERATE}`; the records",
        "are written by `difftest versions --record corpus/bugs`, which builds the interpreter",
        "against each version and replays every case (docs/measurements.md). A candidate fix is a",
        "patch in `upstream/` that `difftest versions --burn patch:FILE --record` applied to the",
        "release and replayed the corpus on (docs/contributing-to-burn.md).",
        "",
        "| case | " + " | ".join(versions) + " | upstream | root cause | candidate fix |",
        "|---|" + "---|" * len(versions) + "---|---|---|",
    ]
    for c in cases:
        tested = c.record.get("versions_tested") or {}
        cells = []
        for v in versions:
            entry = tested.get(v)
            cells.append(f"{entry.get('outcome', '?')} ({entry.get('date', '?')})" if isinstance(entry, dict) else "-")
        root = "its own" if c.root == c.name else f"shared with `{c.root}`"
        fix = c.fix
        proved = (f"`{fix['patch']}` on {fix['burn']}: {fix['outcome']}, {fix['others']} ({fix['date']})"
                  if fix else "-")
        lines.append(f"| `{c.name}` | " + " | ".join(cells) + f" | {c.upstream or 'not reported'} | {root} | "
                     f"{proved} |")
    return "\n".join(lines) + "\n"
