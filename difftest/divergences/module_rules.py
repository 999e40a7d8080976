"""Declared divergences of nn modules (handles, transforms, parameter reads, forwards), as
data: the flag rules of module statements, applied by the semantic model after the tensor rules
(rules.py), and the base states of a handle's parameters in each framework."""

from __future__ import annotations

from dataclasses import replace

from difftest.divergences.knowledge import Framework, burn_source
from difftest.divergences.messages import BURN_DROPOUT_PROBABILITY
from difftest.divergences.rule import Rule, Step, burn_inputs, divergence, returns_input
from difftest.divergences.states import EMPTY, BurnState, Failure, ModuleState, Result, TorchState
from difftest.ops.strides import contiguous_strides
from difftest.program.ir import Apply, Module, Param, Shape
from difftest.program.modules import module_kind

_MODULE_BASE = burn_source("burn-core", "src/module/base.rs")
_PARAM_TENSOR = burn_source("burn-core", "src/module/param/tensor.rs")
_DROPOUT = burn_source("burn-nn", "src/modules/dropout.rs")

def torch_param_state(m: ModuleState, name: str, shape: Shape) -> TorchState:
    """A parameter of the handle `m` in PyTorch: its own leaf (every transform deep-copies); a
    buffer (running statistics) never requires grad."""
    if module_kind(m.kind).is_buffer(name):
        return TorchState(False, True, False, False, strides=contiguous_strides(shape) if shape else ())
    key = m.key(name) if m.requires_grad else None
    return TorchState(m.requires_grad, True, False, False, key, frozenset({key}) if key else EMPTY,
                      contiguous_strides(shape) if shape else ())


def burn_param_state(m: ModuleState, name: str) -> BurnState:
    """PyTorch's parameter mapped onto burn's flags: a leaf on the autodiff device that
    requires grad when PyTorch's does, one leaf per handle (the base; rules refine it). A
    buffer (running statistics) is a plain value on the parameters' device (burn stores it
    detached)."""
    default = m.default_strategy and not m.valid
    if module_kind(m.kind).is_buffer(name):
        return BurnState(not m.valid, False, False, default_strategy=default)
    if not m.requires_grad:
        return BurnState(True, False, False, default_strategy=default)
    key = m.key(name)
    return BurnState(True, True, True, key, frozenset({key}), default)


def shares_params(m: ModuleState) -> bool:
    """burn's parameters of `m` are the leaves of an earlier handle (a clone that kept them)."""
    return (bool(m.params) and not m.valid and m.requires_grad and m.burn_origin is not None
            and m.burn_origin != m.id)


def module_param_keys(fw: Framework, m: ModuleState) -> list[str]:
    """The grad keys of the parameters a forward through `m` records, in each framework."""
    if not m.params or m.valid or not m.requires_grad:
        return []
    if fw == "burn" and shares_params(m):
        return [m.key(name, m.burn_origin) for name in m.params]
    return [m.key(name) for name in m.params]


def _module_of(step: Step) -> ModuleState:
    assert step.module is not None
    return step.module


def _is_dropout_p1(step: Step) -> bool:
    st = step.statement
    return isinstance(st, Module) and st.module == "dropout" and not st.p < 1.0


def _valid_module_computes(step: Step) -> bool:
    """A param of, or a forward through, a module derived from valid() (not trained since)
    that computes something (a dropout that returns its input as is computes nothing; every
    other kind computes, a group_norm without parameters too)."""
    st, m = step.statement, step.module
    if m is None or not m.valid:
        return False
    if isinstance(st, Param):
        return True
    return isinstance(st, Apply) and (m.kind != "dropout" or (m.training and m.p > 0.0))


def _valid_off_autodiff(step: Step) -> Result:
    return BurnState(False, False, False)


def _valid_with_autodiff_input(step: Step) -> bool:
    return (
        _valid_module_computes(step)
        and isinstance(step.statement, Apply)
        and burn_inputs(step)[0].is_autodiff
    )


def _autodiff_input_output(step: Step) -> Result:
    x = burn_inputs(step)[0]  # computed on the input's strategy (the parameters are off autodiff)
    return BurnState(True, x.is_tracked, False, None, x.sources if x.is_tracked else EMPTY, x.default_strategy)


def _shares_params(step: Step) -> bool:
    m, st = step.module, step.statement
    if isinstance(st, Param) and m is not None and module_kind(m.kind).is_buffer(st.param):
        return False  # a running statistic is no parameter leaf
    return isinstance(st, (Param, Apply)) and m is not None and shares_params(m)


def _shared_params(step: Step) -> Result:
    st, m, cur = step.statement, _module_of(step), step.current
    assert isinstance(cur, BurnState)
    if isinstance(st, Param):
        key = m.key(st.param, m.burn_origin)
        return BurnState(True, True, True, key, frozenset({key}), m.default_strategy)
    own = frozenset(module_param_keys("torch", m))  # the base: PyTorch's deep copy's keys
    shared = frozenset(module_param_keys("burn", m))
    return replace(cur, sources=(cur.sources - own) | shared)


def _module_no_grad(step: Step) -> bool:
    m = step.module
    return isinstance(step.statement, (Param, Apply)) and m is not None and m.no_grad and not m.valid


def _no_grad_semantics(step: Step) -> Result:
    """burn's Module::no_grad(): every float parameter set_require_grad(false) (a detached
    leaf on the autodiff device), persistently (train() keeps it); training flags untouched."""
    if isinstance(step.statement, Param):
        return BurnState(True, False, False, default_strategy=_module_of(step).default_strategy)
    return step.current


def _freeze_survives_train(step: Step) -> bool:
    m = step.module
    return (isinstance(step.statement, Apply) and m is not None and m.kind == "dropout" and m.p > 0.0
            and m.training and not m.burn_training)


def _dropout_off_autodiff(step: Step) -> bool:
    m = step.module
    return (isinstance(step.statement, Apply) and m is not None and m.kind == "dropout" and m.p > 0.0
            and m.burn_training and not burn_inputs(step)[0].is_autodiff)


MODULE_RULES: tuple[Rule, ...] = (
    Rule(
        divergence(
            "dropout-p1-panics",
            "burn",
            "burn's DropoutConfig::init panics unless 0 <= p < 1 (\"Dropout probability must be finite "
            "and in the range [0, 1), but got 1\"); PyTorch's nn.Dropout(1.0) zeroes its input.",
            "docs/semantics.md#burn-facts",
            "tests/differential/test_modules.py",
            _DROPOUT,
        ),
        (Module,),
        _is_dropout_p1,
        lambda step: Failure("panic", "DropoutConfig::new(1.0).init() panics (p must be in [0, 1))",
                             BURN_DROPOUT_PROBABILITY),
    ),
    Rule(
        divergence(
            "valid-off-autodiff",
            "burn",
            "valid() returns a snapshot whose parameters are on the plain device (false false false, "
            "no gradient) until train(); unfreeze() does not bring them back. Its forward computes "
            "off autodiff: the counterpart of PyTorch's eval() + torch.no_grad() (whose parameters "
            "still require grad).",
            "docs/semantics.md#valid-off-autodiff",
            "docs/semantics.md#golden-linear",
            "corpus/seed/linear-table.json",
            _PARAM_TENSOR,
        ),
        (Param, Apply),
        _valid_module_computes,
        _valid_off_autodiff,
    ),
    Rule(
        divergence(
            "valid-with-autodiff-input",
            "burn",
            "a valid() module fed an input still on the autodiff device returns an autodiff tensor, "
            "untracked (true false false) unless the input itself is tracked, in which case the "
            "graph through the input is recorded and the input gets a gradient. Under PyTorch's "
            "torch.no_grad() the output never requires grad.",
            "docs/semantics.md#valid-with-autodiff-input",
            "docs/semantics.md#golden-linear",
            "corpus/seed/linear-table.json",
        ),
        (Apply,),
        _valid_with_autodiff_input,
        _autodiff_input_output,
    ),
    Rule(
        divergence(
            "module-no-grad",
            "burn",
            "Module::no_grad() is requires_grad_(False) on every parameter, not an inference mode: "
            "the parameters stay on the autodiff device as constants (true false false), forwards "
            "are still recorded through a tracked input, a later train() does not re-enable "
            "gradients, and dropout keeps training. Measured against difftest's PyTorch "
            "counterpart (deep copy + requires_grad_(False)) this is no flag or gradient difference: "
            "the rule records where the module-no-grad divergence of docs/semantics.md is exercised "
            "and asserts burn's semantics (its effect equals the base, so it cannot go stale).",
            "docs/semantics.md#module-no-grad",
            "docs/semantics.md#mapping",
            _MODULE_BASE,
        ),
        (Param, Apply),
        _module_no_grad,
        _no_grad_semantics,
    ),
    Rule(
        divergence(
            "clone-shares-params",
            "burn",
            "a module clone shares its parameter tensors: train() or unfreeze() of a module whose "
            "parameters already require grad on the autodiff device keeps the same leaves, so the "
            "gradient of a forward through the new handle also lands on the old handle's params "
            "(measured: fc.clone().train() and .unfreeze()), and where both handles reach the loss "
            "burn's gradient is the sum of what PyTorch gives each deep copy (those gradient values "
            "are not compared: Prediction.incomparable_grads). PyTorch's counterpart is a deep copy "
            "with its own leaves.",
            "tests/differential/test_modules.py",
            _PARAM_TENSOR,
            _MODULE_BASE,
        ),
        (Param, Apply),
        _shares_params,
        _shared_params,
    ),
    Rule(
        divergence(
            "freeze-survives-train",
            "burn",
            "freeze() clears dropout's training flag persistently: a later train() restores the "
            "configured flag, which freeze cleared, so the dropout returns its input as is (only "
            "unfreeze() re-enables it). PyTorch's train() after eval() drops out again.",
            "tests/differential/test_modules.py",
            _MODULE_BASE,
        ),
        (Apply,),
        _freeze_survives_train,
        returns_input,
    ),
    Rule(
        divergence(
            "dropout-off-autodiff-identity",
            "burn",
            "burn's Dropout::forward returns its input unchanged when the input is not on the "
            "autodiff device (`!input.device().is_autodiff()`), even in training mode; PyTorch's "
            "dropout in training mode always draws a mask.",
            "tests/differential/test_modules.py",
            _DROPOUT,
        ),
        (Apply,),
        _dropout_off_autodiff,
        returns_input,
    ),
)
