"""The program generator, written once against difftest's choice interface.

Programs grow statement by statement. The generator evaluates every value as it goes (through
the catalog's PyTorch lowering, without autograd), so an op is only applied where its input
domain holds: programs are valid by construction and nothing is rejected after the fact. When
an existing value does not fit an op's domain, fresh leaves drawn from the domain's range take
its place. Each statement is drawn inside the loop, so Hypothesis shrinks a program by
deleting statements and simplifying their choices.

The distribution is shaped for detection power (measured by
tests/quality/test_distribution.py):

* Most programs end in a backward of a *tracked* root reached through several recorded ops. The
  generator keeps a light track of which values depend on a require-grad autodiff leaf through
  ops in the grad region (`_Value.tracked`, `depth`: the longest such chain); ops take tracked
  inputs by preference, the deepest first, so programs grow chains, and the backward's root is
  the deepest tracked value by preference. A program rarely stops before it has a few ops.
* Every catalog op appears about equally often: an op is drawn by weight once and then tried on
  up to `op_attempts` inputs (existing values first, then fresh leaves, the last from a narrowed
  range and of a fresh shape), so ops whose domain or attributes rarely fit are not starved.
* Leaf values are continuous, uniform over the domain's range (strategies/choices.py), except
  for a share of leaves (`p_boundary_leaf`) that get some elements from the edges of the value
  space: the op's domain edges and kinks, 0 and -0.0, ties, tiny and subnormal magnitudes
  (strategies/boundary.py); with them, an op accepts inputs exactly at its kinks. An op whose
  domain lists kink points (relu's 0) takes a fresh first input with elements on them at
  times (`p_kink_leaf`, profile "kinks"), so a gradient meets its convention there.
* Some programs are sessions (strategies/sessions.py): after a backward, another
  forward and backward follow (up to `max_backwards`), reusing leaves, detached values and
  gradients read from the handle (and, rarely, values of the consumed graph); some hold a short
  training loop (a Linear, a loss, zero_grad, backward, an SGD step, repeated).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from difftest.choices import Choices
from difftest.divergences.bug_sites import MINMAX_UPDATES, writes_a_tie
from difftest.divergences.known_bugs import KnownBug, known_bug
from difftest.divergences.states import State
from difftest.ops.backend_support import call_refusal
from difftest.ops.catalog import OpSpec
from difftest.ops.domains import MAX_MAGNITUDE, Domain
from difftest.ops.dtype_support import supported
from difftest.ops.value_dtypes import CAST_ATTR_TYPE
from difftest.oracle.model import predict_burn
from difftest.program.dtypes import round_to
from difftest.program.ir import (
    MAX_RANK,
    Backward,
    Cut,
    Leaf,
    OpCall,
    Program,
    Region,
    Shape,
    Statement,
    gradient_sources,
    numel,
)
from difftest.program.shapes import ShapeError
from difftest.strategies import boundary, module_draws, sessions
from difftest.strategies.choices import weighted
from difftest.strategies.config import GenConfig
from difftest.strategies.values import _Value

_T = TypeVar("_T")
REGIONS: tuple[Region, ...] = ("grad", "no_grad", "inference_mode")
CUTS = ("detach", "without_autodiff", "autodiff")


# leaves an op's late attempts may draw beyond GenConfig.max_leaves: fresh inputs for its domain,
# a fresh first input of its rank on the last attempt (so an op is not given up for leaves alone)
FRESH_SLACK = 2


class _Builder:
    def __init__(self, c: Choices, cfg: GenConfig, dtype: str = "float32") -> None:
        self.c = c
        self.cfg = cfg
        self.dtype = dtype
        self.statements: list[Statement] = []
        self.values: list[_Value] = []
        self.counter = {"x": 0, "v": 0, "c": 0, "m": 0, "t": 0, "y": 0, "p": 0, "g": 0, "z": 0, "o": 0}
        self.specs = cfg.op_specs(dtype)
        self.weights = [cfg.weights.get(s.name, 1.0) for s in self.specs] if cfg.weights else [1.0] * len(self.specs)
        self.leaves = 0
        self._burn: tuple[tuple[Statement, ...], dict[str, State]] | None = None

    def burn_states(self) -> dict[str, State]:
        """The model's prediction of burn's state of each value of the statements so far
        (difftest/oracle/model.py), kept until a statement is added or rolled back."""
        if self._burn is None or len(self._burn[0]) != len(self.statements) or \
                any(a is not b for a, b in zip(self._burn[0], self.statements)):
            held = tuple(self.statements)
            self._burn = (held, dict(predict_burn(Program(held)).states))
        return self._burn[1]

    def floats(self, n: int, lo: float, hi: float) -> list[float]:
        """n data values in [lo, hi], each a value of the program's dtype (float32: as drawn)."""
        xs = self.c.floats(n, lo, hi)
        if self.dtype == "float32":
            return xs
        return [_inside(x, lo, hi, self.dtype) for x in xs]

    def statements_by_id(self) -> dict[str, Statement]:
        return {s.id: s for s in self.statements}

    def fresh(self, prefix: str) -> str:
        n = self.counter[prefix]
        self.counter[prefix] = n + 1
        return f"{prefix}{n}"

    def mark(self) -> tuple[int, int, int, dict[str, int]]:
        return len(self.statements), len(self.values), self.leaves, dict(self.counter)

    def rollback(self, mark: tuple[int, int, int, dict[str, int]]) -> None:
        """Forget the statements added since `mark` (the leaves of a failed op attempt)."""
        n_st, n_v, leaves, counter = mark
        del self.statements[n_st:]
        del self.values[n_v:]
        self.leaves = leaves
        self.counter = counter

    def visits(self, what: str) -> bool:
        """Whether to generate a known bug's site `what` the generator would avoid: always when
        GenConfig.avoid_known_bugs is off, else with GenConfig.p_known_site (the site stays under
        test for new bugs there; the bug's record explains the known one)."""
        if not self.cfg.avoid_known_bugs:
            return True
        if self.cfg.p_known_site > 0 and self.c.boolean(self.cfg.p_known_site):
            self.c.note(f"known-bug-visited:{what}")
            return True
        self.c.note(f"known-bug-avoided:{what}")
        return False

    def avoids(self, bug: KnownBug | None, what: str) -> bool:
        """Whether to skip a statement that triggers `bug` (None: it triggers none)."""
        return bug is not None and not self.visits(what)

    # ---------------------------------------------------------------- leaves
    def draw_shape(self, min_rank: int = 1) -> Shape:
        """A shape of rank 1 to 3 (rarely MAX_RANK), at least `min_rank`."""
        rank = min(self.c.integer(1, 3) if not self.c.boolean(0.1) else MAX_RANK, self.cfg.max_rank)
        return tuple(self.c.integer(1, self.cfg.max_dim) for _ in range(max(rank, min(min_rank, self.cfg.max_rank))))

    def leaf(self, shape: Shape, rng: tuple[float, float] = (-3.0, 3.0), domain: Domain | None = None,
             index: int = 0, pair: _Value | None = None, kink: bool = False) -> _Value:
        """A fresh leaf of `shape` with data in `rng`, drawn for input `index` of an op with
        `domain` (None: for no op yet) beside its input `pair` (for ties between inputs);
        `kink`: a kink leaf, some elements on the domain's kink points (boundary.draw_kink)."""
        c, cfg = self.c, self.cfg
        plain = c.boolean(cfg.p_plain_leaf)
        rg = c.boolean(cfg.p_require_grad) if not plain else c.boolean(cfg.p_plain_require_grad)
        data = self.floats(numel(shape), rng[0], rng[1])
        if kink and domain is not None:
            data, replaced = boundary.draw_kink(c, boundary.kink_options(self.dtype, domain, index), data)
            c.note("leaf:kink" if replaced else "leaf:kink-none")
        elif cfg.boundary and c.boolean(cfg.p_boundary_leaf):
            flat = pair.tensor.reshape(-1).tolist() if pair is not None and not pair.dtype else []
            opts = boundary.options(rng[0], rng[1], self.dtype, domain, index, flat)
            data, replaced = opts.draw(c, data)
            c.note("leaf:boundary" if replaced else "leaf:boundary-none")
        st = Leaf(self.fresh("x"), shape, tuple(data), "plain" if plain else "autodiff", rg)
        self.statements.append(st)
        tensor = torch.tensor(data, dtype=torch.float32).reshape(shape)
        v = _Value(st.id, shape, tensor, tracked=rg and not plain)
        self.values.append(v)
        self.leaves += 1
        c.note("leaf:" + ("plain" if plain else "autodiff") + (":require_grad" if rg else ""))
        return v

    # ---------------------------------------------------------------- picking values
    def likely(self, p: float) -> bool:
        """True with probability p, True being the choice a shrinker (and Hypothesis, which
        favours simple choices) goes to."""
        return not self.c.boolean(1.0 - p)

    def biased_index(self, n: int, p_first: float) -> int:
        """0 with probability p_first + (1 - p_first) / n, else uniform in [0, n); shrinks toward 0."""
        return self.c.integer(0, n - 1) if n > 1 and self.c.boolean(1.0 - p_first) else 0

    def pick_existing(self, pred: Callable[[_Value], bool]) -> _Value | None:
        """A value satisfying `pred`: with probability p_tracked_input a tracked one (the deepest
        likelier, so programs grow chains that a backward runs through), else any one (the
        choice a shrinker goes to: the most recent value)."""
        cands = [v for v in self.values if pred(v)]
        if any(v.consumed for v in cands) and not self.c.boolean(self.cfg.p_reuse_consumed):
            cands = [v for v in cands if not v.consumed]
        if not cands:
            return None
        # the deepest first, the most recent among equals
        tracked = sorted((v for v in cands[::-1] if v.tracked), key=lambda v: -v.depth)
        if tracked and self.c.boolean(self.cfg.p_tracked_input):
            return tracked[self.biased_index(len(tracked), self.cfg.p_deepest_input)]
        return self.c.choice(cands[::-1])  # shrinks toward the most recent value

    def input_for(self, shape: Shape, rng: tuple[float, float], dtype: str = "", domain: Domain | None = None,
                  pair: _Value | None = None) -> _Value | None:
        """A value of `shape` in `dtype` ("": the program's) for input 1 of an op with `domain`
        beside input `pair`: an existing one or a fresh leaf (None when no value of a cast's
        `dtype` has that shape)."""
        if not dtype and self.leaves < self.cfg.max_leaves and self.c.boolean(0.4):
            return self.leaf(shape, rng, domain, 1, pair)
        found = self.pick_existing(lambda v: v.shape == shape and v.dtype == dtype)
        return found if found is not None or dtype else self.leaf(shape, rng, domain, 1, pair)

    # ---------------------------------------------------------------- statements
    def op(self) -> bool:
        """One op drawn by weight, tried on up to `op_attempts` inputs (so ops whose domain or
        attributes rarely fit a random value still appear as often as the others)."""
        c = self.c
        spec = weighted(c, self.specs, self.weights)
        for attempt in range(self.cfg.op_attempts):
            mark = self.mark()
            if self.try_op(spec, attempt):
                return True
            self.rollback(mark)
        c.note(f"op-miss:{spec.name}")  # every attempt failed: how often an op is given up
        return False

    def try_op(self, spec: OpSpec, attempt: int) -> bool:
        c = self.c
        # The first attempts take existing values (which keeps chains going); where they do not
        # fit the domain, the later ones take fresh leaves, drawn from the domain's range, and the
        # last one a fresh first input of a fresh shape from that range narrowed around its middle
        # (as does any attempt that finds no existing value of the op's rank).
        fresh_ok = attempt >= self.cfg.op_attempts - 2
        last = attempt == self.cfg.op_attempts - 1
        narrow = 0.25 if last else 1.0

        def leaf_range(i: int) -> tuple[float, float]:
            lo, hi = spec.domain.leaf_range(i)
            mid, half = (lo + hi) / 2, (hi - lo) / 2 * narrow
            return (mid - half, mid + half)

        def existing() -> _Value | None:
            return self.pick_existing(lambda v: len(v.shape) >= spec.min_rank and (
                spec.first_input is None or spec.first_input.rank in (None, len(v.shape))) and (
                not v.dtype or supported(spec.name, v.dtype)))

        # A fresh first input on the last attempt, and on any attempt where no existing value is
        # of the op's rank (an op of an exact rank is not left to its last attempt alone).
        first = None
        if attempt == 0 and self.kink_leaf(spec):
            # an input on the op's kink points that a gradient reaches (boundary.py: kink leaves)
            fresh = spec.first_input.draw(c) if spec.first_input is not None else self.draw_shape(spec.min_rank)
            if len(fresh) >= spec.min_rank:
                first = self.leaf(fresh, leaf_range(0), spec.domain, kink=True)
        if first is None and not last:
            first = existing()
        # the last attempt may go two leaves over the budget, as fresh inputs for a domain may: an
        # op of an exact rank (an image's) that no value has is not given up for the leaves alone
        room = self.cfg.max_leaves + (FRESH_SLACK if last else 0)
        if first is None and self.leaves < room:
            # of the op's rank (an op of rank >= 2 is not starved by rank-1 fresh shapes)
            fresh = spec.first_input.draw(c) if spec.first_input is not None else self.draw_shape(spec.min_rank)
            if len(fresh) >= spec.min_rank:
                first = self.leaf(fresh, leaf_range(0), spec.domain)
        if first is None and last:
            first = existing()
        if first is None:
            return False
        # a value a cast made in another dtype: the op's other inputs in it too, never fresh
        # leaves (in the program's dtype; mixed dtypes are refused: dtype_support.MIXED)
        cast_in = first.dtype

        # the other inputs, as the entry's partner rule draws their shapes (each one drawn just
        # before its input), before the attributes or, for a rule that needs them, after
        inputs = [first]
        partners = spec.partners
        if partners is not None and not partners.after_attrs:
            for shape in partners.draw(c, first.shape, {}, self.cfg.max_dim):
                partner = self.input_for(shape, leaf_range(1), cast_in, spec.domain, first)
                if partner is None:
                    return False
                inputs.append(partner)
        attrs = spec.sample_attrs(c, [v.shape for v in inputs])
        if attrs is not None and self.cfg.boundary:
            attrs, snapped = boundary.snap_attrs(attrs, spec.attrs)
            if snapped:
                c.note("attr:boundary")
        if attrs is None or any(call_refusal(b, spec.name, attrs) is not None for b in self.cfg.backends):
            return False
        if partners is not None and partners.after_attrs:
            for shape in partners.draw(c, first.shape, attrs, self.cfg.max_dim):
                partner = self.input_for(shape, leaf_range(1), cast_in, spec.domain, first)
                if partner is None:
                    return False
                inputs.append(partner)
        shapes = [v.shape for v in inputs]
        try:
            spec.shape(shapes, attrs)
        except ShapeError:
            return False
        at_kinks = self.cfg.boundary  # exact kinks and ties are boundary values too
        if not spec.domain.accepts([v.tensor for v in inputs], attrs, at_kinks):
            if cast_in or not fresh_ok or self.leaves + len(inputs) > self.cfg.max_leaves + FRESH_SLACK:
                return False
            fresh_inputs: list[_Value] = []
            for i, v in enumerate(inputs):
                fresh_inputs.append(self.leaf(v.shape, leaf_range(i), spec.domain, i,
                                              fresh_inputs[0] if fresh_inputs else None))
            inputs = fresh_inputs
            if not spec.domain.accepts([v.tensor for v in inputs], attrs, at_kinks):
                c.note(f"domain-miss:{spec.name}")
                return False
        with torch.no_grad():
            out = spec.lower([v.tensor for v in inputs], attrs)
        # the result's dtype: a cast's target (when other than the program's), else its inputs'
        target = next((str(attrs[a.name]) for a in spec.attrs if a.type == CAST_ATTR_TYPE), None)
        out_dtype = cast_in if target is None else ("" if target == self.dtype else target)
        out = out.float() if out.is_floating_point() else out  # as float32 (the generator's own tracking)
        # finite and within MAX_MAGNITUDE (the max of |out| is NaN or inf where out has one)
        if out.numel() and not float(out.abs().max()) <= MAX_MAGNITUDE:
            c.note(f"out-of-range:{spec.name}")
            return False
        region = weighted(c, REGIONS, self.cfg.region_weights)
        st = OpCall(self.fresh("v"), spec.name, tuple(v.id for v in inputs), attrs, region)
        recorded = [region == "grad" and v.tracked for v in inputs]
        if self.avoids(known_bug(st, self.statements, cast_in or self.dtype, recorded),
                                                     spec.name):
            return False
        if region == "grad" and self.tie_of_one_source(st, inputs) and not self.visits(f"{spec.name}:one-source-tie"):
            return False
        self.statements.append(st)
        tracked_in = [v for v in inputs if v.tracked]
        tracked = region == "grad" and bool(tracked_in)
        depth = 1 + max(v.depth for v in tracked_in) if tracked else 0
        self.values.append(_Value(st.id, tuple(out.shape), out.detach().clone(), tracked, depth, dtype=out_dtype))
        c.note(f"op:{spec.name}")
        if region != "grad":
            c.note(f"region:{region}")
        return True

    def kink_leaf(self, spec: OpSpec) -> bool:
        """Whether the op's first input is a fresh kink leaf (GenConfig.p_kink_leaf): only for a
        domain that lists kink points for it, with boundary values on and a leaf to spare."""
        cfg = self.cfg
        if not (cfg.boundary and cfg.p_kink_leaf > 0 and "kink" in spec.domain.tags
                and spec.domain.boundary_values(0) and self.leaves < cfg.max_leaves):
            return False
        return self.c.boolean(cfg.p_kink_leaf)

    def tie_of_one_source(self, st: OpCall, inputs: Sequence[_Value]) -> bool:
        """A max/min update of two tracked values a gradient of each reaches one tracked source
        from, writing a value equal to the destination element it lands on: the tie whose
        gradient burn counts twice there (minmax-update-tie-grad-to-both, whose trigger is the
        update of a value by itself), avoided but for GenConfig.p_known_site of the times."""
        if st.op not in MINMAX_UPDATES or len(inputs) != 2 or not all(v.tracked for v in inputs):
            return False
        dest, values = inputs
        if dest.id == values.id:  # the record's own trigger, decided above
            return False
        if not writes_a_tie(st.attrs, dest.tensor.reshape(-1).tolist(), values.tensor.reshape(-1).tolist(),
                            [dest.shape, values.shape]):
            return False
        table = {x.id: x for x in self.statements}
        tracked = {v.id for v in self.values if v.tracked}
        return bool(gradient_sources(table, dest.id) & gradient_sources(table, values.id) & tracked)

    def cut(self) -> bool:
        c = self.c
        src = self.pick_existing(lambda v: True)
        if src is None:
            return False
        kind = weighted(c, CUTS, self.cfg.cut_weights)
        region = weighted(c, REGIONS, self.cfg.region_weights)
        st = Cut(self.fresh("c"), kind, src.id, region)  # type: ignore[arg-type]
        self.statements.append(st)
        keeps = kind == "autodiff" and src.tracked  # autodiff() keeps the graph; the others cut it
        self.values.append(_Value(st.id, src.shape, src.tensor, keeps, src.depth if keeps else 0, dtype=src.dtype))
        c.note(f"cut:{kind}")
        return True


    def backward(self) -> bool:
        """A backward of (most often) the deepest tracked op result not yet consumed. Known-bug
        triggers are not avoided here: a backward of a used leaf (backward-of-used-leaf-panics)
        is recognised by its known-bug record. The roots not drawn here are still tried:
        campaigns probe every other tracked value as the root (difftest/oracle/probe_run.py)."""
        # the deepest tracked op results first (the most recent among equals); not one whose
        # graph an earlier backward consumed, but rarely
        stale = sessions.stale(self)
        if stale and self.c.boolean(self.cfg.p_consumed_root):
            stale = set()
            self.c.note("backward:consumed-allowed")
        tracked = sorted((v for v in self.values[::-1] if v.tracked and v.depth > 0 and v.id not in stale),
                         key=lambda v: -v.depth)
        # rarely a require-grad leaf itself (PyTorch gives it ones; burn too, unless an earlier
        # backward consumed it as a root, or the known bug backward-of-used-leaf-panics)
        leaves = [v for v in self.values[::-1] if v.tracked and v.depth == 0]
        if leaves and self.c.boolean(self.cfg.p_leaf_root):
            root = leaves[self.biased_index(len(leaves), 0.5)]  # the most recent likelier
            self.c.note("backward:leaf")
        elif tracked and self.likely(self.cfg.p_tracked_root):
            root = tracked[self.biased_index(len(tracked), self.cfg.p_deepest_root)]
            self.c.note("backward:tracked")
        else:
            roots = [v for v in self.values[::-1] if v.id not in stale] or self.values[::-1]
            if not roots:
                return False
            root = self.c.choice(roots)
            self.c.note("backward:any" + (":consumed" if root.consumed else ""))
        backwards = sum(isinstance(s, Backward) for s in self.statements)
        ident = "bw" if backwards == 0 else f"bw{backwards}"
        retain = backwards < self.cfg.max_backwards - 1 and self.c.boolean(self.cfg.p_retain_graph)
        self.statements.append(Backward(ident, root.id, retain))
        if retain:
            self.c.note("backward:retain_graph")
        else:
            sessions.consume(self, root.id)
        return True


def _inside(x: float, lo: float, hi: float, dtype: str) -> float:
    """`x` (in [lo, hi]) rounded to `dtype`, moved toward the middle of the range until the
    rounded value is inside it (a bound itself need not be a value of the dtype)."""
    mid = (lo + hi) / 2
    for _ in range(64):
        r = round_to(x, dtype)
        if lo <= r <= hi:
            return r
        x = (x + mid) / 2
    raise ValueError(f"no {dtype} value in [{lo!r}, {hi!r}]")


def _grouped(c: Choices, fn: Callable[[], _T]) -> _T:
    """fn(), as one group of choices where the source supports it (Hypothesis: one span, which
    its shrinker deletes whole)."""
    group: Callable[[Callable[[], _T]], _T] | None = getattr(c, "group", None)
    return fn() if group is None else group(fn)


def generate(c: Choices, cfg: GenConfig | None = None) -> Program:
    cfg = cfg or GenConfig()
    dtype = cfg.draw_dtype(c)
    if dtype != "float32":
        c.note(f"dtype:{dtype}")
    b = _Builder(c, cfg, dtype)
    for _ in range(c.integer(1, 2)):
        _grouped(c, lambda: b.leaf(b.draw_shape()))

    def statement() -> bool:
        """One statement (with the choice to have it): False ends the program."""
        ops = sum(isinstance(s, OpCall) for s in b.statements)
        if not c.boolean(cfg.p_continue_short if ops < cfg.short_ops else cfg.p_continue):
            return False
        kind = weighted(c, ("op", "cut", "leaf", "module"), (*cfg.kind_weights, cfg.module_weight))
        if kind == "op":
            b.op()
        elif kind == "cut":
            b.cut()
        elif kind == "module":
            module_draws.module(b)
        elif b.leaves < cfg.max_leaves:
            b.leaf(b.draw_shape())
        return True

    if c.boolean(cfg.p_training):
        _grouped(c, lambda: sessions.training_loop(b))
    for _ in range(cfg.max_statements):
        if not _grouped(c, statement):
            break
    if c.boolean(cfg.p_backward) and _grouped(c, b.backward):
        # sessions: more forwards and backwards after the first
        for _ in range(cfg.max_backwards - 1):
            if not c.boolean(cfg.p_another_backward):
                break
            c.note("session")
            _grouped(c, lambda: sessions.after_backward(b))
            for _ in range(cfg.segment_statements):
                if not _grouped(c, statement):
                    break
            if not _grouped(c, b.backward):
                break
    checkpointing = "balanced" if c.boolean(cfg.p_checkpointing) else "disabled"
    if checkpointing != "disabled":
        c.note(f"checkpointing:{checkpointing}")
    return Program(tuple(b.statements), dtype, checkpointing)


def ops_of(program: Program) -> Sequence[str]:
    return [s.op for s in program.statements if isinstance(s, OpCall)]
