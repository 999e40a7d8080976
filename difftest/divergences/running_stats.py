"""Running statistics of stateful modules (BatchNorm): the update each framework applies, as
data with its evidence, and the formula the PyTorch side reports burn's convention with.

burn 0.22.1 (burn-nn `modules/norm/batch.rs`, `forward_train`) and PyTorch both update
`new = (1 - momentum) * old + momentum * batch`, but for `running_var` burn takes the *biased*
batch variance (divided by n) where PyTorch takes the unbiased one (n - 1): measured in
rust/src/batch_norm_evidence.rs and tests/unit/test_batch_norm_torch.py on the same batches.

The comparison stays honest: the PyTorch executor (difftest/exec/torch_modules.py) does not
excuse running_var mismatches, it computes the running statistics itself with `update`
below (burn's declared convention, the biased variance), so a burn update that is wrong in any
other way still shows as a value mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from difftest.divergences.knowledge import Knowledge

EVIDENCE = ("rust/src/batch_norm_evidence.rs", "tests/unit/test_batch_norm_torch.py",
            "https://github.com/tracel-ai/burn/blob/v0.22.1/crates/burn-nn/src/modules/norm/batch.rs")


@dataclass(frozen=True)
class RunningStatConvention:
    knowledge: Knowledge
    unbiased_var: bool  # burn's running_var takes the unbiased batch variance (PyTorch's does)

    @property
    def name(self) -> str:
        return self.knowledge.name

    def update(self, old_mean: torch.Tensor, old_var: torch.Tensor, x: torch.Tensor, momentum: float
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """burn's new (running_mean, running_var) after a train-mode forward on `x` (channels
        in dim 1), computed from the formula in the input's dtype."""
        dims = [d for d in range(x.dim()) if d != 1]
        mean = x.mean(dim=dims)
        var = x.var(dim=dims, unbiased=self.unbiased_var)
        return ((1.0 - momentum) * old_mean + momentum * mean,
                (1.0 - momentum) * old_var + momentum * var)


BATCH_NORM_RUNNING_VAR = RunningStatConvention(
    Knowledge(
        "batch-norm-running-var-biased", "convention", "burn",
        "burn's BatchNorm updates running_var with the biased batch variance (sum of squares / n); "
        "PyTorch's with the unbiased one (/ (n - 1)). The momentum convention is the same "
        "(new = (1 - m) old + m batch). The PyTorch side reports the running statistics under burn's "
        "convention, computed from this formula, so any other difference still shows.",
        EVIDENCE),
    unbiased_var=False,
)

# burn-core 0.22.1 module/param/running.rs: `update` keeps the new value pending (per thread);
# `value()` returns the last synced value, `value_sync()`, `valid()` and `train()` sync first
RUNNING_STATE_LAGS = Knowledge(
    "running-state-lags-one-update", "convention", "burn",
    "burn's RunningState keeps a train-mode forward's update pending until a sync (the next train-mode "
    "forward's value_sync, valid(), train(), or a read with value_sync, which difftest's param reads use); "
    "an eval-mode forward reads value(), which lags that last update ('The current value might be outdated "
    "by one update'). Handles that share the state (clone, no_grad, freeze, unfreeze) share the pending "
    "update. The PyTorch side keeps the same pending update (difftest/exec/torch_modules.py), so an "
    "eval-mode forward after a train-mode one through a shared handle is compared under burn's rule.",
    ("rust/src/batch_norm_evidence.rs",
     "https://github.com/tracel-ai/burn/blob/v0.22.1/crates/burn-core/src/module/param/running.rs"),
)


# burn-nn 0.22.1 modules/norm/batch.rs forward: `input.device().is_autodiff() && self.training`
TRAINS_ON_AUTODIFF_ONLY = Knowledge(
    "batch-norm-trains-on-autodiff-device-only", "convention", "burn",
    "burn's BatchNorm takes the training path (batch statistics, a running-state update) only for an "
    "input on the autodiff device of a module in training mode; an input off it (a plain leaf, "
    "without_autodiff, a valid() result) takes the inference path (running statistics, no update) even "
    "in training mode. PyTorch's mode alone decides; the PyTorch side follows burn's rule for such an "
    "input (difftest/exec/torch_exec.py, burn_inference_path), from the model's device prediction.",
    ("https://github.com/tracel-ai/burn/blob/v0.22.1/crates/burn-nn/src/modules/norm/batch.rs",
     "tests/differential/test_module_kinds.py"),
)


# burn-core 0.22.1 module/base.rs `freeze`: "every module-owned training flag is disabled ... to
# stateful layers such as batch normalization", persistently (its test
# freeze_during_validation_survives_train); burn-nn batch.rs forward reads that flag
FREEZE_SURVIVES_TRAIN = Knowledge(
    "batch-norm-freeze-survives-train", "convention", "burn",
    "burn's freeze() disables a BatchNorm's own training flag persistently: a later train() restores the "
    "configured flag, which freeze cleared, so the module keeps taking the inference path (running "
    "statistics, no update) until unfreeze(). PyTorch's train() after eval() trains again. The PyTorch side "
    "follows burn's flag for such a forward (difftest/exec/torch_exec.py, burn_inference_path), from the "
    "model's module state (ModuleState.burn_training); the same flag makes dropout return its input "
    "(rule freeze-survives-train).",
    ("https://github.com/tracel-ai/burn/blob/v0.22.1/crates/burn-core/src/module/base.rs",
     "https://github.com/tracel-ai/burn/blob/v0.22.1/crates/burn-nn/src/modules/norm/batch.rs",
     "tests/differential/test_module_kinds.py"),
)


@dataclass(frozen=True)
class RunningStateRule:
    knowledge: Knowledge

    @property
    def name(self) -> str:
        return self.knowledge.name


RUNNING_STAT_CONVENTIONS: tuple[RunningStatConvention | RunningStateRule, ...] = (
    BATCH_NORM_RUNNING_VAR, RunningStateRule(RUNNING_STATE_LAGS), RunningStateRule(TRAINS_ON_AUTODIFF_ONLY),
    RunningStateRule(FREEZE_SURVIVES_TRAIN))
