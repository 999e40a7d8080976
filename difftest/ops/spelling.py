"""How a catalog entry's expression templates become code: the PyTorch expression the executor
evaluates and the reproducer script prints, and the burn expression the Rust reproducer prints.

A template is source text with placeholders: `{x}` (input 0), `{y}` (input 1), `{xs}` (every
input, comma-separated), `{opt_z}` (an optional input 2, as burn's `Option`: `Some(z)` or
`None`; convolution biases), one per attribute (`{dim}`, `{min}`, …, rendered by its declared type,
below) and the names an entry's `derive` hook returns (values computed from the attributes and
the input shapes, e.g. `repeat_dim`'s repeat counts). Any other brace is literal text, so a
burn template may be a `{ … }` block. Torch-free: the executor's evaluation is in lowering.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from difftest.program.ir import Shape
from difftest.program.literals import list_literal, number, py_scalar, py_value, rust_f64, wrap

if TYPE_CHECKING:
    from difftest.ops.spec import OpSpec

# The namespace a PyTorch template is evaluated in: the executor runs this source to make it,
# and every reproducer script starts with it (so a script imports nothing but torch).
TORCH_NAMESPACE_SOURCE = "import torch\nF = torch.nn.functional\n"

INPUT_PLACEHOLDERS = ("x", "y", "xs", "opt_z")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# burn: inline tensors (attributes) are made on the device of the template block's `input`
BURN_DEVICE_OF = "input"
# burn::tensor names a burn expression may use beyond Tensor and TensorData (the reproducer
# imports the ones it mentions)
BURN_IMPORTS = ("activation", "Bool", "Int", "Shape", "Slice", "FloatDType")


def placeholders(template: str) -> set[str]:
    return set(PLACEHOLDER.findall(template))


def render(template: str, values: Mapping[str, str], op: str) -> str:
    def sub(m: re.Match[str]) -> str:
        try:
            return values[m[1]]
        except KeyError:
            raise KeyError(f"{op}: template placeholder {{{m[1]}}} is not an input, an attribute "
                           "or a derived value") from None

    return PLACEHOLDER.sub(sub, template)


def _spell(spec: OpSpec, template: str, args: Sequence[str], attrs: dict[str, Any], shapes: Sequence[Shape],
           by_type: Mapping[str, Callable[[Any], str]], literal: Callable[[Any], str]) -> str:
    """`template` with the inputs `args`, the attributes rendered `by_type` and the values the
    entry derives rendered as `literal`s."""
    values = {"x": args[0], "xs": ", ".join(args), "opt_z": f"Some({args[2]})" if len(args) > 2 else "None"}
    if len(args) > 1:
        values["y"] = args[1]
    for a in spec.attrs:
        values[a.name] = by_type[a.type](attrs[a.name])
    if spec.derive is not None:  # only those the template uses (a value may suit one language only)
        used = placeholders(template)
        values.update((k, literal(v)) for k, v in spec.derive(attrs, shapes).items() if k in used)
    return render(template, values, spec.name)


# ---------------------------------------------------------------- PyTorch


def _py_ranges(v: Any) -> str:
    """`x[lo:hi, …]` indexes one dim per range; no range is `x[()]`."""
    return ", ".join(f"{int(lo)}:{int(hi)}" for lo, hi in v) if v else "()"


def _py_tensor(dtype: str) -> Callable[[Any], str]:
    def spell(v: Any) -> str:
        return f"torch.tensor({list_literal(v['data'])}, dtype=torch.{dtype}).reshape({list_literal(v['shape'])})"

    return spell


# by attribute type (spec.AttrSpec): the Python object the program holds, as a literal
TORCH_ATTR: dict[str, Callable[[Any], str]] = {
    "float": py_scalar,
    "int": py_value,
    "dim": py_value,
    "dims": py_value,
    "ints": py_value,
    "shape": py_value,
    "ranges": _py_ranges,
    "int_tensor": _py_tensor("int64"),
    "bool_tensor": _py_tensor("bool"),
    "dtype": lambda v: f"torch.{v}",
}


def torch_expr(spec: OpSpec, args: Sequence[str], attrs: dict[str, Any], shapes: Sequence[Shape]) -> str:
    """`spec`'s PyTorch expression over the input expressions `args` (of shapes `shapes`)."""
    return _spell(spec, spec.pytorch, args, attrs, shapes, TORCH_ATTR, py_value)


# ---------------------------------------------------------------- burn


def _rust_ints(v: Any) -> str:
    """A `[usize; N]` array (`[0usize; 0]` when empty, where `[]` has no element type)."""
    return list_literal(int(d) for d in v) if v else "[0usize; 0]"


def _rust_ranges(v: Any) -> str:
    slices = [f"Slice::new({int(lo)}, Some({int(hi)}), 1)" for lo, hi in v]
    return f"&vec![{', '.join(slices)}]" if slices else "&Vec::<Slice>::new()"


def _rust_inline(kind: str, shape: Sequence[int], data: Sequence[Any]) -> str:
    """An Int (i64) or Bool tensor given inline, on the device of the block's `input`."""
    if kind == "Int":
        items = [f"{int(v)}i64" if i == 0 else str(int(v)) for i, v in enumerate(data)]
    else:
        items = ["true" if v else "false" for v in data]
    return (f"Tensor::<{len(shape)}, {kind}>::from_data(TensorData::new(vec![{wrap(items, ' ' * 8)}], "
            f"{list_literal(shape)}), &{BURN_DEVICE_OF}.device())")


# by attribute type: the value the interpreter parses it to (rust/src/ops/attr.rs, `Attr`)
BURN_ATTR: dict[str, Callable[[Any], str]] = {
    "float": lambda v: rust_f64(float(number(v))),
    "int": lambda v: str(int(v)),
    "dim": lambda v: str(int(v)),
    "dims": _rust_ints,
    "shape": _rust_ints,
    "ranges": _rust_ranges,
    "int_tensor": lambda v: _rust_inline("Int", v["shape"], v["data"]),
    "bool_tensor": lambda v: _rust_inline("Bool", v["shape"], v["data"]),
    "ints": lambda v: _rust_inline("Int", [len(v)], v),  # `select`: a rank-1 Int tensor
    "dtype": lambda v: "FloatDType::" + {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16"}[v],
}


def _rust_value(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return _rust_ints(v)
    if isinstance(v, float):
        return rust_f64(v)
    return str(int(v))


def burn_expr(spec: OpSpec, args: Sequence[str], attrs: dict[str, Any], shapes: Sequence[Shape]) -> str:
    """`spec`'s burn expression over the input expressions `args` (of shapes `shapes`): the
    interpreter's call, rank promotion included (the lower-rank operand of an op that
    `promotes_rank` gets leading size-1 dims, as the interpreter's `zip!` does)."""
    if spec.promotes_rank:
        r = max(len(s) for s in shapes)
        args = [f"{a}.unsqueeze::<{r}>()" if len(s) < r else a for a, s in zip(args, shapes, strict=True)]
    return _spell(spec, spec.burn, args, attrs, shapes, BURN_ATTR, _rust_value)


def burn_imports(expr: str) -> set[str]:
    """The burn::tensor names (of BURN_IMPORTS) a rendered burn expression uses."""
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expr)) & set(BURN_IMPORTS)


def burn_locals(template: str) -> set[str]:
    """The names a burn template binds (`let name = …` in a block): a program variable of that
    name would be shadowed inside the block."""
    return set(re.findall(r"\blet\s+(?:mut\s+)?([A-Za-z_][A-Za-z0-9_]*)", template))
