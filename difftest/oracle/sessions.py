"""Sessions in the semantic model: which graph nodes a backward walks, and which of them saved
tensors (the part of a graph that a backward without retain_graph leaves unusable in PyTorch).

A graph node is a value whose state is a recorded op result (PyTorch: it has a grad_fn; burn:
tracked and not a require-grad leaf); a value that is another value itself (an `autodiff` cut,
a dropout or no-op call that returns its input) is that value's node. Leaves are never
consumed as parents: both frameworks let a new graph use them after a backward (burn PR
#5645). burn consumes the leaves a backward reaches as *roots*, though: a later backward of
such a leaf itself panics (measured; rule backward-consumes-graph).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from difftest.divergences.states import EMPTY, BurnState, ModuleState, State, TorchState
from difftest.ops.catalog import CATALOG
from difftest.program.ir import Apply, Cut, OpCall, Shape, Statement, value_inputs
from difftest.program.modules import module_kind


def is_node(state: State) -> bool:
    if isinstance(state, TorchState):
        return state.has_grad_fn
    return state.is_tracked and not state.is_require_grad


def saves_tensors(st: Statement, module: ModuleState | None, needs: tuple[bool, ...] = (),
                  shapes: Mapping[str, Shape] | None = None) -> bool:
    """Whether PyTorch's node(s) for `st` saved tensors, its inputs requiring grad as `needs`
    says (catalog data; Linear saves its input and weight, a dropout that drew a mask saves it)."""
    if isinstance(st, OpCall):
        in_shapes = [shapes[x] for x in st.inputs] if shapes is not None else None
        return CATALOG[st.op].frees_on_backward_for(needs or (True,) * len(st.inputs), st.attrs, in_shapes)
    if isinstance(st, Apply) and module is not None:
        kind = module_kind(module.kind)
        draws_mask = module.kind == "dropout" and module.training and module.p > 0.0
        return kind.saves_input or bool(kind.params) or draws_mask
    return False


def alias_of(st: Statement, state: State, input_state: Callable[[str], State],
             states: Mapping[str, State]) -> str | None:
    """The input whose node `st`'s value is, or None when it is a node (or no node) of its own.
    An input that later statements see other than it is reported (burn: a linear weight, read
    transposed, a new node per use) is not aliased: that use is a node of its own, and so is
    the value of a call that returns its input as is (an identity permute of such a weight is
    that use's transpose node, which a backward rooted at it consumes)."""
    if isinstance(st, Cut) and st.cut == "autodiff":
        return st.input if input_state(st.input) is states.get(st.input) else None
    for x in value_inputs(st):
        if input_state(x) is state:
            return x if state is states.get(x) else None
    return None


class Walker:
    """The walks of backwards over one state of the model (the states before a backward): for
    a root, (the graph nodes a backward from it walks, those of them that saved tensors, the
    grad keys of the require-grad leaves it reaches). Each node's part is computed once, so the
    walks of every root probe of a backward share it."""

    def __init__(self, by_id: Mapping[str, Statement], states: Mapping[str, State],
                 input_state: Callable[[str], State], modules: Mapping[str, ModuleState],
                 shapes: Mapping[str, Shape] | None = None) -> None:
        self.by_id, self.states, self.input_state, self.modules, self.shapes = (
            by_id, states, input_state, modules, shapes)
        self.memo: dict[str, tuple[frozenset[str], frozenset[str], frozenset[str]]] = {}

    def __call__(self, root: str) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        got = self.memo.get(root)
        if got is None:
            got = self.memo[root] = self._part(root)
        return got

    def _part(self, v: str) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        if v not in self.states:
            return EMPTY, EMPTY, EMPTY
        st, state = self.by_id[v], self.states[v]
        alias = alias_of(st, state, self.input_state, self.states)
        if alias is not None:
            return self(alias)
        if not is_node(state):
            return EMPTY, EMPTY, (frozenset({state.key}) if _in_graph(state) and state.key is not None else EMPTY)
        nodes, leaves = {v}, set(state.sources)  # the require-grad leaves (module parameters too) it is computed from
        module = self.modules.get(st.module) if isinstance(st, Apply) else None
        needs = tuple(_in_graph(self.input_state(x)) for x in value_inputs(st))
        saving = {v} if saves_tensors(st, module, needs, self.shapes) else set()
        for x in value_inputs(st):
            if _in_graph(self.input_state(x)):
                n, s, lv = self(x)
                nodes |= n
                saving |= s
                leaves |= lv
        return frozenset(nodes), frozenset(saving), frozenset(leaves)


def _in_graph(s: State) -> bool:
    if isinstance(s, TorchState):
        return s.requires_grad
    assert isinstance(s, BurnState)
    return s.is_tracked
