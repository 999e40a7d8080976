"""Standalone reproducers of a program: a PyTorch script (python.py) and a burn `#[test]`
(rust.py).

Both are pure functions of the program. Neither has an op table: an op statement is spelled by
its catalog entry's templates (difftest/ops/spelling.py). The PyTorch script prints the very
expression the executor evaluates (difftest/ops/lowering.py), in the namespace the executor
evaluates it in; the Rust test uses plain `burn::tensor` code with concrete ranks and makes the
burn calls of the `difftest-burn` interpreter (`rust/src/ops/`, `exec.rs`, `value.rs`), so
either can be pasted into an issue.

Output of both, one line per value statement and per gradient:

    <id> shape=[..] requires_grad=.. is_leaf=.. grad_fn=.. is_inference=.. values=[..]   (PyTorch)
    <id> shape=[..] is_autodiff=.. is_tracked=.. is_require_grad=.. values=[..]           (burn)
    backward <id>
    grad <id> = [..] shape=[..]        or        grad <id> = None
    error <index> <id>: <Type>: <message>                                                  (PyTorch)
"""

from __future__ import annotations

from difftest.findings.reproducers.expect import Expected, expected
from difftest.findings.reproducers.names import variable_names
from difftest.findings.reproducers.python import torch_script
from difftest.findings.reproducers.rust import rust_test, rust_test_file, test_name

__all__ = ["Expected", "expected", "rust_test", "rust_test_file", "test_name", "torch_script", "variable_names"]
