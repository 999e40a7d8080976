"""The one record type of declared knowledge, and the burn version ranges it holds for.

Every piece of knowledge difftest declares about burn and PyTorch is a `Knowledge` record: a
divergence the flag model applies (rules.py), a memory divergence (memory_rules.py), a
subgradient convention at a kink (conventions.py), a known burn bug (known_bugs.py) or a call
burn answers with its input (noops.py). Each of those modules keeps its behaviour (predicates
and effects, triggers, measured gradients) next to the record it carries; registry.py lists
every record (`KNOWLEDGE`), and `difftest rules` prints them.

`evidence` holds references, each either a path in this repository (optionally with a
markdown anchor, e.g. `docs/semantics.md#leaf-detach`) or an https URL (upstream source, a
pull request); tests/unit/test_knowledge.py checks that every path and anchor exists.

`burn_versions` is the range of burn versions the record is declared to hold for: clauses
`>=`, `>`, `<=`, `<`, `==` or `!=` and a version (`0.22`, `0.22.1`, `0.23.0-pre.1`), joined by
commas, all of which must hold; `*` is every version. Versions compare in semver order (a
pre-release before its release, after every earlier release), so `>=0.22.1` contains
`0.23.0-pre.1` and `<0.23.0-pre.1` excludes it. A record observed on one version holds from it on until
a later version shows otherwise (a stale rule), which then gets an upper bound.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

Kind = Literal["divergence", "memory", "convention", "known-bug", "no-op"]
KINDS: tuple[Kind, ...] = get_args(Kind)
Framework = Literal["burn", "torch"]  # a framework the model predicts
Side = Literal["burn", "torch", "both"]  # whose behaviour a record describes ("both": each's own)
SIDES: tuple[Side, ...] = get_args(Side)

# Every record so far was measured on burn 0.22.1 (the default build) and holds on 0.22.0 too:
# `difftest versions` (the corpus) and the differential suite run against a 0.22.0 build
# (DIFFTEST_BURN=..., docs/measurements.md "Across burn versions") agree with every record declared from it.
MEASURED_ON = ">=0.22.0"

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:-([0-9A-Za-z.-]+))?")
_CLAUSE = re.compile(r"(>=|<=|==|!=|>|<)?\s*(\S+)")
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq, "!=": operator.ne,
}


@dataclass(frozen=True, order=True)
class Version:
    """A burn version, ordered as semver orders them: a pre-release (`0.23.0-pre.1`) comes
    before its release (`0.23.0`) and after every earlier release; pre-release identifiers
    compare numerically when numeric, else as text, and a numeric one sorts first."""

    release: tuple[int, int, int]
    # (0, ids...) for a pre-release, (1,) for a release: a release sorts after its pre-releases
    pre: tuple[Any, ...] = (1,)

    def __str__(self) -> str:
        text = ".".join(map(str, self.release))
        if self.pre[0] == 0:
            text += "-" + ".".join(str(i[1]) for i in self.pre[1:])
        return text

    @property
    def is_prerelease(self) -> bool:
        return bool(self.pre[0] == 0)


def parse_version(text: str) -> Version:
    """`0.22.1`, `0.22` (= 0.22.0) or a pre-release `0.23.0-pre.1`. Raises ValueError on
    anything else (a `v` prefix, build metadata, `0.22.x`)."""
    m = _VERSION.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a version: {text!r} (expected MAJOR.MINOR[.PATCH][-PRE])")
    release = (int(m[1]), int(m[2]), int(m[3] or 0))
    if m[4] is None:
        return Version(release)
    ids = m[4].split(".")
    if any(not i for i in ids):
        raise ValueError(f"not a version: {text!r} (empty pre-release identifier)")
    return Version(release, (0, *((0, int(i)) if i.isdigit() else (1, i) for i in ids)))


@dataclass(frozen=True)
class VersionRange:
    """A parsed `burn_versions` string: every (operator, version) clause must hold."""

    clauses: tuple[tuple[str, Version], ...]

    @staticmethod
    def parse(spec: str) -> VersionRange:
        if spec.strip() == "*":
            return VersionRange(())
        clauses: list[tuple[str, Version]] = []
        for part in spec.split(","):
            m = _CLAUSE.fullmatch(part.strip())
            if m is None:
                raise ValueError(f"not a version range: {spec!r}")
            clauses.append((m[1] or "==", parse_version(m[2])))
        return VersionRange(tuple(clauses))

    def contains(self, version: str | Version) -> bool:
        v = parse_version(version) if isinstance(version, str) else version
        return all(_COMPARE[op](v, bound) for op, bound in self.clauses)


@functools.lru_cache(maxsize=1024)
def holds_for(spec: str, version: str) -> bool:
    """Whether the version range `spec` contains `version` (remembered: a campaign asks of
    every record once a program)."""
    return VersionRange.parse(spec).contains(version)


def is_url(ref: str) -> bool:
    return "://" in ref


def burn_source(crate: str, path: str, version: str = "0.22.1") -> str:
    """The docs.rs URL of a file of a published burn crate (its source as released)."""
    return f"https://docs.rs/crate/{crate}/{version}/source/{path}"


@dataclass(frozen=True)
class Knowledge:
    name: str  # unique across every kind (a corpus status `divergence:<name>` names one)
    kind: Kind
    framework: Side
    reason: str
    evidence: tuple[str, ...]  # repository paths (with #anchor) or https URLs
    burn_versions: str = MEASURED_ON

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is not one of {KINDS}")
        if self.framework not in SIDES:
            raise ValueError(f"{self.name}: framework {self.framework!r} is not one of {SIDES}")
        if not self.reason.strip():
            raise ValueError(f"{self.name}: no reason")
        if not self.evidence or isinstance(self.evidence, str):
            raise ValueError(f"{self.name}: evidence must be a non-empty tuple of references")
        for ref in self.evidence:
            if is_url(ref) and not ref.startswith("https://"):
                raise ValueError(f"{self.name}: evidence URL {ref!r} is not https")
            if not is_url(ref) and (ref.startswith("/") or ".." in ref.split("/")):
                raise ValueError(f"{self.name}: evidence {ref!r} is not a path in the repository")
        VersionRange.parse(self.burn_versions)  # raises on a malformed range

    def holds_for(self, version: str) -> bool:
        """Whether this record is declared for burn `version`."""
        return holds_for(self.burn_versions, version)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "framework": self.framework,
            "burn_versions": self.burn_versions,
            "evidence": list(self.evidence),
            "reason": self.reason,
        }


class OneFramework:
    """Mixin for declared behaviour of one framework that a model applies (flag rules, memory
    rules): its record must be of kind `KIND` and name one framework."""

    KIND: ClassVar[str]
    knowledge: Knowledge

    def __post_init__(self) -> None:
        if self.knowledge.kind != self.KIND or self.knowledge.framework == "both":
            raise ValueError(f"{self.knowledge.name}: a {type(self).__name__} is a {self.KIND} record of "
                             "one framework")

    @property
    def name(self) -> str:
        return self.knowledge.name

    @property
    def framework(self) -> Framework:
        return "burn" if self.knowledge.framework == "burn" else "torch"
