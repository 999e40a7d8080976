"""A program's gradient-checkpointing strategy (docs/format.md#gradient-checkpointing): read and
written, kept by every program derived from it, drawn by the generator after the statements,
shrunk away when a finding does not need it, shown in the text and the reproducers, and the
strategy each tensor carries in the flag model (difftest/divergences/checkpointing_rules.py)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import pytest

from difftest.findings.one_op import one_op_program
from difftest.findings.recompute import recompute_fault, with_reader
from difftest.findings.reproducers.python import torch_script
from difftest.findings.reproducers.rust import rust_test
from difftest.findings.shrink import shrink
from difftest.oracle.model import predict_burn
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import (
    Apply,
    Backward,
    Cut,
    InlineTensor,
    Leaf,
    Module,
    OpCall,
    Program,
    ProgramError,
    Transform,
)
from difftest.program.jsonio import program_from_dict, program_to_dict
from difftest.program.text import program_text
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate


def _program(checkpointing: str = "balanced") -> Program:
    return Program((Leaf("x", (2,), (0.5, -1.25), require_grad=True), OpCall("y", "sin", ("x",)),
                    OpCall("z", "exp", ("y",)), OpCall("s", "sum", ("z",)), Backward("bw", "s")),
                   checkpointing=checkpointing)


def test_json_round_trip() -> None:
    p = _program()
    d = program_to_dict(p)
    assert d["gradient_checkpointing"] == "balanced"
    assert program_from_dict(d) == p
    plain = program_to_dict(_program("disabled"))
    assert "gradient_checkpointing" not in plain  # documents without it read as before
    assert program_from_dict(plain).checkpointing == "disabled"


def test_unknown_strategy_is_refused_naming_the_field() -> None:
    d = program_to_dict(_program())
    d["gradient_checkpointing"] = "sometimes"
    with pytest.raises(ProgramError, match="gradient_checkpointing"):
        program_from_dict(d)
    with pytest.raises(ProgramError, match="gradient_checkpointing 'always'"):
        _program("always")


def test_derived_programs_keep_it() -> None:
    p = _program()
    assert p.prefix(3).checkpointing == "balanced"
    assert p.rerooted(4, "y").checkpointing == "balanced"
    assert p.extended(Backward("bw2", "z")).checkpointing == "balanced"
    assert p.with_statements(p.statements[:2]).checkpointing == "balanced"
    obs = run_torch(p)
    made = one_op_program(p, p.statements[2], obs, obs)
    assert made is not None and made[0].checkpointing == "balanced"


def test_shrink_drops_it_unless_the_failure_needs_it() -> None:
    p = _program()
    assert shrink(p, lambda q: any(st.id == "z" for st in q.statements)).checkpointing == "disabled"
    kept = shrink(p, lambda q: q.checkpointing == "balanced" and any(st.id == "z" for st in q.statements))
    assert kept.checkpointing == "balanced"
    assert len(kept) < len(p)  # and the statements still shrink


def test_generator_draws_it_after_the_statements() -> None:
    for k in range(30):
        on = generate(RandomChoices(k), GenConfig(p_checkpointing=1.0))
        off = generate(RandomChoices(k), GenConfig(p_checkpointing=0.0))
        assert on.checkpointing == "balanced" and off.checkpointing == "disabled"
        assert on.statements == off.statements and on.dtype == off.dtype
    drawn = [generate(RandomChoices(k)).checkpointing for k in range(200)]
    assert 20 < drawn.count("balanced") < 80  # the default share is a quarter


def test_text_and_reproducers_name_it() -> None:
    p = _program()
    assert program_text(p).splitlines()[0] == "# gradient checkpointing balanced"
    assert not program_text(_program("disabled")).startswith("#")
    assert "Device::flex().autodiff().gradient_checkpointing();" in rust_test(p, "t")
    assert ".gradient_checkpointing()" not in rust_test(_program("disabled"), "t")
    assert "balanced gradient checkpointing" in torch_script(p)


def _mixed(checkpointing: str) -> Program:
    """autodiff() of a value computed under no_grad, combined with a tensor on the program's
    autodiff device."""
    return Program((Leaf("x", (2,), (0.5, 1.5), require_grad=True),
                    Cut("c", "autodiff", "x", region="no_grad"),
                    OpCall("y", "mul", ("c", "x")), OpCall("s", "sum", ("y",)), Backward("bw", "s")),
                   checkpointing=checkpointing)


def test_model_predicts_the_strategy_mismatch() -> None:
    failure = predict_burn(_mixed("balanced")).failure
    assert failure is not None and failure[1] == "y" and failure[2].kind == "panic"
    assert predict_burn(_mixed("disabled")).failure is None
    # the default-strategy tensor with itself, or with a plain tensor, is no mismatch
    alone = Program((*_mixed("balanced").statements[:2], OpCall("y", "mul", ("c", "c"))), checkpointing="balanced")
    assert predict_burn(alone).failure is None
    # and what derives from it carries the strategy on
    later = Program((*_mixed("balanced").statements[:2], OpCall("d", "exp", ("c",)), OpCall("y", "add", ("d", "x"))),
                    checkpointing="balanced")
    failure = predict_burn(later).failure
    assert failure is not None and failure[1] == "y"
    # detach keeps a tensor's strategy (found by a 20,000-program campaign, seed 15, program
    # 10878: autodiff() under no_grad, sum_dim, detach, then remainder with a leaf)
    detached = Program((*_mixed("balanced").statements[:2], Cut("d", "detach", "c"), OpCall("y", "add", ("d", "x"))),
                       checkpointing="balanced")
    failure = predict_burn(detached).failure
    assert failure is not None and failure[1] == "y"


def _trained(checkpointing: str) -> Program:
    """A linear module through valid() and train(), fed a value on the program's device."""
    return Program((Leaf("x", (1, 2), (0.5, 1.5), require_grad=True),
                    Module("m", "linear", InlineTensor((1, 2), (0.25, -0.5)), None),
                    Transform("v", "valid", "m"), Transform("t", "train", "v"), Apply("y", "t", "x")),
                   checkpointing=checkpointing)


def test_model_predicts_the_mismatch_after_train() -> None:
    failure = predict_burn(_trained("balanced")).failure
    assert failure is not None and failure[1] == "y"
    assert predict_burn(_trained("disabled")).failure is None
    direct = Program((*_trained("balanced").statements[:2], Apply("y", "m", "x")), checkpointing="balanced")
    assert predict_burn(direct).failure is None


def test_recompute_experiment_reads_the_ops_output_back() -> None:
    """The experiment is the op alone, then y * y (whose backward reads y), rooted there; an op is
    named when its experiment fails checkpointed and passes without (a stand-in judge here: the
    patched burn of tests/quality/test_one_case_per_fault.py runs it for real)."""
    p = _program()
    obs = run_torch(p)
    verdict = cast(Any, SimpleNamespace(program=p, torch=obs, burn=obs))
    built = one_op_program(p, p.statements[1], obs, obs, grads=True)
    assert built is not None
    q = with_reader(built[0])
    assert q is not None and q.checkpointing == "balanced"
    assert [getattr(s, "op", None) for s in q.statements] == [None, "sin", "mul", None]
    assert q.statements[-1] == Backward("bw", "yy")

    def judge(wrong: str) -> Callable[[Program], Any]:
        def run(q: Program) -> Any:
            ops = {getattr(s, "op", None) for s in q.statements}
            return SimpleNamespace(ok=q.checkpointing == "disabled" or wrong not in ops, findings=[])
        return run

    path = [p.statements[2], p.statements[1]]  # exp, then sin: the first that fails is named
    found = recompute_fault(verdict, path, True, judge("sin"))
    assert found is not None and found.statement.id == "y"
    assert recompute_fault(verdict, path, True, judge("tanh")) is None
    # an experiment that fails without checkpointing too is not a recomputation
    assert recompute_fault(verdict, path, True, lambda q: cast(Any, SimpleNamespace(ok=False, findings=[]))) is None
    plain = cast(Any, SimpleNamespace(program=_program("disabled"), torch=obs, burn=obs))
    assert recompute_fault(plain, path, True, judge("sin")) is None
