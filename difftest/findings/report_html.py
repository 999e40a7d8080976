"""The HTML of `difftest report` (report.py gathers and runs; this only renders).

One self-contained page: inline CSS, inline SVG (Graphviz pictures, hand-made plots), no script,
nothing fetched. Every text from a case, a summary or a framework goes through `html.escape`."""

from __future__ import annotations

import datetime as _dt
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from difftest.divergences.registry import KNOWLEDGE
from difftest.findings.issue import evidence_lines, known_bug_reason, mismatch_tensor
from difftest.findings.report_coverage import coverage_section, suspects_section
from difftest.findings.report_svg import Series, line_plot, rate_series
from difftest.findings.reproducers import rust_test, test_name, torch_script
from difftest.findings.summary import finding_case_path
from difftest.findings.table import grad_text, predicted_text, rows, shape_text, value_text
from difftest.ops.catalog import CATALOG
from difftest.oracle.compare import DISMISSED
from difftest.program.ir import Backward
from difftest.program.literals import fmt_data
from difftest.program.text import program_text

if TYPE_CHECKING:
    from difftest.findings.report import Campaign, CaseReport, Report
    from difftest.oracle.compare import Mismatch, Verdict

CSS = """
body { font-family: Helvetica, Arial, sans-serif; margin: 24px; color: #1b1b1b; background: #fff; max-width: 1400px; }
h1 { margin-bottom: 4px; } h2 { border-bottom: 2px solid #ccc; padding-bottom: 4px; margin-top: 40px; }
h3 { margin: 20px 0 8px; } h4 { margin: 14px 0 6px; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f0f3f7; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f8fa; border: 1px solid #ddd; padding: 8px;
  overflow-x: auto; font-size: 12px; line-height: 1.35; }
code { background: #f0f0f0; padding: 0 3px; }
.muted { color: #666; } .small { font-size: 12px; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: bold;
  color: #fff; vertical-align: middle; }
.ok { background: #2e7d32; } .fail { background: #c62828; } .error { background: #ef6c00; }
.skipped { background: #78909c; }
.case { border-left: 6px solid #2e7d32; padding-left: 14px; margin-top: 36px; }
.case.ok, .case.fail, .case.error, .case.skipped { background: none; }
.case.fail { border-left-color: #c62828; } .case.error { border-left-color: #ef6c00; }
.case.skipped { border-left-color: #78909c; }
.cell-finding { background: #ffd6d6; font-weight: bold; } .cell-dismissed { background: #fff3c4; }
table.rows td { font-family: Menlo, Consolas, monospace; font-size: 12px; white-space: nowrap; }
.picture { border: 1px solid #ddd; padding: 6px; display: inline-block; max-width: 100%; overflow-x: auto;
  background: #fff; }
.picture svg { max-width: 100%; height: auto; }
.mismatch { border: 1px solid #ddd; border-left: 4px solid #c62828; padding: 4px 10px; margin: 8px 0; }
.mismatch.dismissed { border-left-color: #f9a825; }
.repro { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
.repro > div { min-width: 0; }
.repro pre { max-height: 520px; }
.two { display: flex; gap: 20px; align-items: flex-start; }
.two > .left { flex: 0 1 auto; max-width: 45%; min-width: 0; } .two > .right { flex: 1 1 0; min-width: 0; }
.status-pass { background: #546e7a; } .status-bug { background: #6a1b9a; } .status-divergence { background: #1565c0; }
.bar { display: inline-block; height: 10px; background: #1f77b4; vertical-align: middle; }
.note { background: #fff8e1; border: 1px solid #f0d58c; padding: 6px 10px; }
.grid3 { columns: 3; column-gap: 24px; }
.scroll { overflow-x: auto; max-width: 100%; }
table.facts th { background: #f7f7f7; font-weight: normal; color: #444; white-space: nowrap; }
nav ul { columns: 2; font-size: 13px; }
"""

STATE_TEXT = {"ok": "ok", "fail": "FAIL", "error": "cannot run", "skipped": "skipped"}


def _e(x: object) -> str:
    return escape(str(x), quote=True)


def _lines(text: str) -> str:
    """Escaped text with its newlines as <br>."""
    return "<br>".join(_e(line) for line in text.split("\n"))


def _inline_md(text: str) -> str:
    """issue.py's Markdown evidence lines (`code`, **bold**) as HTML."""
    out = _e(text)
    out = re.sub(r"`([^`]*)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """A table whose cells are already HTML."""
    out = [f'<table class="{cls}">' if cls else "<table>", "<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    out += ["<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in row) + "</tr>" for row in rows]
    out.append("</table>")
    return "\n".join(out)


def _facts(rows: Iterable[tuple[str, str]]) -> str:
    """A two-column table without a header: a plain label, an HTML value."""
    return '<table class="facts">' + "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _num(x: float | int) -> str:
    return f'<td class="num">{x:,}</td>' if isinstance(x, int) else f'<td class="num">{x:,.2f}</td>'


def _pre(text: str) -> str:
    return f"<pre>{_e(text)}</pre>"


def anchor(item: CaseReport, index: int) -> str:
    return f"case-{index}-" + re.sub(r"[^A-Za-z0-9_-]+", "-", item.name).strip("-")


# ---------------------------------------------------------------------- campaign summary

def _counts(counter: Counter[str], total: int) -> str:
    if not counter:
        return '<p class="muted">none</p>'
    rows = [[_e(k), _num(v), _num(100.0 * v / total) if total else "<td>-</td>"] for k, v in counter.most_common()]
    return _table(["", "count", "% of programs"], rows)


def _rules(summary: Any) -> str:

    declared = {k.name: k for k in KNOWLEDGE if k.kind == "divergence"}
    fired = summary.rules
    rows = []
    for name, n in fired.most_common():
        k = declared.get(name)
        note = _e(k.framework) if k else '<span class="muted">not a declared rule of this difftest</span>'
        rows.append([f"<code>{_e(name)}</code>", _num(n), note])
    out = ["<h4>Rules fired</h4>", _table(["rule", "programs", "framework"], rows) if rows
           else '<p class="muted">no declared rule fired</p>']
    never = [k for name, k in declared.items() if name not in fired]
    out.append(f"<h4>Declared rules never fired ({len(never)} of {len(declared)})</h4>")
    if never:
        out.append(_table(["rule", "framework", "reason"],
                          [[f"<code>{_e(k.name)}</code>", _e(k.framework), _e(k.reason)] for k in never]))
    else:
        out.append('<p class="muted">every declared rule fired</p>')
    others = Counter(k.kind for k in KNOWLEDGE if k.kind != "divergence")
    out.append('<p class="small muted">The knowledge registry also holds '
               + ", ".join(f"{n} {_e(kind)}" for kind, n in others.items())
               + " records (difftest rules): they are not flag-model rules and do not fire in a campaign.</p>")
    return "\n".join(out)


def _ops(summary: Any) -> str:

    ops: Counter[str] = summary.catalog_ops
    generated = [name for name in CATALOG if ops.get(name)]
    missing = [name for name in CATALOG if not ops.get(name)]
    unknown = [name for name in ops if name not in CATALOG]
    total = sum(ops.values())
    top = max(ops.values(), default=1)
    out = [f"<p>{len(generated)} of {len(CATALOG)} catalog ops generated, {total:,} op statements in all.</p>"]
    if missing:
        out.append("<p>Never generated: " + ", ".join(f"<code>{_e(n)}</code>" for n in missing) + "</p>")
    if unknown:
        out.append("<p>Not in this difftest's catalog: " + ", ".join(f"<code>{_e(n)}</code>" for n in unknown) + "</p>")
    if ops:
        rows = [[f"<code>{_e(k)}</code>", _num(v), f'<td><span class="bar" style="width:{120 * v / top:.0f}px">'
                 "</span></td>"] for k, v in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))]
        out.append('<div class="grid3">' + _table(["op", "count", ""], rows) + "</div>")
    if summary.module_kinds:
        out.append("<p>Module kinds generated: " + ", ".join(
            f"<code>{_e(k)}</code> {v:,}" for k, v in summary.module_kinds.most_common()) + "</p>")
    return "\n".join(out)


def _throughput(summary: Any) -> str:
    timelines = summary.timelines
    if not timelines:
        return ('<p class="muted">No time series in this summary (written by a difftest before it recorded one); '
                f"average {summary.rate:,.1f} programs/s.</p>")
    rates = [Series(t.label, rate_series(t.points)) for t in timelines]
    totals = [Series(t.label, tuple((float(s), float(n)) for s, n in t.points)) for t in timelines]
    return ('<div class="plots">'
            + line_plot(rates, title="Throughput", x_label="seconds since start", y_label="programs / s")
            + " "
            + line_plot(totals, title="Programs checked", x_label="seconds since start", y_label="programs")
            + "</div>")


def campaign_section(c: Campaign, anchors: dict[str, str], index: int) -> str:
    """`anchors`: resolved case path -> the anchor of its section."""

    s = c.summary
    title = f"Campaign {c.path.as_posix()}"
    facts = [
        ("programs", f"{s.programs:,}"),
        ("wall clock", f"{s.seconds:,.1f} s" + (" (summed over the merged summaries)" if s.shards_merged else "")),
        ("rate", f"{s.rate:,.1f} programs/s" + (f"; {s.steady_rate:,.1f}/s after {s.startup:.1f} s start-up"
                                                 if s.startup > 0 else "")),
        ("seed / shard / jobs", f"{s.seed} / {s.shard} / {s.jobs}"),
        ("worker restarts", str(s.restarts)),
    ]
    if s.shards_merged:
        facts.append(("summaries merged", str(s.shards_merged)))
    if s.interrupted:
        facts.append(("interrupted", "yes (the summary covers what ran)"))
    for k, v in s.versions.items():
        if v not in (None, ""):
            facts.append((f"version: {k}", str(v)))
    out = [f'<section class="campaign" id="campaign-{index}">', f"<h2>{_e(title)}</h2>",
           _facts((k, _e(v)) for k, v in facts)]
    out += ["<h3>Verdicts</h3>", _counts(s.verdicts, s.programs)]
    out.append(f"<h3>Distinct findings ({len(s.findings)})</h3>")
    if s.findings:
        rows = []
        for f in s.ordered_findings():
            where = _e(f.where())
            target = anchors.get(str(finding_case_path(f.path, c.path).resolve())) if f.path is not None else None
            if target is not None:
                where = f'<a href="#{target}">{where}</a>'
            rows.append([f"<code>{_e(f.signature)}</code>", _e(f.kind), _num(f.count),
                         _e("-" if f.first is None else f.first), where])
        out.append(_table(["signature", "kind", "programs", "first", "case"], rows))
    else:
        out.append('<p class="muted">no findings</p>')
    if s.saved:
        out.append(f"<p>{len(s.saved)} new case(s) saved by this campaign.</p>")
    out += ["<h3>Rules</h3>", _rules(s)]
    out += ["<h3>Op coverage</h3>", _ops(s)]
    dismissed = sum(s.dismissals.values())
    out += [f"<h3>Dismissals ({dismissed:,})</h3>",
            '<p class="small muted">Numeric mismatches float64 arbitration judged float32 noise (agreement) or '
            "ill-conditioned, by reason.</p>", _counts(s.dismissals, s.programs)]
    out += ["<h3>Throughput over time</h3>", _throughput(s)]
    if s.errors:
        out += ["<h3>Errors</h3>"] + [_pre(e) for e in s.errors]
    out.append("</section>")
    return "\n".join(out)


# ---------------------------------------------------------------------- corpus summary

def corpus_section(cases: Sequence[CaseReport], anchors: Sequence[str]) -> str:
    groups: dict[str, Counter[str]] = {}
    for item in cases:
        groups.setdefault(item.group, Counter())[item.state] += 1
    rows = [[_e(g), _num(sum(c.values())), _num(c["ok"]), _num(c["fail"]), _num(c["error"]), _num(c["skipped"])]
            for g, c in groups.items()]
    total: Counter[str] = Counter(item.state for item in cases)
    rows.append(["<strong>all</strong>", _num(len(cases)), _num(total["ok"]), _num(total["fail"]),
                 _num(total["error"]), _num(total["skipped"])])
    out = ['<section id="cases-summary">', f"<h2>Cases ({len(cases)})</h2>",
           "<p>Every case replayed now; a case is ok when it does what its status says "
           "(pass: passes; divergence: explained by its rule; bug: still fails as recorded); skipped when it was "
           "recorded on a backend this interpreter lacks or needs CPU flags this machine lacks.</p>",
           _table(["directory", "cases", "ok", "failed", "cannot run", "skipped"], rows)]
    listing = []
    for item, a in zip(cases, anchors):
        status = item.case.status if item.case is not None else "?"
        outcome = (item.outcome.message.splitlines()[0] if item.outcome is not None
                   else (item.error or item.skipped or ""))
        listing.append([f'<a href="#{a}">{_e(item.path.as_posix())}</a>', _e(status), _badge(item.state),
                        _e(outcome.splitlines()[0] if outcome else "")])
    out.append(_table(["case", "status", "replay", "outcome"], listing))
    out += _bugs_by_root(cases, anchors)
    out.append("</section>")
    return "\n".join(out)


def _bugs_by_root(cases: Sequence[CaseReport], anchors: Sequence[str]) -> list[str]:
    """One row per root cause of the bug cases (the unit of an upstream report): its cases,
    where it is reported, the release that fixed it, the candidate fix difftest proved."""
    roots: dict[str, list[tuple[CaseReport, str]]] = {}
    for item, a in zip(cases, anchors):
        if item.case is not None and item.case.status == "bug":
            roots.setdefault(item.case.root, []).append((item, a))
    if not roots:
        return []
    rows = []
    for root, members in roots.items():
        members.sort(key=lambda m: m[0].name != root)
        head = members[0][0].case
        assert head is not None
        links = ", ".join(f'<a href="#{a}">{_e(item.name)}</a> {_badge(item.state)}' for item, a in members)
        fix = head.fix
        rows.append([
            f"<code>{_e(root)}</code>", links,
            _e(head.upstream) if head.upstream else '<span class="muted">not reported</span>',
            _e(head.fixed_in) if head.fixed_in else '<span class="muted">-</span>',
            (f"<code>{_e(fix['patch'])}</code> on {_e(fix['burn'])}: {_e(fix['outcome'])}; {_e(fix['others'])}"
             if fix else '<span class="muted">none</span>'),
        ])
    return [f"<h3>Bugs by root cause ({len(roots)} report(s) upstream for "
            f"{sum(len(m) for m in roots.values())} bug case(s))</h3>",
            _table(["root cause", "cases", "upstream", "fixed in", "candidate fix"], rows)]


def _badge(state: str, prefix: str = "") -> str:
    return f'<span class="badge {state}">{_e(prefix)}{STATE_TEXT[state]}</span>'


# ---------------------------------------------------------------------- one case

def rows_table(verdict: Verdict) -> str:
    """table.py's rows as an HTML table; mismatching cells marked (`!` a finding, `~` dismissed)."""

    backwards = [st.id for st in verdict.program.statements if isinstance(st, Backward)]
    head = ["id", "op", "shape", "burn<br>ad trk rg", "torch<br>rg leaf fn inf", "predicted", "rules",
            "value burn / torch<br>max abs / rel"] + [f"grad@{_e(b)} burn / torch<br>max abs / rel" for b in backwards]

    def cell(text: str, mark: str | None) -> str:
        if not mark:
            return f"<td>{_lines(text)}</td>"
        cls = "cell-finding" if mark == "!" else "cell-dismissed"
        return f'<td class="{cls}">{_lines(text)} {_e(mark)}</td>'

    out = []
    for r in rows(verdict):
        marks = r["marks"]
        out.append([cell(r["id"], None), cell(r["what"], None), cell(shape_text(r), marks.get("shape")),
                    cell(r["burn"], marks.get("burn")), cell(r["torch"], marks.get("torch")),
                    cell(predicted_text(r), None), cell("\n".join(r["rules"]), None),
                    cell(value_text(r), marks.get("value")),
                    *(cell(grad_text(r["grads"][b]), marks.get(f"grad:{b}")) for b in backwards)])
    return ('<div class="scroll">' + _table(head, out, "rows") + "</div>"
            + '<p class="small muted">Flags: T true, F false, ? not reported. Marked cells: '
            '<span class="cell-finding">! a finding</span> <span class="cell-dismissed">~ a numeric mismatch '
            "arbitration dismissed</span>.</p>")


def _tensor_text(t: Any) -> str:

    return "None" if t is None else f"{fmt_data(t.data)} shape={list(t.shape)}"


def mismatch_block(verdict: Verdict, m: Mismatch) -> str:

    dismissed = m.verdict in DISMISSED
    where = f"statement {m.index} ({m.statement})" if m.statement else "the program"
    head = f"{m.kind}{f' [{m.framework}]' if m.framework else ''} at {where}"
    if m.verdict:
        head += f" → {m.verdict}"
    rows = [("expected", f"<code>{_e(m.expected)}</code>"), ("observed", f"<code>{_e(m.observed)}</code>")]
    if m.kind in ("grad", "value", "shape"):
        refs = [("PyTorch (float32)", verdict.torch), ("burn", verdict.burn)]
        if verdict.reference is not None:
            refs.append(("PyTorch float64 reference", verdict.reference))
        for who, obs in refs:
            rows.append((who, f"<code>{_e(_tensor_text(mismatch_tensor(obs, m)))}</code>"))
        if m.element is not None:
            rows.append(("worst element", _e(f"{m.element}: (PyTorch, burn) = {m.pair}")))
    out = [f'<div class="mismatch{" dismissed" if dismissed else ""}">',
           f"<p><strong>{_e(head)}</strong>{' (dismissed)' if dismissed else ''}</p>", _facts(rows)]
    if m.detail and not m.detail.startswith("rules fired here"):
        out.append(_pre(m.detail))
    evidence = evidence_lines(m)
    if evidence:
        out.append("<p>Evidence:</p><ul>" + "".join(f"<li>{_inline_md(line.strip().removeprefix('- '))}</li>"
                                                    for line in evidence) + "</ul>")
    out.append("</div>")
    return "\n".join(out)


def _reproducers(item: CaseReport) -> str:

    assert item.case is not None
    program = item.case.program
    name = test_name(item.name)
    makers: list[tuple[str, Callable[[], str]]] = [("PyTorch script", lambda: torch_script(program)),
                                                   ("burn #[test] (Rust)", lambda: rust_test(program, name))]
    parts = []
    for title, make in makers:
        try:
            text = make()
        except Exception as e:  # a reproducer the emitter cannot write: say so, keep the report
            text = f"(cannot write this reproducer: {e})"
        parts.append(f"<div><h4>{_e(title)}</h4>{_pre(text)}</div>")
    return '<div class="repro">' + "".join(parts) + "</div>"


def _case_versions(item: CaseReport, now: dict[str, Any]) -> str:
    found = (item.case.record.get("versions") if item.case is not None else None) or {}
    keys = ["burn", "difftest_burn", "torch", "difftest"]
    rows = [[_e(k), _e(found.get(k, "-")), _e(now.get(k, "-"))] for k in keys]
    return _table(["", "when found", "replayed with"], rows)


def case_section(item: CaseReport, a: str, now: dict[str, Any]) -> str:

    status = item.case.status if item.case is not None else None
    status_badge = "" if status is None else (
        f'<span class="badge status-{_e(status.split(":", 1)[0])}">{_e(status)}</span> ')
    out = [f'<section class="case {item.state}" id="{a}">',
           f"<h2>{_e(item.name)} {status_badge}{_badge(item.state, 'replay ')}</h2>",
           f'<p class="muted">{_e(item.path.as_posix())} · {_e(item.origin)}</p>']
    if item.error is not None:
        out += ["<p>This case cannot be run:</p>", _pre(item.error), "</section>"]
        return "\n".join(out)
    case, verdict, outcome = item.case, item.verdict, item.outcome
    assert case is not None
    if item.skipped is not None:
        out.append(f'<p class="note">Not replayed here: {_e(item.skipped)}. '
                   + ("What follows is the burn observation recorded when the case was found, judged against "
                      "PyTorch now.</p>" if verdict is not None else "It recorded no observation to show.</p>"))
    judged = [] if verdict is None else [
        ("verdict now" if outcome is not None else "verdict as recorded", f"<strong>{_e(verdict.kind)}</strong>"),
        ("rules fired", _e(", ".join(verdict.prediction.rules_fired) or "none"))]
    facts = [("status", f"<code>{_e(case.status)}</code>"), ("reason", _e(case.reason or "-")),
             ("upstream", _e(case.upstream) if case.upstream else '<span class="muted">not reported upstream</span>'),
             ("root cause", "its own" if case.root == case.name else f"shared with <code>{_e(case.root)}</code>"),
             ("fixed in", _e(f"burn {case.fixed_in}") if case.fixed_in else '<span class="muted">not fixed in a '
              'tested version</span>'),
             *([("candidate fix", _e(f"{case.fix['patch']} on burn {case.fix['burn']}: {case.fix['outcome']}; "
                                     f"{case.fix['others']} ({case.fix['date']})"))] if case.fix else []),
             *judged,
             ("replay", f"{_badge(item.state)} "
                        f"{_lines(outcome.message.splitlines()[0] if outcome else item.skipped or '')}")]
    out.append(_facts(facts))
    if verdict is None:
        out += ["<h3>Program</h3>", _pre(program_text(case.program)), "</section>"]
        return "\n".join(out)
    if outcome is not None and len(outcome.message.splitlines()) > 1:
        out += ["<details><summary>Replay message</summary>", _pre(outcome.message), "</details>"]

    out += ['<div class="two">', '<div class="left">', "<h3>Picture</h3>"]
    if item.picture is not None:
        out.append(f'<div class="picture">{item.picture}</div>')
    else:
        out.append(f'<p class="note">{_e(item.picture_note or "no picture")}</p>')
    out += ["</div>", '<div class="right">',
            f"<h3>Evidence ({len(verdict.findings)} finding(s), {len(verdict.dismissals)} dismissed)</h3>"]
    if not verdict.mismatches:
        out.append('<p class="muted">No mismatch: both frameworks do what the model predicts.</p>')
    out += [mismatch_block(verdict, m) for m in verdict.findings + verdict.dismissals]
    known = known_bug_reason(case)
    if known is not None:
        out.append(f"<p>Declared known bug <code>{_e(known[0])}</code>: {_e(known[1])}</p>")
    out += ["</div>", "</div>"]
    out += ["<h3>Per-statement table</h3>", rows_table(verdict)]
    if item.memory_table is not None:
        out += ["<h3>Memory table (quick size)</h3>",
                "<p class=\"small muted\">A memory case: the table is measured in fresh processes; the picture, "
                "the per-statement table and the reproducers are those of its stand-in program.</p>",
                _pre(item.memory_table)]
    out += ["<h3>Program</h3>", _pre(program_text(case.program))]
    out += ["<h3>Reproducers</h3>", _reproducers(item)]
    out += ["<h3>Versions</h3>", _case_versions(item, now), "</section>"]
    return "\n".join(out)


# ---------------------------------------------------------------------- the page

def page(report: Report) -> str:
    anchors = [anchor(item, k) for k, item in enumerate(report.cases)]
    by_path = {str(item.path.resolve()): a for item, a in zip(report.cases, anchors)}
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    v = report.versions
    versions = [("difftest", _e(v.get("difftest", "?"))),
                ("burn (reported by difftest-burn)", _e(v.get("burn", "?"))),
                ("difftest-burn", _e(v.get("difftest_burn", "?"))),
                ("PyTorch", _e(v.get("torch", "?")))]
    if v.get("fault"):
        versions.append(("FAULT injected", _e(v["fault"])))
    states = Counter(item.state for item in report.cases)
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           "<title>difftest report</title>", f"<style>{CSS}</style>", "</head>", "<body>",
           "<h1>difftest report</h1>",
           f'<p class="muted">Generated {_e(now)} from {_e(", ".join(report.inputs))}: {len(report.campaigns)} '
           f"campaign summary(ies), {len(report.cases)} case(s) — {states['ok']} ok, {states['fail']} failed, "
           f"{states['error']} cannot run, {states['skipped']} skipped.</p>",
           _facts(versions)]
    toc = [f'<li><a href="#campaign-{k}">Campaign {_e(c.path.as_posix())}</a></li>'
           for k, c in enumerate(report.campaigns)]
    toc += [f'<li><a href="#coverage-{k}">Coverage {_e(p.as_posix())}</a></li>' for k, (p, _) in
            enumerate(report.coverages)]
    toc += [f'<li><a href="#suspects-{k}">Where in burn {_e(p.as_posix())}</a></li>' for k, (p, _) in
            enumerate(report.suspects)]
    if report.cases:
        toc.append('<li><a href="#cases-summary">Cases</a></li>')
    toc += [f'<li><a href="#{a}">{_e(item.name)}</a> {_badge(item.state)}</li>'
            for item, a in zip(report.cases, anchors)]
    out.append("<nav><ul>" + "".join(toc) + "</ul></nav>")
    out += [campaign_section(c, by_path, k) for k, c in enumerate(report.campaigns)]
    out += [coverage_section(p, cov, k) for k, (p, cov) in enumerate(report.coverages)]
    by_case = {str(item.path.resolve()): a for item, a in zip(report.cases, anchors)}
    out += [suspects_section(p, doc, k, by_case) for k, (p, doc) in enumerate(report.suspects)]
    if report.cases:
        out.append(corpus_section(report.cases, anchors))
    out += [case_section(item, a, v) for item, a in zip(report.cases, anchors)]
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"
