"""What the generator tracks of the values and module handles a program has so far."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from difftest.exec.torch_values import TorchModule
from difftest.program.ir import (
    Shape,
)


@dataclass
class _Value:
    id: str
    shape: Shape
    tensor: torch.Tensor  # concrete float32 value, no autograd
    # depends on a require-grad autodiff leaf through recorded (grad-region) ops, deterministically
    # (the generator's own light tracking; difftest.model has the exact flags of each framework)
    tracked: bool = False
    depth: int = 0  # recorded ops on the longest tracked path from a leaf
    consumed: bool = False  # in the graph of an earlier backward (sessions)
    dtype: str = ""  # its dtype when a cast made it other than the program's ("": the program's)


@dataclass
class _Handle:
    """What the generator tracks of a module handle: whether its output is recorded."""

    module: TorchModule
    kind: str
    p: float = 0.0
    params_require_grad: bool = True
    valid: bool = False  # applied under no_grad (PyTorch) / on the plain device (burn)
    training: bool = True
    burn_configured: bool = True  # burn's configured training flag (freeze clears it, unfreeze sets it)
