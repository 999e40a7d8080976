"""Bounded resources: the element budget (both sides, before anything runs) and the worker's
memory limit (a worker past it dies, which is a crash observation, and is restarted)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from difftest.exec.burn_worker import DEFAULT_MEMORY_LIMIT, MEMORY_LIMIT_ENV, BurnWorker
from difftest.ops.validate import MAX_PROGRAM_ELEMENTS, MAX_TENSOR_ELEMENTS, check_program, infer_shapes
from difftest.program.ir import InlineTensor, Module, Program, ProgramError
from difftest.program.observation import Observation
from tests.programs import cut, leaf, op, program

MIB = 1 << 20
SMALL = program(leaf("w", [3.0, 4.0], rg=True), op("y", "tanh", "w"), op("s", "sum", "y"))

REPEAT_BOMB = program(
    leaf("x", [1.0, 2.0]),
    op("s", "sum", "x"),
    op("v1", "exp", "x"),
    op("v2", "repeat_dim", "v1", dim=0, times=4_000_000_000),
    op("v3", "sum", "v2"),
)
EXPAND_BOMB = program(
    leaf("x", [1.0, 2.0]),
    op("e", "expand", "x", shape=[1000, 1000, 2]),
    op("s", "sum", "e"),
)


def _python_error(p: Program) -> ProgramError:
    with pytest.raises(ProgramError) as info:
        check_program(p)
    return info.value


def _burn_error(worker: BurnWorker, p: Program) -> Observation:
    obs = worker.run(p)
    assert obs.outcome == "invalid", obs
    assert obs.error is not None and obs.error.kind == "invalid-program"
    assert obs.values == ()  # nothing ran
    return obs


def test_limits_are_the_same_on_both_sides() -> None:
    source = (Path(__file__).resolve().parents[2] / "rust" / "src" / "program" / "bounds.rs").read_text()

    def rust(name: str) -> int:
        m = re.search(rf"pub const {name}: u64 = ([0-9_]+);", source)
        assert m, name
        return int(m.group(1).replace("_", ""))

    assert (MAX_TENSOR_ELEMENTS, MAX_PROGRAM_ELEMENTS) == (1_000_000, 4_000_000)
    assert rust("MAX_TENSOR_ELEMENTS") == MAX_TENSOR_ELEMENTS
    assert rust("MAX_PROGRAM_ELEMENTS") == MAX_PROGRAM_ELEMENTS


def test_repeat_dim_bomb_is_rejected_on_both_sides(burn_worker: BurnWorker) -> None:
    e = _python_error(REPEAT_BOMB)
    assert (e.index, e.statement) == (3, "v2")
    assert str(e) == (
        "statement 3 (id 'v2'): repeat_dim would make 8000000000 elements; the limit is 1000000 per tensor"
    )
    obs = _burn_error(burn_worker, REPEAT_BOMB)
    assert obs.error is not None and (obs.error.index, obs.error.statement) == (3, "v2")
    assert "repeat_dim would make 8000000000 elements; the limit is 1000000 per tensor" in obs.error.message
    assert burn_worker.run(SMALL).outcome == "ok"


def test_expand_bomb_is_rejected_on_both_sides(burn_worker: BurnWorker) -> None:
    e = _python_error(EXPAND_BOMB)
    assert (e.index, e.statement) == (1, "e")
    assert "expand would make 2000000 elements" in str(e)
    obs = _burn_error(burn_worker, EXPAND_BOMB)
    assert obs.error is not None and (obs.error.index, obs.error.statement) == (1, "e")
    assert "expand would make 2000000 elements; the limit is 1000000 per tensor" in obs.error.message


@pytest.mark.parametrize(
    "statements, index",
    [
        # reshape carries the expanded size along; matmul's result is the bomb
        ((leaf("a", [1.0], shape=[1, 1]), op("e", "expand", "a", shape=[2000, 1]),
          op("r", "reshape", "e", shape=[1, 2000]), op("m", "matmul", "e", "r")), 3),
        # broadcasting in a binary op
        ((leaf("a", [1.0] * 2000, shape=[2000, 1]), leaf("b", [1.0] * 2000, shape=[1, 2000]),
          op("c", "add", "a", "b")), 2),
        # a leaf counts like any value
        ((leaf("a", [0.0] * (MAX_TENSOR_ELEMENTS + 1)),), 0),
        # an inline tensor attribute
        ((leaf("a", [1.0, 2.0]),
          op("g", "gather", "a", dim=0, indices={"shape": [MAX_TENSOR_ELEMENTS + 1],
                                                 "data": [0] * (MAX_TENSOR_ELEMENTS + 1)})), 1),
    ],
)
def test_every_inferred_shape_is_bounded(statements: tuple[object, ...], index: int, burn_worker: BurnWorker) -> None:
    p = program(*statements)
    assert _python_error(p).index == index
    obs = _burn_error(burn_worker, p)
    assert obs.error is not None and obs.error.index == index


def test_program_total_is_bounded(burn_worker: BurnWorker) -> None:
    # a one-element leaf and four values of 1e6 elements: each within the per-tensor limit,
    # together one element over the program's (a cut counts like any value)
    p = program(
        leaf("x", [1.0]),
        op("a", "expand", "x", shape=[1000, 1000]),
        op("b", "exp", "a"),
        op("c", "neg", "b"),
        cut("d", "detach", "c"),
        op("e", "sin", "d"),
    )
    e = _python_error(p)
    assert (e.index, e.statement) == (4, "d")
    assert f"total {MAX_PROGRAM_ELEMENTS + 1} elements" in str(e) and "4000000 per program" in str(e)
    obs = _burn_error(burn_worker, p)
    assert obs.error is not None and (obs.error.index, obs.error.statement) == (4, "d")
    assert "4000000 per program" in obs.error.message


def test_module_weights_count() -> None:
    n = 1001
    big = Module("fc", "linear", weight=InlineTensor((n, n), (0.0,) * (n * n)))
    e = _python_error(program(big))
    assert e.index == 0 and "weight would make 1002001 elements" in str(e)


def test_at_the_limit_is_fine_and_memory_experiments_are_exempt() -> None:
    p = program(leaf("x", [1.0]), op("a", "expand", "x", shape=[1000, 1000]), op("s", "sum", "a"))
    assert check_program(p)["a"] == (1000, 1000)
    huge = program(leaf("x", [1.0]), op("a", "expand", "x", shape=[2000, 2000]))
    assert infer_shapes(huge)["a"] == (2000, 2000)  # the unbounded inference the memory model uses


# ---------------------------------------------------------------------------- memory limit


def _limit_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max address space"):
            return line.split()[3]
    raise AssertionError("no address-space line")


def test_memory_limit_is_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    with BurnWorker() as w:
        assert w.memory_limit == DEFAULT_MEMORY_LIMIT
        assert w.pid is not None and _limit_of(w.pid) == str(DEFAULT_MEMORY_LIMIT)
        assert w.run(SMALL).outcome == "ok"
    monkeypatch.setenv(MEMORY_LIMIT_ENV, str(768 * MIB))
    assert BurnWorker().memory_limit == 768 * MIB
    assert BurnWorker(memory_limit=512 * MIB).memory_limit == 512 * MIB  # the keyword wins
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "0")
    with BurnWorker() as w:
        assert w.memory_limit is None and w.pid is not None and _limit_of(w.pid) == "unlimited"


def test_worker_past_its_memory_limit_crashes_and_restarts() -> None:
    with BurnWorker(memory_limit=512 * MIB, test_requests=True) as w:
        assert w.run(SMALL).outcome == "ok"  # a normal program fits in 512 MiB
        ok = w.allocate(64 * MIB)
        assert ok.outcome == "ok" and ok.meta["allocated"] == 64 * MIB
        first = w.pid
        obs = w.allocate(2 << 30)
        assert obs.outcome == "crash", obs
        assert obs.error is not None and "exited" in obs.error.message
        assert w.restarts == 1 and w.pid != first
        after = w.run(SMALL)
        assert after.outcome == "ok" and after.value("s") is not None
        assert w.pid is not None and _limit_of(w.pid) == str(512 * MIB)  # the new worker is limited too


def test_allocate_is_test_only() -> None:
    with BurnWorker(test_requests=False) as w:
        obs = w.allocate(MIB)
        assert obs.outcome == "invalid" and obs.error is not None
        assert obs.error.kind == "invalid-request" and "unknown request" in obs.error.message
        assert w.restarts == 0 and w.run(SMALL).outcome == "ok"
