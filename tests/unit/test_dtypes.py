"""Program dtypes: representability, rounding, JSON round trips per dtype, and documents
without a dtype unchanged."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from difftest.ops import tolerance as tol
from difftest.program.dtypes import FLOAT_DTYPES, first_unrepresentable, representable, round_to
from difftest.program.ir import InlineTensor, Leaf, Module, Program, ProgramError
from difftest.program.jsonio import dumps, program_from_json, program_to_dict, program_to_json

TORCH = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
         "bfloat16": torch.bfloat16}
CORPUS = Path(__file__).resolve().parents[2] / "corpus"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_round_to_matches_torch(dtype: str) -> None:
    rng = random.Random(1)
    for _ in range(3000):
        x = rng.uniform(-10, 10) * 10 ** rng.randint(-6, 4)
        want = torch.tensor([x], dtype=torch.float64).to(TORCH[dtype]).double().item()
        assert round_to(x, dtype) == want, (dtype, x)
        assert representable(want, dtype)


def test_representable() -> None:
    assert representable(0.1, "float64") and not representable(0.1, "float32")
    assert representable(round_to(0.1, "float16"), "float16") and not representable(round_to(0.1, "float32"), "float16")
    assert not representable(1e5, "float16") and representable(65504.0, "float16")
    assert representable(math.inf, "bfloat16") and representable(math.nan, "float16")
    assert first_unrepresentable((0.5, 0.25, 0.1), "bfloat16") == (2, 0.1)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_json_round_trip_is_exact(dtype: str) -> None:
    rng = random.Random(2)
    data = tuple(round_to(rng.uniform(-3, 3), dtype) for _ in range(12)) + (-0.0, math.inf)
    weight = InlineTensor((2, 2), tuple(round_to(rng.uniform(-1, 1), dtype) for _ in range(4)))
    p = Program((Leaf("x", (14,), data, require_grad=True), Module("m", "linear", weight, None)), dtype)
    text = program_to_json(p)
    q = program_from_json(text)
    assert q == p and q.dtype == dtype
    assert all(math.copysign(1, a) == math.copysign(1, b) for a, b in zip(q.leaves()[0].data, data))
    assert ('"dtype"' in text) == (dtype != "float32")


def test_float64_data_keep_every_bit() -> None:
    x = 0.1 + 2**-55  # not a float32 value, nor the double nearest 0.1
    p = program_from_json(program_to_json(Program((Leaf("x", (1,), (x,)),), "float64")))
    assert p.leaves()[0].data == (x,)


def test_data_outside_the_dtype_is_refused_naming_the_statement() -> None:
    doc = {"format": "difftest-program", "version": 1, "dtype": "bfloat16", "statements": [
        {"id": "a", "kind": "leaf", "shape": [1], "data": [1.0], "device": "autodiff", "require_grad": False},
        {"id": "m", "kind": "module", "module": "linear", "weight": {"shape": [1, 1], "data": [0.3]}, "bias": None}]}
    with pytest.raises(ProgramError, match=r"statement 1 \(id 'm'\): weight\[0\] = 0.3 is not a bfloat16 value"):
        program_from_json(json.dumps(doc))
    doc["dtype"] = "float8"
    with pytest.raises(ProgramError, match="dtype"):
        program_from_json(json.dumps(doc))


def test_documents_without_dtype_are_written_unchanged() -> None:
    """Corpus programs without a dtype are float32 programs, written without one; what difftest
    wrote (findings/) comes back byte for byte, hand-written data as their float32 values."""
    seen = 0
    for path in sorted(CORPUS.rglob("*.json")):
        doc = json.loads(path.read_text())
        raw = doc.get("program")
        if not isinstance(raw, dict) or "dtype" in raw:
            continue
        p = program_from_json(json.dumps(raw))
        assert p.dtype == "float32"
        written = program_to_dict(p, raw.get("name"))
        assert "dtype" not in written, path  # the program's own key (a cast's attribute is another)
        out = dumps(written)
        assert dumps(program_to_dict(program_from_json(out), raw.get("name"))) == out, path
        if path.parent.name == "findings":
            assert out == dumps(raw), path
            seen += 1
    assert seen > 0


def test_float32_budgets_are_unchanged() -> None:
    """The scale of float32 is exactly 1: screen and budget are the formulas of before dtypes."""
    assert tol.scale("float32") == 1.0 and tol.tiny("float32") == tol.TINY
    for noise, ref, terms in ((1e-7, 1.0, 0.0), (0.0, -3.5, 2.0), (2e-9, 1e-3, 1e-2)):
        old = tol.NOISE_FACTOR * noise + tol.FLOOR_ULPS * tol.F32_EPS * abs(ref) + \
            tol.TERMS_ULPS * tol.F32_EPS * terms + tol.TINY
        assert tol.budget(noise, ref, terms) == old == tol.budget(noise, ref, terms, "float32")
    assert tol.budget(0.0, 1.0, 0.0, "float64") < tol.budget(0.0, 1.0) < tol.budget(0.0, 1.0, 0.0, "float16") \
        < tol.budget(0.0, 1.0, 0.0, "bfloat16")


def test_float64_rounding_is_measured_through_float32() -> None:
    """A float64 op's own rounding cannot be measured against the float64 reference: it is
    measured in float32 and scaled by the epsilon ratio; every other dtype measures itself."""
    assert tol.measured_in("float64") == "float32" and tol.measured_scale("float64") == 2.0**-29
    for dtype in ("float32", "float16", "bfloat16"):
        assert tol.measured_in(dtype) == dtype and tol.measured_scale(dtype) == 1.0


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_screen_failures_is_screen_element_by_element(dtype: str) -> None:
    """`screen_failures` lists exactly the elements `screen` fails, non-finite values, signed
    zeros, values at the screen's bound and below tiny included."""
    rng = random.Random(5)
    eps = tol.SCREEN * tol.scale(dtype)
    special = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-300, -1e-300, tol.tiny(dtype), 1.7e308, -1.7e308,
               1.0, 1.0 + eps, 1.0 + 2 * eps, 1.0 - eps, -1.0]
    ts = [*special * len(special), *(rng.uniform(-2, 2) for _ in range(2000))]
    bs = [*(y for y in special for _ in special), *(x * (1 + rng.choice([-1, 1]) * eps * rng.uniform(0.5, 1.5))
                                                    for x in ts[len(special) ** 2:])]
    want = [j for j, (t, b) in enumerate(zip(ts, bs)) if not tol.screen(t, b, dtype)]
    assert tol.screen_failures(ts, bs, dtype) == want
    assert 0 < len(want) < len(ts)


def test_the_comparisons_equal_non_finite_elements_are_equal_nonfinite_s() -> None:
    """compare._numeric lists the elements where both results are the same non-finite value
    with equal_nonfinite inline: the same elements."""
    from itertools import product

    from difftest.oracle.compare import _numeric, equal_nonfinite
    from difftest.program.observation import TensorObs

    specials = [0.0, 1.0, -2.5, math.inf, -math.inf, math.nan, 1e30, 5e-324]
    pairs = [(x, y) for x, y in product(specials, specials) if tol.screen(x, y)]  # so only `both` is listed
    t = TensorObs((len(pairs),), tuple(x for x, _ in pairs))
    b = TensorObs((len(pairs),), tuple(y for _, y in pairs))
    m = _numeric("value", "v", 0, t, b, None)
    assert m is not None
    assert set(m.elements) == {j for j, (x, y) in enumerate(pairs) if equal_nonfinite(x, y)} != set()
