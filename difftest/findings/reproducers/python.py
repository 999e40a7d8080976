"""The PyTorch reproducer: a standalone script (it imports only torch) that replays a program
with the executor's lowerings and module constructors and prints every value, its autograd
flags and the gradients."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from difftest.findings.reproducers.names import count, variable_names
from difftest.ops.catalog import CATALOG
from difftest.ops.spelling import TORCH_NAMESPACE_SOURCE
from difftest.ops.validate import infer_shapes
from difftest.oracle.burn_devices import batch_norm_inference_applies
from difftest.program.ir import (
    Apply,
    Backward,
    ByKind,
    Cut,
    Grad,
    Leaf,
    Module,
    OpCall,
    Optimizer,
    Param,
    Program,
    Region,
    Shape,
    Statement,
    Step,
    Transform,
    ZeroGrad,
    region_of,
    root_module,
)
from difftest.program.literals import list_literal, py_f32, py_float, wrap
from difftest.program.modules import SHARES_BUFFERS_ACROSS, module_kind

__all__ = ["torch_script"]

S = TypeVar("S", bound=Statement)

_TORCH_PRELUDE = TORCH_NAMESPACE_SOURCE + '''

def show(name, t):
    grad_fn = type(t.grad_fn).__name__ if t.grad_fn is not None else None
    values = ", ".join(repr(x) for x in t.detach().reshape(-1).tolist())
    print(f"{name} shape={list(t.shape)} requires_grad={t.requires_grad} is_leaf={t.is_leaf} "
          f"grad_fn={grad_fn} is_inference={t.is_inference()} values=[{values}]")


def show_grad(name, t, handle):
    g = handle.get(id(t)) if t.is_leaf else None  # only leaves get a gradient
    if g is None:
        print(f"grad {name} = None")
    else:
        values = ", ".join(repr(x) for x in g.reshape(-1).tolist())
        print(f"grad {name} = [{values}] shape={list(g.shape)}")


def fail(index, ident, e):
    print(f"error {index} {ident}: {type(e).__name__}: {e}".strip())
    raise SystemExit(1)


def backward(root, tensors, retain_graph=False):
    """root.backward(), with .grad accumulation kept apart: returns what this backward produced,
    per tensor (burn's backward returns such fresh gradients); each .grad then holds what
    PyTorch's accumulation makes of it (its earlier value plus this backward's)."""
    earlier = {id(t): t.grad for t in tensors}
    for t in tensors:
        t.grad = None
    try:
        root.backward(torch.ones_like(root), retain_graph=retain_graph)
    finally:
        fresh = {id(t): t.grad for t in tensors}
        for t in tensors:
            before, new = earlier[id(t)], fresh[id(t)]
            t.grad = new if before is None else (before if new is None else before + new)
    return {k: g for k, g in fresh.items() if g is not None}


def gradient(handle, t):
    g = handle.get(id(t)) if t.is_leaf else None
    if g is None:
        raise LookupError("no gradient in this handle")
    return g
'''

# Only in scripts with optimizer steps: burn's step returns a new module; the counterpart is
# torch.optim.SGD on a copy that gets the original's .grad, resuming the optimizer's state.
_TORCH_STEP_HELPERS = '''

def sgd_step(m, new, lr, config, state):
    c = copy_module(m, new)
    for new, old in zip(c.parameters(), m.parameters()):
        new.grad = None if old.grad is None else old.grad.clone()
    opt = torch.optim.SGD(c.parameters(), lr=lr, **config)
    if state is not None:
        opt.load_state_dict(state)
    opt.step()
    for p in c.parameters():
        p.grad = None  # a new handle starts without gradients, like burn's
    return c, opt.state_dict()
'''

# Only in scripts that use modules. burn's transforms return a new module; the counterpart is a
# copy (copy.deepcopy in difftest's executor), here a new module from the kind's constructor
# (the one the script builds it with) with the values copied, so the script imports only torch.
_TORCH_MODULE_HELPERS = '''

def copy_module(m, new, share_buffers=False):
    """A copy of the module m: `new()` (its constructor) with m's values and settings, no
    gradients; `share_buffers`: the copy keeps the original's running statistics (burn's clone
    shares its RunningState)."""
    if hasattr(m, "pending") and not share_buffers:
        m.sync()  # burn's valid() and train() sync the running state, then copy it
    c = new()
    with torch.no_grad():
        for name, p in m.named_parameters():
            getattr(c, name).copy_(p)
        for name, b in m.named_buffers():
            if share_buffers:
                setattr(c, name, b)
            else:
                getattr(c, name).copy_(b)
    if hasattr(m, "pending") and share_buffers:
        c.pending = m.pending
    for p, q in zip(c.parameters(), m.parameters()):
        p.requires_grad_(q.requires_grad)
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


@dataclass
class _Script:
    """The script under way (`torch_script`): its lines and what the statements so far defined."""

    program: Program
    shapes: dict[str, Shape]
    names: dict[str, str]  # statement id -> variable name
    burn_inference: frozenset[str]  # batch_norm forwards that follow burn onto its inference path
    out: list[str]
    defined: list[str] = field(default_factory=list)  # values so far
    handles: list[str] = field(default_factory=list)  # module handles so far (their parameters hold .grad)
    no_grad_apply: dict[str, bool] = field(default_factory=dict)  # handle -> derived from valid (not trained since)
    ind: str = ""  # the indent of the current statement (inside a no_grad / inference_mode scope)

    def holders(self) -> str:
        return _holders(self.defined, self.handles, self.names)

    def assign(self, index: int, st: Statement, value: str, caught: str = "Exception") -> None:
        """The value of `st` assigned in a try (an exception is the run's error), then shown."""
        ind, var = self.ind, self.names[st.id]
        self.out.append(f"{ind}try:")
        self.out.append(f"{ind}    {var} = {value}")
        self.out.append(f"{ind}except {caught} as e:")
        self.out.append(f"{ind}    fail({index}, {st.id!r}, e)")
        self.out.append(f"{ind}show({st.id!r}, {var})")
        self.defined.append(st.id)


def torch_script(program: Program, name: str | None = None) -> str:
    """A standalone PyTorch script (imports only torch) that replays `program` with the
    catalog's lowerings and prints every value, its autograd flags and the gradients."""
    kinds = [module_kind(st.module) for st in program.statements if isinstance(st, Module)]
    has_steps = any(isinstance(st, Step) for st in program.statements)
    # the classes the kinds' constructors name (BurnBatchNorm), once each
    helpers = "".join(dict.fromkeys(k.pytorch_helper for k in kinds))
    prelude = _TORCH_PRELUDE + (_TORCH_MODULE_HELPERS if kinds else "") + helpers + (
        _TORCH_STEP_HELPERS if has_steps else "")
    out = [f"# difftest reproducer{f' {name}' if name else ''}: PyTorch {count(program)}"]
    if program.checkpointing != "disabled":
        out.append(f"# burn ran it with {program.checkpointing} gradient checkpointing; PyTorch has no such mode, "
                   "and values and gradients must not depend on it")
    out += [prelude, ""]
    script = _Script(program, infer_shapes(program), variable_names(program),
                     batch_norm_inference_applies(program), out)
    scope: Region = "grad"
    for index, st in enumerate(program.statements):
        region = region_of(st)
        if region != scope:
            if region != "grad":
                out.append(f"with {_REGION_SCOPE[region]}:")
            scope = region
        script.ind = "    " if scope != "grad" else ""
        _WRITERS.of(st)(script, index, st)
    return "\n".join(out) + "\n"


def _backward(s: _Script, index: int, st: Backward) -> None:
    ind, var = s.ind, s.names[st.id]
    retain = ", retain_graph=True" if st.retain_graph else ""
    s.out.append(f"{ind}try:")
    s.out.append(f"{ind}    {var} = backward({s.names[st.input]}, {s.holders()}{retain})")
    s.out.append(f"{ind}except Exception as e:")
    s.out.append(f"{ind}    fail({index}, {st.id!r}, e)")
    s.out.append(f"{ind}print('backward {st.id}')")
    s.out.extend(f"{ind}show_grad({d!r}, {s.names[d]}, {var})" for d in s.defined)


def _zero_grad(s: _Script, index: int, st: ZeroGrad) -> None:
    s.out.append(f"for t in {s.holders()}:")
    s.out.append("    t.grad = None  # zero_grad (burn has nothing to clear)")


def _optimizer(s: _Script, index: int, st: Optimizer) -> None:
    var = s.names[st.id]
    config = (f"dict(momentum={py_float(st.momentum)}, dampening={py_float(st.dampening)}, "
              f"nesterov={st.nesterov}, weight_decay={py_float(st.weight_decay)})")
    s.out.append(f"{var} = {config}  # torch.optim.SGD settings")
    s.out.append(f"{var}_state = None")


def _step(s: _Script, index: int, st: Step) -> None:
    opt = s.names[st.optimizer]
    new = _constructor(s.program, st.module)
    s.out.append(f"{s.names[st.id]}, {opt}_state = sgd_step({s.names[st.module]}, {new}, {py_float(st.lr)}, "
                 f"{opt}, {opt}_state)")
    s.no_grad_apply[st.id] = s.no_grad_apply[st.module]
    s.handles.append(st.id)


def _grad(s: _Script, index: int, st: Grad) -> None:
    s.assign(index, st, f"gradient({s.names[st.grads]}, {s.names[st.of]})", "LookupError")


def _module(s: _Script, index: int, st: Module) -> None:
    s.handles.append(st.id)
    s.no_grad_apply[st.id] = False
    s.out.extend(_torch_module(st, s.names[st.id], s.program.dtype))


def _transform(s: _Script, index: int, st: Transform) -> None:
    s.handles.append(st.id)
    share = ", share_buffers=True" if st.transform in SHARES_BUFFERS_ACROSS else ""
    s.out.append(f"{s.names[st.id]} = copy_module({s.names[st.input]}, {_constructor(s.program, st.input)}{share})"
                 f"{_TORCH_TRANSFORM[st.transform]}")
    if st.transform in ("valid", "train"):
        s.no_grad_apply[st.id] = st.transform == "valid"
    else:
        s.no_grad_apply[st.id] = s.no_grad_apply[st.input]


def _apply(s: _Script, index: int, st: Apply) -> None:
    var = s.names[st.id]
    s.out.append("try:")
    kind = module_kind(root_module(s.program, st.module).module)
    if kind.random:
        s.out.append(f"    torch.manual_seed(0)  # as difftest's executor, before every {kind.name}")
    # records batch-norm-trains-on-autodiff-device-only, batch-norm-freeze-survives-train
    plain = st.id in s.burn_inference
    # an embedding takes indices: the leaf of integral entries, as a LongTensor
    long = ".long()" if kind.index_bound else ""
    call = f"{var} = {s.names[st.module]}({s.names[st.input]}{long}{', burn_inference=True' if plain else ''})"
    if s.no_grad_apply[st.module]:
        s.out.append("    with torch.no_grad():  # the module derives from valid()")
        s.out.append(f"        {call}")
    else:
        s.out.append(f"    {call}")
    s.out.append("except Exception as e:")
    s.out.append(f"    fail({index}, {st.id!r}, e)")
    s.out.append(f"show({st.id!r}, {var})")
    s.defined.append(st.id)


def _value(expr: Callable[[_Script, S], str]) -> Callable[[_Script, int, S], None]:
    """A value computed by one expression (which may write lines before it)."""
    def write(s: _Script, index: int, st: S) -> None:
        s.assign(index, st, expr(s, st))
    return write


def _leaf(s: _Script, st: Leaf) -> str:
    data = wrap(_floats(st.data, s.program.dtype), s.ind + " " * 8)
    expr = (f"torch.tensor([{data}], dtype=torch.{s.program.dtype}).reshape({list_literal(st.shape)})"
            ".clone()")
    return expr + ".requires_grad_()" if st.require_grad else expr


def _op(s: _Script, st: OpCall) -> str:
    return CATALOG[st.op].torch_expr([s.names[i] for i in st.inputs], st.attrs, [s.shapes[i] for i in st.inputs])


def _param(s: _Script, st: Param) -> str:
    if module_kind(root_module(s.program, st.module).module).is_buffer(st.param):
        return f"{s.names[st.module]}.read({st.param!r})  # burn: value_sync()"
    return f"{s.names[st.module]}.{st.param}"


def _cut(s: _Script, st: Cut) -> str:
    src = s.names[st.input]
    if st.cut == "autodiff":
        s.out.append(f"{s.ind}# cut autodiff: PyTorch has no such state (identity)")
    return {"detach": f"{src}.detach()", "without_autodiff": f"{src}.detach()", "autodiff": src}[st.cut]


# each statement kind's lines of the script
_WRITERS: ByKind[Callable[[_Script, int, Any], None]] = ByKind(
    "PyTorch reproducer",
    leaf=_value(_leaf),
    op=_value(_op),
    cut=_value(_cut),
    backward=_backward,
    module=_module,
    transform=_transform,
    apply=_apply,
    param=_value(_param),
    grad=_grad,
    zero_grad=_zero_grad,
    optimizer=_optimizer,
    step=_step,
)


def _holders(defined: list[str], handles: list[str], names: dict[str, str]) -> str:
    """The tensors that can hold a `.grad`: the leaves defined so far and the parameters of
    every module handle."""
    tensors = f"[t for t in [{', '.join(names[d] for d in defined)}] if t.is_leaf]"
    if not handles:
        return tensors
    return f"{tensors} + [p for m in [{', '.join(names[h] for h in handles)}] for p in m.parameters()]"


def _floats(data: Sequence[float], dtype: str) -> list[str]:
    """Data literals: the shortest float32 spelling in float32 programs, else every bit of the double."""
    return [py_f32(x) for x in data] if dtype == "float32" else [py_float(x) for x in data]


def _dtype_keyword(dtype: str) -> str:
    return "" if dtype == "float32" else f", dtype=torch.{dtype}"


def _constructor(program: Program, handle: str) -> str:
    """A new module of the handle's kind, as its `module` statement builds it: the copies'."""
    root = root_module(program, handle)
    return f"lambda: {module_kind(root.module).pytorch(root, _dtype_keyword(program.dtype))}"


def _torch_module(st: Module, var: str, dtype: str = "float32") -> list[str]:
    """The kind's constructor (the executor's, difftest/program/modules/), then the statement's
    tensors copied in by name."""
    kind = module_kind(st.module)
    dt = _dtype_keyword(dtype)
    lines = [f"{var} = {kind.pytorch(st, dt)}"]
    tensors = st.tensors()
    if tensors:
        lines.append("with torch.no_grad():")
    for name, t in tensors.items():
        spec = kind.tensor(name)
        if spec is not None and spec.layout:
            lines.append(f"    # {name} {spec.layout} = {list(t.shape)}")
        data = wrap(_floats(t.data, dtype), " " * 8)
        reshape = f".reshape({', '.join(map(str, t.shape))})" if len(t.shape) > 1 else ""
        lines.append(f"    {var}.{name}.copy_(torch.tensor([{data}]{dt}){reshape})")
    return lines
