"""Sessions: several backwards, gradient handles, zero_grad, optimizer steps.

The PyTorch half of the model is checked against PyTorch on many generated sessions here (no
burn needed); the burn half by the corpus cases (corpus/seed/session-*.json, replayed by
test_corpus.py) and the campaign tests, which run both frameworks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from difftest.ops.validate import infer_shapes
from difftest.oracle import compare
from difftest.oracle.model import predict
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import Backward, Grad, ProgramError, Step
from difftest.program.jsonio import program_from_dict, program_to_dict
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = GenConfig(p_another_backward=0.6, p_training=0.25)


def _doc(statements: list[dict[str, Any]], version: int = 2) -> dict[str, Any]:
    return {"format": "difftest-program", "version": version, "statements": statements}


LEAF = {"id": "x", "kind": "leaf", "shape": [2], "data": [0.5, -1.0], "device": "autodiff", "require_grad": True}
EXP = {"id": "y", "kind": "op", "op": "exp", "inputs": ["x"]}
SUM = {"id": "s", "kind": "op", "op": "sum", "inputs": ["y"]}
BW = {"id": "bw", "kind": "backward", "input": "s"}


def test_version_1_documents_load_and_plain_programs_are_written_as_version_1() -> None:
    doc = json.loads((ROOT / "corpus/seed/flags-of-w.json").read_text())
    program = program_from_dict(doc["program"])
    assert program_to_dict(program)["version"] == 1
    session = program_from_dict(_doc([LEAF, EXP, SUM, BW, {"id": "g", "kind": "grad", "grads": "bw", "of": "x"}]))
    assert program_to_dict(session)["version"] == 2
    assert program_from_dict(program_to_dict(session)) == session


@pytest.mark.parametrize("statements, message", [
    ([LEAF, {"id": "g", "kind": "grad", "grads": "x", "of": "x"}], "not a backward"),
    ([LEAF, EXP, SUM, BW, {"id": "g", "kind": "grad", "grads": "bw", "of": "nope"}], "later or unknown"),
    ([LEAF, EXP, SUM, BW, {"id": "z", "kind": "op", "op": "neg", "inputs": ["x"]},
      {"id": "g", "kind": "grad", "grads": "bw", "of": "z"}], "defined after backward"),
    ([{"id": "o", "kind": "optimizer", "optimizer": "sgd", "momentum": 0.0, "nesterov": True}], "nesterov"),
    ([{"id": "o", "kind": "optimizer", "optimizer": "adam"}], "adam"),
    ([LEAF, EXP, SUM, BW, {"id": "o", "kind": "optimizer", "optimizer": "sgd"},
      {"id": "m2", "kind": "step", "optimizer": "o", "module": "x", "grads": "bw", "lr": 0.1}], "not a module"),
    ([LEAF, EXP, SUM, BW, {"id": "o", "kind": "optimizer", "optimizer": "sgd"},
      {"id": "m", "kind": "module", "module": "dropout", "p": 0.0},
      {"id": "m2", "kind": "step", "optimizer": "o", "module": "m", "grads": "bw", "lr": 0.0}], "lr"),
])
def test_malformed_sessions_are_rejected_naming_the_statement(statements: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ProgramError) as e:
        program_from_dict(_doc(statements))
    assert message in str(e.value)
    assert e.value.statement is not None


def test_a_session_statement_in_a_version_1_document_is_rejected() -> None:
    with pytest.raises(ProgramError, match="unknown statement kind 'zero_grad' in format version 1"):
        program_from_dict(_doc([LEAF, {"id": "z", "kind": "zero_grad"}], version=1))


def test_one_optimizer_steps_one_module() -> None:
    linear = {"kind": "module", "module": "linear", "weight": {"shape": [1, 2], "data": [1.0, 2.0]}, "bias": None}
    statements: list[dict[str, Any]] = [
        LEAF, {"id": "m1", **linear}, {"id": "m2", **linear},
        {"id": "y", "kind": "apply", "module": "m1", "input": "x"},
        {"id": "s", "kind": "op", "op": "sum", "inputs": ["y"]}, {"id": "bw", "kind": "backward", "input": "s"},
        {"id": "o", "kind": "optimizer", "optimizer": "sgd"},
        {"id": "a", "kind": "step", "optimizer": "o", "module": "m1", "grads": "bw", "lr": 0.5},
        {"id": "b", "kind": "step", "optimizer": "o", "module": "m2", "grads": "bw", "lr": 0.5},
    ]
    with pytest.raises(ProgramError, match="one optimizer per module"):
        program_from_dict(_doc(statements))


def test_the_pytorch_half_of_the_model_matches_pytorch_on_generated_sessions() -> None:
    """Flags, outcomes (which backward raises), gradient presence per handle and completeness
    of PyTorch's observation are what the model predicts, on 300 session-heavy programs."""
    seen = {"backwards>1": 0, "steps": 0, "grads": 0, "torch-errors": 0}
    for seed in range(300):
        program = generate(RandomChoices(seed), SESSIONS)
        prediction = predict(program)
        obs = run_torch(program)
        out: list[compare.Mismatch] = []
        compare._outcome(program, prediction, obs, out)
        compare._completeness(program, obs, out)
        compare._flags_and_shapes(program, infer_shapes(program), prediction, obs, out)
        compare._grad_presence(prediction, obs, out)
        assert not out, f"seed {seed}: " + "; ".join(m.line() for m in out)
        seen["backwards>1"] += sum(isinstance(s, Backward) for s in program.statements) > 1
        seen["steps"] += any(isinstance(s, Step) for s in program.statements)
        seen["grads"] += any(isinstance(s, Grad) for s in program.statements)
        seen["torch-errors"] += obs.error is not None
    assert all(n >= 10 for n in seen.values()), seen  # the sessions the check is about did occur
