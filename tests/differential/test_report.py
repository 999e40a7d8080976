"""`difftest report`: one self-contained HTML file for the corpus and a campaign summary, checked
for structure and rendered by headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import escape
from pathlib import Path

import pytest

from difftest.cli import main
from difftest.divergences.registry import KNOWLEDGE
from difftest.exec.backends import BACKENDS, binary_backends
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import iter_case_files, load_case
from difftest.findings.picture import DOT_MISSING
from difftest.findings.report import build, write
from difftest.findings.report_html import page
from difftest.findings.summary import Summary
from tests.png import read_png

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "corpus"
POWI = CORPUS / "bugs" / "powi-zero-untracked.json"
NO_CHROMIUM = "headless Chromium is not installed (apt-get install chromium; .ci/run installs it)"


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _sections(html: str) -> dict[str, str]:
    """case path (as shown under its heading) -> the HTML of its section."""
    out: dict[str, str] = {}
    for part in html.split('<section class="case ')[1:]:
        body = part.split("</section>", 1)[0]
        found = re.search(r'<p class="muted">([^<]*?) · ', body)
        assert found, body[:300]
        out[found.group(1)] = body
    return out


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short real campaign's summary (`difftest fuzz --json`), its findings kept out of corpus/."""
    tmp = tmp_path_factory.mktemp("campaign")
    out = tmp / "summary.json"
    rc = main(["fuzz", "--programs", "120", "-j", "1", "--seed", "3", "--corpus", str(tmp / "corpus"),
               "--json", str(out), "--progress", "60"])
    assert rc in (0, 1), f"the campaign failed (exit {rc})"
    return out


@pytest.fixture(scope="module")
def report(campaign: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["report", str(CORPUS), str(campaign), "-o", str(out)]) == 0
    return out


def test_every_case_has_a_section_with_its_picture(report: Path) -> None:
    if shutil.which("dot") is None:
        pytest.skip(DOT_MISSING)  # the pictures are Graphviz's (.ci/run installs it)
    html = report.read_text()
    sections = _sections(html)
    cases = iter_case_files([CORPUS])
    assert cases
    for f in cases:
        body = sections.get(f.as_posix())
        assert body is not None, f"no section for {f}"
        assert "<svg" in body, f"no picture in the section of {f}"
        assert 'class="rows"' in body and "<pre>" in body, f"no table or reproducers for {f}"
        assert "#[test]" in body and "import torch" in body, f"a reproducer is missing for {f}"
    # the finding's evidence: burn's panic where PyTorch runs, marked cells in the table
    powi = sections[POWI.as_posix()]
    assert "Tensor::backward requires a tracked autodiff tensor" in powi
    assert 'class="cell-finding"' in powi and "powi-zero-untracked" in powi


def test_each_case_shows_where_it_is_known_upstream(report: Path) -> None:
    """A case's upstream is its link, else the record's `upstream` (a case with no link that
    records a burn PR showed "not reported upstream")."""
    sections = _sections(report.read_text())
    for path in sorted((CORPUS / "bugs").glob("*.json")):
        case = load_case(path)
        body = next(b for shown, b in sections.items() if shown.endswith(f"bugs/{path.name}"))
        if case.upstream:
            assert case.upstream in body and "not reported upstream" not in body, path.name
        else:
            assert "not reported upstream" in body, path.name


def test_bugs_are_listed_by_root_cause_with_their_fixes(report: Path) -> None:
    """One row per root cause (the unit of an upstream report), its cases, the release that
    fixed it and the candidate fix difftest proved."""
    html = report.read_text()
    table = html.split("<h3>Bugs by root cause", 1)[1].split("</table>", 1)[0]
    cases = [c for c in (load_case(p) for p in iter_case_files([CORPUS])) if c.status == "bug"]
    roots = {c.root for c in cases}
    assert table.count("<tr>") - 1 == len(roots)  # the header row and one per root
    shared = [c for c in cases if c.root != c.name]
    assert shared, "the corpus has cases that share a root cause"
    for c in shared:
        row = next(r for r in table.split("<tr>") if f"<code>{c.root}</code>" in r)
        assert c.name in row and c.root in row
    for c in cases:
        if c.fix is not None:
            row = next(r for r in table.split("<tr>") if f"<code>{c.root}</code>" in r)
            assert c.fix["patch"] in row
        if c.fixed_in is not None:
            row = next(r for r in table.split("<tr>") if f"<code>{c.root}</code>" in r)
            assert c.fixed_in in row


def test_a_nan_gradient_finding_shows_its_float64_evidence(report: Path) -> None:
    body = _sections(report.read_text())[(CORPUS / "bugs" / "powf-zero-base-nan-grad.json").as_posix()]
    assert "PyTorch float64 reference" in body and "finite difference" in body


def test_the_campaign_summary(report: Path, campaign: Path) -> None:
    html = report.read_text()
    summary = json.loads(campaign.read_text())
    section = html.split('<section class="campaign"', 1)[1].split("</section>", 1)[0]
    assert f"<td>{summary['programs']:,}</td>" in section
    for kind, n in summary["verdicts"].items():
        assert re.search(rf"<td>{re.escape(kind)}</td><td class=\"num\">{n:,}</td>", section), kind
    declared = [k.name for k in KNOWLEDGE if k.kind == "divergence"]
    never = [name for name in declared if name not in summary["rules"]]
    assert f"Declared rules never fired ({len(never)} of {len(declared)})" in section
    for name in summary["rules"]:
        assert f"<code>{name}</code>" in section.split("Declared rules never fired", 1)[0]
    assert "catalog ops generated" in section
    modules = {k.split(":", 1)[1]: n for k, n in summary["ops"].items() if k.startswith("module:")}
    assert modules, "the campaign's summary counts the module kinds drawn"
    for kind, n in modules.items():
        assert f"<code>{kind}</code> {n:,}" in section, kind
        assert f"<code>module:{kind}</code>" not in section  # not listed as a catalog op
    assert section.count('<svg xmlns="http://www.w3.org/2000/svg" class="plot"') == 2
    assert "<polyline" in section  # throughput over time, from the summary's time series


def test_self_contained(report: Path) -> None:
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>")
    for banned in ("<script", "<link", "<img", "<iframe", "src=", "@import", "url("):
        assert banned not in html, f"the report loads something: {banned}"


def test_chromium_renders_it(report: Path, tmp_path: Path) -> None:
    exe = _chromium()
    if exe is None:
        pytest.skip(NO_CHROMIUM)
    shot = tmp_path / "shot.png"
    done = subprocess.run([exe, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                           f"--screenshot={shot}", "--window-size=1200,2000", report.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    image = read_png(shot)
    assert (image.width, image.height) == (1200, 2000)
    pixels = image.pixels()
    ink = sum(p != (255, 255, 255) for p in pixels) / len(pixels)
    colours = len(set(pixels))
    assert ink > 0.03 and colours > 32, f"the screenshot looks blank: {ink:.1%} non-white, {colours} colours"


def test_unrunnable_cases_and_no_dot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, burn_worker: BurnWorker) -> None:
    """A corrupt case gets a section with its error, a missing `dot` a readable note; the report
    is still written."""
    shutil.copy(POWI, tmp_path / "powi.json")
    (tmp_path / "broken.json").write_text('{"format": "difftest-case", "version": 1, "status": ')
    monkeypatch.setattr(shutil, "which", lambda name: None)
    report = build([tmp_path], burn_worker)
    out = tmp_path / "out" / "report.html"
    write(report, out)
    sections = _sections(out.read_text())
    broken = sections[(tmp_path / "broken.json").as_posix()]
    assert "This case cannot be run" in broken and "malformed JSON" in broken
    powi = sections[(tmp_path / "powi.json").as_posix()]
    assert escape(DOT_MISSING) in powi
    assert "<svg" not in powi and 'class="rows"' in powi
    assert [c.state for c in report.cases] == ["error", "ok"]


def test_the_exit_status_says_a_case_could_not_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As replay's: the report is written, and the status is 1 when a case cannot run (0 when all
    ran as recorded), so a CI step that writes the report still notices."""
    shutil.copy(POWI, tmp_path / "powi.json")
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "powi.json"), "-o", str(out)]) == 0
    (tmp_path / "broken.json").write_text('{"format": "difftest-case", "version": 1, "status": ')
    out.unlink()
    assert main(["report", str(tmp_path), "-o", str(out)]) == 1
    assert out.exists() and "1 ok, 0 failed, 1 cannot run, 0 skipped" in capsys.readouterr().err


def test_a_case_recorded_on_a_backend_the_interpreter_lacks_is_skipped(tmp_path: Path,
                                                                       burn_worker: BurnWorker) -> None:
    """As replay skips it: run on the default backend, a Wgpu bug case would show as FAIL."""
    lacking = [b for b in BACKENDS if b not in binary_backends(burn_worker.binary)]
    if not lacking:
        pytest.skip("the test interpreter was built with every backend")
    doc = json.loads(POWI.read_text())
    doc["backend"] = lacking[0]
    (tmp_path / "elsewhere.json").write_text(json.dumps(doc))
    shutil.copy(POWI, tmp_path / "powi.json")
    report = build([tmp_path], burn_worker)
    assert [(c.path.name, c.state) for c in report.cases] == [("elsewhere.json", "skipped"), ("powi.json", "ok")]
    section = _sections(page(report))[(tmp_path / "elsewhere.json").as_posix()]
    assert "Not replayed here" in section and f"--backend {lacking[0]}" in section
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 0  # skipped is not a failure


def test_a_worker_that_cannot_start(tmp_path: Path) -> None:
    report = build([POWI], BurnWorker(str(tmp_path / "no-such-difftest-burn")))
    [item] = report.cases
    assert item.state == "error" and item.error is not None and "running the case failed" in item.error
    assert "unknown" in str(report.versions["burn"])
    assert "This case cannot be run" in page(report)


def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    assert main(["report", str(missing), "-o", str(tmp_path / "r.html")]) == 2
    assert f"{missing}: no such file or directory" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("x")
    assert main(["report", str(tmp_path / "notes.txt"), "-o", str(tmp_path / "r.html")]) == 2
    assert "expected a corpus directory" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_an_older_summary_without_a_time_series(tmp_path: Path, campaign: Path, burn_worker: BurnWorker) -> None:
    doc = json.loads(campaign.read_text())
    del doc["throughput"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    assert Summary.from_dict(doc).timelines == []
    html = page(build([old], burn_worker))
    assert "No time series in this summary" in html and "Verdicts" in html
