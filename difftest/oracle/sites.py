"""How the noise model (noise.py) and the finite differences (numerics.py) see each op and
module forward of a PyTorch run: an `OpSite` per forward (its tolerance class, reduced
extent, the magnitudes of its terms, its gradient's terms, a module's parameter path, a
normalisation's shared rounding), and `SiteHooks`, the executor's hooks (difftest/exec/
torch_exec.py `ExecHooks`) that build the site and hand it to a subclass's `on_site`. The
executor runs ops and modules; what they mean for rounding is known here only."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from difftest.exec.torch_modules import update_running_state
from difftest.exec.torch_values import TorchModule, apply_module
from difftest.ops import tolerance as tol
from difftest.ops.catalog import CATALOG
from difftest.ops.value_dtypes import coarsest
from difftest.oracle.norm_terms import NORMALIZE, norm_grad_terms, normalized_terms, running_stat_noise, stateless_norm
from difftest.oracle.shared_noise import shared_norm_noise
from difftest.program.ir import Apply, OpCall, Region, Statement
from difftest.program.modules import module_kind

Uniform = Callable[[torch.Size], torch.Tensor]


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
    # the terms are a declaration of an elementwise op's formula (the catalog's `grad_terms` of
    # a unary op: tanh's 1 - y**2 from the rounded y), not a sum: they enter the budget once, as
    # tolerance.TERMS_ULPS ulps of them, and are not injected as noise (which NOISE_FACTOR would
    # multiply). The terms of reductions (softmax's g - sum(s * g)) cancel in a sum of an
    # implementation-defined order and stay injected.
    declared_terms: bool = False
    # modules: the forward recomputed on |inputs| (detached), so that the gradients reaching the
    # module's own parameters are the magnitudes of their terms (noise.magnitude_run)
    param_path: Callable[[Sequence[torch.Tensor]], torch.Tensor] | None = None
    dtype: str = "float32"  # the dtype the op computes in natively (the program's): its rounding
    # rounding shared by many elements (a normalisation's statistics), given uniform draws: a
    # differentiable perturbation of the output that the noise runs add (oracle/shared_noise.py)
    shared: Callable[[Sequence[torch.Tensor], Callable[[torch.Size], torch.Tensor]], torch.Tensor | None] | None = None
    # the op splits its gradient among exactly equal input elements (ops/spec.py OpSpec.splits_ties):
    # the noise runs keep the float64 run's exact ties at its inputs
    ties: bool = False


class SiteHooks:
    """The executor's hooks for the oracle's float64 runs: each op and module forward becomes an
    OpSite handed to `on_site` with the computation. Subclasses say what a site does."""

    # a normalisation's parameters get their exact gradient beside the hooked forward (the
    # magnitude run routes them through the site's param_path instead)
    exact_param_grads = True

    def uniform_draws(self) -> Uniform | None:
        """The noise runs' uniform draws in [-1, 1] (a normalisation's own rounding reaches its
        parameters' gradients and a BatchNorm's running state too), or None."""
        return None

    def constant(self, st: Statement) -> torch.Tensor | None:
        return None

    def carried(self, st: Statement, t: torch.Tensor) -> torch.Tensor:
        return t

    def on_site(self, site: OpSite, inputs: Sequence[torch.Tensor],
                compute: Callable[[Sequence[torch.Tensor]], torch.Tensor]) -> torch.Tensor:
        """Runs `compute(inputs)` (already in the statement's region) for the forward `site`."""
        raise NotImplementedError

    def op(self, st: OpCall, inputs: Sequence[torch.Tensor], attrs: dict[str, Any],
           dtypes: dict[str, str], native: str) -> torch.Tensor:
        spec = CATALOG[st.op]
        return self.on_site(op_site(st, inputs, attrs, dtypes, native), inputs, lambda xs: spec.lower(xs, attrs))

    def module(self, st: Apply, handle: TorchModule, x: torch.Tensor, native: str) -> torch.Tensor:
        return module_forward(st, handle, x, self, native)


def op_site(st: OpCall, inputs: Sequence[torch.Tensor], attrs: dict[str, Any], dtypes: dict[str, str],
            native: str) -> OpSite:
    """The op `st` for the noise model: its tolerance class, the size of the terms its sums add
    up (accumulating ops), the terms of its gradient, the dtype it rounds in."""
    # the op rounds in its result's dtype, and its backward in its inputs' (a cast: the coarser)
    own = dtypes
    site_dtype = coarsest(own.get(st.id, native), *(own.get(x, native) for x in st.inputs))
    return _op_site(st.op, st.id, st.region, inputs, attrs, site_dtype)


def _op_site(op: str, ident: str, region: Region, inputs: Sequence[torch.Tensor], attrs: dict[str, Any],
             site_dtype: str) -> OpSite:
    """The catalog op `op` on `inputs` as the site `ident` (see op_site)."""
    spec = CATALOG[op]
    accumulates = spec.tolerance.grows_with_size
    value_terms = spec.value_terms

    def magnitude(xs: Sequence[torch.Tensor]) -> torch.Tensor:
        if value_terms is not None:
            return value_terms([x.detach() for x in xs], attrs, site_dtype)
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
    return OpSite(ident, region, spec.tolerance, spec.family == "binary", extent,
                  magnitude if accumulates or value_terms is not None else None, measure=True,
                  grad_terms=grad_terms if has_terms else None,
                  declared_terms=terms is not None and spec.family == "unary", dtype=site_dtype,
                  ties=spec.splits_ties)


def module_forward(st: Apply, handle: TorchModule, x: torch.Tensor, hooks: SiteHooks,
                   native: str = "float32") -> torch.Tensor:
    """A module forward as the noise model sees it, by its kind's noise class
    (difftest/program/modules/): a Linear and the kinds that are an op (conv2d, embedding) as the
    op they compute, a normalisation with its shared statistics, an exact kind (dropout) as is."""
    kind = module_kind(handle.kind)
    if kind.noise.startswith("norm:"):
        return _apply_norm(st, handle, x, hooks, native, channels=kind.noise == "norm:channels")
    op = kind.noise_op
    if op is not None:
        if op in _AS_OP:
            return _AS_OP[op](st, handle, x, hooks, native)
        return _apply_as_op(op, st, handle, x, hooks, native)
    if kind.noise == "linear":
        return _apply_linear(st, handle, x, hooks, native)
    assert kind.noise == "exact", f"{kind.name}: unknown noise class {kind.noise!r}"
    return apply_module(handle, x)


def _apply_linear(st: Apply, handle: TorchModule, x: torch.Tensor, hooks: SiteHooks,
                  native: str = "float32") -> torch.Tensor:
    """A Linear forward for the noise model: a dot product over `in` plus the bias, an
    accumulating op; its parameters' terms through a forward on |x|."""
    lin = handle.module
    assert isinstance(lin, torch.nn.Linear)

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
    return hooks.on_site(site, [x], lambda xs: apply_module(handle, xs[0]))


def _apply_conv(st: Apply, handle: TorchModule, x: torch.Tensor, hooks: SiteHooks,
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
    return hooks.on_site(site, [x], lambda xs: apply_module(handle, xs[0]))


def _apply_embedding(st: Apply, handle: TorchModule, x: torch.Tensor, hooks: SiteHooks,
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
    return hooks.on_site(site, [x], lambda xs: apply_module(handle, xs[0]))


def _apply_norm(st: Apply, handle: TorchModule, x: torch.Tensor, hooks: SiteHooks,
                native: str = "float32", *, channels: bool) -> torch.Tensor:
    """A normalisation forward for the noise model: a few roundings per element (mean,
    variance, square root, division: the softmax-like class), computed once (a train-mode
    forward updates the running state); the parameters' gradient terms are |g| |x_hat| (weight)
    and |g| (bias), through a forward that only they differentiate. `channels`: the affine
    parameters scale dim 1 (else the last dim)."""
    m = handle.module

    def affine(xhat: torch.Tensor, magnitudes: bool) -> torch.Tensor:
        """weight * xhat + bias, each where the module has it (or their magnitudes)."""
        weight, bias = m.weight, getattr(m, "bias", None)
        assert weight is None or isinstance(weight, torch.Tensor)
        assert bias is None or isinstance(bias, torch.Tensor)
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

    with torch.no_grad() if handle.no_grad else contextlib.nullcontext():
        y = hooks.on_site(site, [x], compute)
        if hooks.exact_param_grads and torch.is_grad_enabled():
            # the parameters' gradients, exact (the hooks see the input only; the magnitude
            # run routes them through param_path)
            xp = x.detach()
            uniform = hooks.uniform_draws()  # the noise runs: the normalisation's own
            if uniform is not None:  # rounding reaches the parameters' gradients too
                xp = xp * (1.0 + NORMALIZE.input_rel * tol.scale(native) * uniform(xp.shape).to(xp.dtype))
            yp = stateless_norm(m, xp)
            if uniform is not None and yp.requires_grad:
                # the statistics' shared rounding shifts every normalised value of a group alike:
                # the weight's gradient, a sum of them times the cotangent, carries it coherently
                # (recomputed from perturbed inputs, the normalised values of a group still sum to
                # exactly 0, where burn's float32 ones sum to its rounding)
                coherent = shared_norm_noise(m, [xp], uniform, native, tracked_scale=True)
                if coherent is not None:
                    yp = yp + coherent
            if yp.requires_grad:
                y = y + (yp - yp.detach())
    if module_kind(handle.kind).stateful:  # a train-mode forward updates the running state
        draws = hooks.uniform_draws()  # the noise runs' draws, when these are they
        update_running_state(m, x, running_stat_noise(draws) if draws is not None else None)
    return y


def _apply_as_op(op: str, st: Apply, handle: TorchModule, x: torch.Tensor, hooks: SiteHooks,
                 native: str = "float32") -> torch.Tensor:
    """A module forward as the catalog op `op` (one without attributes) on the input and the
    module's parameters, in the kind's declared order (prelu: x, weight): the op's own site,
    with the parameters among its inputs, so that their gradients get the noise and the
    magnitudes an op's inputs get."""
    spec = CATALOG[op]
    m = handle.module
    params = [getattr(m, name) for name in module_kind(handle.kind).params]
    inputs = [x, *(p for p in params if isinstance(p, torch.Tensor))]
    site = _op_site(op, st.id, "no_grad" if handle.no_grad else "grad", inputs, {}, native)

    def compute(xs: Sequence[torch.Tensor]) -> torch.Tensor:
        with torch.no_grad() if handle.no_grad else contextlib.nullcontext():  # a module derived from valid()
            return spec.lower(xs, {})

    return hooks.on_site(site, inputs, compute)


# the kinds whose noise class is an op with a site of its own (the parameters reach the noise
# model through the site's param_path, as a Linear's do; the embedding op takes its indices as an
# attribute, the module as its input); any other op: _apply_as_op
_AS_OP: dict[str, Callable[[Apply, TorchModule, torch.Tensor, SiteHooks, str], torch.Tensor]] = {
    "conv2d": _apply_conv,
    "embedding": _apply_embedding,
}
