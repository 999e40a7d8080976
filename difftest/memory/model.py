"""The memory model: what one forward leaves resident in each framework, and what a
repeated-forward run should therefore show.

* `saved_storage` asks the flag model (`predict`, with its own rules such as leaf-detach)
  which ops each framework records, and the op catalog which inputs they save (`saves`,
  narrowed by `saved_for_other`: inputs kept only for another input's gradient): the storage
  a forward allocates and keeps for backward (a saved view or cut keeps its base; leaves exist
  anyway).
* Base semantics are PyTorch's: saved tensors live as long as an output that reaches them.
  The declared memory rule `GRAPH_RETAINED` (difftest/divergences/memory_rules.py) overrides
  that for burn: they live until a backward, kept output or not, and `surviving_ops` says
  which of them a backward does not free (graphs that hold another live leaf, following
  burn's graph bookkeeping).
* `expectations` turns the bytes into one expectation per reported row: "grows" (at least
  `GROWS_FRACTION` of the retained bytes times the forwards), "flat" (under the fixed
  `FLAT_SLACK_MIB`), and after a backward "no further growth" (not past the earlier peak:
  allocator pages are reused) or "keeps growing" (past it by half the surviving bytes). It
  refuses an experiment whose predicted growth could not be told from the slack;
  `judge_rows` holds measured rows against them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from difftest.divergences.knowledge import Framework
from difftest.divergences.memory_rules import GRAPH_RETAINED, MEMORY_RULES, MemoryRule
from difftest.divergences.states import BurnState, State, TorchState
from difftest.ops.catalog import CATALOG
from difftest.ops.validate import infer_shapes
from difftest.oracle.model import predict
from difftest.program.ir import Backward, Cut, Leaf, OpCall, Program, Statement, numel

MIB = 1024 * 1024
F32_BYTES = 4
FLAT_SLACK_MIB = 10.0  # "stays flat": growth under this fixed slack (allocator noise)
GROWS_FRACTION = 0.5  # "grows": at least this fraction of the bytes predicted retained
FRAMEWORKS: tuple[Framework, ...] = ("torch", "burn")

Verdict = Literal["grows", "flat", "no-further-growth", "keeps-growing", "unchecked"]
Measured = list[tuple[str, float]]  # (row label, RSS growth in MiB)


def labels(iters: int, then_backward: bool) -> tuple[str, ...]:
    """The rows a repeated-forward run reports (both workers use these labels)."""
    if then_backward:
        return (f"{iters} forwards", "then one backward", f"{iters} more forwards")
    return (f"{iters} forwards",)


def forward_part(program: Program) -> tuple[Program, str | None]:
    """The statements a repeated forward runs (everything before the first backward) and the
    root of that backward (None when the program has none)."""
    for i, st in enumerate(program.statements):
        if isinstance(st, Backward):
            return Program(program.statements[:i]), st.input
    return program, None


def _recorded(state: State | None) -> bool:
    """Whether the op that produced `state` was recorded in a graph."""
    if isinstance(state, BurnState):
        return state.is_tracked
    if isinstance(state, TorchState):
        return state.has_grad_fn
    return False


def _needs_grad(state: State | None) -> bool:
    """Whether a gradient flows into a value (it is part of a graph)."""
    if isinstance(state, BurnState):
        return state.is_tracked
    if isinstance(state, TorchState):
        return state.requires_grad
    return False


def _storage_root(ident: str, by_id: dict[str, Statement]) -> str:
    """The value whose storage `ident` shares: through cuts (same storage, other flags) and
    PyTorch views (catalog `view`) to the leaf or op result that allocated it. A saved view
    keeps its whole base alive."""
    while True:
        st = by_id[ident]
        if isinstance(st, Cut):
            ident = st.input
        elif isinstance(st, OpCall) and CATALOG[st.op].view is not None:
            ident = st.inputs[0]
        else:
            return ident


def saved_storage(program: Program, framework: Framework) -> dict[str, frozenset[str]]:
    """What one forward of `program` (its statements before the first backward) saves for
    backward in `framework`: storage the forward allocated (results of non-view ops; leaves
    exist anyway) that a recorded op saves (the catalog's `saves`, narrowed by its
    `saved_for_other`), mapped to the ids of the recorded ops that save it."""
    forward, _ = forward_part(program)
    prediction = predict(forward).of(framework)
    by_id = forward.by_id()
    saved: dict[str, set[str]] = {}
    for st in forward.statements:
        if not (isinstance(st, OpCall) and _recorded(prediction.states.get(st.id))):
            continue
        spec = CATALOG[st.op]
        for i in spec.saves:
            if i >= len(st.inputs):
                continue
            # an input kept only for another input's gradient (d(a*b)/da = b) is saved only when
            # that input needs one: both frameworks do this (PyTorch's derivatives.yaml; burn's
            # `rhs_tracked.then(|| checkpoint(lhs))`)
            if i in spec.saved_for_other and not any(
                _needs_grad(prediction.states.get(x)) for j, x in enumerate(st.inputs) if j != i
            ):
                continue
            root = by_id[_storage_root(st.inputs[i], by_id)]
            if isinstance(root, OpCall):
                saved.setdefault(root.id, set()).add(st.id)
    return {k: frozenset(v) for k, v in saved.items()}


def _bytes_of(program: Program, values: Iterable[str]) -> int:
    shapes = infer_shapes(forward_part(program)[0])
    return sum(numel(shapes[v]) * F32_BYTES for v in values)


def saved_bytes_per_forward(program: Program, framework: Framework) -> int:
    """Bytes `framework` saves for backward when it runs `program`'s forward once."""
    return _bytes_of(program, saved_storage(program, framework))


class _Graphs:
    """Union-find over graph tokens; a graph is *old* when it holds a live leaf's node."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.old: set[str] = set()

    def find(self, k: str) -> str:
        while self.parent.setdefault(k, k) != k:
            k = self.parent[k]
        return k

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            if rb in self.old:
                self.old.add(ra)

    def is_old(self, k: str) -> bool:
        return self.find(k) in self.old


def _assign_graphs(
    forward: Program, states: dict[str, State], leaves: dict[str, str], graphs: _Graphs
) -> dict[str, str]:
    """The graph of every recorded value's node in one run of `forward`, as burn's graph
    locator assigns them: a program leaf is in the graph `leaves` maps it to (unmapped: none);
    an op joins the graphs of its recorded inputs, merging them, or starts a fresh graph;
    burn's detach of a require-grad leaf makes a new leaf in a fresh graph; an `autodiff` cut
    of a recorded value is that value."""
    node: dict[str, str] = dict(leaves)
    for st in forward.statements:
        state = states.get(st.id)
        if isinstance(st, Leaf) or not _recorded(state):
            continue
        if isinstance(st, Cut):
            if isinstance(state, BurnState) and state.key == st.id:
                node[st.id] = f"fresh:{st.id}"
            elif st.input in node:
                node[st.id] = node[st.input]
        elif isinstance(st, OpCall):
            parents = [node[x] for x in st.inputs if x in node]
            for other in parents[1:]:
                graphs.union(parents[0], other)
            node[st.id] = parents[0] if parents else f"fresh:{st.id}"
    return node


def surviving_ops(program: Program, framework: Framework) -> frozenset[str]:
    """The recorded ops of one repeated forward whose saved tensors a backward of the
    program's (first) root does not free, following burn's graph bookkeeping (burn-autodiff
    0.22.1, runtime/graph.rs and memory_management.rs):

    * a require-grad leaf starts in a graph of its own; an op's node joins the graphs of its
      inputs (merging them) or starts a fresh one;
    * a backward runs on the root's graph: it frees every node there that no live tensor
      holds, and forgets which graph the leaves it reached belong to; afterwards graphs that
      hold no live node are dropped whole, while a graph still holding a live leaf's node is
      kept with everything in it;
    * so after the warm-up's backward, the leaves the root reaches start no graph, and a
      repeated forward's ops land in fresh graphs (dropped at the next backward) unless they
      touch another program leaf, whose old graph survives every backward except one run on
      that very graph (when the root's node landed there too).

    Empty without a backward."""
    forward, root = forward_part(program)
    if root is None:
        return frozenset()
    states = predict(forward).of(framework).states
    live = [leaf.id for leaf in forward.leaves() if _recorded(states.get(leaf.id))]
    warm = _Graphs()
    _assign_graphs(forward, states, {leaf: f"leaf:{leaf}" for leaf in live}, warm)
    reached = states[root].sources
    repeat = _Graphs()
    mapped = {leaf: f"old:{warm.find(f'leaf:{leaf}')}" for leaf in live if leaf not in reached}
    repeat.old.update(mapped.values())
    node = _assign_graphs(forward, states, mapped, repeat)
    root_graph = repeat.find(node[root]) if root in node else None
    return frozenset(
        st.id
        for st in forward.statements
        if isinstance(st, OpCall)
        and st.id in node
        and repeat.is_old(node[st.id])
        and repeat.find(node[st.id]) != root_graph
    )


@dataclass(frozen=True)
class ForwardMemory:
    framework: Framework
    saved_bytes: int  # saved for backward per forward
    retained_bytes: int  # of those, still held after the iteration (until the next backward)
    surviving_bytes: int  # of the retained, what a backward of the program's root leaves held
    rules: tuple[str, ...]  # memory rules that changed the base prediction


def predict_forward_memory(
    program: Program, framework: Framework, *, keep: bool, rules: Sequence[MemoryRule] | None = None
) -> ForwardMemory:
    """What one repetition of `program`'s forward leaves resident in `framework`."""
    saved = saved_storage(program, framework)
    saved_bytes = _bytes_of(program, saved)
    # base (PyTorch): saved tensors die with the output; kept outputs keep them (and a backward
    # of another root frees nothing of theirs)
    retained, surviving = (saved_bytes, saved_bytes) if keep else (0, 0)
    fired: list[str] = []
    for rule in MEMORY_RULES if rules is None else rules:
        if rule is GRAPH_RETAINED and rule.framework == framework and saved_bytes > 0 and not keep:
            # burn: the graph outlives the output, until a backward frees it
            retained = saved_bytes
            alive = surviving_ops(program, framework)
            surviving = _bytes_of(program, (v for v, ops in saved.items() if ops & alive))
            fired.append(rule.name)
    return ForwardMemory(framework, saved_bytes, retained, surviving, tuple(fired))


@dataclass(frozen=True)
class Expectation:
    verdict: Verdict
    threshold_mib: float  # grows / keeps-growing: at least this; flat / no-further-growth: under
    rules: tuple[str, ...] = ()

    def holds(self, growth_mib: float, previous_mib: float | None) -> bool:
        """`previous_mib`: the highest growth of the rows before this one."""
        if self.verdict == "grows":
            return growth_mib >= self.threshold_mib
        if self.verdict == "flat":
            return growth_mib < self.threshold_mib
        if self.verdict == "no-further-growth":
            return growth_mib - (previous_mib or 0.0) < self.threshold_mib
        if self.verdict == "keeps-growing":
            return growth_mib - (previous_mib or 0.0) >= self.threshold_mib
        return True

    def describe(self) -> str:
        text = {
            "grows": f"grows (>= {self.threshold_mib:.1f})",
            "flat": f"flat (< {self.threshold_mib:.1f})",
            "no-further-growth": f"no further growth (< peak +{self.threshold_mib:.1f})",
            "keeps-growing": f"keeps growing (>= peak +{self.threshold_mib:.1f})",
            "unchecked": "- (backward frees graphs)",
        }[self.verdict]
        return text + (f" [{', '.join(self.rules)}]" if self.rules else "")


def _grows_mib(retained_bytes: int, iters: int) -> float:
    return GROWS_FRACTION * retained_bytes * iters / MIB


def distinguishable(fm: ForwardMemory, iters: int) -> bool:
    """Whether every growth `fm` predicts shows at least `FLAT_SLACK_MIB` in `iters` forwards
    at the `GROWS_FRACTION` threshold (else "grows" and "flat" cannot be told apart)."""
    return all(b == 0 or _grows_mib(b, iters) >= FLAT_SLACK_MIB for b in (fm.retained_bytes, fm.surviving_bytes))


def expectations(fm: ForwardMemory, iters: int, *, then_backward: bool) -> tuple[Expectation, ...]:
    """One expectation per row of a repeated-forward run (see `labels`): after `iters`
    forwards; with `then_backward`, after one more forward and its backward (not checked:
    whether RSS drops depends on the allocator returning pages), and after `iters` more
    forwards, which retain again but only what the backward freed, so they stay under the
    earlier peak unless some graph survived the backward (then they grow past it)."""
    if not distinguishable(fm, iters):
        raise ValueError(
            f"{iters} forwards cannot tell growth from noise in {fm.framework}: half the predicted "
            f"growth ({_grows_mib(fm.retained_bytes, iters):.1f} MiB, after a backward "
            f"{_grows_mib(fm.surviving_bytes, iters):.1f} MiB) is under the flat slack ({FLAT_SLACK_MIB} MiB)"
        )
    first = (
        Expectation("grows", _grows_mib(fm.retained_bytes, iters), fm.rules)
        if fm.retained_bytes
        else Expectation("flat", FLAT_SLACK_MIB, fm.rules)
    )
    if not then_backward:
        return (first,)
    last = (
        Expectation("keeps-growing", _grows_mib(fm.surviving_bytes, iters), fm.rules)
        if fm.surviving_bytes
        else Expectation("no-further-growth", FLAT_SLACK_MIB, fm.rules)
    )
    return (first, Expectation("unchecked", 0.0), last)


@dataclass(frozen=True)
class Row:
    framework: Framework
    mode: str
    label: str
    seed_mib: float | None  # the reference figure (docs/semantics.md#golden-memory), if any
    growth_mib: float
    expectation: Expectation
    ok: bool


def judge_rows(
    framework: Framework,
    mode: str,
    measured: Sequence[tuple[str, float]],
    expected: Sequence[Expectation],
    labels: Sequence[str],
    seed_mib: Sequence[float] = (),
) -> list[Row]:
    """Each measured row against its expectation (`no-further-growth` and `keeps-growing`
    compare with the highest growth of the rows before)."""
    if [label for label, _ in measured] != list(labels):
        raise RuntimeError(f"{framework}/{mode} reported rows {list(measured)}, expected {list(labels)}")
    rows: list[Row] = []
    peak: float | None = None
    for i, ((label, growth), exp) in enumerate(zip(measured, expected, strict=True)):
        seed = seed_mib[i] if i < len(seed_mib) else None
        rows.append(Row(framework, mode, label, seed, growth, exp, exp.holds(growth, peak)))
        peak = growth if peak is None else max(peak, growth)
    return rows
