"""The PyTorch executor: runs a program in process and reports an Observation."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from difftest.exec.torch_modules import (
    NORMALIZE,
    BurnBatchNorm,
    build_torch_module,
    burn_inference_path,
    norm_grad_terms,
    normalized_terms,
    share_state,
    stateless_norm,
    sync_state,
)
from difftest.exec.torch_session import MissingGradient, Session, _backward, _grad, _grad_holders, _step
from difftest.ops import tolerance as tol
from difftest.ops.catalog import CATALOG
from difftest.oracle.burn_devices import batch_norm_inference_applies
from difftest.oracle.shared_noise import shared_norm_noise
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
)
from difftest.program.module_kinds import SHARES_BUFFERS_ACROSS
from difftest.program.observation import BackwardObs, ErrorObs, Observation, TensorObs, ValueObs
from difftest.program.value_dtypes import CAST_ATTR_TYPE, coarsest, value_dtypes

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


@contextlib.contextmanager
def region_context(region: Region) -> Iterator[None]:
    if region == "no_grad":
        with torch.no_grad():
            yield
    elif region == "inference_mode":
        with torch.inference_mode():
            yield
    else:
        yield


def tensor_obs(t: torch.Tensor) -> TensorObs:
    flat = t.detach().reshape(-1)
    dtype = DTYPE_NAMES.get(flat.dtype, str(flat.dtype).removeprefix("torch."))
    if flat.dtype != torch.float64:
        flat = flat.to(torch.float64)
    return TensorObs(tuple(t.shape), tuple(flat.tolist()), dtype)


def flags(t: torch.Tensor) -> dict[str, bool]:
    return {
        "requires_grad": bool(t.requires_grad),
        "is_leaf": bool(t.is_leaf),
        "has_grad_fn": t.grad_fn is not None,
        "is_inference": bool(t.is_inference()),
    }


@dataclass(frozen=True)
class TorchModule:
    """A module handle: the nn.Module and whether its forward runs under `torch.no_grad()`
    (a module derived from `valid` and not trained since: `model.eval()` + `no_grad`)."""

    module: torch.nn.Module
    no_grad: bool = False


def build_module(st: Module, dt: torch.dtype) -> torch.nn.Module:
    """`module` statement -> its kind's PyTorch module (difftest/exec/torch_modules.py)."""
    return build_torch_module(st, dt)


def transform_module(handle: TorchModule, transform: str) -> TorchModule:
    """burn's transforms return a new module: a deep copy with PyTorch's counterpart applied."""
    if transform not in SHARES_BUFFERS_ACROSS:
        sync_state(handle.module)  # burn's valid() and train() sync the running state, then copy it
    m = copy.deepcopy(handle.module)
    for p in m.parameters():
        p.grad = None  # a copy starts without gradients, like burn's fresh parameters
    if transform in SHARES_BUFFERS_ACROSS:  # burn's clone shares the running state
        share_state(m, handle.module)
    if transform == "valid":
        return TorchModule(m.eval(), no_grad=True)
    if transform == "train":
        return TorchModule(m.train(), no_grad=False)
    if transform == "no_grad":
        return TorchModule(m.requires_grad_(False), handle.no_grad)
    if transform == "freeze":
        return TorchModule(m.requires_grad_(False).eval(), handle.no_grad)
    assert transform == "unfreeze", transform
    return TorchModule(m.requires_grad_(True).train(), handle.no_grad)


def apply_module(handle: TorchModule, x: torch.Tensor) -> torch.Tensor:
    if isinstance(handle.module, torch.nn.Dropout):
        torch.manual_seed(0)
    if handle.no_grad:
        with torch.no_grad():
            out: torch.Tensor = handle.module(x)
            return out
    out = handle.module(x)
    return out


def module_param(handle: TorchModule, name: str) -> torch.Tensor:
    sync_state(handle.module, name)  # burn's read of a running statistic: value_sync()
    t = getattr(handle.module, name)
    if name in dict(handle.module.named_buffers()):
        # burn's read is a tensor of its own; the buffer is updated in place by later syncs
        t = t.detach().clone()
    assert isinstance(t, torch.Tensor), name
    return t


class ExecHooks(Protocol):
    """How the float64 arbiter steers an execution (numerics.py, noise.py): a value held
    constant (finite differences freeze what autodiff does not differentiate), and a wrapper
    around each op or module forward (Monte Carlo rounding noise)."""

    def constant(self, st: Statement) -> torch.Tensor | None:
        """A constant to use for `st` instead of computing it, or None."""
        ...

    def op(self, site: OpSite, inputs: Sequence[torch.Tensor],
           compute: Callable[[Sequence[torch.Tensor]], torch.Tensor]) -> torch.Tensor:
        """Runs `compute(inputs)` (already in the statement's region)."""
        ...


@dataclass(frozen=True)
class OpSite:
    """What the noise model needs to know of one op or module forward."""

    id: str
    region: Region
    tolerance: tol.ToleranceClass
    elementwise: bool  # broadcasting elementwise op: its backward sums over broadcast dims
    extent: int  # reduced extent (accumulating ops)
    # the op evaluated on the magnitudes of its inputs (accumulating ops: the size of the terms
    # its sums add up), or None
    magnitude: Callable[[Sequence[torch.Tensor]], torch.Tensor] | None = None
    measure: bool = False  # the op can be re-run in float32 on the same inputs (its own rounding)
    # the size of the terms the op's gradient sums, per input, from |incoming gradient|
    grad_terms: Callable[[Sequence[torch.Tensor], torch.Tensor], list[torch.Tensor]] | None = None
    # modules: the forward recomputed on |inputs| (detached), so that the gradients reaching the
    # module's own parameters are the magnitudes of their terms (noise.magnitude_run)
    param_path: Callable[[Sequence[torch.Tensor]], torch.Tensor] | None = None
    dtype: str = "float32"  # the dtype the op computes in natively (the program's): its rounding
    # rounding shared by many elements (a normalisation's statistics), given uniform draws: a
    # differentiable perturbation of the output that the noise runs add (oracle/shared_noise.py)
    shared: Callable[[Sequence[torch.Tensor], Callable[[torch.Size], torch.Tensor]], torch.Tensor | None] | None = None


AtEnd = Callable[[dict[str, torch.Tensor], dict[str, TorchModule], Session], None]  # run_torch's `at_end`


def run_torch(program: Program, dtype: str | None = None, *, hooks: ExecHooks | None = None,
              at_end: AtEnd | None = None) -> Observation:
    """Execute `program` in its own dtype (`dtype` None: framework "torch") or in `dtype` (the
    float64 arbiter: "torch64"); a raised exception stops execution and becomes the error.
    `at_end(env, modules, session)`: called on the state a run without error ends in (torch_probes.py)."""
    framework = "torch" if dtype is None else ("torch64" if dtype == "float64" else "torch")
    dt = DTYPES[dtype or program.dtype]
    native = program.dtype
    burn_inference = batch_norm_inference_applies(program)
    # every value's own dtype (cast changes it); a run in another dtype (the float64 arbiter and
    # its noise runs) runs every cast to that dtype instead: the reference skips the casts'
    # rounding, which the noise runs inject and measure at each cast as its own rounding
    dtypes = value_dtypes(program)
    run_in = None if dtype is None else dtype
    env: dict[str, torch.Tensor] = {}
    modules: dict[str, TorchModule] = {}
    session = Session({}, {}, {})
    values: list[ValueObs] = []
    backwards: list[BackwardObs] = []
    error: ErrorObs | None = None
    for i, st in enumerate(program.statements):
        try:
            if isinstance(st, Backward):
                backwards.append(_backward(st, env, modules, session))
                continue
            if isinstance(st, Module):
                modules[st.id] = TorchModule(build_module(st, dt))
                continue
            if isinstance(st, Transform):
                modules[st.id] = transform_module(modules[st.input], st.transform)
                continue
            if isinstance(st, ZeroGrad):
                for t in _grad_holders(env, modules):
                    t.grad = None
                continue
            if isinstance(st, Optimizer):
                session.optimizers[st.id] = st
                continue
            if isinstance(st, Step):
                modules[st.id] = _step(st, modules, session)
                continue
            frozen = hooks.constant(st) if hooks is not None else None
            if frozen is not None:
                t = frozen
            elif isinstance(st, Apply):
                with burn_inference_path(modules[st.module].module, st.id in burn_inference):
                    t = _apply(st, modules, env, hooks, native)
            elif isinstance(st, Param):
                t = module_param(modules[st.module], st.param)
            elif isinstance(st, Grad):
                t = _grad(st, env, session)
            else:
                t = _value(st, env, dt, hooks, native, dtypes, run_in)
        except MissingGradient as e:
            error = ErrorObs("missing-gradient", str(e), i, st.id)
            break
        except Exception as e:
            error = ErrorObs("exception", f"{type(e).__name__}: {e}".strip(), i, st.id)
            break
        env[st.id] = t
        values.append(ValueObs(st.id, tensor_obs(t), flags(t)))
    if at_end is not None and error is None:
        at_end(env, modules, session)
    return Observation(framework, tuple(values), tuple(backwards), error)


def _apply(st: Apply, modules: dict[str, TorchModule], env: dict[str, torch.Tensor],
           hooks: ExecHooks | None, native: str = "float32") -> torch.Tensor:
    handle = modules[st.module]
    x = env[st.input]
    if hooks is None:
        return apply_module(handle, x)
    if isinstance(handle.module, (BurnBatchNorm, torch.nn.LayerNorm, torch.nn.RMSNorm, torch.nn.GroupNorm)):
        return _apply_norm(st, handle, x, hooks, native)
    if isinstance(handle.module, torch.nn.Conv2d):
        return _apply_conv(st, handle, x, hooks, native)
    if isinstance(handle.module, torch.nn.Embedding):
        return _apply_embedding(st, handle, x, hooks, native)
    if not isinstance(handle.module, torch.nn.Linear):
        return apply_module(handle, x)
    lin = handle.module

    def magnitude(xs: Sequence[torch.Tensor]) -> torch.Tensor:
        bias = lin.bias.detach().abs() if lin.bias is not None else None
        return torch.nn.functional.linear(xs[0].detach().abs(), lin.weight.detach().abs(), bias)

    def grad_terms(xs: Sequence[torch.Tensor], g: torch.Tensor) -> list[torch.Tensor]:
        return [g.abs() @ lin.weight.detach().abs()]  # |g| |W|: the terms of x's gradient

    # a Linear is a dot product over `in` plus the bias: an accumulating op for the noise model
    def param_path(xs: Sequence[torch.Tensor]) -> torch.Tensor:
        return apply_module(handle, xs[0].detach().abs())  # d/dW = |g|^T |x|, d/db = |g|

    site = OpSite(st.id, "no_grad" if handle.no_grad else "grad", tol.ACCUMULATE, False,
                  lin.in_features + 1, magnitude, grad_terms=grad_terms, param_path=param_path, dtype=native)
    return hooks.op(site, [x], lambda xs: apply_module(handle, xs[0]))


def _apply_conv(st: Apply, handle: TorchModule, x: torch.Tensor, hooks: ExecHooks,
                native: str = "float32") -> torch.Tensor:
    """A Conv2d forward for the noise model, as the conv2d op's: an accumulating op over
    C_in / groups times the kernel (plus the bias); the sizes of its input gradient's terms are
    the vector-Jacobian product on magnitudes; its parameters' through a forward on |x|."""
    conv = handle.module
    assert isinstance(conv, torch.nn.Conv2d)

    def on(xs: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return torch.nn.functional.conv2d(xs, w, b, conv.stride, conv.padding, conv.dilation, conv.groups)

    def magnitude(xs: Sequence[torch.Tensor]) -> torch.Tensor:
        b = conv.bias.detach().abs() if conv.bias is not None else None
        return on(xs[0].detach().abs(), conv.weight.detach().abs(), b)

    def grad_terms(xs: Sequence[torch.Tensor], g: torch.Tensor) -> list[torch.Tensor]:
        with torch.enable_grad():
            absx = xs[0].detach().abs().requires_grad_(True)
            (out,) = torch.autograd.grad(on(absx, conv.weight.detach().abs(), None), [absx], g)
        return [out.abs()]

    def param_path(xs: Sequence[torch.Tensor]) -> torch.Tensor:
        return apply_module(handle, xs[0].detach().abs())  # d/dW = |g| (x) |x|, d/db = |g|

    extent = conv.weight[0].numel() + (conv.bias is not None)  # the conv2d op's (nn_shapes.conv_extent)
    site = OpSite(st.id, "no_grad" if handle.no_grad else "grad", CATALOG["conv2d"].tolerance, False, extent,
                  magnitude,
                  grad_terms=grad_terms, param_path=param_path, dtype=native)
    return hooks.op(site, [x], lambda xs: apply_module(handle, xs[0]))


def _apply_embedding(st: Apply, handle: TorchModule, x: torch.Tensor, hooks: ExecHooks,
                     native: str = "float32") -> torch.Tensor:
    """An Embedding forward for the noise model, as the embedding op's: the forward copies rows
    (exact); the weight's gradient sums the gradients of the rows picked more than once (its
    terms: the forward itself, linear in the weight, on the magnitudes of the gradient)."""
    emb = handle.module
    assert isinstance(emb, torch.nn.Embedding)
    picks = x.detach().long().reshape(-1).tolist()
    extent = max((picks.count(i) for i in set(picks)), default=1)  # the embedding op's (nn_shapes.embedding_extent)

    def param_path(xs: Sequence[torch.Tensor]) -> torch.Tensor:
        return apply_module(handle, xs[0])

    site = OpSite(st.id, "no_grad" if handle.no_grad else "grad", CATALOG["embedding"].tolerance, False, extent,
                  param_path=param_path, dtype=native)
    return hooks.op(site, [x], lambda xs: apply_module(handle, xs[0]))


def _apply_norm(st: Apply, handle: TorchModule, x: torch.Tensor, hooks: ExecHooks,
                native: str = "float32") -> torch.Tensor:
    """A normalisation forward for the noise model: a few roundings per element (mean,
    variance, square root, division: the softmax-like class), computed once (a train-mode
    forward updates the running state); the parameters' gradient terms are |g| |x_hat| (weight)
    and |g| (bias), through a forward that only they differentiate."""
    m = handle.module

    def affine(xhat: torch.Tensor, magnitudes: bool) -> torch.Tensor:
        """weight * xhat + bias, each where the module has it (or their magnitudes)."""
        weight, bias = m.weight, getattr(m, "bias", None)
        assert weight is None or isinstance(weight, torch.Tensor)
        assert bias is None or isinstance(bias, torch.Tensor)
        channels = isinstance(m, (BurnBatchNorm, torch.nn.GroupNorm))
        shape = [1, -1] + [1] * (xhat.dim() - 2) if channels else [-1]
        if magnitudes:
            weight = weight.detach().abs().to(xhat.dtype) if weight is not None else None
            bias = bias.detach().abs().to(xhat.dtype) if bias is not None else None
        out = xhat * weight.reshape(shape) if weight is not None else xhat  # group_norm: affine or not
        return out + bias.reshape(shape) if bias is not None else out

    def param_path(xs: Sequence[torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            xhat = normalized_terms(m, xs[0].detach())
        return affine(xhat, magnitudes=False)

    def magnitude(xs: Sequence[torch.Tensor]) -> torch.Tensor:
        """The size of the terms of each output, |weight| |x_hat terms| + |bias|: the affine's
        rounding is relative to them, not to an output they cancel to (near zero)."""
        with torch.no_grad():
            return affine(normalized_terms(m, xs[0].detach()), magnitudes=True)

    def grad_terms(xs: Sequence[torch.Tensor], g: torch.Tensor) -> list[torch.Tensor]:
        return [norm_grad_terms(m, xs[0].detach(), g.abs())]

    # the noise model re-runs the forward in the program's dtype on the same inputs (its own
    # rounding, measured): the stateless forward; a train-mode batch_norm then updates its running state
    # once, from the input; the sizes of its gradient's terms bound the cancellation in its backward
    def shared(xs: Sequence[torch.Tensor], uniform: Callable[[torch.Size], torch.Tensor]) -> torch.Tensor | None:
        return shared_norm_noise(m, xs, uniform, native)

    # the affine's rounding: NORMALIZE's relative size (4 eps), of the terms (accumulation_noise(16) = 4 eps)
    site = OpSite(st.id, "no_grad" if handle.no_grad else "grad", NORMALIZE, False, 16, magnitude, measure=True,
                  grad_terms=grad_terms, param_path=param_path, dtype=native, shared=shared)

    def compute(xs: Sequence[torch.Tensor]) -> torch.Tensor:
        return stateless_norm(m, xs[0], detach_params=True)

    from difftest.oracle.noise import MagnitudeHooks  # the oracle imports this module

    with torch.no_grad() if handle.no_grad else contextlib.nullcontext():
        y = hooks.op(site, [x], compute)
        if not isinstance(hooks, MagnitudeHooks) and torch.is_grad_enabled():
            # the parameters' gradients, exact (the hooks see the input only; the magnitude
            # run routes them through param_path)
            xp = x.detach()
            uniform = getattr(hooks, "uniform", None)  # the noise runs: the normalisation's own
            if uniform is not None:  # rounding reaches the parameters' gradients too
                xp = xp * (1.0 + NORMALIZE.input_rel * tol.scale(native) * uniform(xp.shape).to(xp.dtype))
            yp = stateless_norm(m, xp)
            if yp.requires_grad:
                y = y + (yp - yp.detach())
    if isinstance(m, BurnBatchNorm):
        m.update(x, getattr(hooks, "uniform", None))  # the noise runs' draws, when these are they
    return y


def _value(st: Statement, env: dict[str, torch.Tensor], dt: torch.dtype,
           hooks: ExecHooks | None = None, native: str = "float32", dtypes: dict[str, str] | None = None,
           run_in: str | None = None) -> torch.Tensor:
    if isinstance(st, Leaf):
        t = torch.tensor(st.data, dtype=dt).reshape(st.shape).clone()  # a base, not a view
        return t.requires_grad_(True) if st.require_grad else t
    assert isinstance(st, (OpCall, Cut)), st
    with region_context(st.region):
        if isinstance(st, OpCall):
            spec = CATALOG[st.op]
            inputs = [env[x] for x in st.inputs]
            attrs = st.attrs
            if run_in is not None and any(a.type == CAST_ATTR_TYPE for a in spec.attrs):
                own = dtypes or {}
                if own.get(st.id) == own.get(st.inputs[0]):
                    # a cast to its input's own dtype is that input itself, on both sides (rules
                    # cast-same-dtype-returns-input, to-same-dtype-returns-input): so in the
                    # arbiter's and the noise runs, where it is no op that rounds
                    return inputs[0]
                attrs = {k: run_in if any(a.name == k and a.type == CAST_ATTR_TYPE for a in spec.attrs) else v
                         for k, v in attrs.items()}
            if hooks is None:
                return spec.lower(inputs, attrs)

            accumulates = spec.tolerance.grows_with_size
            value_terms = spec.value_terms

            def magnitude(xs: Sequence[torch.Tensor]) -> torch.Tensor:
                if value_terms is not None:
                    return value_terms([x.detach() for x in xs], attrs)
                return spec.lower([x.detach().abs() for x in xs], attrs).abs()

            extent = spec.reduced_extent([tuple(x.shape) for x in inputs], attrs)
            terms = spec.grad_terms

            def grad_terms(xs: Sequence[torch.Tensor], g: torch.Tensor) -> list[torch.Tensor]:
                if terms is not None:
                    return terms(xs, attrs, g)
                # an accumulating op: its vector-Jacobian product on magnitudes sums |terms|
                with torch.enable_grad():
                    absx = [x.detach().abs().requires_grad_(True) for x in xs]
                    out = torch.autograd.grad(spec.lower(absx, attrs), absx, g, allow_unused=True)
                return [o.abs() if o is not None else torch.zeros_like(x) for o, x in zip(out, xs)]

            has_terms = terms is not None or accumulates
            # the op rounds in its result's dtype, and its backward in its inputs' (a cast: the coarser)
            own = dtypes or {}
            site_dtype = coarsest(own.get(st.id, native), *(own.get(x, native) for x in st.inputs))
            site = OpSite(st.id, st.region, spec.tolerance, spec.family == "binary", extent,
                          magnitude if accumulates or value_terms is not None else None, measure=True,
                          grad_terms=grad_terms if has_terms else None, dtype=site_dtype)
            return hooks.op(site, inputs, lambda xs: spec.lower(xs, attrs))
        assert isinstance(st, Cut), st
        x = env[st.input]
        if st.cut in ("detach", "without_autodiff"):
            return x.detach()
        return x  # autodiff: PyTorch has no such state; identity
