"""Known burn bugs, as data: the record of each (its corpus case and links are its evidence)
and what triggers it.

The default strategy avoids generating a known bug's trigger (so property runs keep looking
for new ones); a bug without a trigger is outside the generator's domains or rare enough that
campaigns just count it under its case's signature. The bug itself stays covered by its corpus
case, whose status `bug` makes the replay fail loudly once burn fixes it (a strict xfail).
Nothing else consults this table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from difftest.divergences.knowledge import Knowledge, burn_source
from difftest.program.ir import Apply, Backward, Cut, Leaf, OpCall, Param, Statement, inputs_of

Trigger = Callable[[Statement, Sequence[Statement]], bool]  # (statement, the statements before it)


@dataclass(frozen=True)
class KnownBug:
    knowledge: Knowledge
    # None: the generator does not avoid it (it cannot reach it, or campaigns only count it)
    triggers: Trigger | None

    @property
    def name(self) -> str:
        return self.knowledge.name


def _bug(name: str, reason: str, evidence: tuple[str, ...], triggers: Trigger | None) -> KnownBug:
    return KnownBug(Knowledge(name, "known-bug", "burn", reason, evidence), triggers)


def _pow_zero(st: Statement, prior: Sequence[Statement]) -> bool:
    # powf_scalar with an integral exponent is dispatched to powi_scalar by burn
    return isinstance(st, OpCall) and st.op in ("powi_scalar", "powf_scalar") and st.attrs.get("exponent") == 0


def _backward_of_used_leaf(st: Statement, prior: Sequence[Statement]) -> bool:
    if not isinstance(st, Backward):
        return False
    root = next((s for s in prior if s.id == st.input), None)
    # autodiff() of a tracked value is that value itself (the same burn node): follow it, and
    # count uses of every alias
    aliases: set[str] = {st.input}
    chain: set[str] = set()
    while isinstance(root, Cut) and root.cut == "autodiff":
        chain.add(root.id)
        aliases.add(root.input)
        root = next((s for s in prior if s.id == root.input), None)
    if isinstance(root, Param) and root.param == "bias":
        # a Linear's bias is burn's parameter leaf itself (a weight is read transposed): once
        # a module has been applied it may be a used leaf
        return any(isinstance(s, Apply) for s in prior)  # conservative: any module handle
    return isinstance(root, Leaf) and any(aliases & set(inputs_of(s)) for s in prior if s.id not in chain)


def _conv1d_grouped_uncropped(st: Statement, prior: Sequence[Statement]) -> bool:
    # the span of a group's weight-gradient conv exceeds the kernel when the stride does not
    # divide L + 2 padding - dilation (k - 1) - 1 (shapes read from the leaves and values before)
    if not (isinstance(st, OpCall) and st.op == "conv1d" and st.attrs.get("groups", 1) > 1):
        return False
    s, p, d = st.attrs["stride"][0], st.attrs["padding"][0], st.attrs["dilation"][0]
    if s == 1:
        return False
    shapes = _shapes(prior)
    x, w = shapes.get(st.inputs[0]), shapes.get(st.inputs[1])
    if x is None or w is None:
        return True  # unknown shapes: avoid conservatively
    return bool((x[-1] + 2 * p - d * (w[-1] - 1) - 1) % s != 0)


def _shapes(prior: Sequence[Statement]) -> dict[str, tuple[int, ...]]:
    """The shapes of the values before a statement, as far as the catalog's shape rules give them."""
    from difftest.program.ir import Program, ProgramError
    from difftest.program.validate import infer_shapes

    try:
        return infer_shapes(Program(tuple(prior)))
    except ProgramError:
        return {}


KNOWN_BUGS: tuple[KnownBug, ...] = (
    _bug(
        "powi-zero-untracked",
        "x.powi_scalar(0) on a tracked tensor returns an untracked ones tensor: the dispatch "
        "layer's default float_powi_scalar short-circuits `0 => ones` before burn-autodiff's "
        "tracked PowiScalarZero node, so the gradient through it is missing (None, and "
        "backward of a loss that only depends on it panics) where PyTorch gives zeros.",
        ("corpus/bugs/powi-zero-untracked.json", "docs/semantics.md#upstream",
         burn_source("burn-backend", "src/backend/ops/tensor.rs"), "https://github.com/tracel-ai/burn/pull/5692"),
        _pow_zero,
    ),
    _bug(
        "backward-of-used-leaf-panics",
        "backward() of a require-grad leaf that feeds a chain of ops over several leaves panics "
        "with 'graph tape has already been consumed' although nothing was consumed; PyTorch "
        "gives the leaf a gradient of ones. The generator does not take a leaf with consumers "
        "as the backward root.",
        ("corpus/bugs/backward-of-used-leaf-panics.json", "docs/semantics.md#upstream",
         "https://github.com/tracel-ai/burn/pull/5645"),
        _backward_of_used_leaf,
    ),
    _bug(
        "powf-zero-base-nan-grad",
        "burn's float_powf backward gives d(a**b)/db = a**b * ln(a) * g, NaN at a = 0 (0 * ln 0), "
        "and d/da NaN at a = b = 0; PyTorch masks both (0, the limit as a -> 0+). The forward "
        "value agrees. Outside the generator's pow-base domain (a >= 0.1), so no trigger.",
        ("corpus/bugs/powf-zero-base-nan-grad.json", "docs/semantics.md#upstream",
         burn_source("burn-autodiff", "src/ops/tensor.rs"), "https://github.com/pytorch/pytorch/issues/27134"),
        None,
    ),
    _bug(
        "flex-reduce-dim-after-unit-swap-panics",
        "burn's Flex backend panics ('range end index 5 out of range for slice of length 4') on a "
        "reduction along dim 0 (mean_dim, sum_dim) of a [1, 2, 2, 1] tensor whose size-1 dims 0 "
        "and 3 were swapped, on plain and autodiff devices alike; PyTorch reduces. Rare enough "
        "that campaigns only count it (its case's signature is known), so no trigger.",
        ("corpus/bugs/flex-reduce-dim-after-unit-swap-panics.json",),
        None,
    ),
    _bug(
        "flex-sum-dim-backward-after-unit-swap-panics",
        "burn's Flex backend panics ('range end index 7 out of range for slice of length 6') in the "
        "backward of sum_dim(0) of a [1, 2, 3, 1] tensor whose result has its size-1 dims 0 and 3 "
        "swapped; PyTorch gives ones. The same family as flex-reduce-dim-after-unit-swap-panics, in "
        "the backward's expand. Rare: campaigns count it by signature, no trigger.",
        ("corpus/bugs/flex-sum-dim-backward-after-unit-swap-panics.json",
         "corpus/bugs/flex-reduce-dim-after-unit-swap-panics.json"),
        None,
    ),
    _bug(
        "conv1d-grouped-weight-grad-uncropped",
        "the weight gradient of a grouped conv1d is wrong when the stride does not divide "
        "L + 2 padding - dilation (k - 1) - 1: burn-backend's conv1d_weight_grad_groups slice-assigns "
        "each group's gradient, computed as a conv spanning more than k positions, without cropping "
        "it to the kernel (conv2d_weight_grad_groups crops since tracel-ai/burn#1891). The forward and "
        "the input gradient agree. The generator avoids grouped strided conv1d whose span the stride "
        "does not divide.",
        ("corpus/bugs/conv1d-grouped-weight-grad-uncropped.json",
         burn_source("burn-backend", "src/backend/ops/modules/conv.rs"), "https://github.com/tracel-ai/burn/pull/1891"),
        _conv1d_grouped_uncropped,
    ),
)


def known_bug(st: Statement, prior: Sequence[Statement] = ()) -> KnownBug | None:
    for bug in KNOWN_BUGS:
        if bug.triggers is not None and bug.triggers(st, prior):
            return bug
    return None
