"""Standalone reproducers of a program: a PyTorch script and a burn `#[test]`.

Both are pure functions of the program. The PyTorch script imports only `torch` and follows the
catalog's lowerings statement by statement (as `torch_exec.run_torch` does); the Rust test uses
plain `burn::tensor` code with concrete ranks and makes exactly the burn calls of the
`difftest-burn` interpreter (`rust/src/ops.rs`, `exec.rs`, `value.rs`), so either can be pasted
into an issue.

Output of both, one line per value statement and per gradient:

    <id> shape=[..] requires_grad=.. is_leaf=.. grad_fn=.. is_inference=.. values=[..]   (PyTorch)
    <id> shape=[..] is_autodiff=.. is_tracked=.. is_require_grad=.. values=[..]           (burn)
    backward <id>
    grad <id> = [..] shape=[..]        or        grad <id> = None
    error <index> <id>: <Type>: <message>                                                  (PyTorch)
"""

from __future__ import annotations

import builtins
import keyword
import math
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from difftest.program.ir import (
    Apply,
    Backward,
    Cut,
    Leaf,
    Module,
    OpCall,
    Param,
    Program,
    Region,
    Shape,
    Statement,
    Transform,
)
from difftest.program.validate import infer_shapes

__all__ = ["rust_test", "rust_test_file", "torch_script", "variable_names"]

# ---------------------------------------------------------------- names

RUST_KEYWORDS = frozenset(
    "as break const continue crate else enum extern false fn for if impl in let loop match mod move "
    "mut pub ref return self Self static struct super trait true type unsafe use where while async "
    "await dyn abstract become box do final macro override priv typeof unsized virtual yield try gen "
    "union".split()
)
# Names the emitted code itself uses (helpers, types, block locals).
EMITTER_NAMES = frozenset(
    "torch F sys t e show show_grad fail device plain input lhs rhs indices mask Tensor TensorData Device "
    "Int Bool Shape Slice Gradients activation burn std core alloc f32 f64 i64 usize bool vec println "
    "assert _ copy_module show_param show_grad_param Linear Dropout DropoutConfig Param Module nn Some None "
    "raw".split()
)
RESERVED = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | RUST_KEYWORDS | EMITTER_NAMES


def variable_names(program: Program) -> dict[str, str]:
    """A variable name per statement id, valid in Python and Rust: the id itself unless it is a
    keyword or a name the emitted code uses, then the id with trailing underscores."""
    ids = {s.id for s in program.statements}
    taken: set[str] = set()
    out: dict[str, str] = {}
    for st in program.statements:
        name = st.id
        while name in RESERVED or name in taken or (name != st.id and name in ids):
            name += "_"
        taken.add(name)
        out[st.id] = name
    return out


# ---------------------------------------------------------------- float literals

def _to_f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _literal(s: str) -> str:
    """A float literal valid in Python and Rust: always a '.' in the mantissa."""
    mant, _, exp = s.partition("e")
    if "." not in mant:
        mant += ".0"
    return f"{mant}e{int(exp)}" if exp else mant


def shortest_f32(x: float) -> str:
    """The shortest decimal that reads back (rounded to f32) as the f32 `x` (finite)."""
    for digits in range(1, 10):
        s = f"{x:.{digits}g}"
        if _to_f32(float(s)) == x:
            return _literal(s)
    return _literal(repr(x))


def _special(x: float, nan: str, inf: str, ninf: str) -> str | None:
    if math.isnan(x):
        return nan
    if math.isinf(x):
        return inf if x > 0 else ninf
    return None


def py_float(x: float) -> str:
    return _special(x, "float('nan')", "float('inf')", "float('-inf')") or _literal(repr(float(x)))


def py_f32(x: float) -> str:
    return _special(x, "float('nan')", "float('inf')", "float('-inf')") or shortest_f32(x)


def rust_f64(x: float) -> str:
    return _special(x, "f64::NAN", "f64::INFINITY", "f64::NEG_INFINITY") or _literal(repr(float(x)))


def rust_f32(x: float) -> str:
    return _special(x, "f32::NAN", "f32::INFINITY", "f32::NEG_INFINITY") or shortest_f32(x)


def _list(items: Iterable[Any]) -> str:
    return "[" + ", ".join(str(i) for i in items) + "]"


def _wrap(items: list[str], indent: str, width: int = 100) -> str:
    """Comma-separated items, broken into lines of at most `width` characters."""
    lines: list[str] = []
    cur = ""
    for it in items:
        piece = it if not cur else f"{cur}, {it}"
        if cur and len(indent) + len(piece) > width:
            lines.append(cur + ",")
            cur = it
        else:
            cur = piece
    lines.append(cur)
    return f"\n{indent}".join(lines)


# ---------------------------------------------------------------- PyTorch

_TORCH_UNARY = {
    "exp": "torch.exp", "log": "torch.log", "log1p": "torch.log1p", "sqrt": "torch.sqrt",
    "sin": "torch.sin", "cos": "torch.cos", "tan": "torch.tan", "tanh": "torch.tanh",
    "sinh": "torch.sinh", "cosh": "torch.cosh", "erf": "torch.erf", "atan": "torch.atan", "recip": "torch.reciprocal",
    "square": "torch.square", "abs": "torch.abs", "neg": "torch.neg", "sign": "torch.sign",
    "floor": "torch.floor", "ceil": "torch.ceil", "round": "torch.round", "sigmoid": "torch.sigmoid",
    "relu": "torch.relu", "gelu": "torch.nn.functional.gelu",
}
_TORCH_BINARY = {
    "add": "torch.add", "sub": "torch.sub", "mul": "torch.mul", "div": "torch.div", "powf": "torch.pow",
    "maximum": "torch.maximum", "minimum": "torch.minimum", "matmul": "torch.matmul",
}
_TORCH_SCALAR = {"add_scalar": "+", "sub_scalar": "-", "mul_scalar": "*", "div_scalar": "/"}
_TORCH_REDUCE = {"sum": "torch.sum", "mean": "torch.mean", "max": "torch.max", "min": "torch.min",
                 "prod": "torch.prod"}
_TORCH_REDUCE_DIM = {"sum_dim": "sum", "mean_dim": "mean", "max_dim": "max", "min_dim": "min",
                     "prod_dim": "prod"}
_TORCH_ALONG = {"cumsum": "torch.cumsum", "cumprod": "torch.cumprod", "softmax": "torch.softmax",
                "log_softmax": "torch.log_softmax"}


def _py_scalar(v: Any) -> str:
    """An attribute as the catalog passes it: ints stay ints, floats keep every bit."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"not a number: {v!r}")
    return str(v) if isinstance(v, int) else py_float(v)


def _py_index_tensor(spec: dict[str, Any]) -> str:
    return f"torch.tensor({_list(spec['data'])}, dtype=torch.int64).reshape({_list(spec['shape'])})"


def _py_mask(spec: dict[str, Any]) -> str:
    return f"torch.tensor({_list(spec['data'])}, dtype=torch.bool).reshape({_list(spec['shape'])})"


def torch_op_expr(st: OpCall, args: Sequence[str], shapes: dict[str, Shape]) -> str:
    """The catalog's PyTorch lowering of `st` as an expression over the variables `args`."""
    op, a = st.op, st.attrs
    x = args[0]
    if op in _TORCH_UNARY:
        return f"{_TORCH_UNARY[op]}({x})"
    if op == "leaky_relu":
        return f"torch.nn.functional.leaky_relu({x}, {_py_scalar(a['slope'])})"
    if op in ("powf_scalar", "powi_scalar"):
        return f"torch.pow({x}, {_py_scalar(a['exponent'])})"
    if op == "clamp":
        return f"torch.clamp({x}, {_py_scalar(a['min'])}, {_py_scalar(a['max'])})"
    if op == "clamp_min":
        return f"torch.clamp({x}, min={_py_scalar(a['min'])})"
    if op == "clamp_max":
        return f"torch.clamp({x}, max={_py_scalar(a['max'])})"
    if op in _TORCH_SCALAR:
        return f"{x} {_TORCH_SCALAR[op]} {_py_scalar(a['scalar'])}"
    if op in _TORCH_BINARY:
        return f"{_TORCH_BINARY[op]}({x}, {args[1]})"
    if op in _TORCH_REDUCE:
        return f"{_TORCH_REDUCE[op]}({x}).reshape(1)"
    if op in _TORCH_REDUCE_DIM:
        tail = ".values" if op in ("max_dim", "min_dim") else ""
        return f"{x}.{_TORCH_REDUCE_DIM[op]}({a['dim']}, keepdim=True){tail}"
    if op in _TORCH_ALONG:
        return f"{_TORCH_ALONG[op]}({x}, {a['dim']})"
    if op == "reshape":
        return f"{x}.contiguous().view({_list(a['shape'])})"
    if op == "transpose":
        return f"{x}.transpose(-1, -2)"
    if op == "swap_dims":
        return f"{x}.transpose({a['dim1']}, {a['dim2']})"
    if op == "permute":
        return f"{x}.permute({', '.join(str(d) for d in a['axes'])})"
    if op == "unsqueeze":
        return f"{x}.unsqueeze({a['dim']})"
    if op == "squeeze":
        return f"{x}.squeeze({a['dim']})"
    if op == "flip":
        return f"{x}.flip({_list(a['axes'])})"
    if op == "slice":
        if not a["ranges"]:
            return f"{x}[()]"
        return f"{x}[{', '.join(f'{lo}:{hi}' for lo, hi in a['ranges'])}]"
    if op == "cat":
        return f"torch.cat({_list(args)}, {a['dim']})"
    if op == "stack":
        return f"torch.stack({_list(args)}, {a['dim']})"
    if op == "expand":
        return f"{x}.expand({', '.join(str(d) for d in a['shape'])})"
    if op == "repeat_dim":
        reps = [a["times"] if i == a["dim"] else 1 for i in range(len(shapes[st.inputs[0]]))]
        return f"{x}.repeat({', '.join(str(r) for r in reps)})"
    if op == "gather":
        return f"torch.gather({x}, {a['dim']}, {_py_index_tensor(a['indices'])})"
    if op == "select":
        return f"torch.index_select({x}, {a['dim']}, torch.tensor({_list(a['indices'])}, dtype=torch.int64))"
    if op == "mask_fill":
        return f"{x}.masked_fill({_py_mask(a['mask'])}, {_py_scalar(a['value'])})"
    if op == "mask_where":
        return f"torch.where({_py_mask(a['mask'])}, {args[1]}, {x})"
    raise NotImplementedError(f"torch_script: op {op!r} has no PyTorch emitter")


_TORCH_PRELUDE = '''\
import torch


def show(name, t):
    grad_fn = type(t.grad_fn).__name__ if t.grad_fn is not None else None
    values = ", ".join(repr(x) for x in t.detach().reshape(-1).tolist())
    print(f"{name} shape={list(t.shape)} requires_grad={t.requires_grad} is_leaf={t.is_leaf} "
          f"grad_fn={grad_fn} is_inference={t.is_inference()} values=[{values}]")


def show_grad(name, t):
    g = t.grad if t.is_leaf else None  # only leaves keep .grad
    if g is None:
        print(f"grad {name} = None")
    else:
        values = ", ".join(repr(x) for x in g.reshape(-1).tolist())
        print(f"grad {name} = [{values}] shape={list(g.shape)}")


def fail(index, ident, e):
    print(f"error {index} {ident}: {type(e).__name__}: {e}".strip())
    raise SystemExit(1)
'''

# Only in scripts that use modules. burn's transforms return a new module; the counterpart is a
# deep copy (copy.deepcopy in difftest's executor), rebuilt here so the script imports only torch.
_TORCH_MODULE_HELPERS = '''

def copy_module(m):
    """A deep copy of an nn.Linear / nn.Dropout: same values and settings, no gradients."""
    if isinstance(m, torch.nn.Dropout):
        c = torch.nn.Dropout(m.p)
    else:
        c = torch.nn.Linear(m.in_features, m.out_features, bias=m.bias is not None, dtype=m.weight.dtype)
        with torch.no_grad():
            c.weight.copy_(m.weight)
            if m.bias is not None:
                c.bias.copy_(m.bias)
        c.requires_grad_(m.weight.requires_grad)
    return c.train(m.training)
'''

# PyTorch counterparts of burn's module transforms (docs/format.md, Modules).
_TORCH_TRANSFORM = {
    "valid": ".eval()  # burn: valid(); forwards run under torch.no_grad()",
    "train": ".train()",
    "no_grad": ".requires_grad_(False)",
    "freeze": ".requires_grad_(False).eval()",
    "unfreeze": ".requires_grad_(True).train()",
}

_REGION_SCOPE = {"no_grad": "torch.no_grad()", "inference_mode": "torch.inference_mode()"}


def _region(st: Statement) -> Region:
    return st.region if isinstance(st, (OpCall, Cut)) else "grad"


def torch_script(program: Program, name: str | None = None) -> str:
    """A standalone PyTorch script (imports only torch) that replays `program` with the
    catalog's lowerings and prints every value, its autograd flags and the gradients."""
    shapes = infer_shapes(program)
    names = variable_names(program)
    has_modules = any(isinstance(st, Module) for st in program.statements)
    prelude = _TORCH_PRELUDE + (_TORCH_MODULE_HELPERS if has_modules else "")
    out = [f"# difftest reproducer{f' {name}' if name else ''}: PyTorch {_count(program)}", prelude, ""]
    defined: list[str] = []
    scope: Region = "grad"
    no_grad_apply: dict[str, bool] = {}  # module handle -> derived from valid (not trained since)
    dropouts: set[str] = set()
    for index, st in enumerate(program.statements):
        region = _region(st)
        if region != scope:
            if region != "grad":
                out.append(f"with {_REGION_SCOPE[region]}:")
            scope = region
        ind = "    " if scope != "grad" else ""
        var = names[st.id]
        if isinstance(st, Backward):
            root = names[st.input]
            out.append(f"{ind}try:")
            out.append(f"{ind}    for t in [{', '.join(names[d] for d in defined)}]:")
            out.append(f"{ind}        if t.is_leaf:")
            out.append(f"{ind}            t.grad = None  # every backward starts from fresh gradients")
            out.append(f"{ind}    {root}.backward(torch.ones_like({root}))")
            out.append(f"{ind}except Exception as e:")
            out.append(f"{ind}    fail({index}, {st.id!r}, e)")
            out.append(f"{ind}print('backward {st.id}')")
            out.extend(f"{ind}show_grad({d!r}, {names[d]})" for d in defined)
            continue
        if isinstance(st, Module):
            no_grad_apply[st.id] = False
            out.extend(_torch_module(st, var))
            if st.module == "dropout":
                dropouts.add(st.id)
            continue
        if isinstance(st, Transform):
            src = names[st.input]
            out.append(f"{var} = copy_module({src}){_TORCH_TRANSFORM[st.transform]}")
            if st.transform in ("valid", "train"):
                no_grad_apply[st.id] = st.transform == "valid"
            else:
                no_grad_apply[st.id] = no_grad_apply[st.input]
            if st.input in dropouts:
                dropouts.add(st.id)
            continue
        if isinstance(st, Apply):
            out.append("try:")
            if st.module in dropouts:
                out.append("    torch.manual_seed(0)  # as difftest's executor, before every dropout")
            call = f"{var} = {names[st.module]}({names[st.input]})"
            if no_grad_apply[st.module]:
                out.append("    with torch.no_grad():  # the module derives from valid()")
                out.append(f"        {call}")
            else:
                out.append(f"    {call}")
            out.append("except Exception as e:")
            out.append(f"    fail({index}, {st.id!r}, e)")
            out.append(f"show({st.id!r}, {var})")
            defined.append(st.id)
            continue
        if isinstance(st, Leaf):
            data = _wrap([py_f32(x) for x in st.data], ind + " " * 8)
            expr = f"torch.tensor([{data}], dtype=torch.float32).reshape({_list(st.shape)}).clone()"
            if st.require_grad:
                expr += ".requires_grad_()"
        elif isinstance(st, OpCall):
            expr = torch_op_expr(st, [names[i] for i in st.inputs], shapes)
        elif isinstance(st, Param):
            expr = f"{names[st.module]}.{st.param}"
        else:
            src = names[st.input]
            expr = {"detach": f"{src}.detach()", "without_autodiff": f"{src}.detach()", "autodiff": src}[st.cut]
            if st.cut == "autodiff":
                out.append(f"{ind}# cut autodiff: PyTorch has no such state (identity)")
        out.append(f"{ind}try:")
        out.append(f"{ind}    {var} = {expr}")
        out.append(f"{ind}except Exception as e:")
        out.append(f"{ind}    fail({index}, {st.id!r}, e)")
        out.append(f"{ind}show({st.id!r}, {var})")
        defined.append(st.id)
    return "\n".join(out) + "\n"


def _torch_module(st: Module, var: str) -> list[str]:
    if st.module == "dropout":
        return [f"{var} = torch.nn.Dropout({py_float(st.p)})"]
    assert st.weight is not None
    out_f, in_f = st.weight.shape
    has_bias = st.bias is not None
    lines = [f"{var} = torch.nn.Linear({in_f}, {out_f}, bias={has_bias})  # weight [out, in] = [{out_f}, {in_f}]",
             "with torch.no_grad():"]
    w = _wrap([py_f32(x) for x in st.weight.data], " " * 8)
    lines.append(f"    {var}.weight.copy_(torch.tensor([{w}]).reshape({out_f}, {in_f}))")
    if st.bias is not None:
        b = _wrap([py_f32(x) for x in st.bias.data], " " * 8)
        lines.append(f"    {var}.bias.copy_(torch.tensor([{b}]))")
    return lines


def _count(program: Program) -> str:
    return f"({len(program)} statements)"


# ---------------------------------------------------------------- burn

_RUST_METHOD = {
    "exp": "exp", "log": "log", "log1p": "log1p", "sqrt": "sqrt", "sin": "sin", "cos": "cos",
    "tan": "tan", "tanh": "tanh", "sinh": "sinh", "cosh": "cosh", "erf": "erf", "atan": "atan", "recip": "recip",
    "square": "square", "abs": "abs", "neg": "neg", "sign": "sign", "floor": "floor", "ceil": "ceil",
    "round": "round", "transpose": "transpose",
}
_RUST_ACTIVATION = {"sigmoid", "relu", "gelu"}
_RUST_SCALAR = {"add_scalar": "scalar", "sub_scalar": "scalar", "mul_scalar": "scalar",
                "div_scalar": "scalar", "powf_scalar": "exponent", "clamp_min": "min", "clamp_max": "max"}
_RUST_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "powf": "powf",
                "maximum": "max_pair", "minimum": "min_pair", "matmul": "matmul"}
_RUST_REDUCE = {"sum", "mean", "max", "min", "prod"}
_RUST_DIM = {"sum_dim", "mean_dim", "max_dim", "min_dim", "prod_dim", "cumsum", "cumprod"}


def _rust_float_attr(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"not a number: {v!r}")
    return rust_f64(float(v))


def _rust_block(lets: list[str], result: str) -> str:
    inner = "".join(f"    {line}\n" for line in lets)
    return "{\n" + inner + f"    {result}\n}}"


def rust_op_expr(st: OpCall, args: Sequence[str], ranks: Sequence[int], uses: set[str]) -> str:
    """The interpreter's burn call for `st`; `args` are the (already region-entered) inputs."""
    op, a = st.op, st.attrs
    x = args[0]
    if op in _RUST_METHOD:
        return f"{x}.{_RUST_METHOD[op]}()"
    if op in _RUST_ACTIVATION:
        uses.add("activation")
        return f"activation::{op}({x})"
    if op == "leaky_relu":
        uses.add("activation")
        return f"activation::leaky_relu({x}, {_rust_float_attr(a['slope'])})"
    if op in ("softmax", "log_softmax"):
        uses.add("activation")
        return f"activation::{op}({x}, {a['dim']})"
    if op in _RUST_SCALAR:
        return f"{x}.{op}({_rust_float_attr(a[_RUST_SCALAR[op]])})"
    if op == "powi_scalar":
        return f"{x}.powi_scalar({int(a['exponent'])}i64)"
    if op == "clamp":
        return f"{x}.clamp({_rust_float_attr(a['min'])}, {_rust_float_attr(a['max'])})"
    if op in _RUST_BINARY or op == "mask_where":
        # burn needs equal ranks: the lower-rank operand gets leading size-1 dims (unsqueeze)
        r = max(ranks[0], ranks[1])
        lhs, rhs = (f"{v}.unsqueeze::<{r}>()" if k < r else v for v, k in zip(args, ranks, strict=True))
        if op != "mask_where":
            return f"{lhs}.{_RUST_BINARY[op]}({rhs})"
        uses.add("Bool")
        m = a["mask"]
        return _rust_block(
            [f"let lhs = {lhs};", f"let rhs = {rhs};",
             f"let mask = {_rust_inline(m, r, 'Bool', 'lhs')};"],
            "lhs.mask_where(mask, rhs)")
    if op in _RUST_REDUCE:
        return f"{x}.{op}()"
    if op in _RUST_DIM:
        return f"{x}.{op}({a['dim']})"
    if op == "reshape":
        return f"{x}.reshape({_list(a['shape'])})"
    if op == "swap_dims":
        return f"{x}.swap_dims({a['dim1']}, {a['dim2']})"
    if op == "permute":
        return f"{x}.permute({_list(a['axes'])})"
    if op == "unsqueeze":
        return f"{x}.unsqueeze_dim({a['dim']})"
    if op == "squeeze":
        if ranks[0] < 2:
            raise NotImplementedError("rust_test: squeeze of a rank-1 tensor (burn would give rank 0)")
        return f"{x}.squeeze_dim({a['dim']})"
    if op == "flip":
        axes = a["axes"]
        return f"{x}.flip({_list(axes)})" if axes else f"{x}.flip([0usize; 0])"
    if op == "slice":
        uses.add("Slice")
        slices = [f"Slice::new({lo}, Some({hi}), 1)" for lo, hi in a["ranges"]]
        return f"{x}.slice(&vec![{', '.join(slices)}])" if slices else f"{x}.slice(&Vec::<Slice>::new())"
    if op in ("cat", "stack"):
        return f"Tensor::{op}(vec![{', '.join(args)}], {a['dim']})"
    if op == "expand":
        uses.add("Shape")
        return f"{x}.expand(Shape::from(vec!{_list(a['shape'])}))"
    if op == "repeat_dim":
        return f"{x}.repeat_dim({a['dim']}, {a['times']})"
    if op == "gather":
        uses.add("Int")
        idx = _rust_inline(a["indices"], ranks[0], "Int", "input")
        return _rust_block([f"let input = {x};", f"let indices = {idx};"],
                           f"input.gather({a['dim']}, indices)")
    if op == "select":
        uses.add("Int")
        spec = {"shape": [len(a["indices"])], "data": a["indices"]}
        idx = _rust_inline(spec, 1, "Int", "input")
        return _rust_block([f"let input = {x};", f"let indices = {idx};"],
                           f"input.select({a['dim']}, indices)")
    if op == "mask_fill":
        uses.add("Bool")
        m = _rust_inline(a["mask"], ranks[0], "Bool", "input")
        return _rust_block([f"let input = {x};", f"let mask = {m};"],
                           f"input.mask_fill(mask, {_rust_float_attr(a['value'])})")
    raise NotImplementedError(f"rust_test: op {op!r} has no burn emitter")


def _rust_inline(spec: dict[str, Any], rank: int, kind: str, on: str) -> str:
    """An Int (i64) or Bool tensor given inline, on the device of the tensor `on`."""
    if kind == "Int":
        items = [f"{int(v)}i64" if i == 0 else str(int(v)) for i, v in enumerate(spec["data"])]
    else:
        items = ["true" if v else "false" for v in spec["data"]]
    data = _wrap(items, " " * 8)
    return (f"Tensor::<{rank}, {kind}>::from_data(TensorData::new(vec![{data}], {_list(spec['shape'])}), "
            f"&{on}.device())")


def _rust_param_helpers(uses_grads: bool) -> list[str]:
    """Linear weights: burn stores [in, out]; flags are the parameter's, values (and the
    gradient) are printed in PyTorch's [out, in] layout, as difftest-burn reports them."""
    lines = [
        "fn show_param(name: &str, raw: &Tensor<2>) {",
        "    let t = raw.clone().transpose();",
        "    let values = t.try_to_vec_as::<f32>().unwrap();",
        "    println!(",
        '        "{} shape={:?} is_autodiff={} is_tracked={} is_require_grad={} values={:?}",',
        "        name, t.dims(), raw.is_autodiff(), raw.is_tracked(), raw.is_require_grad(), values",
        "    );",
        "}",
    ]
    if uses_grads:
        lines += [
            "fn show_grad_param(name: &str, raw: &Tensor<2>, grads: &Gradients) {",
            "    match raw.grad(grads) {",
            "        Some(g) => {",
            "            let g = g.transpose();",
            "            let values = g.try_to_vec_as::<f32>().unwrap();",
            '            println!("grad {} = {:?} shape={:?}", name, values, g.dims());',
            "        }",
            '        None => println!("grad {} = None", name),',
            "    }",
            "}",
        ]
    return lines


def _rust_module(st: Module, var: str) -> str:
    if st.module == "dropout":
        return f"let {var} = DropoutConfig::new({rust_f64(st.p)}).init();"
    assert st.weight is not None
    out_f, in_f = st.weight.shape
    # burn's Linear stores [in, out]: the program's [out, in] weight, transposed
    wt = [st.weight.data[o * in_f + i] for i in range(in_f) for o in range(out_f)]
    items = [rust_f32(x) for x in wt]
    if not items[0].startswith("f32::"):
        items[0] += "f32"
    w = (f"Param::from_tensor(Tensor::<2>::from_data(TensorData::new(vec![{_wrap(items, '        ')}], "
         f"[{in_f}, {out_f}]), &device))")
    if st.bias is None:
        bias = "None"
    else:
        b_items = [rust_f32(x) for x in st.bias.data]
        if not b_items[0].startswith("f32::"):
            b_items[0] += "f32"
        bias = (f"Some(Param::from_tensor(Tensor::<1>::from_data(TensorData::new(vec![{_wrap(b_items, '        ')}], "
                f"[{out_f}]), &device)))")
    return "\n".join([
        f"// weight [out, in] = [{out_f}, {in_f}], stored by burn as [in, out]",
        f"let {var} = Linear {{",
        f"    weight: {w},",
        f"    bias: {bias},",
        "};",
    ])


_RUST_TRANSFORM = {"valid": "valid()", "train": "clone().train()", "no_grad": "clone().no_grad()",
                   "freeze": "clone().freeze()", "unfreeze": "clone().unfreeze()"}


def _rust_helpers(uses_grads: bool) -> list[str]:
    lines = [
        "fn show<const D: usize>(name: &str, t: &Tensor<D>) {",
        "    let values = t.try_to_vec_as::<f32>().unwrap();",
        "    println!(",
        '        "{} shape={:?} is_autodiff={} is_tracked={} is_require_grad={} values={:?}",',
        "        name, t.dims(), t.is_autodiff(), t.is_tracked(), t.is_require_grad(), values",
        "    );",
        "}",
    ]
    if uses_grads:
        lines += [
            "fn show_grad<const D: usize>(name: &str, t: &Tensor<D>, grads: &Gradients) {",
            "    match t.grad(grads) {",
            "        Some(g) => {",
            "            let values = g.try_to_vec_as::<f32>().unwrap();",
            '            println!("grad {} = {:?} shape={:?}", name, values, g.dims());',
            "        }",
            '        None => println!("grad {} = None", name),',
            "    }",
            "}",
        ]
    return lines


def rust_test(program: Program, name: str) -> str:
    """A self-contained burn `#[test]` (plain `burn::tensor` API, concrete ranks) that makes the
    same burn calls as the difftest-burn interpreter and prints values, flags and gradients."""
    if not name.isidentifier() or name in RUST_KEYWORDS:
        raise ValueError(f"test name {name!r} is not a Rust identifier")
    shapes = infer_shapes(program)
    names = variable_names(program)
    ranks = {k: len(v) for k, v in shapes.items()}
    uses: set[str] = set()
    ind = "    "
    body: list[str] = []
    leaves = [s for s in program.statements if isinstance(s, Leaf)]
    modules = [s for s in program.statements if isinstance(s, Module)]
    nn_uses: set[str] = set()
    if any(m.module == "dropout" for m in modules):
        body.append("// dropout masks come from the backend's RNG, seeded as difftest-burn seeds it")
        body.append("Device::flex().seed(0);")
    if any(s.device == "autodiff" for s in leaves) or any(m.module == "linear" for m in modules):
        body.append("let device = Device::flex().autodiff();")
    if any(s.device == "plain" for s in leaves):
        body.append("let plain = Device::flex();")
    defined: list[str] = []
    weights: dict[str, str] = {}  # weight param id -> expression of burn's [in, out] parameter
    for st in program.statements:
        if isinstance(st, Backward):
            body.append(f"let {names[st.id]} = {names[st.input]}.backward();")
            body.append(f'println!("backward {st.id}");')
            for d in defined:
                if d in weights:
                    body.append(f'show_grad_param("{d}", &{weights[d]}, &{names[st.id]});')
                else:
                    body.append(f'show_grad("{d}", &{names[d]}, &{names[st.id]});')
            uses.add("Gradients")
            continue
        var = names[st.id]
        if isinstance(st, Module):
            nn_uses.update({"Module", "Param", "Linear"} if st.module == "linear" else {"Module", "DropoutConfig"})
            body.append(_rust_module(st, var))
            continue
        if isinstance(st, Transform):
            body.append(f"let {var} = {names[st.input]}.{_RUST_TRANSFORM[st.transform]};")
            continue
        rank = ranks[st.id]
        if isinstance(st, Param):
            handle = names[st.module]
            if st.param == "weight":
                weights[st.id] = f"{handle}.weight.val()"
                body.append(f"let {var}: Tensor<2> = {handle}.weight.val().transpose(); // PyTorch's layout")
                body.append(f'show_param("{st.id}", &{weights[st.id]});')
            else:
                body.append(f"let {var}: Tensor<1> = {handle}.bias.as_ref().unwrap().val();")
                body.append(f'show("{st.id}", &{var});')
            defined.append(st.id)
            continue
        if isinstance(st, Apply):
            body.append(f"let {var}: Tensor<{rank}> = {names[st.module]}.forward({names[st.input]}.clone());")
            body.append(f'show("{st.id}", &{var});')
            defined.append(st.id)
            continue
        if isinstance(st, Leaf):
            dev = "device" if st.device == "autodiff" else "plain"
            items = [rust_f32(x) for x in st.data]
            if not items[0].startswith("f32::"):
                items[0] += "f32"
            data = _wrap(items, ind)
            expr = f"Tensor::<{rank}>::from_data(TensorData::new(vec![{data}], {_list(st.shape)}), &{dev})"
            if st.require_grad:
                expr += ".require_grad()"
        else:
            region = st.region
            if region != "grad":
                body.append(f"// {region}: burn has no such scope; the inputs are taken off autodiff")
            enter = ".without_autodiff()" if region != "grad" else ""
            if isinstance(st, OpCall):
                args = [f"{names[i]}.clone(){enter}" for i in st.inputs]
                expr = rust_op_expr(st, args, [ranks[i] for i in st.inputs], uses)
            else:
                method = {"detach": "detach", "without_autodiff": "without_autodiff", "autodiff": "autodiff"}
                expr = f"{names[st.input]}.clone(){enter}.{method[st.cut]}()"
        body.append(f"let {var}: Tensor<{rank}> = {expr};")
        body.append(f'show("{st.id}", &{var});')
        defined.append(st.id)
    imports = ["Device", "Tensor", "TensorData", *sorted(uses - {"activation"})]
    if "activation" in uses:
        imports.insert(0, "activation")
    allow = ["non_snake_case"] if any(v != v.lower() for v in names.values()) else []
    out = ["#[test]"]
    if allow:
        out.append(f"#[allow({', '.join(allow)})]")
    out.append(f"fn {name}() {{")
    out.append(f"{ind}// difftest reproducer: burn 0.22.1, Flex backend {_count(program)}")
    out.append(f"{ind}use burn::tensor::{{{', '.join(imports)}}};")
    for path, names_used in (("burn::module", nn_uses & {"Module", "Param"}),
                             ("burn::nn", nn_uses & {"DropoutConfig", "Linear"})):
        if len(names_used) == 1:
            out.append(f"{ind}use {path}::{next(iter(names_used))};")
        elif names_used:
            out.append(f"{ind}use {path}::{{{', '.join(sorted(names_used))}}};")
    out.append("")
    out.extend(f"{ind}{line}" if line else "" for line in _rust_helpers("Gradients" in uses))
    if weights:
        out.extend(f"{ind}{line}" if line else "" for line in _rust_param_helpers("Gradients" in uses))
    out.append("")
    for line in body:
        out.extend(f"{ind}{part}" for part in line.split("\n"))
    out.append("}")
    return "\n".join(out) + "\n"


def rust_test_file(tests: Sequence[tuple[Program, str]],
                   emit: Callable[[Program, str], str] = rust_test) -> str:
    """Several reproducers in one integration-test file (`tests/<file>.rs` of a crate that
    depends on burn with the `flex` and `autodiff` features)."""
    header = "//! difftest reproducers (generated).\n"
    return header + "".join("\n" + emit(p, n) for p, n in tests)
