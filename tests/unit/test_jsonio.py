from __future__ import annotations

import json
import math

import pytest

from difftest.program.dtypes import to_f32
from difftest.program.ir import ProgramError
from difftest.program.jsonio import program_from_dict, program_from_json, program_to_dict, program_to_json
from tests.programs import backward, cut, leaf, op, program


def sample() -> object:
    return program(
        leaf("x", [math.nan, math.inf, -math.inf, -0.0, to_f32(0.1), to_f32(1e-40), 3.4028234663852886e38], rg=True),
        op("y", "mul_scalar", "x", scalar=2.0),
        cut("z", "detach", "y", region="no_grad"),
        backward("y"),
    )


def test_floats_round_trip_exactly() -> None:
    p = sample()
    text = program_to_json(p)  # type: ignore[arg-type]
    back = program_from_json(text)
    data = back.statements[0].data  # type: ignore[union-attr]
    assert math.isnan(data[0])
    assert data[1:3] == (math.inf, -math.inf)
    assert data[3] == 0.0 and math.copysign(1.0, data[3]) == -1.0
    assert data[4] == to_f32(0.1) and data[5] == to_f32(1e-40)
    assert program_to_json(back) == text  # NaN != NaN, so compare the canonical text
    assert '"NaN"' in text and '"-Infinity"' in text and "-0.0" in text


def test_schema_error_names_the_statement() -> None:
    doc = program_to_dict(sample())  # type: ignore[arg-type]
    doc["statements"][1]["kind"] = "opp"
    with pytest.raises(ProgramError) as e:
        program_from_dict(doc)
    assert e.value.index == 1 and e.value.statement == "y"


def test_dangling_input_is_rejected() -> None:
    doc = program_to_dict(sample())  # type: ignore[arg-type]
    doc["statements"][1]["inputs"] = ["nope"]
    with pytest.raises(ProgramError, match=r"statement 1 \(id 'y'\).*'nope'"):
        program_from_dict(doc)


def test_data_length_must_match_shape() -> None:
    doc = program_to_dict(program(leaf("x", [1.0, 2.0])))
    doc["statements"][0]["shape"] = [3]
    with pytest.raises(ProgramError, match="statement 0"):
        program_from_dict(doc)


def test_malformed_json() -> None:
    with pytest.raises(ProgramError, match="malformed JSON"):
        program_from_json("{not json")


def test_bare_nan_is_never_written() -> None:
    text = program_to_json(sample())  # type: ignore[arg-type]
    json.loads(text)  # strict JSON
    assert "NaN," not in text.replace('"NaN"', "")
