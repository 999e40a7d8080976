"""The registry of declared knowledge: one record type, evidence that exists, `difftest rules`."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from difftest.cli import main
from difftest.divergences.conventions import CONVENTIONS
from difftest.divergences.knowledge import (
    KINDS,
    Knowledge,
    VersionRange,
    holds_for,
    is_url,
    parse_version,
)
from difftest.divergences.known_bugs import KNOWN_BUGS
from difftest.divergences.memory_rules import MEMORY_RULES
from difftest.divergences.noops import NOOPS
from difftest.divergences.registry import KNOWLEDGE
from difftest.divergences.rules import RULES
from difftest.divergences.running_stats import RUNNING_STAT_CONVENTIONS
from difftest.versions import BURN_VERSION

ROOT = Path(__file__).resolve().parents[2]
ANCHOR = re.compile(r"^#+ .*\{#([A-Za-z0-9_-]+)\}\s*$", re.MULTILINE)
DOCS_RS = re.compile(r"https://docs\.rs/crate/([a-z0-9_-]+)/([0-9.]+)/source/(.+)")


def _anchors(markdown: Path) -> set[str]:
    return set(ANCHOR.findall(markdown.read_text()))


def _references() -> list[tuple[str, str]]:
    return [(k.name, ref) for k in KNOWLEDGE for ref in k.evidence]


# ------------------------------------------------------------------ the registry


def test_every_record_of_every_kind_is_listed_once() -> None:
    carried = [
        *(x.knowledge for x in RULES), *(x.knowledge for x in NOOPS), *(x.knowledge for x in MEMORY_RULES),
        *(x.knowledge for x in CONVENTIONS), *(x.knowledge for x in KNOWN_BUGS),
        *(x.knowledge for x in RUNNING_STAT_CONVENTIONS),
    ]
    assert carried == list(KNOWLEDGE)
    assert {k.kind for k in KNOWLEDGE} == set(KINDS)


def test_names_are_unique_across_kinds() -> None:
    counts = Counter(k.name for k in KNOWLEDGE)
    assert [name for name, n in counts.items() if n > 1] == []


def test_every_record_has_a_reason_evidence_and_holds_for_the_tested_burn() -> None:
    for k in KNOWLEDGE:
        assert k.reason.strip(), k.name
        assert k.evidence and isinstance(k.evidence, tuple), k.name
        assert k.holds_for(BURN_VERSION), f"{k.name} is not declared for burn {BURN_VERSION}"


def test_every_bug_case_is_a_declared_known_bug() -> None:
    declared = {ref for b in KNOWN_BUGS for ref in b.knowledge.evidence}
    cases = {str(p.relative_to(ROOT)) for d in ("bugs", "backends") for p in (ROOT / "corpus" / d).glob("*.json")}
    assert cases <= declared


# ------------------------------------------------------------------ evidence


@pytest.mark.parametrize(("name", "ref"), _references(), ids=[f"{n}:{r}" for n, r in _references()])
def test_evidence_exists(name: str, ref: str) -> None:
    if is_url(ref):
        assert ref.startswith("https://"), f"{name}: {ref} is not an https URL"
        return
    path, _, anchor = ref.partition("#")
    assert not Path(path).is_absolute() and ".." not in Path(path).parts, f"{name}: {ref} is outside the repository"
    target = ROOT / path
    assert target.is_file(), f"{name}: {path} does not exist"
    if anchor:
        assert target.suffix == ".md", f"{name}: an anchor needs a markdown file ({ref})"
        assert anchor in _anchors(target), f"{name}: {path} has no heading with {{#{anchor}}}"


def _cargo_registry_sources() -> list[Path]:
    return sorted((Path.home() / ".cargo" / "registry" / "src").glob("*"))


def test_burn_source_links_name_files_of_the_released_crates() -> None:
    """docs.rs source URLs point at files of the published crate; where cargo has the crate
    locally (the interpreter's build fetched it), the file must be there."""
    registries = _cargo_registry_sources()
    checked = 0
    for name, ref in _references():
        m = DOCS_RS.fullmatch(ref)
        if m is None:
            continue
        crate, version, path = m.groups()
        dirs = [r / f"{crate}-{version}" for r in registries if (r / f"{crate}-{version}").is_dir()]
        if not dirs:
            continue
        assert (dirs[0] / path).is_file(), f"{name}: {crate} {version} has no {path}"
        checked += 1
    if not checked:
        pytest.skip("no burn crate sources in the local cargo registry")


def test_semantics_anchors_are_unique() -> None:
    anchors = ANCHOR.findall((ROOT / "docs" / "semantics.md").read_text())
    assert len(anchors) == len(set(anchors))


def _repository_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / line for line in out.splitlines() if line]


# Files whose reference is being replaced by their owner (remove the entry once it is gone):
# docs/format.md line 52, "(<the retired document> section 1)" -> docs/semantics.md#region-off-autodiff.
PENDING: frozenset[str] = frozenset()


def test_no_reference_to_documents_outside_the_repository() -> None:
    # the retired design document and the seed it came from, spelled apart so that this file
    # does not match itself
    retired = ("DESIGN" + ".md", "shared/" + "seed/")
    me = Path(__file__).resolve()
    hits = []
    for f in _repository_files():
        if f.resolve() == me or not f.is_file() or str(f.relative_to(ROOT)) in PENDING:
            continue
        try:
            text = f.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        hits += [f"{f.relative_to(ROOT)}:{i}" for i, line in enumerate(text.splitlines(), 1)
                 if any(r in line for r in retired)]
    assert hits == [], "evidence must point into docs/semantics.md or the repository: " + ", ".join(hits)


# ------------------------------------------------------------------ versions


def test_versions_parse() -> None:
    assert parse_version("0.22.1").release == (0, 22, 1)
    assert parse_version(" 0.22 ") == parse_version("0.22.0")
    assert str(parse_version("0.23.0-pre.1")) == "0.23.0-pre.1"
    assert parse_version("0.23.0-pre.1").is_prerelease and not parse_version("0.23.0").is_prerelease
    for bad in ("", "0", "v0.22.1", "0.22.x", "0.22.1-", "0.22.1-pre..1", "0.22.1+build"):
        with pytest.raises(ValueError):
            parse_version(bad)


def test_versions_order_as_semver() -> None:
    ordered = ["0.21.0", "0.22.0", "0.22.1", "0.23.0-alpha", "0.23.0-pre.1", "0.23.0-pre.2", "0.23.0-pre.10",
               "0.23.0", "0.23.1", "1.0.0"]
    parsed = [parse_version(v) for v in ordered]
    assert sorted(reversed(parsed)) == parsed
    assert [str(v) for v in parsed] == ordered


@pytest.mark.parametrize(("spec", "version", "holds"), [
    (">=0.22.1", "0.22.1", True),
    (">=0.22.1", "0.22.0", False),
    (">=0.22.1", "0.23.0", True),
    (">=0.22.0, <0.23", "0.22.9", True),
    (">=0.22.0, <0.23", "0.23.0", False),
    ("==0.22.1", "0.22.1", True),
    ("0.22.1", "0.22.2", False),  # a bare version means ==
    ("!=0.22.1", "0.22.1", False),
    (">0.22", "0.22.1", True),
    ("<=0.22", "0.22.0", True),
    ("*", "9.9.9", True),
    (">=0.22.1", "0.23.0-pre.1", True),
    ("<0.23.0-pre.1", "0.23.0-pre.1", False),
    ("<0.23.0-pre.1", "0.22.1", True),
    ("<0.23", "0.23.0-pre.1", True),  # a pre-release comes before its release
])  # fmt: skip
def test_version_ranges(spec: str, version: str, holds: bool) -> None:
    assert holds_for(spec, version) is holds
    assert VersionRange.parse(spec).contains(parse_version(version)) is holds


@pytest.mark.parametrize("spec", ["", ">=", ">=0.22,", "~0.22", ">= 0.22 <0.23", "=>0.22"])
def test_malformed_version_ranges_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        VersionRange.parse(spec)


def test_a_malformed_record_is_refused() -> None:
    ok = {"name": "x", "kind": "divergence", "framework": "burn", "reason": "r", "evidence": ("README.md",)}
    Knowledge(**ok)  # type: ignore[arg-type]
    for change in ({"kind": "rule"}, {"framework": "jax"}, {"reason": " "}, {"evidence": ()},
                   {"evidence": "README.md"}, {"evidence": ("http://example.com",)},
                   {"evidence": ("/etc/passwd",)}, {"evidence": ("../DESIGN",)}, {"burn_versions": "0.22.x"}):
        with pytest.raises(ValueError):
            Knowledge(**{**ok, **change})  # type: ignore[arg-type]


# ------------------------------------------------------------------ difftest rules


def test_rules_json_lists_every_record(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    # a known bug's row also names the backends it shows on (null: every backend)
    shown = {b.name: list(b.backends) if b.backends is not None else None for b in KNOWN_BUGS}
    assert listed == [{**k.to_dict(), **({"backends": shown[k.name]} if k.name in shown else {})} for k in KNOWLEDGE]
    assert {"name", "kind", "framework", "burn_versions", "evidence", "reason"} == set(listed[0])
    assert {row["name"]: row["backends"] for row in listed if row["kind"] == "known-bug"} == shown


def test_rules_table_lists_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    for kind in KINDS:
        assert kind in out
    assert f"{len(KNOWLEDGE)} records" in out
