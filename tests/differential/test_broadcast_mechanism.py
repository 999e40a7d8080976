"""A fault in the reduction of a broadcast operand's gradient is one finding, whichever op shows
it (difftest/findings/localise.py, `_broadcast_mechanism`): the localiser runs the op's one-op
program again with the inputs it broadcasts implicitly expanded first (one_op.without_broadcast,
shapes from OpSpec.partners.explicit). When that passes, the op's own derivative is right; when
another op broadcasting the same input the same way fails too (broadcast.witness), the
signature names the mechanism, `broadcast`; when that other op is right, the op reduces its own
operand wrong and is named, `broadcast:<op>`. A fault of the op's own derivative fails both and
keeps the op's name. The faults are compiled into difftest-burn (rust/src/fault.rs)."""

from __future__ import annotations

import json

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.broadcast import OWN, promotion, without_broadcast, witness
from difftest.findings.triage import Triage, triage
from difftest.ops.catalog import OPS
from difftest.ops.sampling import BROADCASTING
from difftest.oracle.check import check
from difftest.program.ir import Program
from tests.programs import backward, leaf, op

# an operand broadcast over two dims, as `x + bias` of a [batch, time, features] input has it
CASES = {
    **{o.name: ([4, 4, 2], [1, 1, 2]) for o in OPS if o.partners is BROADCASTING},
    "mul": ([3, 2, 2], [2]),
    "atan2": ([2, 3, 2], [1, 3, 1]),
    "matmul": ([2, 3, 2, 1], [1, 1, 1, 3]),
}


def _program(name: str, shapes: tuple[list[int], list[int]]) -> Program:
    a, b = shapes
    # positive, off every tie, integer ratio and kink the binary ops have
    xs = [0.3 + 0.125 * (k % 7) for k in range(_numel(a))]
    ys = [0.61 + 0.25 * (k % 5) for k in range(_numel(b))]
    # named as a one-op program names them (one_op.py): inputs a0, a1, the op's result y
    return Program((leaf("a0", xs, rg=True, shape=a), leaf("a1", ys, rg=True, shape=b), op("y", name, "a0", "a1"),
                    backward("y")), "float32")


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _triage(workers: dict[str, BurnWorker], program: Program, fault: str) -> Triage:
    if fault not in workers:
        workers[fault] = BurnWorker(fault=fault)
    w = workers[fault]
    verdict = check(program, w)
    assert not verdict.ok, f"the fault {fault} does not show in this program"
    return triage(verdict, w)


def test_every_op_that_declares_explicit_shapes_is_covered() -> None:
    assert {o.name for o in OPS if o.partners is not None and o.partners.explicit is not None} == set(CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_a_wrong_broadcast_reduction_is_signed_by_the_mechanism_not_the_op(
        workers: dict[str, BurnWorker], name: str) -> None:
    t = _triage(workers, _program(name, CASES[name]), "broadcast-grad-scale:0.25")
    loc = t.localisation
    assert loc is not None and loc.where == name and loc.mechanism == "broadcast", t
    assert loc.expanded == (1,) and 1 in (loc.input or ())
    assert t.signature.startswith("burn-wrong:-:broadcast:grad:wrong "), t.signature
    assert "expanded first" in loc.describe()


@pytest.mark.parametrize("name", ["add", "matmul"])
def test_a_wrong_derivative_of_the_op_keeps_the_ops_name(workers: dict[str, BurnWorker], name: str) -> None:
    """The op's own derivative is wrong with or without the broadcast: the variant fails too."""
    t = _triage(workers, _program(name, CASES[name]), f"grad-scale:{name}:0.25")
    assert t.localisation is not None and t.localisation.mechanism is None
    assert t.signature.startswith(f"burn-wrong:-:{name}:grad:wrong "), t.signature


def test_the_same_values_without_the_broadcast_are_right(workers: dict[str, BurnWorker]) -> None:
    """The fault needs an implicit broadcast; expanded by hand the same op passes, which is what
    the localiser's variant relies on."""
    variant = without_broadcast(_program("add", CASES["add"]))
    assert variant is not None
    expanded, positions = variant
    assert positions == (1,) and expanded.by_id()["a1"].shape == (4, 4, 2)  # type: ignore[union-attr]
    if "broadcast-grad-scale:0.25" not in workers:
        workers["broadcast-grad-scale:0.25"] = BurnWorker(fault="broadcast-grad-scale:0.25")
    assert check(expanded, workers["broadcast-grad-scale:0.25"]).ok


TITLES = {  # the shared reduction, by the mechanism and the op that showed it; an op's own, by the op
    "broadcast-grad-scale:0.25": ("add", "broadcasting (seen in add, input 1 broadcast): wrong gradient of input 1 "
                                         "(float32, large error)"),
    "broadcast-grad-scale:sub:0.25": ("sub", "sub when broadcasting (input 1 broadcast; right expanded, and other ops "
                                             "broadcasting it are right): wrong gradient of input 1 (float32, large "
                                             "error)"),
}


@pytest.mark.parametrize("fault", list(TITLES))
def test_a_broadcast_case_is_titled_by_what_is_wrong(workers: dict[str, BurnWorker], fault: str) -> None:
    from difftest.findings.corpus import case_from_verdict
    from difftest.findings.issue import title

    name, expected = TITLES[fault]
    t = _triage(workers, _program(name, CASES[name]), fault)
    case = case_from_verdict(check(_program(name, CASES[name]), workers[fault]), source="test")
    case.record["triage"] = json.loads(json.dumps(t.to_dict()))  # as saved and read back
    assert title(case) == expected


@pytest.mark.parametrize("name", list(CASES))
def test_one_ops_own_broadcast_reduction_is_signed_by_the_op(workers: dict[str, BurnWorker], name: str) -> None:
    """The same wrong reduction in `name` alone: right expanded, yet the witness (add, or sub for
    add) broadcasting the same input is right, so the op names the fault."""
    t = _triage(workers, _program(name, CASES[name]), f"broadcast-grad-scale:{name}:0.25")
    loc = t.localisation
    assert loc is not None and loc.where == name and loc.mechanism == OWN, t
    assert loc.expanded == (1,) and 1 in (loc.input or ())
    assert t.signature.startswith(f"burn-wrong:-:broadcast:{name}:grad:wrong "), t.signature
    assert f"{name}'s own reduction" in loc.describe()


@pytest.mark.parametrize("name", ["sub", "add", "matmul"])
def test_the_witness_broadcasts_the_same_input_the_same_way(workers: dict[str, BurnWorker], name: str) -> None:
    """The witness is another op with the same input over the same dims: right on the correct
    build, wrong under the shared fault, right under the op's own."""
    p = _program(name, CASES[name])
    w = witness(p, 1)
    assert w is not None
    y = w.by_id()["y"]
    assert y.op != name and y.inputs == ("a1", "a0")  # type: ignore[union-attr]
    assert w.by_id()["a0"].shape == p.by_id()["a1"].shape  # type: ignore[union-attr]
    assert witness(p, 0) is None  # input 0 is not broadcast
    for fault, ok in (("", True), ("broadcast-grad-scale:0.25", False), (f"broadcast-grad-scale:{name}:0.25", True)):
        if fault not in workers:
            workers[fault] = BurnWorker(fault=fault or None)
        assert check(w, workers[fault]).ok is ok, (fault, name)


def test_the_rank_promotion_alone_is_a_reshape_of_the_lower_rank_input(workers: dict[str, BurnWorker]) -> None:
    """difftest-burn gives a lower-rank operand leading size-1 dims (burn's unsqueeze, a reshape)
    before the op broadcasts it; `promotion` is that reshape alone, right on the correct build.
    Inputs of the target's rank have none. (A burn whose reshape is wrong on a rank change names
    the reshape, not the broadcast: tests/quality/test_one_case_per_fault.py.)"""
    p = _program("mul", CASES["mul"])  # [3, 2, 2] * [2]
    q = promotion(p, 1)
    assert q is not None
    y = q.by_id()["y"]
    assert y.op == "reshape" and y.attrs == {"shape": [1, 1, 2]}  # type: ignore[union-attr]
    assert promotion(p, 0) is None and promotion(_program("add", CASES["add"]), 1) is None  # same rank
    if "" not in workers:
        workers[""] = BurnWorker()
    assert check(q, workers[""]).ok
