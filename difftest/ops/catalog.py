"""The op catalog: one declarative entry per op (PyTorch OpInfo style).

Each entry names the op, its family and arity, its PyTorch and burn expression templates (the
executor evaluates the first; the reproducers print both: spelling.py), its attributes (with how
to draw them) and how the generator draws its other inputs (sampling.py), its shape rule
(shape_rules.py), its input domain, which inputs PyTorch saves for backward, and its tolerance
class. The Rust interpreter has one `ops!` line and one match arm per entry; `tests/differential/test_catalog.py`
checks that names, arities and attribute names and types agree. See docs/adding-an-op.md.

Torch-free at import (tests/unit/test_layers.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from difftest.ops import domains as dom
from difftest.ops import nn_shapes as nn
from difftest.ops import remainder as rem
from difftest.ops import sampling as draw
from difftest.ops import shape_rules as rule
from difftest.ops import strides as sv
from difftest.ops import tensor_ops as tx
from difftest.ops import terms
from difftest.ops import tolerance as T
from difftest.ops import windows as win
from difftest.ops.spec import VARIADIC, Attrs, AttrSampler, AttrSpec, GradTerms, OpSpec, ShapeRule, ValueTerms
from difftest.program.ir import Shape

__all__ = ["CATALOG", "OPS", "VARIADIC", "AttrSpec", "OpSpec", "families", "get"]

A_DIM = (AttrSpec("dim", "dim"),)


def block(*lines: str) -> str:
    """A burn block expression: `let` lines, then the value."""
    return "{\n" + "".join(f"    {line}\n" for line in lines) + "}"


def unary(name: str, pytorch: str, burn: str, t: T.ToleranceClass, d: dom.Domain = dom.ANY,
          saves: tuple[int, ...] = (0,), grad_terms: GradTerms | None = None,
          value_terms: ValueTerms | None = None, attrs: tuple[AttrSpec, ...] = (),
          draw_attrs: AttrSampler | None = None, doc: str = "", saves_tensors: bool | None = None) -> OpSpec:
    return OpSpec(name, "unary", 1, pytorch, burn, rule.same, t, d, attrs, draw_attrs, saves=saves,
                  grad_terms=grad_terms, value_terms=value_terms, doc=doc, saves_tensors=saves_tensors)


def scalar_op(name: str, pytorch: str, burn: str, attr: str, lo: float, hi: float, t: T.ToleranceClass,
              d: dom.Domain = dom.ANY, attr_type: str = "float", saves: tuple[int, ...] = (),
              saves_tensors: bool | None = None) -> OpSpec:
    return OpSpec(name, "scalar", 1, pytorch, burn, rule.same, t, d, (AttrSpec(attr, attr_type),),
                  draw.number(attr, lo, hi, attr_type), saves=saves, saves_tensors=saves_tensors)


def binary(name: str, pytorch: str, burn: str, t: T.ToleranceClass, d: dom.Domain = dom.ANY,
           saves: tuple[int, ...] = (0, 1), saved_for_other: tuple[int, ...] = ()) -> OpSpec:
    return OpSpec(name, "binary", 2, pytorch, burn, rule.bcast, t, d, partners=draw.BROADCASTING,
                  promotes_rank=True, saves=saves, saved_for_other=saved_for_other)


def reduce_all(name: str, pytorch: str, burn: str, t: T.ToleranceClass, d: dom.Domain = dom.ANY,
               saves: tuple[int, ...] = ()) -> OpSpec:
    return OpSpec(name, "reduction", 1, pytorch, burn, rule.to_one, t, d, saves=saves,
                  reduced_extent=rule.extent)


def reduce_dim(name: str, pytorch: str, burn: str, t: T.ToleranceClass, d: dom.Domain = dom.ANY,
               saves: tuple[int, ...] = (), shape_rule: ShapeRule = rule.keep_dim,
               grad_terms: GradTerms | None = None, saves_tensors: bool | None = None) -> OpSpec:
    return OpSpec(name, "reduction", 1, pytorch, burn, shape_rule, t, d, A_DIM, draw.dim, saves=saves,
                  reduced_extent=rule.dim_extent, grad_terms=grad_terms, saves_tensors=saves_tensors)


def nn_op(name: str, arity: int, pytorch: str, burn: str, shape_rule: ShapeRule, t: T.ToleranceClass,
          **fields: Any) -> OpSpec:
    """burn's module functions (family "nn"): PyTorch keeps a channels_last input's memory format,
    so the model measures the result's layout."""
    return OpSpec(name, "nn", arity, pytorch, burn, shape_rule, t, measured_layout=True, **fields)


def _repeats(attrs: Attrs, shapes: Sequence[Shape]) -> Attrs:
    # PyTorch's repeat takes a count per dim of the input
    return {"reps": [attrs["times"] if i == attrs["dim"] else 1 for i in range(len(shapes[0]))]}


def _bounds(attrs: Attrs, shapes: Sequence[Shape]) -> Attrs:
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


OPS: tuple[OpSpec, ...] = (
    # unary elementwise
    unary("exp", "torch.exp({x})", "{x}.exp()", T.TRANSCENDENTAL, dom.EXP, saves=(), saves_tensors=True),
    unary("log", "torch.log({x})", "{x}.log()", T.TRANSCENDENTAL, dom.POSITIVE),
    unary("log1p", "torch.log1p({x})", "{x}.log1p()", T.TRANSCENDENTAL, dom.LOG1P),
    unary("sqrt", "torch.sqrt({x})", "{x}.sqrt()", T.TRANSCENDENTAL, dom.POSITIVE, saves=(), saves_tensors=True),
    unary("sin", "torch.sin({x})", "{x}.sin()", T.TRANSCENDENTAL),
    unary("cos", "torch.cos({x})", "{x}.cos()", T.TRANSCENDENTAL),
    unary("tan", "torch.tan({x})", "{x}.tan()", T.TRANSCENDENTAL, dom.TAN, saves=(), saves_tensors=True),
    unary("tanh", "torch.tanh({x})", "{x}.tanh()", T.TRANSCENDENTAL, saves=(), grad_terms=terms.tanh_grad,
          saves_tensors=True),
    unary("sinh", "torch.sinh({x})", "{x}.sinh()", T.TRANSCENDENTAL, dom.EXP),
    unary("cosh", "torch.cosh({x})", "{x}.cosh()", T.TRANSCENDENTAL, dom.EXP),
    unary("erf", "torch.erf({x})", "{x}.erf()", T.TRANSCENDENTAL),
    unary("atan", "torch.atan({x})", "{x}.atan()", T.TRANSCENDENTAL),
    unary("asin", "torch.asin({x})", "{x}.asin()", T.TRANSCENDENTAL, dom.UNIT_INTERIOR),
    unary("acos", "torch.acos({x})", "{x}.acos()", T.TRANSCENDENTAL, dom.UNIT_INTERIOR),
    unary("asinh", "torch.asinh({x})", "{x}.asinh()", T.TRANSCENDENTAL),
    unary("acosh", "torch.acosh({x})", "{x}.acosh()", T.TRANSCENDENTAL, dom.ACOSH),
    unary("atanh", "torch.atanh({x})", "{x}.atanh()", T.TRANSCENDENTAL, dom.UNIT_INTERIOR),
    unary("recip", "torch.reciprocal({x})", "{x}.recip()", T.ROUNDED, dom.NONZERO, saves=(), saves_tensors=True),
    unary("square", "torch.square({x})", "{x}.square()", T.ROUNDED),
    unary("abs", "torch.abs({x})", "{x}.abs()", T.EXACT, dom.KINK_AT_ZERO),
    unary("neg", "torch.neg({x})", "{x}.neg()", T.EXACT, saves=()),
    unary("sign", "torch.sign({x})", "{x}.sign()", T.STEP, dom.KINK_AT_ZERO, saves=()),
    unary("floor", "torch.floor({x})", "{x}.floor()", T.STEP, dom.ROUNDING, saves=()),
    unary("ceil", "torch.ceil({x})", "{x}.ceil()", T.STEP, dom.ROUNDING, saves=()),
    unary("round", "torch.round({x})", "{x}.round()", T.STEP, dom.ROUND_HALF, saves=()),
    unary("trunc", "torch.trunc({x})", "{x}.trunc()", T.STEP, dom.ROUNDING, saves=(), doc="towards zero"),
    unary("sigmoid", "torch.sigmoid({x})", "activation::sigmoid({x})", T.TRANSCENDENTAL, saves=(),
          grad_terms=terms.sigmoid_grad, saves_tensors=True),
    unary("relu", "torch.relu({x})", "activation::relu({x})", T.EXACT, dom.KINK_AT_ZERO, saves=(), saves_tensors=True),
    unary("gelu", "F.gelu({x})", "activation::gelu({x})", T.TRANSCENDENTAL, grad_terms=terms.gelu_grad,
          value_terms=terms.gelu_value, doc="the exact (erf) form"),
    unary("silu", "F.silu({x})", "activation::silu({x})", T.TRANSCENDENTAL, doc="x * sigmoid(x)"),
    unary("cast", "{x}.to({dtype})", "{x}.cast({dtype})", T.ROUNDED, saves=(), saves_tensors=False,
          attrs=(AttrSpec("dtype", "dtype"),), draw_attrs=draw.dtype,
          doc="to another float dtype (its values and ops after it are in it; the gradient in the input's dtype)"),
    unary("leaky_relu", "F.leaky_relu({x}, {slope})", "activation::leaky_relu({x}, {slope})", T.ROUNDED,
          dom.KINK_AT_ZERO, attrs=(AttrSpec("slope", "float"),), draw_attrs=draw.number("slope", 0.01, 0.5)),
    scalar_op("powf_scalar", "torch.pow({x}, {exponent})", "{x}.powf_scalar({exponent})", "exponent", -2.0, 3.0,
              T.TRANSCENDENTAL, dom.POW_BASE, saves=(0,)),
    scalar_op("powi_scalar", "torch.pow({x}, {exponent})", "{x}.powi_scalar({exponent}i64)", "exponent", -2, 3,
              T.ROUNDED, dom.POWI_BASE, "int", saves=(0,)),
    unary("clamp", "torch.clamp({x}, {min}, {max})", "{x}.clamp({min}, {max})", T.EXACT, dom.CLAMP,
          attrs=(AttrSpec("min", "float"), AttrSpec("max", "float")), draw_attrs=draw.clamp("clamp")),
    unary("clamp_min", "torch.clamp({x}, min={min})", "{x}.clamp_min({min})", T.EXACT, dom.CLAMP,
          attrs=(AttrSpec("min", "float"),), draw_attrs=draw.clamp("clamp_min")),
    unary("clamp_max", "torch.clamp({x}, max={max})", "{x}.clamp_max({max})", T.EXACT, dom.CLAMP,
          attrs=(AttrSpec("max", "float"),), draw_attrs=draw.clamp("clamp_max")),
    # scalar forms
    scalar_op("add_scalar", "{x} + {scalar}", "{x}.add_scalar({scalar})", "scalar", -3.0, 3.0, T.ROUNDED),
    scalar_op("sub_scalar", "{x} - {scalar}", "{x}.sub_scalar({scalar})", "scalar", -3.0, 3.0, T.ROUNDED),
    scalar_op("mul_scalar", "{x} * {scalar}", "{x}.mul_scalar({scalar})", "scalar", -3.0, 3.0, T.ROUNDED,
              saves_tensors=True),
    scalar_op("div_scalar", "{x} / {scalar}", "{x}.div_scalar({scalar})", "scalar", 0.25, 4.0, T.ROUNDED,
              saves_tensors=True),
    OpSpec("remainder_scalar", "scalar", 1, "torch.remainder({x}, {scalar})", "{x}.remainder_scalar({scalar})",
           rule.same, T.ROUNDED, rem.REMAINDER_SCALAR, (AttrSpec("scalar", "float"),), draw.number("scalar", -3.0, 3.0),
           saves=(), value_terms=rem.remainder_scalar_value, doc="x - floor(x / s) * s (sign of s); |s| >= 0.25"),
    # binary with broadcasting (burn: rank promotion first)
    binary("add", "torch.add({x}, {y})", "{x}.add({y})", T.ROUNDED, saves=()),
    binary("sub", "torch.sub({x}, {y})", "{x}.sub({y})", T.ROUNDED, saves=()),
    binary("mul", "torch.mul({x}, {y})", "{x}.mul({y})", T.ROUNDED, saved_for_other=(0, 1)),
    binary("div", "torch.div({x}, {y})", "{x}.div({y})", T.ROUNDED, dom.DIVISOR, saved_for_other=(0,)),
    binary("powf", "torch.pow({x}, {y})", "{x}.powf({y})", T.TRANSCENDENTAL, dom.POW_BASE),
    binary("maximum", "torch.maximum({x}, {y})", "{x}.max_pair({y})", T.EXACT, dom.NO_TIES_PAIR),
    binary("minimum", "torch.minimum({x}, {y})", "{x}.min_pair({y})", T.EXACT, dom.NO_TIES_PAIR),
    binary("atan2", "torch.atan2({x}, {y})", "{x}.atan2({y})", T.TRANSCENDENTAL, dom.ATAN2),
    # PyTorch saves each input only when that input needs its gradient, and the result always
    OpSpec("hypot", "binary", 2, "torch.hypot({x}, {y})", "{x}.hypot({y})", rule.bcast, T.TRANSCENDENTAL, dom.HYPOT,
           partners=draw.BROADCASTING, promotes_rank=True, saves=(), saves_tensors=True),
    OpSpec("cross", "binary", 2, "torch.linalg.cross({x}, {y}, dim={dim})", "{x}.cross({y}, {dim})", tx.cross_rule,
           T.ROUNDED, attrs=A_DIM, draw_attrs=tx.cross_dim, partners=draw.SAME_SHAPE, first_input=draw.with_size(3),
           saves=(0, 1), saved_for_other=(0, 1), value_terms=terms.cross_value, grad_terms=terms.cross_grad,
           doc="the cross product along dim (of size 3); equal shapes"),
    OpSpec("matmul", "matmul", 2, "torch.matmul({x}, {y})", "{x}.matmul({y})", rule.matmul_rule, T.ACCUMULATE,
           partners=draw.MATMUL, promotes_rank=True, min_rank=2, saves=(0, 1), saved_for_other=(0, 1),
           reduced_extent=rule.matmul_extent, doc="both rank >= 2, batch dims broadcast"),
    # reductions
    reduce_all("sum", "torch.sum({x}).reshape(1)", "{x}.sum()", T.ACCUMULATE),
    reduce_all("mean", "torch.mean({x}).reshape(1)", "{x}.mean()", T.ACCUMULATE),
    reduce_all("max", "torch.max({x}).reshape(1)", "{x}.max()", T.EXACT, dom.UNIQUE_EXTREME, saves=(0,)),
    reduce_all("min", "torch.min({x}).reshape(1)", "{x}.min()", T.EXACT, dom.UNIQUE_EXTREME, saves=(0,)),
    reduce_all("prod", "torch.prod({x}).reshape(1)", "{x}.prod()", T.ACCUMULATE, dom.PRODUCT, saves=(0,)),
    reduce_dim("sum_dim", "{x}.sum({dim}, keepdim=True)", "{x}.sum_dim({dim})", T.ACCUMULATE),
    reduce_dim("mean_dim", "{x}.mean({dim}, keepdim=True)", "{x}.mean_dim({dim})", T.ACCUMULATE),
    reduce_dim("max_dim", "{x}.max({dim}, keepdim=True).values", "{x}.max_dim({dim})", T.EXACT,
               dom.UNIQUE_EXTREME, (0,)),
    reduce_dim("min_dim", "{x}.min({dim}, keepdim=True).values", "{x}.min_dim({dim})", T.EXACT,
               dom.UNIQUE_EXTREME, (0,)),
    reduce_dim("prod_dim", "{x}.prod({dim}, keepdim=True)", "{x}.prod_dim({dim})", T.ACCUMULATE, dom.PRODUCT, (0,)),
    reduce_dim("cumsum", "torch.cumsum({x}, {dim})", "{x}.cumsum({dim})", T.ACCUMULATE, shape_rule=rule.along_dim),
    reduce_dim("cumprod", "torch.cumprod({x}, {dim})", "{x}.cumprod({dim})", T.ACCUMULATE, dom.PRODUCT, (0,),
               shape_rule=rule.along_dim),
    reduce_dim("cummax", "torch.cummax({x}, {dim}).values", "{x}.cummax({dim})", T.EXACT, tx.DISTINCT_ALONG_DIM,
               (0,), shape_rule=rule.along_dim),
    reduce_dim("cummin", "torch.cummin({x}, {dim}).values", "{x}.cummin({dim})", T.EXACT, tx.DISTINCT_ALONG_DIM,
               (0,), shape_rule=rule.along_dim),
    reduce_dim("softmax", "torch.softmax({x}, {dim})", "activation::softmax({x}, {dim})", T.TRANSCENDENTAL,
               shape_rule=rule.along_dim, grad_terms=terms.softmax_grad, saves_tensors=True),
    reduce_dim("log_softmax", "torch.log_softmax({x}, {dim})", "activation::log_softmax({x}, {dim})",
               T.TRANSCENDENTAL, shape_rule=rule.along_dim, grad_terms=terms.log_softmax_grad, saves_tensors=True),
    # shape and indexing
    OpSpec("reshape", "shape", 1, "{x}.contiguous().view({shape})", "{x}.reshape({shape})", rule.reshape_rule,
           T.EXACT, attrs=(AttrSpec("shape", "shape"),), draw_attrs=draw.reshape, view=sv.reshape_view,
           view_needs_contiguous=True, doc="same element count, no -1"),
    OpSpec("transpose", "shape", 1, "{x}.transpose(-1, -2)", "{x}.transpose()", rule.transpose_rule, T.EXACT,
           min_rank=2, view=sv.transpose_view, doc="swaps the last two dims (rank >= 2)"),
    OpSpec("swap_dims", "shape", 1, "{x}.transpose({dim1}, {dim2})", "{x}.swap_dims({dim1}, {dim2})",
           rule.swap_rule, T.EXACT, attrs=(AttrSpec("dim1", "dim"), AttrSpec("dim2", "dim")),
           draw_attrs=draw.swap, view=sv.swap_view),
    OpSpec("permute", "shape", 1, "{x}.permute({axes})", "{x}.permute({axes})", rule.permute_rule, T.EXACT,
           attrs=(AttrSpec("axes", "dims"),), draw_attrs=draw.permute, view=sv.permute_view),
    OpSpec("unsqueeze", "shape", 1, "{x}.unsqueeze({dim})", "{x}.unsqueeze_dim({dim})", rule.unsqueeze_rule,
           T.EXACT, attrs=A_DIM, draw_attrs=draw.unsqueeze, view=sv.unsqueeze_view),
    OpSpec("squeeze", "shape", 1, "{x}.squeeze({dim})", "{x}.squeeze_dim({dim})", rule.squeeze_rule, T.EXACT,
           attrs=A_DIM, draw_attrs=draw.squeeze, view=sv.squeeze_view, min_rank=2, first_input=draw.with_size(1, 2),
           doc="size 1 at dim; rank >= 2"),
    OpSpec("flip", "shape", 1, "{x}.flip({axes})", "{x}.flip({axes})", rule.flip_rule, T.EXACT,
           attrs=(AttrSpec("axes", "dims"),), draw_attrs=draw.flip, keeps_layout=True),
    OpSpec("slice", "index", 1, "{x}[{ranges}]", "{x}.slice({ranges})", rule.slice_rule, T.EXACT,
           attrs=(AttrSpec("ranges", "ranges"),), draw_attrs=draw.slice_ranges, view=sv.same_view,
           doc="one [start, end) per leading dim, step 1"),
    OpSpec("cat", "shape", VARIADIC, "torch.cat([{xs}], {dim})", "Tensor::cat(vec![{xs}], {dim})", rule.cat_rule,
           T.EXACT, attrs=A_DIM, draw_attrs=draw.cat, partners=draw.CONCATENATED,
           doc="same rank, equal sizes off dim"),
    OpSpec("stack", "shape", VARIADIC, "torch.stack([{xs}], {dim})", "Tensor::stack(vec![{xs}], {dim})",
           rule.stack_rule, T.EXACT, attrs=A_DIM, draw_attrs=draw.stack, partners=draw.STACKED,
           doc="equal shapes, result rank <= 4"),
    OpSpec("expand", "shape", 1, "{x}.expand({shape})", "{x}.expand(Shape::from(vec!{shape}))", rule.expand_rule,
           T.EXACT, attrs=(AttrSpec("shape", "shape"),), draw_attrs=draw.expand, view=sv.expand_view,
           doc="broadcast to shape (rank >= input rank)"),
    OpSpec("unfold", "shape", 1, "{x}.unfold({dim}, {size}, {step})", "{x}.unfold({dim}, {size}, {step})",
           win.unfold_rule, T.EXACT, attrs=(AttrSpec("dim", "dim"), AttrSpec("size", "int"), AttrSpec("step", "int")),
           draw_attrs=win.unfold, view=win.unfold_view, doc="windows of size along dim, step apart; rank <= 3"),
    OpSpec("repeat_dim", "shape", 1, "{x}.repeat({reps})", "{x}.repeat_dim({dim}, {times})", rule.repeat_rule,
           T.EXACT, attrs=(AttrSpec("dim", "dim"), AttrSpec("times", "int")), draw_attrs=draw.repeat,
           derive=_repeats),
    OpSpec("gather", "index", 1, "torch.gather({x}, {dim}, {indices})",
           block("let input = {x};", "let indices = {indices};", "input.gather({dim}, indices)"),
           rule.gather_rule, T.EXACT, attrs=(AttrSpec("dim", "dim"), AttrSpec("indices", "int_tensor")),
           draw_attrs=draw.gather, saves_tensors=True),
    OpSpec("select", "index", 1, "torch.index_select({x}, {dim}, torch.tensor({indices}, dtype=torch.int64))",
           block("let input = {x};", "let indices = {indices};", "input.select({dim}, indices)"),
           rule.select_rule, T.EXACT, attrs=(AttrSpec("dim", "dim"), AttrSpec("indices", "ints")),
           draw_attrs=draw.select, saves_tensors=True),
    OpSpec("mask_fill", "index", 1, "{x}.masked_fill({mask}, {value})",
           block("let input = {x};", "let mask = {mask};", "input.mask_fill(mask, {value})"),
           rule.mask_rule, T.EXACT, attrs=(AttrSpec("mask", "bool_tensor"), AttrSpec("value", "float")),
           draw_attrs=draw.mask(True), doc="mask of the input's shape", saves_tensors=True),
    OpSpec("mask_where", "index", 2, "torch.where({mask}, {y}, {x})",
           block("let input = {x};", "let rhs = {y};", "let mask = {mask};", "input.mask_where(mask, rhs)"),
           rule.mask_rule, T.EXACT, attrs=(AttrSpec("mask", "bool_tensor"),), draw_attrs=draw.mask(False),
           partners=draw.SAME_SHAPE, promotes_rank=True, doc="mask and both inputs of one shape", saves_tensors=True),
    # tensor ops, activations, losses
    OpSpec("scatter", "index", 2, "torch.scatter_add({x}, {dim}, {indices}, {y})",
           block("let input = {x};", "let indices = {indices};",
                 "input.scatter({dim}, indices, {y}, burn::tensor::IndexingUpdateOp::Add)"),
           tx.scatter_rule, T.ACCUMULATE, attrs=(AttrSpec("dim", "dim"), AttrSpec("indices", "int_tensor")),
           draw_attrs=tx.scatter, partners=tx.SCATTERED, reduced_extent=tx.scatter_extent,
           doc="add: values (input 1) of the indices' shape; repeated indices accumulate",
           saves_tensors=True, saves_only_for=(1,)),
    OpSpec("select_assign", "index", 2, "torch.index_add({x}, {dim}, torch.tensor({indices}, dtype=torch.int64), {y})",
           block("let input = {x};", "let indices = {indices};",
                 "input.select_assign({dim}, indices, {y}, burn::tensor::IndexingUpdateOp::Add)"),
           tx.select_assign_rule, T.ACCUMULATE, attrs=(AttrSpec("dim", "dim"), AttrSpec("indices", "ints")),
           draw_attrs=tx.select_assign, partners=tx.SELECTED, reduced_extent=tx.select_assign_extent,
           doc="add (PyTorch index_add): values at dim have len(indices); repeats accumulate",
           saves_tensors=True, saves_only_for=(1,)),
    OpSpec("select_replace", "index", 2,
           "torch.index_copy({x}, {dim}, torch.tensor({indices}, dtype=torch.int64), {y})",
           block("let input = {x};", "let indices = {indices};",
                 "input.select_assign({dim}, indices, {y}, burn::tensor::IndexingUpdateOp::Assign)"),
           tx.select_replace_rule, T.EXACT, attrs=(AttrSpec("dim", "dim"), AttrSpec("indices", "ints")),
           draw_attrs=tx.select_replace, partners=tx.SELECTED,
           doc="select_assign with Assign (index_copy), distinct indices; no destination gradient there",
           saves_tensors=True),
    OpSpec("slice_assign", "index", 2,
           "[_t := {x}.clone(), _t.__setitem__(tuple(slice(*r) for r in {bounds}), {y}), _t][2].contiguous()",
           "{x}.slice_assign({ranges}, {y})", tx.slice_assign_rule, T.EXACT, attrs=(AttrSpec("ranges", "ranges"),),
           draw_attrs=tx.slice_assign, partners=tx.SLICED, derive=_bounds,
           doc="values (input 1) replace the slice; the destination's gradient is 0 there", saves_tensors=True,
           saves_if=tx.slice_assign_saves),
    reduce_dim("sort", "torch.sort({x}, {dim}).values.contiguous()", "{x}.sort({dim})", T.EXACT,
               tx.DISTINCT_ALONG_DIM, shape_rule=rule.along_dim, saves_tensors=True),
    reduce_dim("sort_descending", "torch.sort({x}, {dim}, descending=True).values.contiguous()",
               "{x}.sort_descending({dim})", T.EXACT, tx.DISTINCT_ALONG_DIM, shape_rule=rule.along_dim,
               saves_tensors=True),
    OpSpec("topk", "reduction", 1, "torch.topk({x}, {k}, {dim}).values", "{x}.topk({k}, {dim})", tx.topk_rule,
           T.EXACT, tx.DISTINCT_ALONG_DIM, (AttrSpec("k", "int"), AttrSpec("dim", "dim")), tx.topk,
           doc="the k largest along dim, descending", saves_tensors=True),
    OpSpec("cross_entropy", "loss", 1, "F.cross_entropy({x}, torch.tensor({targets}, dtype=torch.int64)).reshape(1)",
           block("let input = {x};", "let targets = {targets};",
                 "burn::nn::loss::CrossEntropyLossConfig::new().init(&input.device()).forward(input, targets)"),
           tx.class_loss_rule, T.ACCUMULATE, attrs=(AttrSpec("targets", "ints"),), draw_attrs=tx.class_targets,
           min_rank=2, first_input=draw.MATRIX, reduced_extent=rule.extent, grad_terms=tx.cross_entropy_grad,
           doc="logits [batch, classes], one class index per row; mean over the batch", saves_tensors=True),
    OpSpec("cross_entropy_with_logits", "loss", 2, "F.cross_entropy({x}, {y}).reshape(1)",
           "burn::tensor::loss::cross_entropy_with_logits({x}, {y})", tx.logits_probs_rule, T.ACCUMULATE,
           tx.SOFT_TARGETS,
           partners=draw.SAME_SHAPE, min_rank=2, first_input=draw.MATRIX, saves=(1,), reduced_extent=rule.extent,
           grad_terms=tx.cross_entropy_probs_grad,
           doc="logits and probability targets, both [batch, classes]; mean over the batch"),
    OpSpec("mse_loss", "loss", 2, "F.mse_loss({x}, {y}).reshape(1)",
           "burn::nn::loss::MseLoss::new().forward({x}, {y}, burn::nn::loss::Reduction::Mean)", tx.pair_loss_rule,
           T.ACCUMULATE, partners=draw.SAME_SHAPE, saves=(0, 1), reduced_extent=rule.extent,
           doc="mean of (x - y)^2 over every element"),
    OpSpec("binary_cross_entropy", "loss", 1, "F.binary_cross_entropy({x}, {targets}.to({x}.dtype)).reshape(1)",
           block("let input = {x};", "let targets = {targets};",
                 "burn::nn::loss::BinaryCrossEntropyLossConfig::new().init(&input.device()).forward(input, targets)"),
           tx.binary_loss_rule, T.ACCUMULATE, tx.PROBABILITIES, (AttrSpec("targets", "int_tensor"),),
           tx.binary_targets, saves=(0,), reduced_extent=rule.extent,
           doc="probabilities, 0/1 targets of their shape; mean"),
    OpSpec("binary_cross_entropy_with_logits", "loss", 1,
           "F.binary_cross_entropy_with_logits({x}, {targets}.to({x}.dtype)).reshape(1)",
           block("let input = {x};", "let targets = {targets};",
                 "burn::nn::loss::BinaryCrossEntropyLossConfig::new().with_logits(true).init(&input.device())"
                 ".forward(input, targets)"),
           tx.binary_loss_rule, T.ACCUMULATE, attrs=(AttrSpec("targets", "int_tensor"),),
           draw_attrs=tx.binary_targets, saves=(0,), reduced_extent=rule.extent, grad_terms=tx.bce_logits_grad,
           doc="logits, 0/1 targets of their shape; mean"),
    OpSpec("var", "reduction", 1, "torch.var({x}, {dim}, keepdim=True)", "{x}.var({dim})", tx.variance_rule,
           T.ACCUMULATE, attrs=A_DIM, draw_attrs=tx.variance_dim, saves=(0,), reduced_extent=rule.dim_extent,
           grad_terms=tx.var_grad, value_terms=tx.var_value, doc="unbiased (n - 1) in both: PyTorch correction=1"),
    OpSpec("var_bias", "reduction", 1, "torch.var({x}, {dim}, keepdim=True, correction=0)", "{x}.var_bias({dim})",
           tx.variance_rule, T.ACCUMULATE, attrs=A_DIM, draw_attrs=tx.variance_dim, saves=(0,),
           reduced_extent=rule.dim_extent, grad_terms=tx.var_bias_grad, value_terms=tx.var_bias_value,
           doc="biased (n): PyTorch correction=0"),
    OpSpec("tril", "shape", 1, "torch.tril({x}, {diagonal})", "{x}.tril({diagonal})", tx.tri_rule, T.EXACT,
           attrs=(AttrSpec("diagonal", "int"),), draw_attrs=tx.diagonal, min_rank=2,
           doc="zeroes above the diagonal of the last two dims"),
    OpSpec("triu", "shape", 1, "torch.triu({x}, {diagonal})", "{x}.triu({diagonal})", tx.tri_rule, T.EXACT,
           attrs=(AttrSpec("diagonal", "int"),), draw_attrs=tx.diagonal, min_rank=2,
           doc="zeroes below the diagonal of the last two dims"),
    OpSpec("narrow", "index", 1, "torch.narrow({x}, {dim}, {start}, {length})", "{x}.narrow({dim}, {start}, {length})",
           tx.narrow_rule, T.EXACT, attrs=(AttrSpec("dim", "dim"), AttrSpec("start", "int"), AttrSpec("length", "int")),
           draw_attrs=tx.narrow, view=sv.same_view, doc="length elements from start along dim"),
    OpSpec("remainder", "binary", 2, "torch.remainder({x}, {y})", "{x}.remainder({y})", rule.bcast, T.ROUNDED,
           rem.REMAINDER, partners=draw.BROADCASTING, promotes_rank=True, saves=(0,), saved_for_other=(0,),
           value_terms=rem.remainder_value, doc="x - floor(x / y) * y (sign of y)", saves_only_for=(1,)),
    unary("softplus", "F.softplus({x}, {beta})", "activation::softplus({x}, {beta})", T.TRANSCENDENTAL,
          tx.SOFTPLUS, attrs=(AttrSpec("beta", "float"),), draw_attrs=draw.number("beta", 0.5, 2.0),
          doc="log(1 + exp(beta x)) / beta; identity above beta x = 20 in both"),
    unary("mish", "F.mish({x})", "activation::mish({x})", T.TRANSCENDENTAL, tx.SOFTPLUS,
          grad_terms=terms.mish_grad, doc="x tanh(softplus(x))"),
    OpSpec("log_sigmoid", "activation", 1, "F.logsigmoid({x})", "activation::log_sigmoid({x})", rule.same,
           T.TRANSCENDENTAL, saves=(0,), doc="contiguous in PyTorch whatever the input's layout"),
    unary("hard_sigmoid", "F.hardsigmoid({x})", "activation::hard_sigmoid({x}, 1.0 / 6.0, 0.5)", T.TRANSCENDENTAL,
          tx.HARD_SIGMOID, doc="burn's alpha 1/6, beta 1/2: PyTorch's only parameters"),
    OpSpec("prelu", "activation", 2, "F.prelu({x}, {y}).contiguous()", "activation::prelu({x}, {y})", tx.prelu_rule,
           T.ROUNDED,
           tx.PRELU, partners=tx.PRELU_WEIGHT, saves=(0, 1), doc="weight (input 1): [1] or [channels] (dim 1)"),
    reduce_dim("quiet_softmax",
               "torch.softmax(torch.cat([{x}, torch.zeros_like({x}.narrow({dim}, 0, 1))], {dim}), {dim})"
               ".narrow({dim}, 0, {x}.shape[{dim}]).contiguous()",
               "activation::quiet_softmax({x}, {dim})", T.TRANSCENDENTAL, tx.QUIET_SOFTMAX, shape_rule=rule.along_dim,
               grad_terms=terms.softmax_grad, saves_tensors=True),
    # nn functions (burn::tensor::module; shapes, samplers and domains in nn_shapes.py)
    nn_op("conv2d", VARIADIC,
          "F.conv2d({xs}, stride={stride}, padding={padding}, dilation={dilation}, groups={groups})",
          f"{MODULE}conv2d({{x}}, {{y}}, {{opt_z}}, {OPTIONS}ConvOptions::new({{stride}}, {{padding}}, "
          "{dilation}, {groups}))",
          nn.conv(2), T.ACCUMULATE, attrs=CONV_ATTRS, draw_attrs=nn.conv_attrs(2), partners=nn.CONV,
          first_input=nn.IMAGE, saves=(0, 1), reduced_extent=nn.conv_extent,
          doc="x [N, C, H, W], weight [O, C / groups, kh, kw], optional bias [O]"),
    max_pool(2),
    nn_op("embedding", 1, "F.embedding({indices}, {x})",
          block("let input = {x};", "let indices = {indices};", f"{MODULE}embedding(input, indices)"),
          nn.embedding_rule, T.EXACT, attrs=(AttrSpec("indices", "int_tensor"),), draw_attrs=nn.embedding_attrs,
          first_input=nn.TABLE, reduced_extent=nn.embedding_extent,
          doc="x is the table [rows, dim]; indices [B, L] repeat rows", saves_tensors=True),
    nn_op("conv1d", VARIADIC,
          "F.conv1d({xs}, stride={stride}, padding={padding}, dilation={dilation}, groups={groups})",
          f"{MODULE}conv1d({{x}}, {{y}}, {{opt_z}}, {OPTIONS}ConvOptions::new({{stride}}, {{padding}}, "
          "{dilation}, {groups}))",
          nn.conv(1), T.ACCUMULATE, attrs=CONV_ATTRS, draw_attrs=nn.conv_attrs(1), partners=nn.CONV,
          first_input=nn.SEQUENCE, saves=(0, 1), reduced_extent=nn.conv_extent,
          doc="x [N, C, L], weight [O, C / groups, k], optional bias [O]"),
    avg_pool(2),
    nn_op("adaptive_avg_pool2d", 1, "F.adaptive_avg_pool2d({x}, {output_size})",
          f"{MODULE}adaptive_avg_pool2d({{x}}, {{output_size}})", nn.adaptive_rule(2), T.ACCUMULATE,
          attrs=(AttrSpec("output_size", "shape"),), draw_attrs=nn.adaptive_attrs(2), first_input=nn.IMAGE,
          saves=(0,), reduced_extent=nn.adaptive_extent, doc="output_size [oh, ow]",
          saves_if=nn.adaptive_saves),
    conv_transpose(2),
    conv_transpose(1),
    max_pool(1),
    avg_pool(1),
    nn_op("adaptive_avg_pool1d", 1, "F.adaptive_avg_pool1d({x}, {output_size})",
          f"{MODULE}adaptive_avg_pool1d({{x}}, {{output_size}}[0])", nn.adaptive_rule(1), T.ACCUMULATE,
          attrs=(AttrSpec("output_size", "shape"),), draw_attrs=nn.adaptive_attrs(1), first_input=nn.SEQUENCE,
          saves=(0,), reduced_extent=nn.adaptive_extent, doc="output_size [ol]", saves_if=nn.adaptive_saves),
    nn_op("interpolate_nearest", 1, 'F.interpolate({x}, size={output_size}, mode="nearest")',
          f"{MODULE}interpolate({{x}}, {OPTIONS}InterpolateOptions::new({OPTIONS}InterpolateMode::Nearest)"
          ".with_output_size({output_size}))",
          nn.interpolate_rule, T.EXACT, attrs=(AttrSpec("output_size", "shape"),),
          draw_attrs=nn.interpolate_attrs(False), first_input=nn.IMAGE,
          doc="output_size [oh, ow]; source index floor(i * in / out)"),
    nn_op("interpolate_bilinear", 1,
          'F.interpolate({x}, size={output_size}, mode="bilinear", align_corners={align_corners} == 1)',
          f"{MODULE}interpolate({{x}}, {OPTIONS}InterpolateOptions::new({OPTIONS}InterpolateMode::Bilinear)"
          ".with_output_size({output_size}).with_align_corners({align_corners} == 1))",
          nn.interpolate_rule, T.ACCUMULATE,
          attrs=(AttrSpec("output_size", "shape"), AttrSpec("align_corners", "int")),
          draw_attrs=nn.interpolate_attrs(True), first_input=nn.IMAGE, reduced_extent=nn.bilinear_extent,
          value_terms=nn.bilinear_value,
          doc="output_size [oh, ow]; align_corners 0 or 1"),
    # indices used through gather: the selected index routes the gradient (the IR carries float
    # values only, so the index op and the gather are one statement)
    reduce_dim("gather_argmax", "torch.gather({x}, {dim}, {x}.argmax({dim}, keepdim=True))",
               block("let input = {x};", "let indices = input.clone().argmax({dim});", "input.gather({dim}, indices)"),
               T.EXACT, dom.UNIQUE_EXTREME,
           saves_tensors=True),
    reduce_dim("gather_argmin", "torch.gather({x}, {dim}, {x}.argmin({dim}, keepdim=True))",
               block("let input = {x};", "let indices = input.clone().argmin({dim});", "input.gather({dim}, indices)"),
               T.EXACT, dom.UNIQUE_EXTREME,
           saves_tensors=True),
    reduce_dim("gather_sort_indices", "torch.gather({x}, {dim}, torch.sort({x}, {dim}).indices)",
               block("let input = {x};", "let (_, indices) = input.clone().sort_with_indices({dim});",
                     "input.gather({dim}, indices)"),
               T.EXACT, tx.DISTINCT_ALONG_DIM, shape_rule=rule.along_dim,
           saves_tensors=True),
    OpSpec("gather_topk_indices", "index", 1, "torch.gather({x}, {dim}, torch.topk({x}, {k}, {dim}).indices)",
           block("let input = {x};", "let (_, indices) = input.clone().topk_with_indices({k}, {dim});",
                 "input.gather({dim}, indices)"),
           tx.topk_rule, T.EXACT, tx.DISTINCT_ALONG_DIM, (AttrSpec("k", "int"), AttrSpec("dim", "dim")), tx.topk,
           doc="x gathered at the indices of its k largest along dim",
           saves_tensors=True),
    # several outputs: one statement per output, `part` names it (docs/format.md)
    OpSpec("chunk", "shape", 1, "torch.chunk({x}, {chunks}, {dim})[{part}]",
           "{x}.chunk({chunks}, {dim}).remove({part})", tx.chunk_rule, T.EXACT,
           attrs=(AttrSpec("chunks", "int"), AttrSpec("dim", "dim"), AttrSpec("part", "int")),
           draw_attrs=tx.chunk, view=sv.same_view,
           doc="part `part` of PyTorch's chunks: ceil(size / chunks) each, the last shorter"),
    OpSpec("split", "shape", 1, "torch.split({x}, {split_size}, {dim})[{part}]",
           "{x}.split({split_size}, {dim}).remove({part})", tx.split_rule, T.EXACT,
           attrs=(AttrSpec("split_size", "int"), AttrSpec("dim", "dim"), AttrSpec("part", "int")),
           draw_attrs=tx.split, view=sv.same_view, doc="part `part` of the pieces of split_size (the last shorter)"),
    OpSpec("var_mean", "reduction", 1, "torch.var_mean({x}, {dim}, keepdim=True)[{part}]",
           "{ let (var, mean) = {x}.var_mean({dim}); [var, mean][{part}].clone() }", tx.var_mean_rule,
           T.ACCUMULATE, attrs=(AttrSpec("dim", "dim"), AttrSpec("part", "int")), draw_attrs=tx.var_mean, saves=(0,),
           reduced_extent=rule.dim_extent, grad_terms=tx.var_mean_grad, value_terms=tx.var_mean_value,
           doc="part 0 the unbiased variance, 1 the mean"),
)

CATALOG: dict[str, OpSpec] = {op.name: op for op in OPS}
assert len(CATALOG) == len(OPS), "duplicate op name in the catalog"


def get(name: str) -> OpSpec:
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {', '.join(sorted(CATALOG))}") from None


def families() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for op in OPS:
        out.setdefault(op.family, []).append(op.name)
    return out
