"""Declared divergences between burn and PyTorch, as data (JAX `Limitation` style).

The semantic model (`difftest/oracle/model.py`) first computes a *base* prediction for each
framework: what that framework would report if it followed PyTorch's autograd semantics (for
burn, mapped onto its flags: tracked = requires_grad, require_grad = a leaf that requires grad,
and the autodiff marker carried from the leaves' devices). Each rule below then overrides the
base where burn (or PyTorch) documentedly differs. A rule that fires is recorded per program; a
rule whose prediction the observation contradicts while the base prediction matches is *stale*
(reported like an unexpected pass).

Adding a rule: append a `Rule` to `TENSOR_RULES` (here) or `MODULE_RULES` (module_rules.py):
its `Knowledge` record (name, framework, reason, evidence: a docs/semantics.md anchor, a corpus
case, the burn source), the statement kinds it can apply to, a predicate and an effect. Tests
never special-case a divergence; they only read what the model predicts.
"""

from __future__ import annotations

from collections.abc import Sequence

from difftest.divergences.knowledge import burn_source
from difftest.divergences.messages import BURN_REQUIRE_GRAD_PLAIN, TORCH_INFERENCE_SAVED
from difftest.divergences.module_rules import (
    MODULE_RULES,
    burn_param_state,
    module_param_keys,
    shares_params,
    torch_param_state,
)
from difftest.divergences.noops import NOOPS_BY_OP
from difftest.divergences.rule import Rule, Step, burn_inputs, divergence, returns_input

__all__ = ["MODULE_RULES", "RULES", "RULES_BY_NAME", "TENSOR_RULES", "Rule", "Step", "burn_param_state",
           "divergence", "module_param_keys", "rules_for", "shares_params", "torch_param_state"]
from difftest.divergences.checkpointing_rules import CHECKPOINTING_RULES
from difftest.divergences.session_rules import SESSION_RULES
from difftest.divergences.states import BurnState, Failure, Result, TorchState
from difftest.ops.catalog import CATALOG
from difftest.ops.value_dtypes import CAST_ATTR_TYPE
from difftest.program.ir import Apply, Cut, Leaf, OpCall, Shape, region_of
from difftest.program.modules import module_kind


def _torch_inputs(step: Step) -> tuple[TorchState, ...]:
    return tuple(s for s in step.inputs if isinstance(s, TorchState))


def _is_leaf_detach(step: Step) -> bool:
    st = step.statement
    ins = burn_inputs(step)
    return isinstance(st, Cut) and st.cut == "detach" and st.region == "grad" and bool(ins) and ins[0].is_require_grad


def _leaf_detach(step: Step) -> Result:
    ident = step.statement.id  # a new leaf on its input's strategy
    return BurnState(True, True, True, key=ident, sources=frozenset({ident}),
                     default_strategy=burn_inputs(step)[0].default_strategy)


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
        (Cut,),
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
        (Cut,),
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
        (OpCall, Cut),
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
        (Leaf,),
        _plain_leaf_require_grad,
        lambda step: Failure("panic", "require_grad() on a plain-device leaf", BURN_REQUIRE_GRAD_PLAIN),
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
        (OpCall, Apply),
        _saves_inference_tensor,
        lambda step: Failure("exception", "inference tensor saved for backward", TORCH_INFERENCE_SAVED),
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
        (OpCall,),
        _is_noop_alias,
        returns_input,
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
        (OpCall,),
        lambda step: _is_same_dtype_cast(step, grad_only=True),
        returns_input,
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
        (OpCall,),
        lambda step: _is_same_dtype_cast(step, grad_only=False),
        returns_input,
    ),
)

# applied in this order (the checkpointing rules last: a predicted panic ends the statement)
RULES: tuple[Rule, ...] = (*TENSOR_RULES, *MODULE_RULES, *SESSION_RULES, *CHECKPOINTING_RULES)
RULES_BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}


def rules_for(version: str, rules: Sequence[Rule] = RULES) -> tuple[Rule, ...]:
    """The rules declared for burn `version` (the model applies no other)."""
    return tuple(r for r in rules if r.knowledge.holds_for(version))
