"""Declared divergences of sessions (several backwards, gradient reads, optimizer steps), as
data. The semantic model applies them like the flag rules (rules.py): the base is PyTorch's
autograd — a backward without retain_graph frees what the nodes it walks saved, so a later
backward through one of those nodes raises; nodes that saved nothing stay usable; `.grad`
accumulates until zero_grad — and these rules say where burn (or PyTorch's API) differs.
"""

from __future__ import annotations

from dataclasses import replace

from difftest.divergences.knowledge import Knowledge, burn_source
from difftest.divergences.rule import Rule, Step, divergence
from difftest.divergences.states import BackwardResult, Failure, ModuleState, Result
from difftest.program.ir import Backward, Grad
from difftest.program.ir import Step as StepStatement

_SERVER = burn_source("burn-autodiff", "src/runtime/server.rs")
_TENSOR_AUTODIFF = burn_source("burn-tensor", "src/tensor/api/autodiff.rs")
_OPTIM_GRADS = burn_source("burn-optim", "src/optim/grads.rs")
PR_5645 = "https://github.com/tracel-ai/burn/pull/5645"
TORCH_RETAIN = "https://pytorch.org/docs/stable/generated/torch.Tensor.backward.html"
TORCH_ACCUMULATE = "https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html"


def _backward_walks(step: Step, retain: bool) -> bool:
    st, cur = step.statement, step.current
    return isinstance(st, Backward) and isinstance(cur, BackwardResult) and st.retain_graph == retain


def _consumes_all(step: Step) -> Result:
    cur = step.current
    assert isinstance(cur, BackwardResult)
    return replace(cur, consumes=cur.traversed | cur.leaves)


def _torch_step_reads_other_grads(step: Step) -> bool:
    s = step.session
    return (isinstance(step.statement, StepStatement) and isinstance(step.current, ModuleState) and s is not None
            and dict(s.accumulated) != dict(s.from_handle))


def _diverged(step: Step) -> Result:
    cur = step.current
    assert isinstance(cur, ModuleState)
    return replace(cur, diverged=True)


def _grad_taken(step: Step) -> bool:
    s = step.session
    return isinstance(step.statement, Grad) and s is not None and s.key is not None and s.key in s.taken


CONSUMES_GRAPH = "backward-consumes-graph"
NO_RETAIN_GRAPH = "no-retain-graph"

SESSION_RULES: tuple[Rule, ...] = (
    Rule(
        divergence(
            CONSUMES_GRAPH,
            "burn",
            "burn's backward consumes every recorded step it walks, whatever the op saved: a later "
            "backward whose graph reaches one of those nodes panics ('graph tape has already been "
            "consumed ... Burn does not support retain_graph'), before consuming anything; so does "
            "a later backward *of* a require-grad leaf it reached (measured: a leaf stays usable as "
            "an input of new graphs, not as a root). PyTorch "
            "frees only saved tensors, so a second backward through nodes that saved nothing (add, "
            "sum, reshape, ...) succeeds. Leaves stay usable in both (burn PR #5645).",
            "docs/semantics.md#sessions", _SERVER, _TENSOR_AUTODIFF, PR_5645, TORCH_RETAIN,
        ),
        (Backward,),
        lambda step: _backward_walks(step, retain=False),
        _consumes_all,
    ),
    Rule(
        divergence(
            NO_RETAIN_GRAPH,
            "burn",
            "burn has no retain_graph: a backward that PyTorch runs with retain_graph=True consumes "
            "its graph in burn like any other, so a later backward through it panics where "
            "PyTorch's succeeds.",
            "docs/semantics.md#sessions", _TENSOR_AUTODIFF, PR_5645, TORCH_RETAIN,
        ),
        (Backward,),
        lambda step: _backward_walks(step, retain=True),
        _consumes_all,
    ),
    Rule(
        divergence(
            "grad-accumulates",
            "torch",
            "PyTorch's optimizer step reads each parameter's `.grad`, which accumulates over every "
            "backward since the last zero_grad; burn's step reads the one Gradients handle it is "
            "given (each backward returns fresh gradients). Where they differ, the stepped "
            "parameters (and what is computed from them) are not comparable.",
            "docs/semantics.md#sessions", _OPTIM_GRADS, TORCH_ACCUMULATE,
        ),
        (StepStatement,),
        _torch_step_reads_other_grads,
        _diverged,
    ),
    Rule(
        divergence(
            "step-takes-param-grads",
            "burn",
            "burn's optimizer step takes the module's parameter gradients out of the Gradients "
            "handle (GradientsParams::from_module removes them; from_grads consumes the handle): "
            "a later read of such a gradient from that handle finds none. PyTorch's `.grad` stays.",
            "docs/semantics.md#sessions", _OPTIM_GRADS,
        ),
        (Grad,),
        _grad_taken,
        lambda step: Failure("missing-gradient", "an optimizer step took this gradient out of the handle"),
    ),
)

SESSION_KNOWLEDGE: tuple[Knowledge, ...] = tuple(r.knowledge for r in SESSION_RULES)
