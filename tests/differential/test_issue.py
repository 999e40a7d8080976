"""`difftest show CASE --issue`: a Markdown bug report for burn's tracker."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import load_case
from difftest.findings.issue import issue_markdown, title
from difftest.oracle.check import check
from difftest.program.ir import OpCall

ROOT = Path(__file__).resolve().parents[2]
POWI = ROOT / "corpus" / "bugs" / "powi-zero-untracked.json"
PANIC = "Tensor::backward requires a tracked autodiff tensor"


def test_title_is_the_reasons_first_clause() -> None:
    case = load_case(POWI)
    assert title(case) == "x.powi_scalar(0) of a tracked x is an untracked ones tensor"


def test_powi_zero_report(burn_worker: BurnWorker) -> None:
    case = load_case(POWI)
    burn_versions = burn_worker.version()
    text = issue_markdown(case, check(case.program, burn_worker), burn_versions)
    assert text.startswith("# x.powi_scalar(0) of a tracked x is an untracked ones tensor\n")
    rust = text.split("```rust\n", 1)[1].split("```", 1)[0]
    assert rust.startswith("#[test]\nfn powi_zero_untracked() {")
    assert PANIC in text.split("## What PyTorch gives and what burn gives", 1)[1]
    assert "burn's panic message" in text
    versions = text.split("## Versions", 1)[1].split("## Description", 1)[0]
    assert f"| burn | `{case.record['versions']['burn']}` | `{burn_versions['burn']}` |" in versions
    assert "| PyTorch |" in versions and "| difftest |" in versions
    assert case.reason in text
    assert "declared known bug `powi-zero-untracked`" in text
    assert f"- upstream: {case.record['upstream']}" in text


def test_cli_issue(capsys: pytest.CaptureFixture[str], burn_worker: BurnWorker) -> None:
    from difftest.cli import main

    assert main(["show", str(POWI), "--issue"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# x.powi_scalar(0)") and "```rust\n#[test]" in out and PANIC in out


def test_cases_of_one_root_cause_make_one_report(burn_worker: BurnWorker) -> None:
    """The two unit-swap cases share burn-flex's reduce.rs branch: reporting either gives one
    issue, titled by the root, with both programs as tests."""
    from difftest.findings.corpus import same_root

    root = load_case(ROOT / "corpus" / "bugs" / "flex-reduce-dim-after-unit-swap-panics.json")
    follower = load_case(ROOT / "corpus" / "bugs" / "flex-sum-dim-backward-after-unit-swap-panics.json")
    assert follower.root == root.name
    others, problems = same_root(follower)
    assert [c.name for c in others] == [root.name] and problems == []
    assert [c.name for c in same_root(root)[0]] == [follower.name]  # found from either side
    texts = []
    for case, other in ((follower, root), (root, follower)):
        group = [(other, check(other.program, burn_worker))]
        texts.append(issue_markdown(case, check(case.program, burn_worker), burn_worker.version(), group))
    assert texts[0] == texts[1]
    text = texts[0]
    assert text.startswith(f"# {title(root)}\n")
    assert text.count("```rust\n#[test]\n") == 2
    assert text.index("fn flex_reduce_dim_after_unit_swap_panics()") < text.index(
        "fn flex_sum_dim_backward_after_unit_swap_panics()")
    assert "The same root cause shows in 2 programs" in text


def test_an_untriaged_finding_is_titled_and_led_by_its_localised_op(tmp_path: Path) -> None:
    """A campaign's new case: the title says where and what (not its status), and the report's
    first test is the op alone on its inputs, the smallest test of the bug."""
    from difftest.findings.corpus import case_from_verdict
    from difftest.findings.saving import save_case
    from difftest.findings.triage import triage
    from difftest.program.ir import Program
    from tests.programs import backward, leaf, op

    program = Program((leaf("x", [0.5, -1.0, 2.0], rg=True), op("y", "exp", "x"), op("z", "tanh", "y"),
                       op("s", "sum", "z"), backward("s")))
    with BurnWorker(fault="grad-scale:exp:0.01") as worker:
        verdict = check(program, worker)
        t = triage(verdict, worker)
        case = case_from_verdict(verdict, source="test")
        case.record["triage"] = t.to_dict()
        path = save_case(case, tmp_path).path
        case = load_case(path)
        assert case.status == "new"
        assert title(case) == "exp: wrong gradient of input 0 (float32, small error)", t.describe()
        raw = case.record["triage"]["localisation"]["program"]
        from difftest.program.jsonio import program_from_dict

        alone = program_from_dict(raw)
        text = issue_markdown(case, check(case.program, worker), worker.version(), None,
                              (alone, check(alone, worker)))
    assert text.startswith("# exp: wrong gradient of input 0 (float32, small error)\n")
    first = text.split("```rust\n", 1)[1].split("```", 1)[0]
    assert f"fn case_{case.name}_alone()" in first and "tanh" not in first and ".exp()" in first
    assert text.index("## The op alone (burn)") < text.index("## Minimal reproducer")


def test_a_shrunk_program_that_is_the_op_alone_is_shown_once(tmp_path: Path) -> None:
    """When shrinking left the localised op alone (under other names), the report has one
    reproducer, saying so, not the same test twice."""
    from difftest.findings.corpus import case_from_verdict
    from difftest.findings.issue import same_up_to_names
    from difftest.findings.saving import save_case
    from difftest.program.ir import Program
    from tests.programs import backward, leaf, op

    shrunk = Program((leaf("x1", [0.5, 0.25], rg=True), op("v0", "exp", "x1"), backward("v0")))
    alone = Program((leaf("a0", [0.5, 0.25], rg=True), op("y", "exp", "a0"), backward("y")))
    other = Program((leaf("a0", [0.5, 0.5], rg=True), op("y", "exp", "a0"), backward("y")))
    assert same_up_to_names(alone, shrunk) and not same_up_to_names(other, shrunk)
    with BurnWorker(fault="grad-scale:exp:0.01") as worker:
        case = load_case(save_case(case_from_verdict(check(shrunk, worker), source="test"), tmp_path).path)
        text = issue_markdown(case, check(case.program, worker), worker.version(), None, (alone, check(alone, worker)))
        wider = issue_markdown(case, check(case.program, worker), worker.version(), None, (other, check(other, worker)))
    assert "## The op alone" not in text and text.count("```rust\n") == 1
    assert "the shrunk program is that op alone" in text
    assert "## The op alone (burn)" in wider and wider.count("```rust\n") == 2


def test_an_issue_says_where_in_burn_and_which_cases_share_the_place(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], burn_worker: BurnWorker) -> None:
    """With a `difftest suspects --json` file, the report gains the place's lines and the other
    cases of that place; a file that is not one is refused by name."""
    import json

    from difftest.cli import main

    line = {"crate": "burn-backend", "path": "src/backend/ops/tensor.rs", "line": 1062,
            "function": "float_powi_scalar<Flex>", "score": 1.0, "failing": 2, "passing": 0,
            "text": "0 => Self::float_ones(lhs.shape(), &lhs.device(), lhs.dtype().into()),"}
    doc = {"format": "difftest-suspects", "failing_runs": 2, "passing_runs": 600,
           "groups": [{"findings": ["powi-zero-untracked", "other"], "strict": True, "site": [line], "ranked": [],
                       "node": "tensor::PowiScalar"}],
           "cases": {"other": {"path": "x.json", "label": "other (burn-wrong:-:square:grad:wrong)"}}}
    path = tmp_path / "suspects.json"
    path.write_text(json.dumps(doc))
    assert main(["show", str(POWI), "--issue", "--suspects", str(path)]) == 0
    where = capsys.readouterr().out.split("## Where in burn", 1)[1].split("\n## ", 1)[0]
    assert "| `burn-backend/src/backend/ops/tensor.rs:1062` | `float_powi_scalar` | 2 / 0 |" in where
    assert "`0 => Self::float_ones(lhs.shape(), &lhs.device(), lhs.dtype().into()),`" in where
    assert "in the backward of burn-autodiff's `tensor::PowiScalar`; no passing program executes it" in where
    assert "1 other case(s) difftest saved: `other (burn-wrong:-:square:grad:wrong)`" in where
    path.write_text(json.dumps({"format": "difftest-summary"}))
    assert main(["show", str(POWI), "--issue", "--suspects", str(path)]) == 2
    assert "suspects.json: not a `difftest suspects --json` file" in capsys.readouterr().err


def test_a_part_of_a_composite_is_reported_as_the_part_seen_inside_it(tmp_path: Path) -> None:
    """A float64 var's gradient carries div_scalar's f32 reciprocal (burn builds var from ops,
    ending in a div_scalar): the report's title names div_scalar, seen inside var, and its first
    test is div_scalar alone."""
    from difftest.findings.corpus import case_from_verdict
    from difftest.findings.saving import save_case
    from difftest.findings.triage import triage
    from difftest.program.ir import Program
    from difftest.program.jsonio import program_from_dict
    from tests.programs import backward, leaf, op

    data = [0.3, -0.7, 1.1, 0.9, 2.3, -1.4, 0.2, 0.5, -0.1, 1.7, -2.2, 0.05]
    program = Program((leaf("x", data, rg=True, shape=[4, 3]), op("v", "var", "x", dim=0), op("s", "sum", "v"),
                       backward("s")), "float64")
    with BurnWorker() as worker:
        verdict = check(program, worker)
        t = triage(verdict, worker)
        case = case_from_verdict(verdict, source="test")
        case.record["triage"] = t.to_dict()
        case = load_case(save_case(case, tmp_path).path)
        assert title(case) == ("div_scalar (seen inside var, which burn builds from it): wrong gradient of input 0 "
                               "(float64, rounding error)"), t.describe()
        alone = program_from_dict(case.record["triage"]["localisation"]["program"])
        assert [s.op for s in alone.statements if isinstance(s, OpCall)] == ["div_scalar"]


def test_a_mechanism_seen_inside_a_composite_is_titled_as_built_from_other_ops(tmp_path: Path) -> None:
    """The sum of a value's contributions, shown by the parts burn builds a composite from: the
    title names the mechanism and the composites it was seen in, which burn builds from other
    ops (not from the mechanism)."""
    import json

    record = json.loads((Path(__file__).parents[2] / "corpus/bugs/powi-zero-untracked.json").read_text())
    record["status"] = "new"
    record["triage"] = {"signature": "burn-wrong:-:accumulate:grad:wrong #0", "known": None, "localisation": {
        "statement": "y", "where": "graph", "kind": "grad", "input": None, "dtype": "float16", "error": "small",
        "verdict": "burn-wrong", "confidence": "suspect", "mechanism": "accumulate", "shown_at": None,
        "inside": ["apply:prelu", "prelu"]}}
    path = tmp_path / "case.json"
    path.write_text(json.dumps(record))
    assert title(load_case(path)) == (
        "gradient accumulation (a value read more than once) (seen inside prelu inside apply:prelu, which burn "
        "builds from other ops): wrong gradient (float16, small error)")


def test_a_panic_says_where_in_burn_it_was_raised(burn_worker: BurnWorker) -> None:
    """A burn panic's `file:line:column` (the worker's panic hook) is in the observation, the
    finding's evidence, its report line and the issue text, from the crate's directory on (the
    same line on every machine); the signature does not carry it (a line moves between builds)."""
    from difftest.findings.signature import signature_of_mismatch
    from difftest.program.observation import ErrorObs

    case = load_case(ROOT / "corpus" / "bugs" / "flex-reduce-dim-after-unit-swap-panics.json")
    verdict = check(case.program, burn_worker)
    err = verdict.burn.error
    assert err is not None and err.kind == "panic" and err.location is not None, err
    assert err.location.startswith("burn-flex-0.22.1/src/ops/reduce.rs:"), err.location
    assert ErrorObs.from_dict(err.to_dict()) == err
    (m,) = [m for m in verdict.findings if m.kind == "outcome"]
    assert m.evidence["location"] == err.location and f"raised at {err.location}" in m.line()
    bare = signature_of_mismatch({**m.to_dict(), "evidence": {}}, case.program)
    assert signature_of_mismatch(m, case.program) == bare
    text = issue_markdown(case, verdict, burn_worker.version())
    assert f"Raised at `{err.location}`." in text
    assert f"  - raised at `{err.location}`" in text.split("## Why this is a bug", 1)[1]  # evidence (and report)


def test_a_panics_location_reads_the_same_from_any_build() -> None:
    from difftest.program.observation import shown_location

    registry = "/home/u/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f"
    assert shown_location(f"{registry}/burn-flex-0.22.1/src/ops/reduce.rs:1014:33") == \
        "burn-flex-0.22.1/src/ops/reduce.rs:1014:33"
    assert shown_location("/tmp/b/patch-1/crates/burn-autodiff/src/ops/tensor.rs:7:9") == \
        "burn-autodiff/src/ops/tensor.rs:7:9"
    assert shown_location("/rustc/59807616e1e0/library/core/src/slice/index.rs:1:2") == \
        "library/core/src/slice/index.rs:1:2"
    assert shown_location("src/exec.rs:10:3") == "src/exec.rs:10:3"
