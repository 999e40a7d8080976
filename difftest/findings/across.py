"""One corpus case on one burn version, judged against the knowledge declared for that version:
a cell of `difftest versions`' matrix.

The model applies only the rules whose `burn_versions` contain the version (`rules_for`). A
cell is `ok` when what the version does matches what is declared for it:

- a pass case: `pass`, or `regression` (not ok);
- a divergence case (`divergence:X`), X declared for the version: `explained by X`; the
  prediction fails there: `X stale` (not ok); passes without X firing: `fails differently`;
- a divergence case, X outside its declared range (not applied): passes without it:
  `X not needed` (ok: the range says so);
- any case the rules declared for the version do not explain, but every declared rule does:
  the rules that fired outside their ranges are `stale` there (not ok: the version still
  diverges as they predict, widen their ranges); otherwise `fails differently`;
- a bug case: fails the way it recorded: `fails as recorded`; passes: `fixed in V`; fails
  otherwise: `fails differently` (not ok). Against the known bug's declared range: a bug
  declared for V that passes, or declared fixed by V (outside the range) that still fails, is
  not ok (its range is stale).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from difftest.divergences.known_bugs import KNOWN_BUGS, KnownBug
from difftest.divergences.memory_rules import MEMORY_RULES, MemoryRule
from difftest.divergences.rules import RULES, Rule, rules_for
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import Case, check_expectations, judge_memory
from difftest.oracle.check import check
from difftest.oracle.compare import Verdict

Outcome = Literal["pass", "regression", "fails as recorded", "fails differently", "fixed", "explained",
                  "not needed", "stale", "not fixed", "not run"]


@dataclass(frozen=True)
class Cell:
    outcome: Outcome
    ok: bool  # what the version does matches what is declared for it
    text: str  # the matrix cell
    detail: str  # why, in a sentence
    rules_fired: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return {"outcome": self.outcome, "ok": self.ok, "text": self.text, "detail": self.detail,
                "rules_fired": list(self.rules_fired)}


def known_bug_of(case: Case, bugs: Sequence[KnownBug] = KNOWN_BUGS) -> KnownBug | None:
    """The declared known bug a bug case stands for: the record of its name, or the one whose
    evidence names its file."""
    for b in bugs:
        if b.name == case.name:
            return b
    if case.path is not None:
        for b in bugs:
            if any(ref.split("#")[0].endswith((f"corpus/bugs/{case.path.name}", f"corpus/backends/{case.path.name}"))
                   for ref in b.knowledge.evidence):
                return b
    return None


def judge_on(case: Case, worker: BurnWorker, version: str | None = None, *, rules: Sequence[Rule] = RULES,
             memory_rules: Sequence[MemoryRule] = MEMORY_RULES, bugs: Sequence[KnownBug] = KNOWN_BUGS,
             patch: str | None = None) -> Cell:
    """Runs `case` on the worker's burn and judges it for `version` (default: the version the
    worker reports). `rules`, `memory_rules`, `bugs`: the declared knowledge to judge against.
    `patch`: the worker's burn is `version` with the candidate fix of that name applied
    (`upstream/<patch>.patch`), which is meant to fix the bug case of that name and the cases
    whose `root` it is, and nothing else.

    A case that the rules declared for the version do not explain is run once more with every
    declared rule: when that explains it, the rules it needed outside their ranges are stale
    there (the version still diverges as they predict: widen their ranges)."""
    version = version or worker.burn_version()
    if case.memory is not None:
        return _judge_memory_case(case, version, memory_rules)

    active = rules_for(version, rules)
    cell = _classify(case, check(case.program, worker, rules=active), version, rules, active, bugs, patch)
    outside = {r.name for r in rules} - {r.name for r in active}
    if cell.ok or not outside:
        return cell
    everything = _classify(case, check(case.program, worker, rules=rules), version, rules, tuple(rules), bugs)
    needed = [name for name in everything.rules_fired if name in outside]
    if not everything.ok or not needed:
        return cell
    ranges = "; ".join(f"{n} declared for {_declared(rules, n).knowledge.burn_versions}" for n in needed)
    text = f"{needed[0]} stale" if len(needed) == 1 else "stale: " + ", ".join(needed)
    return Cell("stale", False, text, f"{ranges}, not {version}, but {version} still diverges as "
                f"{'it predicts' if len(needed) == 1 else 'they predict'} (widen the range); with them: "
                f"{everything.text}", cell.rules_fired)


def _declared(rules: Sequence[Rule], name: str) -> Rule:
    for r in rules:
        if r.name == name:
            return r
    raise ValueError(f"rule {name!r} is not declared")


def _classify(case: Case, verdict: Verdict, version: str, rules: Sequence[Rule], active: Sequence[Rule],
              bugs: Sequence[KnownBug], patch: str | None = None) -> Cell:
    """The cell of `case` given its verdict under the rules `active` (of the declared `rules`)."""
    fired = tuple(verdict.prediction.rules_fired)
    first = verdict.findings[0].line().splitlines()[0] if verdict.findings else ""
    if patch is not None and case.status == "bug":
        patched = _classify_patched(case, verdict, patch, first, fired)
        if patched is not None:
            return patched
    if case.status == "pass":
        if verdict.ok:
            return Cell("pass", True, "pass", "passes", fired)
        return Cell("regression", False, "REGRESSION", f"expected to pass; {first}", fired)
    rule_name = case.expected_rule()
    if rule_name is not None:
        declared = _declared(rules, rule_name)
        scope = declared.knowledge.burn_versions
        if declared in active:
            if verdict.ok and rule_name in fired:
                return Cell("explained", True, f"explained by {rule_name}", f"divergence explained by {rule_name}",
                            fired)
            if verdict.ok:
                return Cell("fails differently", False, "fails differently",
                            f"{rule_name} did not fire (fired: {', '.join(fired) or 'none'}): the case no longer "
                            "exercises it", fired)
            return Cell("stale", False, f"{rule_name} stale",
                        f"{rule_name} is declared for {scope} but its prediction fails on {version}: {first}", fired)
        if verdict.ok:
            return Cell("not needed", True, f"{rule_name} not needed",
                        f"{rule_name} not applied (declared for {scope}); {version} agrees without it", fired)
        return Cell("fails differently", False, "fails differently",
                    f"{rule_name} not applied (declared for {scope}): {first}", fired)
    # a bug case
    bug = known_bug_of(case, bugs)
    declared_here = bug is None or bug.knowledge.holds_for(version)
    where = f" (known bug {bug.name} declared for {bug.knowledge.burn_versions})" if bug is not None else ""
    if verdict.ok:
        advice = f"; narrow the declared range{where}" if declared_here and bug else where
        return Cell("fixed", not declared_here, f"fixed in {version}", f"passes on {version}{advice}", fired)
    diff = check_expectations(case.record.get("expect", []), verdict)
    if diff is not None:
        return Cell("fails differently", False, "fails differently",
                    "fails differently from what it recorded: " + diff.strip().splitlines()[0].strip(), fired)
    if not declared_here:
        return Cell("fails as recorded", False, "fails as recorded",
                    f"still fails on {version}, which the record excludes{where}", fired)
    return Cell("fails as recorded", True, "fails as recorded", f"fails as recorded ({verdict.kind})", fired)


def _classify_patched(case: Case, verdict: Verdict, patch: str, first: str, fired: tuple[str, ...]) -> Cell | None:
    """A bug case on a burn with a candidate fix applied: its own bug (the patch's name is the
    case's or its root's) must be fixed; another bug it fixes is a side effect worth a look.
    None: judged as on the release (another bug, still failing)."""
    target = patch in (case.name, case.root)
    if verdict.ok:
        if target:
            return Cell("fixed", True, f"fixed by {patch}", f"passes with {patch} applied", fired)
        return Cell("fixed", False, f"fixed by {patch}", f"passes with {patch} applied, which is meant for "
                    "another bug: a side effect of the patch to understand", fired)
    if target:
        return Cell("not fixed", False, "NOT fixed", f"still fails with {patch} applied, which is meant to fix "
                    f"it: {first}", fired)
    return None


def _judge_memory_case(case: Case, version: str, memory_rules: Sequence[MemoryRule]) -> Cell:
    """A memory case measures its table in fresh processes of the binary `find_binary()`
    names ($DIFFTEST_BURN), with the memory rules declared for `version`."""
    assert case.memory is not None
    active = [r for r in memory_rules if r.knowledge.holds_for(version)]
    outcome = judge_memory(case, case.memory.run(full=False, rules=active), full=False)
    rule_name = case.expected_rule()
    head = outcome.message.splitlines()[0]
    outside = {r.name for r in memory_rules} - {r.name for r in active}
    if not outcome.ok and outside:  # measured again, with every declared memory rule
        rows = case.memory.run(full=False, rules=list(memory_rules))
        needed = sorted({n for row in rows for n in row.expectation.rules} & outside)
        if judge_memory(case, rows, full=False).ok and needed:
            ranges = "; ".join(f"{r.name} declared for {r.knowledge.burn_versions}" for r in memory_rules
                               if r.name in needed)
            return Cell("stale", False, f"{needed[0]} stale" if len(needed) == 1 else "stale: " + ", ".join(needed),
                        f"{ranges}, not {version}, but {version} still behaves as predicted (widen the range)")
    if outcome.ok:
        if rule_name is not None:
            return Cell("explained", True, f"explained by {rule_name}", head)
        if case.status == "bug":
            return Cell("fails as recorded", True, "fails as recorded", head)
        return Cell("pass", True, "pass", head)
    if case.status == "bug":
        return Cell("fixed", False, f"fixed in {version}", head)
    if rule_name is not None:
        declared = next((r for r in memory_rules if r.name == rule_name), None)
        scope = f" (declared for {declared.knowledge.burn_versions})" if declared is not None else ""
        return Cell("stale", False, f"{rule_name} stale", f"{head}{scope}")
    return Cell("regression", False, "REGRESSION", head)
