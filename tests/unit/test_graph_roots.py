"""A gradient no single op explains (localised to `graph`) is signed by the op nearest the leaf
whose result, as the backward's root, already shows it (difftest/findings/graph_roots.py): two
composition bugs of the backward are two cases, and one bug seen through different downstream
ops is one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from difftest.findings.graph_roots import Judge, shown_name, smallest_root
from difftest.findings.localisation import Localisation
from difftest.findings.paths import candidates
from difftest.findings.triage import localised_signature
from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.ir import Backward, Program
from tests.programs import leaf, op, program

# x -> exp -> expand -> permute -> narrow -> backward: a composition bug of the backward that
# shows from `p` (the permute's result) on, whatever follows it
PROGRAM = program(
    leaf("x", [1.0, 2.0], rg=True), op("e", "exp", "x"), op("d", "expand", "e", shape=[3, 2]),
    op("p", "permute", "d", dims=[1, 0]), op("n", "narrow", "p", dim=0, start=0, length=1), Backward("bw", "n"))
WRONG_X = Mismatch("grad", "x", None, None, 1.0, 2.0, backward="bw")


def _judge_showing_from(roots: set[str], asked: list[str]) -> Judge:
    def judge(p: Program) -> Verdict:
        bw = p.statements[-1]
        assert isinstance(bw, Backward) and len(p.statements) == len(PROGRAM.statements)
        asked.append(bw.input)
        return cast(Verdict, SimpleNamespace(findings=[WRONG_X] if bw.input in roots else []))
    return judge


def test_the_smallest_root_that_shows_the_gradient_is_named() -> None:
    asked: list[str] = []
    path = candidates(PROGRAM, WRONG_X)
    assert [st.id for st in path] == ["e", "d", "p", "n"]
    st = smallest_root(PROGRAM, WRONG_X, path, _judge_showing_from({"p", "n"}, asked))
    assert st is not None and st.id == "p" and shown_name(PROGRAM, st) == "permute"
    assert asked == ["e", "d", "p"]  # nearest the leaf first; the program's own root is not re-run


def test_the_backwards_own_root_when_no_smaller_root_shows_it() -> None:
    asked: list[str] = []
    st = smallest_root(PROGRAM, WRONG_X, candidates(PROGRAM, WRONG_X), _judge_showing_from(set(), asked))
    assert st is not None and st.id == "n" and asked == ["e", "d", "p"]


def test_only_a_finding_of_the_same_kind_at_the_same_leaf_counts() -> None:
    other = Mismatch("grad-presence", "x", None, None, True, False, backward="bw")
    st = smallest_root(PROGRAM, other, candidates(PROGRAM, other), _judge_showing_from({"e"}, []))
    assert st is not None and st.id == "n"  # `e` shows a `grad` finding, not the presence one
    value = Mismatch("value", "n", None, None, 1.0, 2.0)
    assert smallest_root(PROGRAM, value, [], _judge_showing_from(set(), [])) is None


def test_two_graph_gradient_bugs_sign_as_two_cases() -> None:
    def graph(at: str | None) -> Localisation:
        return Localisation(None, "graph", "grad", None, "float32", "large", "burn-wrong", shown_at=at)

    permute, pool, unknown = (localised_signature(graph(a), None) for a in ("permute", "apply:conv2d", None))
    assert permute.startswith("burn-wrong:-:graph@permute:grad:wrong #")
    assert pool.startswith("burn-wrong:-:graph@apply:conv2d:grad:wrong #")
    assert unknown.startswith("burn-wrong:-:graph:grad:wrong #")
    assert len({permute, pool, unknown}) == 3
    assert "first shown rooted at permute" in graph("permute").describe()
