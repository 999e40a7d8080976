"""The program generator, written once against difftest's choice interface.

Programs grow statement by statement. The generator evaluates every value as it goes (through
the catalog's PyTorch lowering, without autograd), so an op is only applied where its input
domain holds: programs are valid by construction and nothing is rejected after the fact. When
an existing value does not fit an op's domain, fresh leaves drawn from the domain's range take
its place. Each statement is drawn inside the loop, so Hypothesis shrinks a program by
deleting statements and simplifying their choices.

The distribution is shaped for detection power (issue 10; measured by
tests/quality/test_distribution.py):

* Most programs end in a backward of a *tracked* root reached through several recorded ops. The
  generator keeps a light track of which values depend on a require-grad autodiff leaf through
  ops in the grad region (`_Value.tracked`, `depth`: the longest such chain); ops take tracked
  inputs by preference, the deepest first, so programs grow chains, and the backward's root is
  the deepest tracked value by preference. A program rarely stops before it has a few ops.
* Every catalog op appears about equally often: an op is drawn by weight once and then tried on
  up to `op_attempts` inputs (existing values first, then fresh leaves, the last from a narrowed
  range and of a fresh shape), so ops whose domain or attributes rarely fit are not starved.
* Leaf values are continuous, uniform over the domain's range (strategies/choices.py).
* Some programs are sessions (issue 11; strategies/sessions.py): after a backward, another
  forward and backward follow (up to `max_backwards`), reusing leaves, detached values and
  gradients read from the handle (and, rarely, values of the consumed graph); some hold a short
  training loop (a Linear, a loss, zero_grad, backward, an SGD step, repeated).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import torch

from difftest.choices import Choices
from difftest.divergences.known_bugs import known_bug
from difftest.exec.torch_exec import TorchModule, apply_module, build_module, module_param, transform_module
from difftest.exec.torch_modules import burn_inference_path
from difftest.ops import catalog
from difftest.ops.catalog import OpSpec
from difftest.ops.domains import MAX_MAGNITUDE
from difftest.ops.dtype_support import supported
from difftest.ops.nn_shapes import CONV, conv, conv_attrs
from difftest.oracle.model import predict
from difftest.oracle.states import BurnState
from difftest.program.dtypes import FLOAT_DTYPES, check_dtype, round_to
from difftest.program.ir import (
    MAX_RANK,
    TRANSFORMS,
    Apply,
    Backward,
    Cut,
    InlineTensor,
    Leaf,
    Module,
    OpCall,
    Param,
    Program,
    Region,
    Shape,
    Statement,
    Transform,
    numel,
)
from difftest.program.module_kinds import module_kind
from difftest.program.shapes import ShapeError
from difftest.program.value_dtypes import CAST_ATTR_TYPE
from strategies import sessions
from strategies.choices import weighted


@dataclass(frozen=True)
class GenConfig:
    """Knobs of the default strategy (all keyword-only in `programs()`)."""

    ops: tuple[str, ...] | None = None  # restrict to these ops (None: the whole catalog)
    weights: dict[str, float] = field(default_factory=dict)  # per-op weight, default 1
    max_statements: int = 10
    max_leaves: int = 6
    max_dim: int = 4
    max_rank: int = MAX_RANK
    # after each statement another one (up to max_statements): with p_continue_short while the
    # program has fewer than `short_ops` ops (few programs end before their ops), else p_continue
    p_continue: float = 0.85
    p_continue_short: float = 0.98
    short_ops: int = 5
    p_backward: float = 0.95
    # the backward's root: a tracked op result (one that depends on a require-grad leaf through
    # recorded ops), the deepest first, with this probability when there is one; else any value
    p_tracked_root: float = 0.95
    # an op's inputs: a tracked value, with this probability when there is one of the right
    # shape; else any value
    p_tracked_input: float = 0.9
    p_deepest_input: float = 0.75  # of those tracked inputs, the deepest one (else any)
    p_deepest_root: float = 0.9  # of the tracked roots, the deepest one (else any)
    op_attempts: int = 4  # a drawn op is tried on this many inputs before it is given up
    p_plain_leaf: float = 0.08
    p_require_grad: float = 0.85
    p_plain_require_grad: float = 0.05  # asks burn to panic (rule plain-leaf-require-grad)
    region_weights: tuple[float, float, float] = (10.0, 1.5, 1.0)  # grad, no_grad, inference_mode
    kind_weights: tuple[float, float, float] = (10.0, 2.0, 1.0)  # op, cut, leaf
    cut_weights: tuple[float, float, float] = (3.0, 2.0, 1.0)  # detach, without_autodiff, autodiff
    module_weight: float = 0.5  # next to kind_weights: an nn module (built, transformed, used)
    linear_weight: float = 3.0  # linear vs dropout (weight 1)
    norm_weight: float = 0.5  # a normalisation module (batch_norm, layer_norm) where the value fits, vs
    # linear + dropout (linear_weight + 1)
    conv_weight: float = 1.0  # a conv2d module where the value is an image [N, C, H, W], vs linear + dropout
    embedding_weight: float = 0.6  # an embedding module (its indices a leaf of its own), vs linear + dropout
    dropout_p_weights: tuple[float, float, float] = (1.0, 2.0, 0.5)  # p = 0, 0.5, 1 (burn panics)
    transform_weights: tuple[float, ...] = (2.0, 2.0, 1.0, 1.0, 1.0)  # valid train no_grad freeze unfreeze
    avoid_known_bugs: bool = True  # skip triggers listed in difftest/divergences/known_bugs.py
    # sessions (strategies/sessions.py): after a backward, another forward and backward with
    # this probability (up to max_backwards); each later forward has up to segment_statements
    max_backwards: int = 4
    p_another_backward: float = 0.3
    segment_statements: int = 5
    p_grad_read: float = 0.5  # after a backward that is not the last: read 1 or 2 gradients
    p_zero_grad: float = 0.4
    p_retain_graph: float = 0.05
    p_reuse_consumed: float = 0.1  # an input from a graph an earlier backward consumed
    p_consumed_root: float = 0.1  # a later backward's root may reach a consumed graph
    p_leaf_root: float = 0.03  # a backward of a require-grad leaf itself
    p_training: float = 0.06  # a training loop (Linear, loss, backward, SGD step; 1 to 3 times)
    # the program's dtype (difftest/program/dtypes.py): drawn with these weights over FLOAT_DTYPES
    # (float32, float64, float16, bfloat16), or always `dtype` when given; in a dtype other than
    # float32 only the ops the catalog's dtype table supports in it are drawn (ops/dtype_support.py)
    dtype_weights: tuple[float, float, float, float] = (80.0, 10.0, 5.0, 5.0)
    dtype: str | None = None
    only_supported: bool = True  # False: draw every op in any dtype (the dtype-support measurement)

    @staticmethod
    def profile(name: str, **kw: object) -> GenConfig:
        """The GenConfig of a named profile (`difftest fuzz --profile`), with `kw` on top."""
        if name not in PROFILES:
            raise ValueError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}")
        return GenConfig(**{**PROFILES[name], **kw})  # type: ignore[arg-type]

    def op_specs(self, dtype: str = "float32") -> list[OpSpec]:
        names = self.ops if self.ops is not None else tuple(catalog.CATALOG)
        unknown = [n for n in names if n not in catalog.CATALOG]
        if unknown:
            raise ValueError(f"unknown op(s) {unknown}; `difftest ops` lists the catalog")
        specs = [catalog.CATALOG[n] for n in names if supported(n, dtype) or not self.only_supported]
        if names and not specs:
            raise ValueError(f"none of the ops {list(names)} runs in {dtype} (difftest/ops/dtype_support.py)")
        return specs

    def draw_dtype(self, c: Choices) -> str:
        if self.dtype is not None:
            return check_dtype(self.dtype, "GenConfig.dtype")
        dtype = weighted(c, FLOAT_DTYPES, self.dtype_weights)
        if self.ops is not None and not any(supported(op, dtype) for op in self.ops):
            return "float32"  # none of the restricted ops is drawn in that dtype
        return dtype


# Named distributions for campaigns: "sessions" makes most programs sessions (several backwards,
# gradient reads, training loops), for campaigns about graph lifetimes and optimizer steps.
# "float64", "float16", "bfloat16" (`difftest fuzz --dtype`): the default distribution with every
# program in that dtype.
PROFILES: dict[str, dict[str, object]] = {
    "default": {},
    "sessions": {"p_another_backward": 0.75, "p_training": 0.3, "p_grad_read": 0.7},
    "float32": {"dtype": "float32"},
    "float64": {"dtype": "float64"},
    "float16": {"dtype": "float16"},
    "bfloat16": {"dtype": "bfloat16"},
}

_T = TypeVar("_T")
REGIONS: tuple[Region, ...] = ("grad", "no_grad", "inference_mode")
CUTS = ("detach", "without_autodiff", "autodiff")


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


class _Builder:
    def __init__(self, c: Choices, cfg: GenConfig, dtype: str = "float32") -> None:
        self.c = c
        self.cfg = cfg
        self.dtype = dtype
        self.statements: list[Statement] = []
        self.values: list[_Value] = []
        self.counter = {"x": 0, "v": 0, "c": 0, "m": 0, "t": 0, "y": 0, "p": 0, "g": 0, "z": 0, "o": 0}
        self.specs = cfg.op_specs(dtype)
        self.weights = [cfg.weights.get(s.name, 1.0) for s in self.specs]
        self.leaves = 0

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

    # ---------------------------------------------------------------- leaves
    def draw_shape(self) -> Shape:
        rank = min(self.c.integer(1, 3) if not self.c.boolean(0.1) else MAX_RANK, self.cfg.max_rank)
        return tuple(self.c.integer(1, self.cfg.max_dim) for _ in range(rank))

    def leaf(self, shape: Shape, rng: tuple[float, float] = (-3.0, 3.0)) -> _Value:
        c, cfg = self.c, self.cfg
        plain = c.boolean(cfg.p_plain_leaf)
        rg = c.boolean(cfg.p_require_grad) if not plain else c.boolean(cfg.p_plain_require_grad)
        data = self.floats(numel(shape), rng[0], rng[1])
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

    def input_for(self, shape: Shape, rng: tuple[float, float], dtype: str = "") -> _Value | None:
        """A value of `shape` in `dtype` ("": the program's): an existing one or a fresh leaf
        (None when no value of a cast's `dtype` has that shape)."""
        if not dtype and self.leaves < self.cfg.max_leaves and self.c.boolean(0.4):
            return self.leaf(shape, rng)
        found = self.pick_existing(lambda v: v.shape == shape and v.dtype == dtype)
        return found if found is not None or dtype else self.leaf(shape, rng)

    # ---------------------------------------------------------------- statements
    def op(self) -> bool:
        """One op drawn by weight, tried on up to `op_attempts` inputs (so ops whose domain or
        attributes rarely fit a random value still appear as often as the others)."""
        spec = weighted(self.c, self.specs, self.weights)
        for attempt in range(self.cfg.op_attempts):
            mark = self.mark()
            if self.try_op(spec, attempt):
                return True
            self.rollback(mark)
        return False

    def try_op(self, spec: OpSpec, attempt: int) -> bool:
        c = self.c
        # The first attempts take existing values (which keeps chains going); where they do not
        # fit the domain, the later ones take fresh leaves, drawn from the domain's range, and the
        # last one a fresh first input of a fresh shape from that range narrowed around its middle.
        fresh_ok = attempt >= self.cfg.op_attempts - 2
        last = attempt == self.cfg.op_attempts - 1
        narrow = 0.25 if last else 1.0

        def leaf_range(i: int) -> tuple[float, float]:
            lo, hi = spec.domain.leaf_range(i)
            mid, half = (lo + hi) / 2, (hi - lo) / 2 * narrow
            return (mid - half, mid + half)

        first = None
        if last and self.leaves < self.cfg.max_leaves:
            fresh = spec.first_input.draw(c) if spec.first_input is not None else self.draw_shape()
            if len(fresh) >= spec.min_rank:
                first = self.leaf(fresh, leaf_range(0))
        if first is None:
            first = self.pick_existing(lambda v: len(v.shape) >= spec.min_rank and (
                spec.first_input is None or len(v.shape) == spec.first_input.rank) and (
                not v.dtype or supported(spec.name, v.dtype)))
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
                partner = self.input_for(shape, leaf_range(1), cast_in)
                if partner is None:
                    return False
                inputs.append(partner)
        attrs = spec.sample_attrs(c, [v.shape for v in inputs])
        if attrs is None:
            return False
        if partners is not None and partners.after_attrs:
            for shape in partners.draw(c, first.shape, attrs, self.cfg.max_dim):
                partner = self.input_for(shape, leaf_range(1), cast_in)
                if partner is None:
                    return False
                inputs.append(partner)
        shapes = [v.shape for v in inputs]
        try:
            spec.shape(shapes, attrs)
        except ShapeError:
            return False
        if not spec.domain.accepts([v.tensor for v in inputs], attrs):
            if cast_in or not fresh_ok or self.leaves + len(inputs) > self.cfg.max_leaves + 2:
                return False
            inputs = [self.leaf(v.shape, leaf_range(i)) for i, v in enumerate(inputs)]
            if not spec.domain.accepts([v.tensor for v in inputs], attrs):
                c.note(f"domain-miss:{spec.name}")
                return False
        with torch.no_grad():
            out = spec.lower([v.tensor for v in inputs], attrs)
        # the result's dtype: a cast's target (when other than the program's), else its inputs'
        target = next((str(attrs[a.name]) for a in spec.attrs if a.type == CAST_ATTR_TYPE), None)
        out_dtype = cast_in if target is None else ("" if target == self.dtype else target)
        out = out.float() if out.is_floating_point() else out  # as float32 (the generator's own tracking)
        if not bool(torch.isfinite(out).all()) or (out.numel() and float(out.abs().max()) > MAX_MAGNITUDE):
            c.note(f"out-of-range:{spec.name}")
            return False
        region = weighted(c, REGIONS, self.cfg.region_weights)
        st = OpCall(self.fresh("v"), spec.name, tuple(v.id for v in inputs), attrs, region)
        recorded = [region == "grad" and v.tracked for v in inputs]
        if self.cfg.avoid_known_bugs and known_bug(st, self.statements, cast_in or self.dtype, recorded) is not None:
            c.note(f"known-bug-avoided:{spec.name}")
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

    def module(self) -> bool:
        """An nn module fitted to an existing value: a Linear whose `in` is the value's last dim
        (weights drawn here) or a Dropout; then transforms of it, forwards and parameters."""
        c, cfg = self.c, self.cfg
        if c.boolean(cfg.embedding_weight / (cfg.embedding_weight + cfg.linear_weight + 1.0)):
            return self.embedding_module()
        src = self.pick_existing(lambda v: not v.dtype)  # modules compute in the program's dtype
        if src is None:
            return False
        norms = self.norms_fitting(src)
        if norms and c.boolean(cfg.norm_weight / (cfg.norm_weight + cfg.linear_weight + 1.0)):
            st = self.norm_module(c.choice(norms), src)
        elif len(src.shape) == 4 and c.boolean(cfg.conv_weight / (cfg.conv_weight + cfg.linear_weight + 1.0)):
            conv = self.conv_module(src)
            if conv is None:
                return False
            st = conv
        elif c.boolean(cfg.linear_weight / (cfg.linear_weight + 1.0)):
            d_in, d_out = src.shape[-1], c.integer(1, cfg.max_dim)
            weight = InlineTensor((d_out, d_in), tuple(self.floats(d_out * d_in, -1.0, 1.0)))
            bias = InlineTensor((d_out,), tuple(self.floats(d_out, -1.0, 1.0))) if c.boolean(0.7) else None
            st = Module(self.fresh("m"), "linear", weight, bias)
        else:
            p = weighted(c, (0.0, 0.5, 1.0), cfg.dropout_p_weights)
            st = Module(self.fresh("m"), "dropout", p=p)
        self.statements.append(st)
        c.note(f"module:{st.module}")
        handles = [(st.id, _Handle(TorchModule(build_module(st, torch.float32)), st.module, st.p))]
        if st.module == "batch_norm":  # its running statistics change as the program runs
            return self.batch_norm_uses(st, src, handles)
        self.transforms(handles)
        for _ in range(c.integer(1, 2)):
            ident, handle = c.choice(handles[::-1])
            if st.weight is not None and c.boolean(0.3):  # a kind with parameters, built with them
                self.param_read(st, ident, handle)
                continue
            x = src if c.boolean(0.7) else self.pick_existing(lambda v: _fits(st, src, v) and not v.dtype)
            x = x if x is not None else src  # every other fitting value is in a consumed graph
            if x is not src and st.module in NORM_KINDS and st.module not in self.norms_fitting(x):
                x = src  # a normalisation only of values away from its tie (nearly constant groups)
            with torch.no_grad():
                out = apply_module(handle.module, x.tensor)
            if not bool(torch.isfinite(out).all()) or (out.numel() and float(out.abs().max()) > MAX_MAGNITUDE):
                c.note("out-of-range:apply")
                continue
            app = Apply(self.fresh("y"), ident, x.id)
            self.statements.append(app)
            if handle.valid:
                tracked, depth = False, 0
            elif module_kind(handle.kind).params and st.weight is not None:
                tracked = x.tracked or handle.params_require_grad
                depth = x.depth + 1 if x.tracked else 1
            else:  # dropout: deterministic only where it returns its input (a group_norm without
                # parameters: p = 0)
                tracked = x.tracked and (handle.p == 0.0 or not handle.training)
                depth = x.depth
            self.values.append(_Value(app.id, tuple(out.shape), out.detach().clone(), tracked, depth))
            c.note("apply")
        return True

    def transforms(self, handles: list[tuple[str, _Handle]]) -> None:
        """0 to 2 transforms of the module's handles (each of the latest handles likelier)."""
        for _ in range(self.c.integer(0, 2)):
            self.transform(handles)

    def transform(self, handles: list[tuple[str, _Handle]]) -> None:
        """One transform of one of the module's handles (the latest likelier), a new handle."""
        c = self.c
        ident, handle = c.choice(handles[::-1])
        kind = weighted(c, TRANSFORMS, self.cfg.transform_weights)
        t = Transform(self.fresh("t"), kind, ident)  # type: ignore[arg-type]
        self.statements.append(t)
        handles.append((t.id, _transformed(handle, kind)))
        c.note(f"transform:{kind}")

    def param_read(self, st: Module, ident: str, handle: _Handle) -> None:
        """A `param` read of the weight (or the bias, where it has one) through the handle `ident`."""
        name = "bias" if st.bias is not None and self.c.boolean(0.3) else "weight"
        param = Param(self.fresh("p"), ident, name)  # type: ignore[arg-type]
        self.statements.append(param)
        tensor = getattr(handle.module.module, name).detach().clone()
        self.values.append(_Value(param.id, tuple(tensor.shape), tensor))
        self.c.note("param")

    def embedding_module(self) -> bool:
        """An embedding table, transforms of it, forwards on leaves of indices [B, L] (a row
        picked twice, so that its gradient must accumulate, as the embedding op's) and, most
        often, a read of its weight (whose gradient is the only one its backward has). The
        indices are data (a leaf that does not require grad), as token ids are; they are not
        values other statements draw from."""
        c, cfg = self.c, self.cfg
        rows, dim = c.integer(2, cfg.max_dim + 1), c.integer(1, cfg.max_dim)
        weight = InlineTensor((rows, dim), tuple(self.floats(rows * dim, -1.0, 1.0)))
        st = Module(self.fresh("m"), "embedding", weight)
        self.statements.append(st)
        c.note("module:embedding")
        handles = [(st.id, _Handle(TorchModule(build_module(st, torch.float32)), st.module))]
        self.transforms(handles)
        indices: list[Leaf] = []
        for _ in range(c.integer(1, 2)):
            ident, handle = c.choice(handles[::-1])
            idx = c.choice(indices) if indices and c.boolean(0.3) else self.index_leaf(rows)
            if idx not in indices:
                indices.append(idx)
            with torch.no_grad():
                out = apply_module(handle.module, torch.tensor(idx.data).reshape(idx.shape))
            app = Apply(self.fresh("y"), ident, idx.id)
            self.statements.append(app)
            tracked = not handle.valid and handle.params_require_grad
            self.values.append(_Value(app.id, tuple(out.shape), out.detach().clone(), tracked, int(tracked)))
            c.note("apply:embedding")
        # the indices have no gradient: the weight's is all there is to see of its backward
        if c.boolean(0.8):
            ident, handle = c.choice(handles[::-1])
            self.param_read(st, ident, handle)
        return True

    def index_leaf(self, rows: int) -> Leaf:
        """A leaf of indices [B, L] in [0, rows), one of them repeated when there are two or more
        (the embedding op's draw, difftest/ops/nn_shapes.py), on burn's autodiff device or rarely
        the plain one; it does not require grad."""
        c = self.c
        shape = (c.integer(1, 2), c.integer(1, 4))
        data = [c.integer(0, rows - 1) for _ in range(numel(shape))]
        if len(data) > 1 and len(set(data)) == len(data):
            data[-1] = data[0]
        plain = c.boolean(self.cfg.p_plain_leaf)
        st = Leaf(self.fresh("x"), shape, tuple(float(i) for i in data), "plain" if plain else "autodiff", False)
        self.statements.append(st)
        c.note("leaf:indices" + (":plain" if plain else ""))
        return st

    def norms_fitting(self, src: _Value) -> list[str]:
        """The normalisation kinds a module fitted to `src` can be: layer_norm over a last dim of
        more than one element; batch_norm for ranks 2 to 4 with more than one value per channel (PyTorch's
        train-mode forward needs them) on burn's autodiff device (its train path)."""
        shape = src.shape
        # a layer_norm over one element is its bias (a constant: its gradient is all rounding);
        # a (nearly) constant row or channel is the normalisations' tie: x - mean is rounding,
        # which the division by sqrt(var + eps) blows up (kept away from, like ops' kinks)
        kinds = ["layer_norm", "rms_norm"] if shape[-1] > 1 and _spread(src.tensor, [-1]) else []
        if 2 <= len(shape) <= 4 and numel(shape) > shape[1] and \
                _spread(src.tensor, [d for d in range(len(shape)) if d != 1]) and self.on_autodiff(src.id):
            kinds.append("batch_norm")
        if _group_counts(src):
            kinds.append("group_norm")
        kinds = [k for k in kinds if supported(k, self.dtype)]  # difftest/ops/dtype_support.py
        if self.cfg.avoid_known_bugs:
            kinds = [k for k in kinds if known_bug(Module("_", k), self.statements, self.dtype) is None]
        return kinds

    def on_autodiff(self, ident: str) -> bool:
        """Whether burn holds the value `ident` on the autodiff device (the model's prediction)."""
        state = predict(Program(tuple(self.statements))).burn.states.get(ident)
        return isinstance(state, BurnState) and state.is_autodiff

    def conv_module(self, src: _Value) -> Module | None:
        """A conv2d fitted to the image `src`, its attributes and weight drawn as the conv2d op's
        (difftest/ops/nn_shapes.py); None when the drawn kernel does not fit the image."""
        c = self.c
        attrs = conv_attrs(2)(c, [src.shape])
        assert attrs is not None
        shapes = list(CONV.draw(c, src.shape, attrs, self.cfg.max_dim))
        try:
            conv(2)([src.shape, *shapes], attrs)
        except ShapeError:
            c.note("no-fit:conv2d")
            return None
        w = shapes[0]
        weight = InlineTensor(w, tuple(self.floats(numel(w), -1.0, 1.0)))
        bias = InlineTensor((w[0],), tuple(self.floats(w[0], -1.0, 1.0))) if len(shapes) == 2 else None
        return Module(self.fresh("m"), "conv2d", weight, bias, attrs={
            "stride": list(attrs["stride"]), "padding": list(attrs["padding"]), "dilation": list(attrs["dilation"]),
            "groups": attrs["groups"]})

    def norm_module(self, kind: str, src: _Value) -> Module:
        c = self.c
        if kind == "rms_norm":
            d = src.shape[-1]
            weight = InlineTensor((d,), tuple(self.floats(d, 0.5, 1.5)))
            return Module(self.fresh("m"), "rms_norm", weight, attrs={"d_model": d, "epsilon": 1e-5})
        if kind == "group_norm":
            n, groups = src.shape[1], c.choice(_group_counts(src))
            affine = c.boolean(0.8)
            gamma = InlineTensor((n,), tuple(self.floats(n, 0.5, 1.5))) if affine else None
            beta = InlineTensor((n,), tuple(self.floats(n, -1.0, 1.0))) if affine else None
            return Module(self.fresh("m"), "group_norm", gamma, beta,
                          attrs={"num_groups": groups, "num_channels": n, "epsilon": 1e-5})
        if kind == "layer_norm":
            d = src.shape[-1]
            weight = InlineTensor((d,), tuple(self.floats(d, 0.5, 1.5)))
            bias = InlineTensor((d,), tuple(self.floats(d, -1.0, 1.0))) if c.boolean(0.7) else None
            return Module(self.fresh("m"), "layer_norm", weight, bias, attrs={"d_model": d, "epsilon": 1e-5})
        n = src.shape[1]
        weight = InlineTensor((n,), tuple(self.floats(n, 0.5, 1.5)))
        bias = InlineTensor((n,), tuple(self.floats(n, -1.0, 1.0)))
        buffers = {"running_mean": InlineTensor((n,), tuple(self.floats(n, -1.0, 1.0))),
                   "running_var": InlineTensor((n,), tuple(self.floats(n, 0.5, 2.0)))}
        momentum = c.choice((0.1, 0.25, 0.5))
        return Module(self.fresh("m"), "batch_norm", weight, bias, attrs={"num_features": n, "epsilon": 1e-5,
                                                                          "momentum": momentum}, buffers=buffers)

    def batch_norm_uses(self, st: Module, src: _Value, handles: list[tuple[str, _Handle]]) -> bool:
        """Forwards of a batch_norm (on `src`, train mode first), reads of its running
        statistics, transforms: a train-mode forward updates the statistics, so values are not
        precomputed here: each forward's output is computed by running it (as the executor does)."""
        c = self.c
        for _ in range(c.integer(1, 3)):
            if c.boolean(0.4):
                self.transform(handles)
            ident, handle = c.choice(handles[::-1])
            if c.boolean(0.3):
                name = c.choice(("running_mean", "running_var", "weight", "bias"))
                param = Param(self.fresh("p"), ident, name)
                self.statements.append(param)
                tensor = module_param(handle.module, name).detach().clone()
                self.values.append(_Value(param.id, tuple(tensor.shape), tensor))
                c.note("param")
                continue
            # burn's train() after freeze() keeps the inference path (batch-norm-freeze-survives-train)
            with torch.no_grad(), burn_inference_path(handle.module.module, not handle.burn_configured):
                out = apply_module(handle.module, src.tensor)
            app = Apply(self.fresh("y"), ident, src.id)
            self.statements.append(app)
            tracked = not handle.valid and (src.tracked or handle.params_require_grad)
            depth = src.depth + 1 if tracked else 0
            self.values.append(_Value(app.id, tuple(out.shape), out.detach().clone(), tracked, depth))
            c.note("apply:batch_norm")
        return True

    def backward(self) -> bool:
        """A backward of (most often) the deepest tracked op result not yet consumed. Known-bug
        triggers are not avoided here: a backward of a used leaf (backward-of-used-leaf-panics)
        is recognised by its known-bug record. The roots not drawn here are still tried:
        campaigns probe every other tracked value as the root (difftest/exec/probes.py)."""
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


NORM_KINDS = ("batch_norm", "layer_norm", "rms_norm", "group_norm")


def _fits(st: Module, src: _Value, v: _Value) -> bool:
    """Whether the module `st`, fitted to `src`, can also be applied to `v`."""
    if st.module == "conv2d":  # the same channels and image size (the kernel fits)
        return v.shape[1:] == src.shape[1:]
    if st.module == "group_norm":
        return v.shape[1:2] == src.shape[1:2] and st.attrs["num_groups"] in _group_counts(v)
    return v.shape[-1:] == src.shape[-1:]


def _group_counts(v: _Value) -> list[int]:
    """The group counts a group_norm over `v` can have: `v` of rank 2 to 4 with more than 2
    elements (burn panics on fewer), the groups dividing its channels (dim 1), more than one
    element per group (one is the bias: a constant) and every group spread (the normalisations' tie)."""
    shape = v.shape
    if not 2 <= len(shape) <= 4 or numel(shape) <= 2:
        return []
    n, c = shape[0], shape[1]
    return [g for g in range(1, c + 1) if c % g == 0 and numel(shape) // (n * g) > 1
            and _spread(v.tensor.reshape(n, g, -1), [2])]


def _spread(x: torch.Tensor, dims: list[int], rel: float = 1e-2) -> bool:
    """Whether every slice of `x` over `dims` has a standard deviation of at least `rel` of its
    largest magnitude (and above zero): no (nearly) constant row or channel."""
    x = x.double()
    std = x.std(dim=dims, unbiased=False)
    scale = x.abs().amax(dim=dims)
    return bool((std > rel * scale).all()) and bool((std > 0).all())


def _transformed(h: _Handle, kind: str) -> _Handle:
    module = transform_module(h.module, kind)
    if kind == "valid":
        return replace(h, module=module, valid=True, training=False)
    if kind == "train":
        return replace(h, module=module, valid=False, training=True)
    if kind == "no_grad":
        return replace(h, module=module, params_require_grad=False)
    if kind == "freeze":
        return replace(h, module=module, params_require_grad=False, training=False, burn_configured=False)
    return replace(h, module=module, params_require_grad=True, training=True, valid=False,  # unfreeze
                   burn_configured=True)


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
            b.module()
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
    return Program(tuple(b.statements), dtype)


def ops_of(program: Program) -> Sequence[str]:
    return [s.op for s in program.statements if isinstance(s, OpCall)]
