"""Where in burn a finding's fault lies: spectrum-based fault localisation over burn's source
lines, from a coverage build (exec/coverage_map.py).

The localiser (localise.py) names the op whose one-op program fails. That names the fault when
the op's own derivative is wrong, but not when the op is correct and the fault sits in burn
code that many ops go through: a helper, the gradient accumulator, or an op that burn builds
out of others (burn's `square` is `x * x`, so a fault in `mul`'s backward fails `square` too).
Such a fault comes out as one finding per op that reaches it. What those findings share is a
place in burn's code, and a coverage build can see it: every failing run executes the faulty
lines, and runs that pass mostly do not.

Each run (a finding's reproducer, or a program of the passing sample) is the set of burn source
lines it executed and whether it failed on burn's side. A line's suspiciousness is Ochiai's
coefficient, fail(l) / sqrt(F * (fail(l) + pass(l))), with F the failing runs, fail(l) and
pass(l) the failing and passing runs that executed the line: 1 for a line every failing run
executes and no passing one does. (Ochiai ranks faults best among the classic spectrum
formulas on real programs: Abreu, Zoeteweij and van Gemund, 2007.)

A finding's *site* is the set of lines of its own run that share the highest score. Findings
whose sites share a line form one group: one place in burn to look at, with every finding of
it listed (nothing is merged away: the cases stay as they are; this is a report). Two findings
of different faults fall in one group only when no passing run tells their places apart, and
then the group lists both of them under that place, with the lines ranked.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

SUSPECTS_FORMAT = "difftest-suspects"
TIE = 1e-9  # scores closer than this are one score (a float sum's rounding)
LIFT = 2.0  # the runs that execute a suspect line fail at least twice as often as runs do (Spectrum.lifts)


@dataclass(frozen=True)
class Line:
    """A source line of burn: the crate, the path inside it, the line, its function (and the
    file it was compiled from, to quote it; not part of the line's identity)."""

    crate: str
    path: str
    line: int
    function: str = field(default="", compare=False)
    source: str = field(default="", compare=False)

    @property
    def where(self) -> str:
        return f"{self.crate}/{self.path}:{self.line}"


@dataclass(frozen=True)
class Run:
    """One program run on the coverage build: the burn lines it executed, and whether it failed
    on burn's side (a finding that is PyTorch's alone is not burn's failure). `finding` names the
    case it reproduces; None for a program of the passing sample (which may fail too: a program
    that fails counts as failing whether or not a case was saved for it)."""

    label: str
    failed: bool
    lines: frozenset[Line]
    finding: str | None = None


@dataclass(frozen=True)
class Suspect:
    line: Line
    score: float
    failing: int  # failing runs that executed it
    passing: int  # passing runs that executed it

    def to_dict(self) -> dict[str, Any]:
        return {"crate": self.line.crate, "path": self.line.path, "line": self.line.line,
                "function": self.line.function, "score": round(self.score, 6), "failing": self.failing,
                "passing": self.passing}


@dataclass
class Spectrum:
    """How many failing and passing runs executed each line; the failing runs are kept, so that
    those one place explains can be taken out (`without`)."""

    failing_runs: list[Run] = field(default_factory=list)
    failing: Counter[Line] = field(default_factory=Counter)
    passing: Counter[Line] = field(default_factory=Counter)
    n_passing: int = 0

    @staticmethod
    def of(runs: Iterable[Run]) -> Spectrum:
        s = Spectrum()
        for r in runs:
            s.add(r)
        return s

    @property
    def n_failing(self) -> int:
        return len(self.failing_runs)

    def add(self, run: Run) -> None:
        if run.failed:
            self.failing.update(run.lines)
            self.failing_runs.append(run)
        else:
            self.passing.update(run.lines)
            self.n_passing += 1

    def without(self, place: frozenset[Line]) -> Spectrum:
        """The spectrum without the failing runs that executed any of `place`."""
        out = Spectrum(passing=self.passing, n_passing=self.n_passing)
        for r in self.failing_runs:
            if r.lines.isdisjoint(place):
                out.add(r)
        return out

    def score(self, line: Line) -> float:
        """Ochiai's coefficient; 0 for a line whose execution does not raise the failure rate of
        the runs enough (`lifts`), however many failing runs executed it: code every program
        runs (the backward pass's engine) is then never a suspect, even where failures are many
        against the passing sample."""
        f = self.failing[line]
        if f == 0 or not self.lifts(f, self.passing[line]):
            return 0.0
        return f / math.sqrt(self.n_failing * (f + self.passing[line]))

    def lifts(self, f: int, p: int) -> bool:
        """Whether runs that execute a line fail at least LIFT times as often as runs do, or (where
        that is more than certain) at least halfway from the runs' failure rate to always."""
        n = self.n_failing + self.n_passing
        base = self.n_failing / n if n else 0.0
        return f / (f + p) >= min(LIFT * base, (1.0 + base) / 2) - TIE

    def executed_by(self, line: Line) -> frozenset[int]:
        """The failing runs (indices) that executed `line`."""
        return frozenset(i for i, r in enumerate(self.failing_runs) if line in r.lines)

    def place(self, best: Line, candidates: Iterable[Line]) -> frozenset[Line]:
        """`best` and the candidates of its score that the same failing runs executed: one block
        of code, not the top lines of unrelated findings that happen to score alike."""
        score, runs = self.score(best), self.executed_by(best)
        return frozenset({best} | {ln for ln in candidates if abs(self.score(ln) - score) <= TIE
                                   and self.failing[ln] == len(runs) and self.executed_by(ln) == runs})

    def suspect(self, line: Line) -> Suspect:
        return Suspect(line, self.score(line), self.failing[line], self.passing[line])

    def ranked(self, lines: Iterable[Line], top: int | None = None) -> list[Suspect]:
        """The suspects among `lines` by decreasing score; among equal scores, more failing runs,
        fewer passing, then by place (a stable order for reports and tests)."""
        out = sorted((s for ln in lines if (s := self.suspect(ln)).score > 0.0),
                     key=lambda s: (-s.score, -s.failing, s.passing, s.line.crate, s.line.path, s.line.line))
        return out if top is None else out[:top]


@dataclass
class Group:
    """Findings one place explains: `site`, the lines of the top score that each of them
    executed; `ranked`, the suspects every one of their runs executed, best first."""

    findings: list[str]
    site: list[Suspect]
    ranked: list[Suspect]
    failing_runs: int = 0  # failing runs no earlier place explains (the scores' F)

    @property
    def strict(self) -> bool:
        """Whether no passing run executed the site's best line (the strongest evidence)."""
        return bool(self.site) and self.site[0].passing == 0

    def to_dict(self) -> dict[str, Any]:
        return {"findings": self.findings, "strict": self.strict, "failing_runs": self.failing_runs,
                "site": [s.to_dict() for s in self.site],
                "ranked": [s.to_dict() for s in self.ranked]}


def group(spectrum: Spectrum, runs: Sequence[Run], top: int = 8) -> tuple[list[Group], list[str]]:
    """The groups of the findings `runs` reproduce (failing runs with a `finding`; the spectrum
    counts them too), in the order they were explained, and the findings no line explains (no
    line they executed scores: a fault that depends on values rather than paths, or a run whose
    edges could not be read).

    One place at a time, as multiple-fault localisation does: the top-scoring line the findings
    still unexplained executed, with the lines of its score the same failing runs executed, is a
    place; the findings that executed it are its
    group; the failing runs that executed it (findings and sample alike) leave the spectrum, and
    the scores are computed again for what is left. A later fault is then scored against the
    failures it can explain, not against the first one's. A finding with several runs takes the
    union of their lines."""
    lines: dict[str, frozenset[Line]] = {}
    for r in runs:
        if r.finding is not None and r.failed:
            lines[r.finding] = lines.get(r.finding, frozenset()) | r.lines
    left = dict(sorted(lines.items()))
    groups: list[Group] = []
    while left:
        candidates = frozenset().union(*left.values())
        best = spectrum.ranked(candidates, 1)
        if not best:
            break
        place = spectrum.place(best[0].line, candidates)
        members = [f for f, ls in left.items() if not ls.isdisjoint(place)]
        common = frozenset.intersection(*(left[f] for f in members))
        groups.append(Group(members, spectrum.ranked(place & common or place, top), spectrum.ranked(common, top),
                            spectrum.n_failing))
        for f in members:
            del left[f]
        spectrum = spectrum.without(place)
    return groups, sorted(left)


@dataclass(frozen=True)
class PlaceNote:
    """A case's place as a `difftest suspects --json` file records it, for the bug report: the
    place's lines (dicts as `Suspect.to_dict`, with the source `text`), the other cases of its
    group (labels), and the spectrum's size."""

    lines: list[dict[str, Any]]
    others: list[str]
    failing_runs: int
    passing_runs: int
    strict: bool
    node: str | None = None  # the burn-autodiff backward node holding it (`tensor::Mul`)


def place_of(doc: dict[str, Any], case: str) -> PlaceNote | None:
    """The place `doc` (a suspects file) gives the case named `case`, None when it gives none."""
    labels = {name: str((info or {}).get("label", name)) for name, info in (doc.get("cases") or {}).items()}
    for g in doc.get("groups") or []:
        if case in g.get("findings", []):
            return PlaceNote(list(g.get("site", [])), [labels.get(f, f) for f in g["findings"] if f != case],
                             int(g.get("failing_runs", doc.get("failing_runs", 0))), int(doc.get("passing_runs", 0)),
                             bool(g.get("strict")), str(g["node"]) if g.get("node") else None)
    return None
