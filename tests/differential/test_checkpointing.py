"""burn's balanced gradient checkpointing, run: the interpreter's autodiff device is
checkpointed when a program says so (burn's strategy-mismatch panic shows the strategy, which no
flag does), the model predicts where burn panics for it, and checkpointed programs agree with
PyTorch as the same programs without it do."""

from __future__ import annotations

from dataclasses import replace

from difftest.campaign.loop import program_at
from difftest.exec.burn_worker import BurnWorker
from difftest.ops.validate import infer_shapes
from difftest.oracle.check import check
from difftest.oracle.compare import compare
from difftest.program.ir import Apply, Backward, Cut, InlineTensor, Leaf, Module, OpCall, Program, Transform
from difftest.pytest_plugin import assert_agrees

MISMATCH = "Gradient checkpointing strategy mismatch"


def _mixed(checkpointing: str) -> Program:
    """autodiff() of a value computed under no_grad (burn's default strategy), multiplied with
    the leaf it came from (the program's device)."""
    return Program((Leaf("x", (2,), (0.5, 1.5), require_grad=True),
                    Cut("c", "autodiff", "x", region="no_grad"),
                    OpCall("y", "mul", ("c", "x")), OpCall("s", "sum", ("y",)), Backward("bw", "s")),
                   checkpointing=checkpointing)


def _trained(checkpointing: str) -> Program:
    """A linear module through valid() and train() (its parameters back on autodiff with burn's
    default strategy), fed a leaf of the program's device."""
    return Program((Leaf("x", (1, 2), (0.5, 1.5), require_grad=True),
                    Module("m", "linear", InlineTensor((1, 2), (0.25, -0.5)), None),
                    Transform("v", "valid", "m"), Transform("t", "train", "v"), Apply("y", "t", "x"),
                    OpCall("s", "sum", ("y",)), Backward("bw", "s")),
                   checkpointing=checkpointing)


def test_the_device_is_checkpointed(burn_worker: BurnWorker) -> None:
    """Balanced: burn panics at the mix, as the model predicts (the verdict agrees); disabled:
    the same program runs through on both sides."""
    balanced = check(_mixed("balanced"), burn_worker)
    assert balanced.burn.error is not None and MISMATCH in balanced.burn.error.message
    assert balanced.burn.error.statement == "y"
    assert balanced.ok, balanced.report()
    assert "checkpointing-strategy-mismatch" in balanced.prediction.rules_fired
    disabled = check(_mixed("disabled"), burn_worker)
    assert disabled.burn.error is None and disabled.ok, disabled.report()


def test_detach_keeps_the_strategy(burn_worker: BurnWorker) -> None:
    """detach() of the default-strategy tensor stays on it: the mix panics one op later (a
    20,000-program campaign, seed 15, program 10878, found the model dropping it there)."""
    mixed = _mixed("balanced")
    p = Program((*mixed.statements[:2], Cut("d", "detach", "c"), OpCall("y", "add", ("d", "x")),
                 OpCall("s", "sum", ("y",)), Backward("bw", "s")), checkpointing="balanced")
    v = check(p, burn_worker)
    assert v.burn.error is not None and MISMATCH in v.burn.error.message and v.burn.error.statement == "y"
    assert v.ok, v.report()


def test_another_panic_at_the_mix_is_news(burn_worker: BurnWorker) -> None:
    """The rule predicts burn-dispatch's mismatch panic, not any panic there: the same burn
    observation with another message at the same statement is an outcome finding."""
    v = check(_mixed("balanced"), burn_worker)
    assert v.ok and v.burn.error is not None
    error = replace(v.burn.error, message="index out of bounds: the len is 2 but the index is 3")
    other = compare(v.program, infer_shapes(v.program), v.prediction, v.torch, replace(v.burn, error=error))
    assert [m.kind for m in other.mismatches] == ["outcome"], other.report()


def test_train_puts_parameters_on_the_default_strategy(burn_worker: BurnWorker) -> None:
    balanced = check(_trained("balanced"), burn_worker)
    assert balanced.burn.error is not None and MISMATCH in balanced.burn.error.message
    assert balanced.ok, balanced.report()
    assert check(_trained("disabled"), burn_worker).ok


def test_checkpointed_programs_agree(burn_worker: BurnWorker) -> None:
    """Campaign programs (seed 11), each run checkpointed: the same verdict as a campaign gives
    (a finding fails unless a known bug explains it)."""
    for k in range(60):
        program = replace(program_at(11, k), checkpointing="balanced")
        assert_agrees(check(program, burn_worker), f"seed 11 program {k}, checkpointed", burn_worker)
