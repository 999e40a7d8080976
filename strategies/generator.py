"""The program generator, written once against difftest's choice interface.

Programs grow statement by statement. The generator evaluates every value as it goes (through
the catalog's PyTorch lowering, without autograd), so an op is only applied where its input
domain holds: programs are valid by construction and nothing is rejected after the fact. When
an existing value does not fit an op's domain, fresh leaves drawn from the domain's range take
its place. Each statement is drawn inside the loop, so Hypothesis shrinks a program by
deleting statements and simplifying their choices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from difftest import catalog
from difftest.catalog import VARIADIC, OpSpec
from difftest.choices import Choices
from difftest.domains import MAX_MAGNITUDE
from difftest.ir import (
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
from difftest.known_bugs import known_bug
from difftest.shapes import ShapeError
from difftest.torch_exec import TorchModule, apply_module, build_module, transform_module

from .choices import weighted


@dataclass(frozen=True)
class GenConfig:
    """Knobs of the default strategy (all keyword-only in `programs()`)."""

    ops: tuple[str, ...] | None = None  # restrict to these ops (None: the whole catalog)
    weights: dict[str, float] = field(default_factory=dict)  # per-op weight, default 1
    max_statements: int = 10
    max_leaves: int = 6
    max_dim: int = 4
    max_rank: int = MAX_RANK
    p_backward: float = 0.8
    p_plain_leaf: float = 0.15
    p_require_grad: float = 0.7
    p_plain_require_grad: float = 0.05  # asks burn to panic (rule plain-leaf-require-grad)
    region_weights: tuple[float, float, float] = (8.0, 1.5, 1.0)  # grad, no_grad, inference_mode
    kind_weights: tuple[float, float, float] = (6.0, 2.0, 1.0)  # op, cut, leaf
    cut_weights: tuple[float, float, float] = (3.0, 2.0, 1.0)  # detach, without_autodiff, autodiff
    module_weight: float = 0.5  # next to kind_weights: an nn module (built, transformed, used)
    linear_weight: float = 3.0  # linear vs dropout (weight 1)
    dropout_p_weights: tuple[float, float, float] = (1.0, 2.0, 0.5)  # p = 0, 0.5, 1 (burn panics)
    transform_weights: tuple[float, ...] = (2.0, 2.0, 1.0, 1.0, 1.0)  # valid train no_grad freeze unfreeze
    avoid_known_bugs: bool = True  # skip triggers listed in difftest/known_bugs.py

    def op_specs(self) -> list[OpSpec]:
        names = self.ops if self.ops is not None else tuple(catalog.CATALOG)
        unknown = [n for n in names if n not in catalog.CATALOG]
        if unknown:
            raise ValueError(f"unknown op(s) {unknown}; `difftest ops` lists the catalog")
        return [catalog.CATALOG[n] for n in names]


REGIONS: tuple[Region, ...] = ("grad", "no_grad", "inference_mode")
CUTS = ("detach", "without_autodiff", "autodiff")


@dataclass
class _Value:
    id: str
    shape: Shape
    tensor: torch.Tensor  # concrete float32 value, no autograd


class _Builder:
    def __init__(self, c: Choices, cfg: GenConfig) -> None:
        self.c = c
        self.cfg = cfg
        self.statements: list[Statement] = []
        self.values: list[_Value] = []
        self.counter = {"x": 0, "v": 0, "c": 0, "m": 0, "t": 0, "y": 0, "p": 0}
        self.specs = cfg.op_specs()
        self.weights = [cfg.weights.get(s.name, 1.0) for s in self.specs]
        self.leaves = 0

    def fresh(self, prefix: str) -> str:
        n = self.counter[prefix]
        self.counter[prefix] = n + 1
        return f"{prefix}{n}"

    # ---------------------------------------------------------------- leaves
    def draw_shape(self) -> Shape:
        rank = min(self.c.integer(1, 3) if not self.c.boolean(0.1) else MAX_RANK, self.cfg.max_rank)
        return tuple(self.c.integer(1, self.cfg.max_dim) for _ in range(rank))

    def leaf(self, shape: Shape, rng: tuple[float, float] = (-3.0, 3.0)) -> _Value:
        c, cfg = self.c, self.cfg
        plain = c.boolean(cfg.p_plain_leaf)
        rg = c.boolean(cfg.p_require_grad) if not plain else c.boolean(cfg.p_plain_require_grad)
        data = c.floats(numel(shape), rng[0], rng[1])
        st = Leaf(self.fresh("x"), shape, tuple(data), "plain" if plain else "autodiff", rg)
        self.statements.append(st)
        v = _Value(st.id, shape, torch.tensor(data, dtype=torch.float32).reshape(shape))
        self.values.append(v)
        self.leaves += 1
        c.note("leaf:" + ("plain" if plain else "autodiff") + (":require_grad" if rg else ""))
        return v

    # ---------------------------------------------------------------- partners
    def partner_shape(self, spec: OpSpec, first: Shape, k: int) -> Shape | None:
        c = self.c
        if spec.name == "matmul":
            batch = first[:-2] if c.boolean(0.7) else tuple(1 if c.boolean() else d for d in first[:-2])
            return batch + (first[-1], c.integer(1, self.cfg.max_dim))
        if spec.name == "cat":
            return None  # decided after attrs
        if spec.name in ("stack", "mask_where"):
            return first
        # broadcasting partner: drop some leading dims, set some dims to 1
        drop = c.integer(0, len(first) - 1) if c.boolean(0.3) else 0
        return tuple(1 if c.boolean(0.2) else d for d in first[drop:])

    def pick_existing(self, pred: object) -> _Value | None:
        cands = [v for v in self.values if pred(v)]  # type: ignore[operator]
        if not cands:
            return None
        return self.c.choice(cands[::-1])  # shrinks toward the most recent value

    def input_for(self, shape: Shape, rng: tuple[float, float]) -> _Value:
        if self.leaves < self.cfg.max_leaves and self.c.boolean(0.4):
            return self.leaf(shape, rng)
        found = self.pick_existing(lambda v: v.shape == shape)
        return found if found is not None else self.leaf(shape, rng)

    # ---------------------------------------------------------------- statements
    def op(self) -> bool:
        c = self.c
        spec = weighted(c, self.specs, self.weights)
        first = self.pick_existing(lambda v: len(v.shape) >= spec.min_rank)
        if first is None:
            return False
        inputs = [first]
        if spec.arity == 2:
            shape = self.partner_shape(spec, first.shape, 1)
            assert shape is not None
            inputs.append(self.input_for(shape, spec.domain.leaf_range(1)))
        shapes: list[Shape] = [v.shape for v in inputs]
        if spec.arity == VARIADIC:
            extra = c.integer(0, 2)
            if spec.name == "stack":
                for _ in range(extra):
                    inputs.append(self.input_for(first.shape, spec.domain.leaf_range(1)))
            shapes = [v.shape for v in inputs]
        attrs = spec.sample_attrs(c, shapes)
        if attrs is None:
            return False
        if spec.name == "cat":
            d = attrs["dim"]
            for _ in range(c.integer(0, 2)):
                s = first.shape[:d] + (c.integer(1, self.cfg.max_dim),) + first.shape[d + 1 :]
                inputs.append(self.input_for(s, spec.domain.leaf_range(1)))
            shapes = [v.shape for v in inputs]
        try:
            spec.shape(shapes, attrs)
        except ShapeError:
            return False
        if not spec.domain.accepts([v.tensor for v in inputs], attrs):
            if self.leaves + len(inputs) > self.cfg.max_leaves + 2:
                return False
            inputs = [self.leaf(v.shape, spec.domain.leaf_range(i)) for i, v in enumerate(inputs)]
            if not spec.domain.accepts([v.tensor for v in inputs], attrs):
                c.note(f"domain-miss:{spec.name}")
                return False
        with torch.no_grad():
            out = spec.lower([v.tensor for v in inputs], attrs)
        if not bool(torch.isfinite(out).all()) or (out.numel() and float(out.abs().max()) > MAX_MAGNITUDE):
            c.note(f"out-of-range:{spec.name}")
            return False
        region = weighted(c, REGIONS, self.cfg.region_weights)
        st = OpCall(self.fresh("v"), spec.name, tuple(v.id for v in inputs), attrs, region)
        if self.cfg.avoid_known_bugs and known_bug(st, self.statements) is not None:
            c.note(f"known-bug-avoided:{spec.name}")
            return False
        self.statements.append(st)
        self.values.append(_Value(st.id, tuple(out.shape), out.detach().clone()))
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
        self.values.append(_Value(st.id, src.shape, src.tensor))
        c.note(f"cut:{kind}")
        return True

    def module(self) -> bool:
        """An nn module fitted to an existing value: a Linear whose `in` is the value's last dim
        (weights drawn here) or a Dropout; then transforms of it, forwards and parameters."""
        c, cfg = self.c, self.cfg
        src = self.pick_existing(lambda v: True)
        if src is None:
            return False
        if c.boolean(cfg.linear_weight / (cfg.linear_weight + 1.0)):
            d_in, d_out = src.shape[-1], c.integer(1, cfg.max_dim)
            weight = InlineTensor((d_out, d_in), tuple(c.floats(d_out * d_in, -1.0, 1.0)))
            bias = InlineTensor((d_out,), tuple(c.floats(d_out, -1.0, 1.0))) if c.boolean(0.7) else None
            st = Module(self.fresh("m"), "linear", weight, bias)
        else:
            p = weighted(c, (0.0, 0.5, 1.0), cfg.dropout_p_weights)
            st = Module(self.fresh("m"), "dropout", p=p)
        self.statements.append(st)
        c.note(f"module:{st.module}")
        handles = [(st.id, TorchModule(build_module(st, torch.float32)))]
        for _ in range(c.integer(0, 2)):
            ident, handle = c.choice(handles[::-1])
            kind = weighted(c, TRANSFORMS, cfg.transform_weights)
            t = Transform(self.fresh("t"), kind, ident)
            self.statements.append(t)
            handles.append((t.id, transform_module(handle, kind)))
            c.note(f"transform:{kind}")
        for _ in range(c.integer(1, 2)):
            ident, handle = c.choice(handles[::-1])
            if st.module == "linear" and c.boolean(0.3):
                name = "bias" if st.bias is not None and c.boolean(0.3) else "weight"
                param = Param(self.fresh("p"), ident, name)  # type: ignore[arg-type]
                self.statements.append(param)
                tensor = getattr(handle.module, name).detach().clone()
                self.values.append(_Value(param.id, tuple(tensor.shape), tensor))
                c.note("param")
                continue
            x = src if c.boolean(0.7) else self.pick_existing(lambda v: v.shape[-1:] == src.shape[-1:])
            assert x is not None
            with torch.no_grad():
                out = apply_module(handle, x.tensor)
            if not bool(torch.isfinite(out).all()) or (out.numel() and float(out.abs().max()) > MAX_MAGNITUDE):
                c.note("out-of-range:apply")
                continue
            app = Apply(self.fresh("y"), ident, x.id)
            self.statements.append(app)
            self.values.append(_Value(app.id, tuple(out.shape), out.detach().clone()))
            c.note("apply")
        return True

    def backward(self) -> None:
        roots = self.values[::-1]
        if self.cfg.avoid_known_bugs:
            roots = [v for v in roots if known_bug(Backward("bw", v.id), self.statements) is None]
        if not roots:
            return
        root = self.c.choice(roots)
        self.statements.append(Backward("bw", root.id))
        self.c.note("backward")


def generate(c: Choices, cfg: GenConfig | None = None) -> Program:
    cfg = cfg or GenConfig()
    b = _Builder(c, cfg)
    for _ in range(c.integer(1, 2)):
        b.leaf(b.draw_shape())
    for _ in range(cfg.max_statements):
        if not c.boolean(0.85):
            break
        kind = weighted(c, ("op", "cut", "leaf", "module"), (*cfg.kind_weights, cfg.module_weight))
        if kind == "op":
            b.op()
        elif kind == "cut":
            b.cut()
        elif kind == "module":
            b.module()
        elif b.leaves < cfg.max_leaves:
            b.leaf(b.draw_shape())
    if c.boolean(cfg.p_backward):
        b.backward()
    return Program(tuple(b.statements))


def ops_of(program: Program) -> Sequence[str]:
    return [s.op for s in program.statements if isinstance(s, OpCall)]
