"""The activations burn-tensor builds from other ops (difftest/ops/activations.py) and the two
burn bugs their first campaigns found (difftest/divergences/activation_bugs.py): a formula
evaluated on every element whose intermediate overflows where the result does not use it, so
the backward multiplies a zero gradient by inf. Each op's NaN is matched to its record by what
fails (the NaN where the intermediate overflows); a wrong gradient in the same op, or the NaN
below the overflow, is still news."""

from __future__ import annotations

from typing import Any

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.program.ir import Program
from tests.differential.triaging import triaged as _triage
from tests.programs import backward, leaf, op

EXP = "elu-exp-overflow-grad-nan"
CUBE = "gelu-approximate-f16-cube-grad-nan"


@pytest.mark.parametrize(("name", "attrs", "data", "dtype"), [
    ("elu", {"alpha": 1.0}, [100.0, 1.0, -1.0], "float32"),
    ("celu", {"alpha": 0.5}, [50.0, 1.0, -1.0], "float32"),  # exp(x / alpha) overflows from 44.4 on
    ("selu", {}, [12.0, 1.0, -1.0], "float16"),
    ("elu", {"alpha": 2.0}, [800.0, -0.5, 3.0], "float64"),
])
def test_the_nan_past_exps_overflow_is_the_record(workers: dict[str, BurnWorker], name: str,
                                                  attrs: dict[str, Any], data: list[float], dtype: str) -> None:
    program = Program((leaf("x", data, rg=True), op("y", name, "x", **attrs), backward("y")), dtype)
    t = _triage(workers, program, None)
    assert ":grad:nan" in t.signature and t.localisation is not None, t.describe()
    assert t.localisation.where.startswith(name), t.describe()
    assert t.known is not None and t.known.name == EXP, t.describe()


def test_a_celu_nan_below_where_its_exp_overflows_is_news(workers: dict[str, BurnWorker]) -> None:
    """celu with alpha 2 at x = 100: exp(50) does not overflow float32, so burn is right; a
    gradient scaled at celu is a finding there, and the record does not take it."""
    program = Program((leaf("x", [100.0, 1.0, -1.0], rg=True), op("y", "celu", "x", alpha=2.0), backward("y")))
    t = _triage(workers, program, "grad-scale:celu:1e-3")
    assert t.known is None, t.describe()


def test_a_wrong_elu_gradient_beside_the_overflow_is_news(workers: dict[str, BurnWorker]) -> None:
    """The record explains a finding only when every failing element is its NaN: elu's gradient
    scaled by 1 + 1e-3 on the program that also overflows is news, named by elu."""
    program = Program((leaf("x", [100.0, 1.0, -1.0], rg=True), op("y", "elu", "x", alpha=1.0), backward("y")))
    t = _triage(workers, program, "grad-scale:elu:1e-3")
    assert t.known is None and ":elu:" in t.signature, t.describe()


def test_gelu_approximates_float16_nan_is_its_record(workers: dict[str, BurnWorker]) -> None:
    program = Program((leaf("x", [200.0, -300.0, 1.0], rg=True), op("y", "gelu_approximate", "x"), backward("y")),
                      "float16")
    t = _triage(workers, program, None)
    assert t.known is not None and t.known.name == CUBE, t.describe()
    # the same values in bfloat16 keep 3 x**2 finite: burn is right there
    ok = Program((leaf("x", [200.0, -300.0, 1.0], rg=True), op("y", "gelu_approximate", "x"), backward("y")),
                 "bfloat16")
    from difftest.oracle.check import check

    assert check(ok, workers[""]).ok
