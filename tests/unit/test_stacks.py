"""A hung worker's stack (exec/stacks.py): gdb's backtraces parsed, the burn function a hang is
stuck in chosen, and a hang signed by that function, so that ops sharing a hung kernel are one
finding (findings/signature.py)."""

from __future__ import annotations

from pathlib import Path

from difftest.exec.stacks import Frame, function_name, parse, site_of
from difftest.findings.signature import signature_of_mismatch
from difftest.oracle.compare import Mismatch
from difftest.program.ir import Program
from difftest.program.jsonio import program_from_dict
from difftest.program.observation import ErrorObs

DATA = Path(__file__).parent / "data"


def test_a_symbol_is_named_without_its_hash_generics_or_impl_header() -> None:
    assert function_name("burn_flex::ops::cumulative::cumsum_f32::ha6c89afb157492c8") == \
        "burn_flex::ops::cumulative::cumsum_f32"
    assert function_name("burn_flex::ops::cumulative::cumulative_op<f32, burn_flex::ops::cumulative::cumsum::"
                         "{closure_env#0}<f32>>") == "burn_flex::ops::cumulative::cumulative_op"
    assert function_name("burn_flex::ops::float::<impl burn_backend::backend::ops::tensor::FloatTensorOps<"
                         "burn_flex::backend::Flex> for burn_flex::backend::Flex>::float_cumsum::hfb8480914582871c"
                         ) == "burn_flex::ops::float::<impl>::float_cumsum"
    assert function_name("<burn_flex::backend::Flex as burn_backend::FloatTensorOps>::float_exp") == \
        "<burn_flex::backend::Flex>::float_exp"
    # the same names from debug info
    assert function_name("burn_flex::ops::float::{impl#0}::float_cumsum") == \
        "burn_flex::ops::float::<impl>::float_cumsum"
    assert function_name("burn_flex::ops::sort::{closure#1}") == function_name("burn_flex::ops::sort::{{closure}}")
    # a function type's arrow inside generic arguments does not close them
    assert function_name("burn_flex::ops::apply<f32, fn(f32) -> f32>") == "burn_flex::ops::apply"


def _threads(*stacks: list[str]) -> list[list[Frame]]:
    return [[Frame(f) for f in stack] for stack in stacks]


def test_the_site_is_the_innermost_burn_frame_of_the_running_thread() -> None:
    parked = ["syscall", "std::sys::pal::unix::futex::futex_wait", "rayon_core::sleep::Sleep::sleep",
              "burn_flex::ops::matmul::matmul", "difftest_burn::main"]
    running = ["core::hint::spin_loop", "burn_flex::ops::cumulative::cumulative_op",
               "burn_flex::ops::cumulative::cumsum_f32", "rayon_core::registry::main_loop"]
    stopped = site_of(_threads(parked, running))
    assert stopped is not None and stopped.site == "burn_flex::ops::cumulative::cumulative_op"
    assert stopped.frames[0] == "core::hint::spin_loop"
    # a deadlock waits everywhere: the first thread in burn
    waiting = site_of(_threads(parked, ["difftest_burn::main"]))
    assert waiting is not None and waiting.site == "burn_flex::ops::matmul::matmul"
    # a hang outside burn (the interpreter's own fault) names no site
    assert site_of(_threads(["std::thread::sleep", "difftest_burn::fault::execute"])) is None
    assert site_of([]) is None


def test_gdbs_backtraces_of_a_hung_patched_burn_are_parsed() -> None:
    """gdb's output for burn-flex's cumulative kernel patched to spin (a build with line tables):
    the inlined generic kernel is the site, not the per-dtype wrapper gdb shows with symbols only."""
    threads = parse((DATA / "gdb-cumulative-hang.txt").read_text())
    stopped = site_of(threads)
    assert stopped is not None
    assert stopped.site == "burn_flex::ops::cumulative::cumulative_op", stopped
    assert any("cumulative.rs" in f for f in stopped.frames)


def _hang(site: str | None, op: str) -> tuple[Mismatch, Program]:
    program = program_from_dict({"format": "difftest-program", "version": 1, "statements": [
        {"id": "x", "kind": "leaf", "shape": [1, 3, 3], "data": [0.5] * 9, "device": "autodiff",
         "require_grad": True},
        {"id": "y", "kind": "op", "op": op, "inputs": ["x"], "attrs": {"dim": 1}}]})
    evidence = {"site": site, "stack": [site]} if site else {}
    return Mismatch("timeout", None, None, "burn", "an answer", "timeout", "no answer within 60s",
                    evidence=evidence), program


def test_a_hang_is_signed_by_the_function_it_is_stuck_in() -> None:
    kernel = "burn_flex::ops::cumulative::cumulative_op"
    signed = {signature_of_mismatch(*_hang(kernel, op)) for op in ("cumsum", "cumprod", "cummax")}
    assert len(signed) == 1, signed  # one kernel, one finding, whichever op reached it
    (sig,) = signed
    assert sig.startswith(f"timeout:burn:{kernel}:timeout "), sig
    other = signature_of_mismatch(*_hang("burn_flex::ops::sort::sort_dim", "cumsum"))
    assert other != sig
    # without a stack a hang is the program's, as before
    assert signature_of_mismatch(*_hang(None, "cumsum")).startswith("timeout:burn:program:timeout")


def test_an_errors_site_and_stack_survive_its_record() -> None:
    error = ErrorObs("timeout", "no answer within 60s", site="burn_flex::k", stack=("burn_flex::k", "main"))
    assert ErrorObs.from_dict(error.to_dict()) == error
    plain = ErrorObs("timeout", "no answer within 60s")
    assert "site" not in plain.to_dict() and ErrorObs.from_dict(plain.to_dict()) == plain
