"""Dtypes: which ops run in which dtype (measured here, declared in ops/dtype_support.py), and
programs in each dtype through both frameworks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from difftest.exec.burn_worker import BurnWorker, WorkerError
from difftest.ops.catalog import CATALOG
from difftest.ops.dtype_support import UNSUPPORTED, why_unsupported
from difftest.ops.validate import check_program
from difftest.ops.value_dtypes import value_dtypes
from difftest.oracle.check import check
from difftest.oracle.pytorch import run as run_torch
from difftest.program.dtypes import FLOAT_DTYPES, round_to
from difftest.program.ir import Backward, Leaf, OpCall, Program, ProgramError
from difftest.program.observation import Observation
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate

OTHER_DTYPES = [d for d in FLOAT_DTYPES if d != "float32"]
PROGRAMS_PER_OP = 3


@pytest.fixture(scope="module")
def burn_worker() -> Iterator[BurnWorker]:
    try:
        worker = BurnWorker()
        worker.start()
    except WorkerError as e:
        pytest.skip(f"difftest-burn is not available: {e}")
    yield worker
    worker.close()


def _dtype_errors(op: str, dtype: str, worker: BurnWorker) -> dict[str, str]:
    """Per framework, the first error a program of `op` raises in `dtype` that the same program
    does not raise in float32 (where the op's statement or a backward fails): what the dtype
    alone breaks."""
    cfg = GenConfig(ops=(op,), dtype=dtype, only_supported=False, avoid_known_bugs=False, p_backward=1.0,
                    p_another_backward=0.0,
                    p_training=0.0, module_weight=0.0, kind_weights=(10.0, 0.0, 0.0), max_statements=3)
    found: dict[str, str] = {}
    ran = 0
    for k in range(PROGRAMS_PER_OP * 2):
        p = generate(RandomChoices(1000 + k), cfg)
        if not any(isinstance(s, OpCall) and s.op == op for s in p.statements):
            continue
        ran += 1
        p32 = Program(p.statements, "float32")
        for fw, run in (("torch", run_torch), ("burn", lambda q: worker.submit(q).result())):
            obs: Observation = run(p)
            e, e32 = obs.error, run(p32).error
            if e is None or (e32 is not None and e32.index == e.index) or fw in found:
                continue
            st = p.statements[e.index] if e.index is not None else None
            if st is None or isinstance(st, Backward) or (isinstance(st, OpCall) and st.op == op):
                found[fw] = f"{e.kind}: {e.message[:300]}"
        if ran >= PROGRAMS_PER_OP:
            break
    assert ran, f"no program of {op} was generated in {dtype}"
    return found


@pytest.mark.parametrize("dtype", OTHER_DTYPES)
def test_declared_support_is_measured(dtype: str, burn_worker: BurnWorker) -> None:
    """Every op runs in `dtype` on both sides exactly when the table says so."""
    wrong: list[str] = []
    for op in CATALOG:
        errors = _dtype_errors(op, dtype, burn_worker)
        runs = why_unsupported(op, dtype) is None
        if runs and errors:
            wrong.append(f"{op}: declared supported in {dtype}, but {errors}")
        if not runs and not errors:
            wrong.append(f"{op}: declared unsupported in {dtype} ({UNSUPPORTED[dtype][op][:80]}...), but runs")
    assert not wrong, "\n".join(wrong)


def test_unsupported_op_is_refused_naming_the_statement() -> None:
    dtype, op = next((d, o) for d in OTHER_DTYPES for o in UNSUPPORTED[d])
    cfg = GenConfig(ops=(op,), dtype=dtype, only_supported=False, p_backward=0.0, max_statements=3)
    programs = (generate(RandomChoices(k), cfg) for k in range(50))
    p = next(q for q in programs if any(isinstance(s, OpCall) for s in q.statements))
    i, st = next((i, s) for i, s in enumerate(p.statements) if isinstance(s, OpCall))
    with pytest.raises(ProgramError, match=f"statement {i} \\(id '{st.id}'\\): op '{op}' does not run in {dtype}"):
        check_program(p)
    with pytest.raises(ValueError, match=f"runs in {dtype}"):
        generate(RandomChoices(0), GenConfig(ops=(op,), dtype=dtype))


def test_data_must_be_values_of_the_dtype() -> None:
    for dtype in ("float16", "bfloat16"):
        with pytest.raises(ProgramError, match=f"statement 0 \\(id 'x'\\): data\\[1\\] = 0.1 is not a {dtype}"):
            Program((Leaf("x", (2,), (0.5, 0.1)),), dtype)
        Program((Leaf("x", (2,), (0.5, round_to(0.1, dtype))),), dtype)
    with pytest.raises(ProgramError, match="unknown program dtype 'float8'"):
        Program((Leaf("x", (1,), (0.5,)),), "float8")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_generated_programs_pass_in_each_dtype(dtype: str, burn_worker: BurnWorker) -> None:
    """Programs of the default strategy forced to `dtype` run clean through both frameworks,
    every value and gradient reported in the dtype (or, after a cast, in the cast's); every
    known bug's trigger avoided (p_known_site 0: a kept one fails as its record says)."""
    cfg = GenConfig(dtype=dtype, p_known_site=0.0)
    for k in range(25):
        p = generate(RandomChoices(77_000 + k), cfg)
        assert p.dtype == dtype
        v = check(p, burn_worker)
        assert v.ok, v.report()
        want = value_dtypes(p)
        for obs in (v.torch, v.burn):
            got = {(x.id, x.value.dtype) for x in obs.values} | {(i, g.dtype) for b in obs.backwards
                                                                 for i, g in b.grads.items() if g is not None}
            assert got == {(i, want[i]) for i, _ in got}, (obs.framework, got)


def test_a_dtype_mismatch_is_a_finding(burn_worker: BurnWorker) -> None:
    """A value reported in another dtype than the program's is a `dtype` mismatch."""
    from dataclasses import replace

    from difftest.oracle.compare import compare
    from difftest.oracle.model import predict

    p = Program((Leaf("x", (2,), (0.5, 0.25), require_grad=True), OpCall("y", "exp", ("x",)),
                 Backward("bw", "y")), "float64")
    shapes = check_program(p)
    t, b = run_torch(p), burn_worker.submit(p).result()
    assert compare(p, shapes, predict(p), t, b).ok
    squeezed = replace(b, values=tuple(replace(v, value=replace(v.value, dtype="float32")) for v in b.values))
    kinds = {(m.kind, m.framework) for m in compare(p, shapes, predict(p), t, squeezed).findings}
    assert kinds == {("dtype", "burn")}
