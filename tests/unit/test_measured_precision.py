"""Precision records (difftest/divergences/measured_precision.py): a backend's measured error at
an op explains a finding of that size there and nothing larger, at no other op or part, on no
other backend; the table behind them is complete for what the records declare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from difftest.divergences import measured_precision as mp
from difftest.divergences.bug_sites import LOG1P_POLYFILL_OPS, WGPU_DRIVER_PRECISION, WGPU_ERF_POLYNOMIAL
from difftest.divergences.known_bugs import KNOWN_BUGS, Fault
from difftest.findings.explaining import explains, known_bug_of
from difftest.program.ir import Program
from difftest.program.statements import Leaf, OpCall

BY_NAME = {b.name: b for b in KNOWN_BUGS}
PRECISION = BY_NAME["wgpu-f32-transcendental-precision"]
ERF = BY_NAME["wgpu-erf-polynomial-approximation"]
LOG1P = BY_NAME["wgpu-log1p-polyfill-without-log1p"]


def _fault(op: str, kind: str, pairs: list[tuple[float, float]], backend: str = "wgpu",
           dtype: str = "float32", attrs: dict[str, float] | None = None) -> Fault:
    program = Program((Leaf("x", (len(pairs),), tuple(0.5 for _ in pairs), "autodiff", True),
                       OpCall("y", op, ("x",), attrs or {})), dtype)
    return Fault(kind, "y", program, dtype, None, "", pairs=tuple(pairs), elements=tuple(range(len(pairs))),
                 backend=backend)


def test_the_tables_cover_every_op_and_part_the_records_declare() -> None:
    table = mp.load_table("wgpu-f32")
    assert table.backend == "wgpu" and table.dtype == "float32"
    for parts in (WGPU_DRIVER_PRECISION, WGPU_ERF_POLYNOMIAL):
        for op, declared in parts.items():
            for part in declared:
                assert table.errors[op][part], (op, part)


def test_an_error_of_the_measured_size_is_the_backends_and_a_larger_one_is_news() -> None:
    # atan(1) on lavapipe: 0.78539485 where float64 gives 0.7853981633974483 (3.3e-6, 55 ulps)
    measured = _fault("atan", "value", [(0.7853981633974483, 0.7853948473930359)])
    assert explains(PRECISION, measured)
    bound = mp.load_table("wgpu-f32").bound("atan", "value", 0.7853981633974483)
    assert bound is not None and 3.3e-6 < bound < 1e-5
    assert not explains(PRECISION, _fault("atan", "value", [(0.7853981633974483, 0.7853981633974483 + 2 * bound)]))
    # tanh of a subnormal: 3e-8 absolute is the driver's; 1e-6 is not
    assert explains(PRECISION, _fault("tanh", "value", [(7.35e-40, 2.98e-8)]))
    assert not explains(PRECISION, _fault("tanh", "value", [(7.35e-40, 1e-6)]))
    # one element past the bound makes the whole fault news
    assert not explains(PRECISION, _fault("atan", "value", [(0.7853981633974483, 0.7853948473930359), (1.0, 1.1)]))


def test_a_precision_record_explains_only_its_ops_parts_dtype_and_backend() -> None:
    pair = [(0.7853981633974483, 0.7853948473930359)]
    # atan2(0.5, 0.5) on Wgpu, 3.3e-6 off: its value is declared as measured, its gradient is not
    assert explains(PRECISION, _fault("atan2", "value", pair))
    assert not explains(PRECISION, _fault("atan2", "grad", pair))
    assert not explains(PRECISION, _fault("atan2", "value", [(0.7853981633974483, 0.7853)]))  # 100x: news
    assert not explains(PRECISION, _fault("atan", "value", pair, backend="flex"))
    assert not explains(PRECISION, _fault("atan", "value", pair, backend="ndarray"))
    assert not explains(PRECISION, _fault("atan", "value", pair, dtype="float64"))
    # gelu's gradient and log_sigmoid have bugs of their own on Wgpu: no precision record takes them
    assert not explains(PRECISION, _fault("gelu", "grad", [(0.5, 0.5001)]))
    assert not explains(ERF, _fault("gelu", "grad", [(0.5, 0.5000001)]))
    assert not explains(PRECISION, _fault("log_sigmoid", "value", [(-0.5, -0.5000001)]))
    # erf's value is cubecl's polynomial (its own record), erf's gradient the driver's exp
    assert explains(ERF, _fault("erf", "value", [(0.0, 5.96e-8)]))
    assert not explains(PRECISION, _fault("erf", "value", [(0.0, 5.96e-8)]))
    assert not explains(ERF, _fault("erf", "value", [(0.0, 1e-5)]))


def test_log1p_on_wgpu_carries_the_rounding_of_one_plus_x() -> None:
    assert explains(LOG1P, _fault("log1p", "value", [(3e-8, 0.0), (-5e-8, -5.96e-8)]))
    assert explains(LOG1P, _fault("softplus", "value", [(2.06e-9, 0.0)], attrs={"beta": 1.0}))
    assert not explains(LOG1P, _fault("log1p", "value", [(3e-8, 1e-5)]))
    assert not explains(LOG1P, _fault("log1p", "grad", [(1.0, 1.0000001)]))
    assert not explains(LOG1P, _fault("log1p", "value", [(3e-8, 0.0)], backend="flex"))
    assert LOG1P_POLYFILL_OPS == {"log1p", "softplus"}
    assert known_bug_of([_fault("log1p", "value", [(3e-8, 0.0)])]) is LOG1P


def test_bounds_take_the_neighbouring_binades_and_nothing_unmeasured() -> None:
    table = mp.PrecisionTable("t", "wgpu", "float32", {"exp": {"value": {0: 1e-7, 2: 4e-7, mp.ZERO_BINADE: 0.0}}})
    assert table.bound("exp", "value", 1.5) == mp.MARGIN * 1e-7  # binade 0, neighbours -1 and 1 unmeasured
    assert table.bound("exp", "value", 2.5) == mp.MARGIN * 4e-7  # binade 1: 0 and 2 measured, the larger
    assert table.bound("exp", "value", 0.0) == 0.0
    assert table.bound("exp", "value", 1e-3) is None  # binade -10: nothing measured near it
    assert table.bound("exp", "grad", 1.5) is None and table.bound("log", "value", 1.5) is None
    assert table.bound("exp", "value", float("nan")) is None


def test_a_corrupt_table_is_refused_naming_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "precision-broken.json").write_text(
        json.dumps({"backend": "wgpu", "ops": {"exp": {"value": {"x": 1}}}}))
    monkeypatch.setattr(mp, "DATA", tmp_path)
    mp.load_table.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"broken\.json"):
            mp.load_table("broken")
        with pytest.raises(ValueError, match=r"missing\.json"):
            mp.load_table("missing")
    finally:
        mp.load_table.cache_clear()
