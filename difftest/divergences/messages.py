"""The error messages of the failures the model predicts, as regular expressions.

A predicted failure is matched by its kind, its statement and, where it names one here, its
message (oracle/compare.py): a burn panic or a PyTorch exception at the predicted statement
with another message is a different failure, so news, not the predicted one. Each pattern is the
stable part of the message as the framework writes it; the burn ones were checked to be the
same in burn 0.22.0, 0.22.1 and 0.23.0-pre.1 (the source file is named beside each). Every
pattern is checked against the real message by tests/differential/test_failure_messages.py.
"""

from __future__ import annotations

from difftest.divergences.knowledge import Framework

# burn-tensor src/tensor/api/autodiff.rs: `Tensor::backward` of a tensor no graph tracks
BURN_BACKWARD_UNTRACKED = r"Tensor::backward requires a tracked autodiff tensor"
# burn-autodiff src/runtime/server.rs: a backward reaching a node an earlier backward consumed
BURN_TAPE_CONSUMED = r"graph tape has already been consumed"
# burn-tensor src/tensor/api/float.rs: `require_grad` of a tensor on a plain device
BURN_REQUIRE_GRAD_PLAIN = r"Tensor::require_grad requires autodiff"
# burn-nn src/modules/dropout.rs: `DropoutConfig::init` with p outside [0, 1)
BURN_DROPOUT_PROBABILITY = r"Dropout probability must be finite and in the range \[0, 1\)"
# burn-dispatch src/tensor.rs: an operation whose autodiff inputs carry different strategies
BURN_STRATEGY_MISMATCH = r"Gradient checkpointing strategy mismatch"

# PyTorch's autograd (its RuntimeError as torch.autograd.backward raises it; the test below runs
# each): backward of a tensor that neither requires grad nor has a grad_fn
TORCH_BACKWARD_UNTRACKED = r"does not require grad and does not have a grad_fn"
# a saved tensor read after an earlier backward freed it
TORCH_GRAPH_FREED = r"Trying to backward through the graph a second time"
# an inference-mode tensor saved for backward by an op recorded outside inference_mode
TORCH_INFERENCE_SAVED = r"Inference tensors cannot be saved for backward"


def untracked_backward(fw: Framework) -> str:
    """The message of a backward whose root is in no graph."""
    return TORCH_BACKWARD_UNTRACKED if fw == "torch" else BURN_BACKWARD_UNTRACKED


def consumed_backward(fw: Framework) -> str:
    """The message of a backward through a graph an earlier backward consumed."""
    return TORCH_GRAPH_FREED if fw == "torch" else BURN_TAPE_CONSUMED
