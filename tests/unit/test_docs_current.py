"""The generated docs are current: each equals what its command prints now (rendered in
process, not by a subprocess). A failure says how to regenerate the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.divergences import listing as knowledge_listing
from difftest.divergences.registry import KNOWLEDGE
from difftest.findings.versions_table import DOC, REGENERATE, recorded_markdown
from difftest.ops import listing as ops_listing

ROOT = Path(__file__).resolve().parents[2]


def test_knowledge_doc_is_the_rules_markdown() -> None:
    doc = (ROOT / knowledge_listing.DOC).read_text()
    assert doc == knowledge_listing.markdown(), (
        f"{knowledge_listing.DOC} is not the output of `difftest rules --markdown` (a record changed): "
        f"regenerate it with `{knowledge_listing.REGENERATE}` and commit it")


def test_format_op_table_is_the_ops_markdown() -> None:
    """docs/format.md's op table (also checked by tests/differential/test_catalog.py, which
    needs the interpreter; this one does not)."""
    doc = (ROOT / "docs" / "format.md").read_text()
    assert ops_listing.table_in(doc) == ops_listing.markdown(), (
        "docs/format.md's op table is not the output of `difftest ops --markdown` (the catalog changed): "
        "regenerate it with `python -m difftest.ops.listing --update docs/format.md` and commit it")


def test_rules_markdown_command_prints_the_doc(capsys: pytest.CaptureFixture[str]) -> None:
    from difftest.cli import main

    assert main(["rules", "--markdown"]) == 0
    assert capsys.readouterr().out == knowledge_listing.markdown()


def test_every_record_has_a_row_in_its_section() -> None:
    text = knowledge_listing.markdown()
    sections = text.split("\n## ")[1:]
    for s in knowledge_listing.SECTIONS:
        body = next(b for b in sections if b.startswith(s.title + " ("))
        names = [k.name for k in KNOWLEDGE if k.kind == s.kind]
        assert body.startswith(f"{s.title} ({len(names)})")
        for name in names:
            assert f"\n| `{name}` |" in body, (s.title, name)
    assert text.count("\n| `") == len(KNOWLEDGE)


def test_cells_escape_outside_code_spans_only() -> None:
    assert knowledge_listing.cell("a `x<y|z` b<c * d |\n e") == "a `x<y\\|z` b&lt;c \\* d \\| e"
    assert knowledge_listing.cell("one ` tick") == "one \\` tick"


def test_evidence_links_are_relative_to_docs() -> None:
    link = knowledge_listing.evidence_link
    assert link("docs/semantics.md#leaf-detach") == "[docs/semantics.md#leaf-detach](semantics.md#leaf-detach)"
    assert link("corpus/bugs/x.json") == "[corpus/bugs/x.json](../corpus/bugs/x.json)"
    assert link("https://github.com/tracel-ai/burn/pull/5692") == (
        "[burn PR #5692](https://github.com/tracel-ai/burn/pull/5692)")
    assert knowledge_listing.url_label("https://docs.rs/crate/burn-nn/0.22.1/source/src/modules/norm/rms.rs") == (
        "burn-nn 0.22.1 src/modules/norm/rms.rs")


def test_versions_doc_is_the_recorded_matrix() -> None:
    assert (ROOT / DOC).read_text() == recorded_markdown(ROOT / "corpus"), (
        f"{DOC} is not the output of `difftest versions --recorded` (a bug case's record changed): "
        f"regenerate it with `{REGENERATE}` and commit it")
