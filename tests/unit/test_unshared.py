"""The tree a `graph` gradient finding is tried on (difftest/findings/unshared.py): the backward's
forward with every value computed once per path that reads it, down to a copy of each leaf per
use, so that no value receives two gradient contributions."""

from __future__ import annotations

from difftest.findings.unshared import MAX_STATEMENTS, unshared
from difftest.oracle.compare import Mismatch
from difftest.program.ir import Backward, Leaf, OpCall, Program, Statement
from tests.programs import backward, leaf, op


def _grad(leaf_id: str, bw: str = "bw") -> Mismatch:
    return Mismatch("grad", leaf_id, 0, "burn", "expected", "observed", backward=bw)


def test_a_value_read_twice_becomes_two_copies_each_read_once() -> None:
    p = Program((leaf("x", [0.5, 1.0], rg=True), op("a", "sin", "x"), op("b", "exp", "x"), op("c", "add", "a", "b"),
                 op("s", "sum", "c"), backward("s")))
    tree = unshared(p, _grad("x"))
    assert tree is not None
    leaves = [s for s in tree.statements if isinstance(s, Leaf)]
    assert len(leaves) == 2 and all(x.data == (0.5, 1.0) and x.require_grad for x in leaves)
    reads = [i for s in tree.statements if isinstance(s, OpCall) for i in s.inputs]
    assert len(reads) == len(set(reads))  # nothing read twice
    assert [s.op for s in tree.statements if isinstance(s, OpCall)] == ["sin", "exp", "add", "sum"]
    assert isinstance(tree.statements[-1], Backward) and tree.statements[-1].input == tree.statements[-2].id


def test_an_aliased_read_and_a_shared_intermediate_are_unshared_too() -> None:
    p = Program((leaf("x", [0.5], rg=True), op("a", "exp", "x"), op("b", "mul", "a", "a"), backward("b")))
    tree = unshared(p, _grad("x"))
    assert tree is not None
    assert [s.op for s in tree.statements if isinstance(s, OpCall)] == ["exp", "exp", "mul"]


def test_nothing_shared_or_nothing_to_build_gives_none() -> None:
    chain = Program((leaf("x", [0.5], rg=True), op("a", "exp", "x"), op("s", "sum", "a"), backward("s")))
    assert unshared(chain, _grad("x")) is None  # the tree would be the program itself
    assert unshared(chain, Mismatch("value", "a", 1, "burn", "e", "o")) is None  # no gradient
    doubling: list[Statement] = [leaf("x", [0.5], rg=True)]
    for k in range(7):  # 2^7 leaf copies
        doubling.append(op(f"d{k}", "add", doubling[-1].id, doubling[-1].id))
    doubling.append(backward(doubling[-1].id))
    assert 2 ** 7 > MAX_STATEMENTS and unshared(Program(tuple(doubling)), _grad("x")) is None
