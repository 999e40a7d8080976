"""The PyTorch reproducer: a standalone script (it imports only torch) that replays a program
with the executor's lowerings and module constructors and prints every value, its autograd
flags and the gradients."""

from __future__ import annotations

from collections.abc import Sequence

from difftest.findings.reproducers.names import count, variable_names
from difftest.ops.catalog import CATALOG
from difftest.ops.spelling import TORCH_NAMESPACE_SOURCE
from difftest.ops.validate import infer_shapes
from difftest.oracle.burn_devices import batch_norm_inference_applies
from difftest.program.ir import (
    Apply,
    Backward,
    Cut,
    Grad,
    Leaf,
    Module,
    OpCall,
    Optimizer,
    Param,
    Program,
    Region,
    Statement,
    Step,
    Transform,
    ZeroGrad,
    root_module,
)
from difftest.program.literals import list_literal, py_f32, py_float, wrap
from difftest.program.modules import SHARES_BUFFERS_ACROSS, module_kind

__all__ = ["torch_script"]

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


def _region(st: Statement) -> Region:
    return st.region if isinstance(st, (OpCall, Cut)) else "grad"


def torch_script(program: Program, name: str | None = None) -> str:
    """A standalone PyTorch script (imports only torch) that replays `program` with the
    catalog's lowerings and prints every value, its autograd flags and the gradients."""
    shapes = infer_shapes(program)
    names = variable_names(program)
    kinds = [module_kind(st.module) for st in program.statements if isinstance(st, Module)]
    has_steps = any(isinstance(st, Step) for st in program.statements)
    # the classes the kinds' constructors name (BurnBatchNorm), once each
    helpers = "".join(dict.fromkeys(k.pytorch_helper for k in kinds))
    prelude = _TORCH_PRELUDE + (_TORCH_MODULE_HELPERS if kinds else "") + helpers + (
        _TORCH_STEP_HELPERS if has_steps else "")
    handles: list[str] = []  # module handles so far (their parameters hold .grad)
    out = [f"# difftest reproducer{f' {name}' if name else ''}: PyTorch {count(program)}", prelude, ""]
    defined: list[str] = []
    scope: Region = "grad"
    no_grad_apply: dict[str, bool] = {}  # module handle -> derived from valid (not trained since)
    burn_inference = batch_norm_inference_applies(program)
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
            retain = ", retain_graph=True" if st.retain_graph else ""
            out.append(f"{ind}try:")
            out.append(f"{ind}    {var} = backward({root}, {_holders(defined, handles, names)}{retain})")
            out.append(f"{ind}except Exception as e:")
            out.append(f"{ind}    fail({index}, {st.id!r}, e)")
            out.append(f"{ind}print('backward {st.id}')")
            out.extend(f"{ind}show_grad({d!r}, {names[d]}, {var})" for d in defined)
            continue
        if isinstance(st, ZeroGrad):
            out.append(f"for t in {_holders(defined, handles, names)}:")
            out.append("    t.grad = None  # zero_grad (burn has nothing to clear)")
            continue
        if isinstance(st, Optimizer):
            config = (f"dict(momentum={py_float(st.momentum)}, dampening={py_float(st.dampening)}, "
                      f"nesterov={st.nesterov}, weight_decay={py_float(st.weight_decay)})")
            out.append(f"{var} = {config}  # torch.optim.SGD settings")
            out.append(f"{var}_state = None")
            continue
        if isinstance(st, Step):
            opt = names[st.optimizer]
            new = _constructor(program, st.module)
            out.append(f"{var}, {opt}_state = sgd_step({names[st.module]}, {new}, {py_float(st.lr)}, {opt}, "
                       f"{opt}_state)")
            no_grad_apply[st.id] = no_grad_apply[st.module]
            handles.append(st.id)
            continue
        if isinstance(st, Grad):
            out.append(f"{ind}try:")
            out.append(f"{ind}    {var} = gradient({names[st.grads]}, {names[st.of]})")
            out.append(f"{ind}except LookupError as e:")
            out.append(f"{ind}    fail({index}, {st.id!r}, e)")
            out.append(f"{ind}show({st.id!r}, {var})")
            defined.append(st.id)
            continue
        if isinstance(st, Module):
            handles.append(st.id)
            no_grad_apply[st.id] = False
            out.extend(_torch_module(st, var, program.dtype))
            continue
        if isinstance(st, Transform):
            handles.append(st.id)
            src = names[st.input]
            share = ", share_buffers=True" if st.transform in SHARES_BUFFERS_ACROSS else ""
            out.append(f"{var} = copy_module({src}, {_constructor(program, st.input)}{share})"
                       f"{_TORCH_TRANSFORM[st.transform]}")
            if st.transform in ("valid", "train"):
                no_grad_apply[st.id] = st.transform == "valid"
            else:
                no_grad_apply[st.id] = no_grad_apply[st.input]
            continue
        if isinstance(st, Apply):
            out.append("try:")
            kind = module_kind(root_module(program, st.module).module)
            if kind.random:
                out.append(f"    torch.manual_seed(0)  # as difftest's executor, before every {kind.name}")
            # records batch-norm-trains-on-autodiff-device-only, batch-norm-freeze-survives-train
            plain = st.id in burn_inference
            # an embedding takes indices: the leaf of integral entries, as a LongTensor
            long = ".long()" if kind.index_bound else ""
            call = f"{var} = {names[st.module]}({names[st.input]}{long}{', burn_inference=True' if plain else ''})"
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
            data = wrap(_floats(st.data, program.dtype), ind + " " * 8)
            expr = (f"torch.tensor([{data}], dtype=torch.{program.dtype}).reshape({list_literal(st.shape)})"
                    ".clone()")
            if st.require_grad:
                expr += ".requires_grad_()"
        elif isinstance(st, OpCall):
            expr = CATALOG[st.op].torch_expr([names[i] for i in st.inputs], st.attrs, [shapes[i] for i in st.inputs])
        elif isinstance(st, Param):
            if module_kind(root_module(program, st.module).module).is_buffer(st.param):
                expr = f"{names[st.module]}.read({st.param!r})  # burn: value_sync()"
            else:
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
