"""Declared divergences between burn and PyTorch, as data (JAX `Limitation` style).

The semantic model (`difftest/oracle/model.py`) first computes a *base* prediction for each
framework: what that framework would report if it followed PyTorch's autograd semantics (for
burn, mapped onto its flags: tracked = requires_grad, require_grad = a leaf that requires grad,
and the autodiff marker carried from the leaves' devices). Each rule below then overrides the
base where burn (or PyTorch) documentedly differs. A rule that fires is recorded per program; a
rule whose prediction the observation contradicts while the base prediction matches is *stale*
(reported like an unexpected pass).

Adding a rule: append a `Rule` to `TENSOR_RULES` or `MODULE_RULES`: its `Knowledge` record
(name, framework, reason, evidence: a docs/semantics.md anchor, a corpus case, the burn source),
a predicate and an effect. Tests never special-case a divergence; they only read what the model
predicts.
"""

from __future__ import annotations

from collections.abc import Sequence

from difftest.divergences.knowledge import Framework, burn_source
from difftest.divergences.noops import NOOPS_BY_OP
from difftest.divergences.rule import Rule, Step, divergence

__all__ = ["MODULE_RULES", "RULES", "RULES_BY_NAME", "TENSOR_RULES", "Rule", "Step", "burn_param_state",
           "divergence", "module_param_keys", "rules_for", "shares_params", "torch_param_state"]
from difftest.divergences.session_rules import SESSION_RULES
from difftest.divergences.states import EMPTY, BurnState, Failure, ModuleState, Result, TorchState
from difftest.ops.catalog import CATALOG
from difftest.ops.strides import contiguous_strides
from difftest.ops.value_dtypes import CAST_ATTR_TYPE
from difftest.program.ir import Apply, Cut, Leaf, Module, OpCall, Param, Shape, region_of
from difftest.program.modules import module_kind


def _burn_inputs(step: Step) -> tuple[BurnState, ...]:
    return tuple(s for s in step.inputs if isinstance(s, BurnState))


def _torch_inputs(step: Step) -> tuple[TorchState, ...]:
    return tuple(s for s in step.inputs if isinstance(s, TorchState))


def _is_leaf_detach(step: Step) -> bool:
    st = step.statement
    ins = _burn_inputs(step)
    return isinstance(st, Cut) and st.cut == "detach" and st.region == "grad" and bool(ins) and ins[0].is_require_grad


def _leaf_detach(step: Step) -> Result:
    ident = step.statement.id
    return BurnState(True, True, True, key=ident, sources=frozenset({ident}))


def _in_region(step: Step) -> bool:
    return isinstance(step.statement, (OpCall, Cut)) and region_of(step.statement) != "grad"


def _region_off_autodiff(step: Step) -> Result:
    st = step.statement
    if isinstance(st, Cut) and st.cut == "autodiff":
        return BurnState(True, False, False)  # without_autodiff(input).autodiff()
    return BurnState(False, False, False)


def _is_without_autodiff(step: Step) -> bool:
    st = step.statement
    return isinstance(st, Cut) and st.cut == "without_autodiff"


def _plain_leaf_require_grad(step: Step) -> bool:
    st = step.statement
    return isinstance(st, Leaf) and st.device == "plain" and st.require_grad


def _saves_inference_tensor(step: Step) -> bool:
    st = step.statement
    ins = _torch_inputs(step)
    m = step.module
    if isinstance(st, Apply) and m is not None:
        # nn.Linear saves its input for the weight's gradient (outside torch.no_grad()); an
        # input of rank >= 3 is flattened to [-1, in] first, and when that reshape has to copy
        # (the leading dims do not merge into one stride), the copy is saved, not the input
        if not module_kind(m.kind).saves_input or m.valid or not m.requires_grad or not ins[0].is_inference:
            return False
        if not m.params:  # a group_norm without parameters: nothing requires grad, nothing is saved
            return False
        if m.kind != "linear":  # normalisations save the input itself
            return True
        shape = step.input_shapes[0]
        return len(shape) <= 2 or _merges_to_view(shape[:-1], ins[0].strides[:-1])
    if not isinstance(st, OpCall) or st.region != "grad":
        return False
    if not any(s.requires_grad for s in ins):
        return False  # nothing is recorded
    spec = CATALOG[st.op]

    def needs_grad(s: TorchState) -> bool:  # has an autograd edge (a no_grad view has none)
        return s.requires_grad and (s.has_grad_fn or s.key is not None)

    for i in spec.saves:
        if i >= len(ins) or not ins[i].is_inference:
            continue
        if i not in spec.saved_for_other or any(needs_grad(s) for j, s in enumerate(ins) if j != i):
            return True
    return False


def _merges_to_view(shape: Shape, strides: tuple[int, ...]) -> bool:
    """Whether dims of this shape and these strides flatten into one dim without a copy."""
    chunk: tuple[int, int] | None = None  # (stride, size) of the merged inner dims
    for size, stride in reversed(list(zip(shape, strides))):
        if size == 1:
            continue
        if chunk is not None and stride != chunk[0] * chunk[1]:
            return False
        chunk = (chunk[0], chunk[1] * size) if chunk is not None else (stride, size)
    return True


# ---------------------------------------------------------------- modules

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
    if module_kind(m.kind).is_buffer(name):
        return BurnState(not m.valid, False, False)
    if not m.requires_grad:
        return BurnState(True, False, False)
    key = m.key(name)
    return BurnState(True, True, True, key, frozenset({key}))


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
        and _burn_inputs(step)[0].is_autodiff
    )


def _autodiff_input_output(step: Step) -> Result:
    x = _burn_inputs(step)[0]
    return BurnState(True, x.is_tracked, False, None, x.sources if x.is_tracked else EMPTY)


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
        return BurnState(True, True, True, key, frozenset({key}))
    own = frozenset(module_param_keys("torch", m))  # the base: PyTorch's deep copy's keys
    shared = frozenset(module_param_keys("burn", m))
    return BurnState(cur.is_autodiff, cur.is_tracked, cur.is_require_grad, cur.key, (cur.sources - own) | shared)


def _module_no_grad(step: Step) -> bool:
    m = step.module
    return isinstance(step.statement, (Param, Apply)) and m is not None and m.no_grad and not m.valid


def _no_grad_semantics(step: Step) -> Result:
    """burn's Module::no_grad(): every float parameter set_require_grad(false) (a detached
    leaf on the autodiff device), persistently (train() keeps it); training flags untouched."""
    if isinstance(step.statement, Param):
        return BurnState(True, False, False)
    return step.current


def _freeze_survives_train(step: Step) -> bool:
    m = step.module
    return (isinstance(step.statement, Apply) and m is not None and m.kind == "dropout" and m.p > 0.0
            and m.training and not m.burn_training)


def _dropout_off_autodiff(step: Step) -> bool:
    m = step.module
    return (isinstance(step.statement, Apply) and m is not None and m.kind == "dropout" and m.p > 0.0
            and m.burn_training and not _burn_inputs(step)[0].is_autodiff)


def _returns_input(step: Step) -> Result:
    return step.inputs[0]


def _is_noop_alias(step: Step) -> bool:
    st = step.statement
    if not isinstance(st, OpCall) or st.region != "grad":
        return False
    noop = NOOPS_BY_OP.get(st.op)
    return noop is not None and noop.applies(st.attrs)


def _is_same_dtype_cast(step: Step, grad_only: bool) -> bool:
    st = step.statement
    if not isinstance(st, OpCall) or (grad_only and st.region != "grad") or not step.input_dtypes:
        return False
    targets = [st.attrs[a.name] for a in CATALOG[st.op].attrs if a.type == CAST_ATTR_TYPE and a.name in st.attrs]
    return bool(targets) and targets[0] == step.input_dtypes[0]


_AUTODIFF_OPS = burn_source("burn-autodiff", "src/ops/tensor.rs")
_CAST_API = burn_source("burn-tensor", "src/tensor/api/cast.rs")
_FLOAT_API = burn_source("burn-tensor", "src/tensor/api/float.rs")
_MODULE_BASE = burn_source("burn-core", "src/module/base.rs")
_PARAM_TENSOR = burn_source("burn-core", "src/module/param/tensor.rs")
_DROPOUT = burn_source("burn-nn", "src/modules/dropout.rs")

TENSOR_RULES: tuple[Rule, ...] = (
    Rule(
        divergence(
            "leaf-detach",
            "burn",
            "burn's float_detach keeps require_grad: detach() of a require-grad leaf is a new leaf "
            "(new id) that still requires grad; ops on it are recorded and its gradient lands on the "
            "new handle. PyTorch's detach() never requires grad.",
            "docs/semantics.md#leaf-detach",
            "corpus/seed/flags-of-w.json",
            _AUTODIFF_OPS,
        ),
        _is_leaf_detach,
        _leaf_detach,
    ),
    Rule(
        divergence(
            "without-autodiff",
            "burn",
            "without_autodiff() moves a tensor off the autodiff backend (is_autodiff=false); mixed "
            "with autodiff tensors it is a constant. PyTorch has no such state (lowered to detach()).",
            "docs/semantics.md#without-autodiff",
            "corpus/seed/flags-of-w.json",
        ),
        _is_without_autodiff,
        lambda step: BurnState(False, False, False),
    ),
    Rule(
        divergence(
            "region-off-autodiff",
            "burn",
            "burn has no no_grad/inference_mode scope: difftest runs a region's statements on "
            "inputs taken without_autodiff(), so its results are off the autodiff device, where "
            "PyTorch's are ordinary (or inference) tensors that do not require grad.",
            "docs/semantics.md#region-off-autodiff",
            "docs/semantics.md#mapping",
            "corpus/seed/side-branch-no-grad.json",
        ),
        _in_region,
        _region_off_autodiff,
    ),
    Rule(
        divergence(
            "plain-leaf-require-grad",
            "burn",
            "require_grad() panics on a tensor without autodiff (a plain-device leaf); PyTorch has "
            "no autodiff device and lets any float leaf require grad.",
            "docs/semantics.md#burn-facts",
            _FLOAT_API,
        ),
        _plain_leaf_require_grad,
        lambda step: Failure("panic", "require_grad() on a plain-device leaf"),
    ),
    Rule(
        divergence(
            "inference-tensor-saved",
            "torch",
            "an inference tensor cannot be saved for backward: an op (or an nn.Linear whose "
            "parameters require grad) recorded outside inference_mode that saves an inference-mode "
            "input raises in PyTorch, while burn's plain-device counterpart is just a constant.",
            "docs/semantics.md#mapping",
            "tests/differential/test_modules.py",
            "https://docs.pytorch.org/cppdocs/notes/inference_mode.html",
        ),
        _saves_inference_tensor,
        lambda step: Failure("exception", "inference tensor saved for backward"),
    ),
    Rule(
        divergence(
            "noop-returns-input",
            "burn",
            "for a no-op call (identity permute, swap_dims(d, d), powi_scalar(1), powf_scalar(1.0): "
            "the no-op records) burn returns the input tensor itself: a require-grad leaf stays a "
            "require-grad leaf and receives the gradient directly; PyTorch records a new node "
            "(requires_grad, not a leaf).",
            "docs/semantics.md#divergences",
            "difftest/divergences/noops.py",
        ),
        _is_noop_alias,
        _returns_input,
    ),
    Rule(
        divergence(
            "cast-same-dtype-returns-input",
            "burn",
            "Tensor::cast to the tensor's own float dtype returns the tensor itself (`if current == dtype "
            "{ return tensor; }`): no node is recorded, a require-grad leaf stays a require-grad leaf "
            "(measured: cast(x, float32) of a float32 require-grad leaf reports is_require_grad true and "
            "receives x's gradient). PyTorch's .to does the same (to-same-dtype-returns-input): the two agree.",
            "rust/src/cast_evidence.rs",
            "tests/differential/test_cast.py",
            _CAST_API,
        ),
        lambda step: _is_same_dtype_cast(step, grad_only=True),
        _returns_input,
    ),
    Rule(
        divergence(
            "to-same-dtype-returns-input",
            "torch",
            "Tensor.to(dtype) with the tensor's own dtype returns self (documented: 'If the self Tensor "
            "already has the correct torch.dtype and torch.device, then self is returned'; measured: "
            "x.to(x.dtype) is x, in every grad mode): no node, a leaf stays a leaf.",
            "https://docs.pytorch.org/docs/stable/generated/torch.Tensor.to.html",
            "tests/differential/test_cast.py",
        ),
        lambda step: _is_same_dtype_cast(step, grad_only=False),
        _returns_input,
    ),
)

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
        _is_dropout_p1,
        lambda step: Failure("panic", "DropoutConfig::new(1.0).init() panics (p must be in [0, 1))"),
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
        _freeze_survives_train,
        _returns_input,
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
        _dropout_off_autodiff,
        _returns_input,
    ),
)

RULES: tuple[Rule, ...] = (*TENSOR_RULES, *MODULE_RULES, *SESSION_RULES)  # applied in this order
RULES_BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}


def rules_for(version: str, rules: Sequence[Rule] = RULES) -> tuple[Rule, ...]:
    """The rules declared for burn `version` (the model applies no other)."""
    return tuple(r for r in rules if r.knowledge.holds_for(version))
