"""What a catalog entry is: `OpSpec` (one per op) and `AttrSpec`, with the attribute checks.

Torch-free at import: templates are strings, and the callables an entry holds (domain
predicates, grad/value terms) use tensor methods of their arguments. The PyTorch lowering
(`OpSpec.lower`) imports torch when it first runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from difftest.choices import Choices
from difftest.ops import domains as dom
from difftest.ops import spelling
from difftest.ops import tolerance as tol
from difftest.program.dtypes import FLOAT_DTYPES
from difftest.program.ir import Shape, numel
from difftest.program.parts import Composition
from difftest.program.shapes import ShapeError, check_rank

if TYPE_CHECKING:
    import torch

    from difftest.ops.sampling import FirstInput, Partners

Attrs = dict[str, Any]
ShapeRule = Callable[[Sequence[Shape], Attrs], Shape]
AttrSampler = Callable[[Choices, Sequence[Shape]], "Attrs | None"]
# what puts well-typed attribute values outside the op's defined behaviour (a message naming it),
# or None: values on which the two frameworks define different results, so that no comparison of
# them is a check (clamp's bounds crossed or NaN)
AttrsRule = Callable[[Attrs], "str | None"]
ViewRule = Callable[[Shape, tuple[int, ...], Attrs], tuple[int, ...]]
GradTerms = Callable[[Sequence["torch.Tensor"], Attrs, "torch.Tensor"], list["torch.Tensor"]]
# value terms also get the dtype the op rounds in (the terms are in units of its eps)
ValueTerms = Callable[[Sequence["torch.Tensor"], Attrs, str], "torch.Tensor"]
# values a template needs beyond the attributes, from the attributes and the input shapes
# (ints or lists of ints)
Derive = Callable[[Attrs, Sequence[Shape]], Attrs]

VARIADIC = -1
# attribute types; the Rust interpreter reports the same names (`difftest-burn ops`)
ATTR_TYPES = ("float", "int", "dim", "dims", "ints", "shape", "ranges", "int_tensor", "bool_tensor", "dtype")


@dataclass(frozen=True)
class AttrSpec:
    name: str
    type: str  # one of ATTR_TYPES
    # a float attribute's values where implementations branch (burn dispatches an integral
    # powf_scalar exponent to powi_scalar, whose 0, 1, 2, -1, -2 are special cases; 0 and 1 of
    # a scalar an op may short-circuit): with boundary values on, the generator snaps a drawn
    # value within strategies/boundary.ATTR_SNAP of one to it, so campaigns reach those paths
    boundary: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        assert self.type in ATTR_TYPES, f"attribute {self.name}: unknown type {self.type!r}"


@dataclass(frozen=True)
class OpSpec:
    name: str
    family: str
    arity: int
    pytorch: str  # PyTorch expression template (spelling.py): executed, and printed by reproducers
    burn: str  # burn expression template: the interpreter's call, printed by the Rust reproducer
    shape_rule: ShapeRule
    tolerance: tol.ToleranceClass
    domain: dom.Domain = dom.ANY
    attrs: tuple[AttrSpec, ...] = ()
    draw_attrs: AttrSampler | None = None
    # how the generator draws the inputs after the first (ops of arity other than 1)
    partners: Partners | None = None
    derive: Derive | None = None
    # burn: the lower-rank operand gets leading size-1 dims first (the interpreter's `zip!`)
    promotes_rank: bool = False
    min_rank: int = 1
    # the first input's exact rank and/or a size its attributes need, and how to draw a fresh one
    # (sampling.FirstInput; None: any shape of rank >= min_rank)
    first_input: FirstInput | None = None
    saves: tuple[int, ...] = ()  # inputs PyTorch saves for backward (inference-tensor rule)
    # of those, the ones PyTorch saves only when *another* input needs a gradient (mul saves a
    # for b's gradient); the others are saved whenever the op is recorded
    saved_for_other: tuple[int, ...] = ()
    # whether PyTorch's backward node(s) for the op save any tensor (an input, the output, an
    # index or mask, a wrapped scalar), which a backward without retain_graph frees, so that a
    # second backward through the op raises; None: it saves exactly when `saves` is not empty
    # (tests/differential/test_catalog.py measures it for every op; sessions.py uses it)
    saves_tensors: bool | None = None
    # saves tensors only when one of these inputs requires grad (scatter saves its index for the
    # values' gradient only); None: whenever it is recorded
    saves_only_for: tuple[int, ...] | None = None
    # for an op whose saving depends on the call: whether it saves, from its attributes and
    # input shapes (slice_assign over the whole tensor is a plain copy, which saves nothing)
    saves_if: Callable[[Attrs, Sequence[Shape]], bool] | None = None
    reduced_extent: Callable[[Sequence[Shape], Attrs], int] = field(default=lambda s, a: 1)
    # ops that burn differentiates through the primitives it composes them of: the size of the
    # terms their gradient sums (given the inputs, attrs and |incoming gradient|), one tensor per
    # input; float32 noise of that size may remain where the terms cancel (noise.py)
    grad_terms: GradTerms | None = None
    # the op splits its gradient among exactly equal input elements (full max/min: evenly;
    # maximum/minimum: half each): an exact tie is a fact of the program, which the oracle's noise
    # runs keep (oracle/noise.py) rather than break with their jitter, or they would send the whole
    # gradient through one element. Ops that send it to one of the tied elements (max_dim, argmax
    # gathers, sort, topk, cummax) leave ties to the jitter: which one is each implementation's
    # choice, and a broken tie varies it across the runs as implementations vary it
    splits_ties: bool = False
    # the same for the op's value, where its formula sums terms larger than the result (the
    # accumulating ops' terms are the op applied to |inputs|, no declaration needed), given the
    # dtype the op rounds in: the terms are in its eps (var's carry the float64 reference's own)
    value_terms: ValueTerms | None = None
    view: ViewRule | None = None  # PyTorch returns a view of input 0: how its strides change
    view_needs_contiguous: bool = False  # a view only when input 0 is contiguous (else a copy)
    # not a view, but the result keeps input 0's memory layout (PyTorch's flip), as elementwise
    # ops do; other copies are contiguous
    keeps_layout: bool = False
    # PyTorch picks the result's memory format from the inputs' strides by rules of its own (the
    # nn ops keep a channels_last input channels_last): the model reads the result's strides
    # from a run of the op on inputs of the same shapes and strides (`result_strides`)
    measured_layout: bool = False
    doc: str = ""
    attrs_rule: AttrsRule | None = None  # values outside the op's defined behaviour (AttrsRule)
    # how burn builds the op from other catalog ops, having no autodiff node for it (compositions.py):
    # the localiser names the part at fault where the op fails as its parts do
    composed: Composition | None = None
    # how burn computes input 0's gradient with another op's forward kernel, on the cotangent
    # (backward_kernels.py): the localiser names that op where its forward is wrong there
    backward_kernel: Composition | None = None

    def __post_init__(self) -> None:
        names = [a.name for a in self.attrs]
        assert len(set(names)) == len(names), f"{self.name}: repeated attribute"
        assert not set(names) & set(spelling.INPUT_PLACEHOLDERS), f"{self.name}: attribute named like an input"
        if self.derive is None:
            known = set(names) | set(spelling.INPUT_PLACEHOLDERS)
            for template in (self.pytorch, self.burn):
                unknown = spelling.placeholders(template) - known
                assert not unknown, f"{self.name}: template placeholders {sorted(unknown)} are unknown"

    @property
    def frees_on_backward(self) -> bool:
        """A backward without retain_graph frees what PyTorch saved for this op (saves_tensors),
        when every input requires grad."""
        return self.saves_tensors if self.saves_tensors is not None else bool(self.saves)

    def frees_on_backward_for(self, needs: Sequence[bool], attrs: Attrs | None = None,
                              shapes: Sequence[Shape] | None = None) -> bool:
        """The same, for a call whose inputs require grad as `needs` says (and, for ops whose
        saving depends on it, with these attributes and input shapes)."""
        if self.saves_only_for is not None and not any(needs[i] for i in self.saves_only_for if i < len(needs)):
            return False
        if self.saves_if is not None and attrs is not None and shapes is not None:
            return self.saves_if(attrs, shapes)
        return self.frees_on_backward

    def shape(self, shapes: Sequence[Shape], attrs: Attrs) -> Shape:
        if self.arity != VARIADIC and len(shapes) != self.arity:
            raise ShapeError(f"{self.name} takes {self.arity} input(s), got {len(shapes)}")
        if not shapes:
            raise ShapeError(f"{self.name} needs at least one input")
        if self.first_input is not None and self.first_input.rank not in (None, len(shapes[0])):
            raise ShapeError(f"{self.name} needs a rank-{self.first_input.rank} first input, got {list(shapes[0])}")
        for s in shapes:
            if len(s) < self.min_rank:
                raise ShapeError(f"{self.name} needs rank >= {self.min_rank}, got {list(s)}")
        self.check_attrs(attrs)
        return check_rank(tuple(self.shape_rule(shapes, attrs)))

    def check_attrs(self, attrs: Attrs) -> None:
        names = {a.name for a in self.attrs}
        extra = set(attrs) - names
        if extra:
            raise ShapeError(f"{self.name} has no attribute(s) {sorted(extra)}")
        for a in self.attrs:
            if a.name not in attrs:
                raise ShapeError(f"{self.name} needs attribute {a.name!r}")
            _check_attr_type(self.name, a, attrs[a.name])
        why = self.attrs_rule(attrs) if self.attrs_rule is not None else None
        if why is not None:
            raise ShapeError(f"{self.name}: {why}")

    def sample_attrs(self, c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
        return self.draw_attrs(c, shapes) if self.draw_attrs else {}

    def torch_expr(self, args: Sequence[str], attrs: Attrs, shapes: Sequence[Shape]) -> str:
        """The PyTorch expression of this op over the input expressions `args`."""
        return spelling.torch_expr(self, args, attrs, shapes)

    def burn_expr(self, args: Sequence[str], attrs: Attrs, shapes: Sequence[Shape]) -> str:
        """The burn expression of this op over the input expressions `args`."""
        return spelling.burn_expr(self, args, attrs, shapes)

    def result_strides(self, shapes: Sequence[Shape], strides: Sequence[tuple[int, ...]],
                       attrs: Attrs) -> tuple[int, ...]:
        """The strides of PyTorch's result on inputs of these shapes and strides (lowering.py)."""
        from difftest.ops import lowering

        return lowering.result_strides(self, shapes, strides, attrs)

    def lower(self, inputs: Sequence[torch.Tensor], attrs: Attrs) -> torch.Tensor:
        """Runs the op in PyTorch: `torch_expr` evaluated on `inputs` (lowering.py)."""
        from difftest.ops import lowering

        return lowering.lower(self, inputs, attrs)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_ints(v: Any) -> bool:
    return isinstance(v, list) and all(_is_int(x) for x in v)


def _is_tensor_of(v: Any, element: Callable[[Any], bool]) -> bool:
    return (isinstance(v, dict) and _is_ints(v.get("shape")) and all(x >= 0 for x in v["shape"])
            and isinstance(v.get("data"), list) and all(element(x) for x in v["data"]))


# what a value of each attribute type must be (asked of the attribute's own type only)
_ATTR_TYPES: dict[str, Callable[[Any], bool]] = {
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "int": _is_int,
    "dim": _is_int,
    "dims": _is_ints,
    "ints": _is_ints,
    "shape": lambda v: _is_ints(v) and all(x >= 1 for x in v),
    "ranges": lambda v: isinstance(v, list) and all(isinstance(r, list) and len(r) == 2 and _is_ints(r) for r in v),
    "int_tensor": lambda v: _is_tensor_of(v, _is_int),
    "bool_tensor": lambda v: _is_tensor_of(v, lambda x: isinstance(x, bool)),
    "dtype": lambda v: v in FLOAT_DTYPES,
}


def _check_attr_type(op: str, a: AttrSpec, v: Any) -> None:
    ok = _ATTR_TYPES[a.type](v)
    if not ok:
        raise ShapeError(f"{op}: attribute {a.name!r}={v!r} is not of type {a.type}")
    if a.type in ("int_tensor", "bool_tensor") and len(v["data"]) != numel(tuple(v["shape"])):
        raise ShapeError(f"{op}: attribute {a.name!r} data does not fit its shape {v['shape']}")
