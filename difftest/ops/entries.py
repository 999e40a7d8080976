"""The constructors the catalog's entries are written with (catalog.py): one per family of
entries that differ only in their names, templates and a few fields (unary, binary, the
reductions, the nn functions by n), the burn paths the nn templates spell in full, and the
`derive` hooks that compute a template's values from the attributes. Torch-free at import."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from difftest.ops import domains as dom
from difftest.ops import index_reduce as ir
from difftest.ops import nd_index as nd
from difftest.ops import nn_shapes as nn
from difftest.ops import sampling as draw
from difftest.ops import shape_rules as rule
from difftest.ops import tensor_ops as tx
from difftest.ops import tolerance as T
from difftest.ops.spec import (
    VARIADIC,
    Attrs,
    AttrSampler,
    AttrSpec,
    AttrsRule,
    GradTerms,
    OpSpec,
    ShapeRule,
    ValueTerms,
)
from difftest.program.ir import Shape
from difftest.program.parts import Composition

A_DIM = (AttrSpec("dim", "dim"),)


def block(*lines: str) -> str:
    """A burn block expression: `let` lines, then the value."""
    return "{\n" + "".join(f"    {line}\n" for line in lines) + "}"


def clamp_bounds(attrs: Attrs) -> str | None:
    """clamp's bounds where the frameworks define clamp differently: a NaN bound (PyTorch's result
    is NaN, burn's comparisons ignore the bound) and min > max (PyTorch gives max everywhere,
    burn's clamp, a clamp_max then a clamp_min, gives min; neither burn's docs nor its tests
    define it)."""
    lo, hi = attrs.get("min"), attrs.get("max")
    for name, v in (("min", lo), ("max", hi)):
        if isinstance(v, float) and math.isnan(v):
            return f"a NaN {name} bound is not compared (PyTorch propagates it, burn's clamp ignores it)"
    if lo is not None and hi is not None and lo > hi:
        return (f"min={lo!r} above max={hi!r} is not compared (PyTorch then gives max everywhere, "
                "burn's clamp gives min)")
    return None


def finite_slope(attrs: Attrs) -> str | None:
    """leaky_relu's slope where the frameworks differ at 0: a non-finite one (PyTorch multiplies
    the 0 by it, NaN; burn's leaky_relu keeps 0 on its x >= 0 branch)."""
    slope = attrs.get("slope")
    if isinstance(slope, float) and not math.isfinite(slope):
        return f"a non-finite slope ({slope!r}) is not compared (PyTorch gives NaN at 0, burn 0)"
    return None


def nonzero_beta(attrs: Attrs) -> str | None:
    """softplus divides by beta: at beta = 0 the value is infinite in both and the gradients are
    each framework's formula at a pole (PyTorch's sigmoid(0) = 0.5, burn's NaN)."""
    if attrs.get("beta") == 0:
        return "beta = 0 is not compared (softplus divides by it)"
    return None


def unary(name: str, pytorch: str, burn: str, t: T.ToleranceClass, d: dom.Domain = dom.ANY,
          saves: tuple[int, ...] = (0,), grad_terms: GradTerms | None = None,
          value_terms: ValueTerms | None = None, attrs: tuple[AttrSpec, ...] = (),
          draw_attrs: AttrSampler | None = None, doc: str = "", saves_tensors: bool | None = None,
          attrs_rule: AttrsRule | None = None, composed: Composition | None = None) -> OpSpec:
    return OpSpec(name, "unary", 1, pytorch, burn, rule.same, t, d, attrs, draw_attrs, saves=saves,
                  grad_terms=grad_terms, value_terms=value_terms, doc=doc, saves_tensors=saves_tensors,
                  attrs_rule=attrs_rule, composed=composed)


def scalar_op(name: str, pytorch: str, burn: str, attr: str, lo: float, hi: float, t: T.ToleranceClass,
              d: dom.Domain = dom.ANY, attr_type: str = "float", saves: tuple[int, ...] = (),
              saves_tensors: bool | None = None, boundary: tuple[float, ...] = (),
              composed: Composition | None = None) -> OpSpec:
    return OpSpec(name, "scalar", 1, pytorch, burn, rule.same, t, d, (AttrSpec(attr, attr_type, boundary),),
                  draw.number(attr, lo, hi, attr_type), saves=saves, saves_tensors=saves_tensors, composed=composed)


def binary(name: str, pytorch: str, burn: str, t: T.ToleranceClass, d: dom.Domain = dom.ANY,
           saves: tuple[int, ...] = (0, 1), saved_for_other: tuple[int, ...] = (),
           splits_ties: bool = False, composed: Composition | None = None) -> OpSpec:
    return OpSpec(name, "binary", 2, pytorch, burn, rule.bcast, t, d, partners=draw.BROADCASTING,
                  promotes_rank=True, saves=saves, saved_for_other=saved_for_other, splits_ties=splits_ties,
                  composed=composed)


def reduce_all(name: str, pytorch: str, burn: str, t: T.ToleranceClass, d: dom.Domain = dom.ANY,
               saves: tuple[int, ...] = (), splits_ties: bool = False, composed: Composition | None = None) -> OpSpec:
    return OpSpec(name, "reduction", 1, pytorch, burn, rule.to_one, t, d, saves=saves,
                  reduced_extent=rule.extent, splits_ties=splits_ties, composed=composed)


def reduce_dim(name: str, pytorch: str, burn: str, t: T.ToleranceClass, d: dom.Domain = dom.ANY,
               saves: tuple[int, ...] = (), shape_rule: ShapeRule = rule.keep_dim,
               grad_terms: GradTerms | None = None, saves_tensors: bool | None = None,
               value_terms: ValueTerms | None = None, composed: Composition | None = None,
               backward_kernel: Composition | None = None) -> OpSpec:
    return OpSpec(name, "reduction", 1, pytorch, burn, shape_rule, t, d, A_DIM, draw.dim, saves=saves,
                  reduced_extent=rule.dim_extent, grad_terms=grad_terms, saves_tensors=saves_tensors,
                  value_terms=value_terms, composed=composed, backward_kernel=backward_kernel)


def nn_op(name: str, arity: int, pytorch: str, burn: str, shape_rule: ShapeRule, t: T.ToleranceClass,
          **fields: Any) -> OpSpec:
    """burn's module functions (family "nn"): PyTorch keeps a channels_last input's memory format,
    so the model measures the result's layout."""
    return OpSpec(name, "nn", arity, pytorch, burn, shape_rule, t, measured_layout=True, **fields)


def repeats(attrs: Attrs, shapes: Sequence[Shape]) -> Attrs:
    # PyTorch's repeat takes a count per dim of the input
    return {"reps": [attrs["times"] if i == attrs["dim"] else 1 for i in range(len(shapes[0]))]}


def bounds(attrs: Attrs, shapes: Sequence[Shape]) -> Attrs:
    # slice_assign in PyTorch: `t[a:b, …] = v` on a clone, spelled with slice objects
    return {"bounds": [list(r) for r in attrs["ranges"]]}

# nn functions: burn's paths, spelled in full so that a reproducer needs no import for them
MODULE = "burn::tensor::module::"
OPTIONS = "burn::tensor::ops::"
CONV_ATTRS = (AttrSpec("stride", "dims"), AttrSpec("padding", "dims"), AttrSpec("dilation", "dims"),
              AttrSpec("groups", "int"))
POOL_ATTRS = (AttrSpec("kernel", "dims"), AttrSpec("stride", "dims"), AttrSpec("padding", "dims"))


# the 1-d and 2-d forms of an nn function differ only in n: one entry each, by n


def conv_transpose(n: int) -> OpSpec:
    name = f"conv_transpose{n}d"
    x, k = ("[N, C, L]", "k") if n == 1 else ("[N, C, H, W]", "kh, kw")
    return nn_op(name, VARIADIC,
                 f"F.{name}({{xs}}, stride={{stride}}, padding={{padding}}, output_padding={{padding_out}}, "
                 "groups={groups}, dilation={dilation})",
                 f"{MODULE}{name}({{x}}, {{y}}, {{opt_z}}, {OPTIONS}ConvTransposeOptions::new({{stride}}, "
                 "{padding}, {padding_out}, {dilation}, {groups}))",
                 nn.conv(n, transposed=True), T.ACCUMULATE, attrs=CONV_ATTRS + (AttrSpec("padding_out", "dims"),),
                 draw_attrs=nn.conv_attrs(n, transposed=True), partners=nn.CONV_TRANSPOSE,
                 first_input=nn.SEQUENCE if n == 1 else nn.IMAGE, saves=(0, 1),
                 reduced_extent=nn.conv_transpose_extent,
                 doc=f"x {x}, weight [C, O / groups, {k}], optional bias [O]; padding_out is PyTorch's output_padding")


def max_pool(n: int) -> OpSpec:
    name = f"max_pool{n}d"
    return nn_op(name, 1, f"F.{name}({{x}}, {{kernel}}, {{stride}}, {{padding}})",
                 f"{MODULE}{name}({{x}}, {OPTIONS}MaxPoolOptions::new({{kernel}}).with_stride({{stride}})"
                 ".with_padding({padding}))",
                 nn.pool_rule(n), T.EXACT, domain=nn.UNIQUE_WINDOW_MAX, attrs=POOL_ATTRS,
                 draw_attrs=nn.pool_attrs(False, n), first_input=nn.SEQUENCE if n == 1 else nn.IMAGE, saves=(0,),
                 doc="padding <= kernel / 2")


def avg_pool(n: int) -> OpSpec:
    name = f"avg_pool{n}d"
    return nn_op(name, 1,
                 f"F.{name}({{x}}, {{kernel}}, {{stride}}, {{padding}}, count_include_pad={{count_include_pad}} == 1)",
                 f"{MODULE}{name}({{x}}, {OPTIONS}AvgPoolOptions::new({{kernel}}).with_stride({{stride}})"
                 ".with_padding({padding}).with_count_include_pad({count_include_pad} == 1))",
                 nn.avg_pool_rule(n), T.ACCUMULATE, attrs=POOL_ATTRS + (AttrSpec("count_include_pad", "int"),),
                 draw_attrs=nn.pool_attrs(True, n), first_input=nn.SEQUENCE if n == 1 else nn.IMAGE, saves=(0,),
                 reduced_extent=nn.pool_extent, doc="count_include_pad 0 or 1")


# scatter and select_assign with an update other than add (index_reduce.py): one entry per
# update, at distinct positions; `reduce` is PyTorch's name of it, `update` burn's


def scatter_update(name: str, update: str, reduce: str | None, t: T.ToleranceClass, d: dom.Domain = dom.ANY,
                   splits_ties: bool = False, doc: str = "") -> OpSpec:
    """`reduce` None: PyTorch's `scatter` (which saves only the index)."""
    pytorch = ("torch.scatter({x}, {dim}, {indices}, {y})" if reduce is None
               else f"{{x}}.scatter_reduce({{dim}}, {{indices}}, {{y}}, '{reduce}')")
    saves = () if reduce is None else (0, 1)
    return OpSpec(name, "index", 2, pytorch,
                  block("let input = {x};", "let indices = {indices};",
                        f"input.scatter({{dim}}, indices, {{y}}, burn::tensor::IndexingUpdateOp::{update})"),
                  ir.scatter_distinct_rule, t, d, attrs=(AttrSpec("dim", "dim"), AttrSpec("indices", "int_tensor")),
                  draw_attrs=ir.scatter_distinct, partners=tx.SCATTERED, saves=saves, saves_tensors=True,
                  splits_ties=splits_ties, doc=doc)


def select_update(name: str, update: str, reduce: str, t: T.ToleranceClass, d: dom.Domain = dom.ANY,
                  splits_ties: bool = False, doc: str = "", via_scatter: bool = False) -> OpSpec:
    """`via_scatter`: PyTorch's side as scatter_reduce with the indices expanded over the values
    (the same function) instead of index_reduce."""
    pytorch = (f"{{x}}.scatter_reduce({{dim}}, torch.tensor({{indices}}, dtype=torch.int64).reshape({{index_view}})"
               f".expand_as({{y}}), {{y}}, '{reduce}')" if via_scatter
               else f"{{x}}.index_reduce({{dim}}, torch.tensor({{indices}}, dtype=torch.int64), {{y}}, '{reduce}')")
    return OpSpec(name, "index", 2, pytorch,
                  block("let input = {x};", "let indices = {indices};",
                        f"input.select_assign({{dim}}, indices, {{y}}, burn::tensor::IndexingUpdateOp::{update})"),
                  ir.select_distinct_rule, t, d, attrs=(AttrSpec("dim", "dim"), AttrSpec("indices", "ints")),
                  draw_attrs=ir.select_distinct, partners=tx.SELECTED, saves=(0, 1), saves_tensors=True,
                  splits_ties=splits_ties, doc=doc, derive=index_view if via_scatter else None)


def scatter_nd_update(name: str, update: str, reduce: str | None, t: T.ToleranceClass, d: dom.Domain = dom.ANY,
                      splits_ties: bool = False, doc: str = "") -> OpSpec:
    """`reduce` None: PyTorch's `index_put` (replacing; it saves only the indices). Otherwise
    `scatter_reduce` over rows of x viewed as a [slices, slice size] table (nd_index.nd_rows):
    PyTorch has no reducing index_put."""
    pytorch = ("{x}.index_put(tuple({indices}.unbind(-1)), {y})" if reduce is None
               else "{x}.reshape({nd_table}).scatter_reduce(0, torch.tensor({nd_rows}, dtype=torch.int64)"
                    f".reshape(-1, 1).expand(-1, {{nd_width}}), {{y}}.reshape(-1, {{nd_width}}), '{reduce}')"
                    ".reshape({x}.shape)")
    return OpSpec(name, "index", 2, pytorch,
                  block("let input = {x};", "let indices = {indices};",
                        f"input.scatter_nd(indices, {{y}}, burn::tensor::IndexingUpdateOp::{update})"),
                  nd.scatter_nd_distinct_rule, t, d, attrs=(AttrSpec("indices", "int_tensor"),),
                  draw_attrs=nd.indices_nd_distinct, partners=nd.SLICES, saves=() if reduce is None else (0, 1),
                  saves_tensors=True, measured_layout=True, splits_ties=splits_ties, doc=doc,
                  derive=None if reduce is None else nd.nd_rows)


def index_view(attrs: Attrs, shapes: Sequence[Shape]) -> Attrs:
    # select indices as a view that expands over the values: -1 at dim, 1 elsewhere
    return {"index_view": [-1 if i == attrs["dim"] else 1 for i in range(len(shapes[0]))]}
