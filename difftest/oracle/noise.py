"""Monte Carlo rounding noise: how much float32 rounding each element's computation carries.

The program runs in float64 with a small random relative error injected at every op boundary,
the way rounding in the program's dtype would perturb it (tolerance.py declares the sizes per
op class for float32 and scales them to the dtype; each op's own rounding is measured in it):

* every op output is multiplied by `1 + rel * u` (u uniform in [-1, 1], one per element);
* inputs of ops whose internals round intermediate values by `1 + input_rel * u`;
* accumulating ops (sums, products, matmul, Linear) add `eps * sqrt(n) * op(|inputs|) * u`,
  with the same u that scales the op's measured rounding (both estimate one rounding, so they
  add up and never cancel each other);
* in the backward pass, the gradient crossing each op boundary is multiplied by
  `1 + max(rel, BACKWARD_REL) * u`, and operands broadcast by an elementwise op are expanded
  first, so the sum over the broadcast dims adds up individually perturbed terms;
* rounding that a whole group of elements shares (a normalisation's mean and variance, and the
  sums over the group in its backward) is drawn once per group (shared_noise.py), so that a
  later reduction over the group adds it coherently, as it adds the real one.

* a gradient read hands the values computed from it its value plus a random error of the size
  its own budget allows for the terms its gradient sums (read_errors), which no op of the run
  injects (tolerance.py: an elementwise op's declared terms enter the budget only).

Leaves, cuts and values behind them are not perturbed beyond what flows into them. Runs are
seeded from the program, so the measurement is deterministic.

Exact ties are kept: at an op that splits its gradient among equal input elements (full
max/min, maximum/minimum; ops/spec.py OpSpec.splits_ties), the elements that both
the float64 run and PyTorch's own run have exactly equal (cos of a vanishing angle, a value and
its detached copy) are made equal again in each noise run, to the noisy value of the first of
them, each keeping its own gradient path. A real run that has the tie splits the gradient as
the float64 run does; a noise run that broke it would send it all to one element and measure
another computation. A float64 tie the real run does not have is left to the draws, as are ties
at ops that route the gradient to one of the tied elements (max_dim, sort, topk): which one is
each implementation's choice, and the draws vary it across the runs as implementations do.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from difftest.exec.torch_values import DTYPES
from difftest.ops import tolerance as tol
from difftest.ops.catalog import CATALOG
from difftest.ops.value_dtypes import dtype_of
from difftest.oracle.pytorch import run as run_torch
from difftest.oracle.sites import OpSite, SiteHooks
from difftest.program.ir import Grad, OpCall, Program, Statement, value_inputs
from difftest.program.jsonio import dumps, program_to_dict
from difftest.program.observation import Observation


class _Jitter(torch.autograd.Function):
    """Forward: x times a fixed factor (or x); backward: the gradient times another factor."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, fwd: torch.Tensor | None, bwd: torch.Tensor) -> torch.Tensor:
        ctx.bwd = bwd
        return x * fwd if fwd is not None else x.clone()

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return grads[0] * ctx.bwd, None, None


def _keep_ties(inputs: Sequence[torch.Tensor], keys: Sequence[torch.Tensor],
               pair: bool) -> list[torch.Tensor]:
    """`inputs` with the elements whose keys (tie_references: per element, its float64 value and
    its value in PyTorch's own run) are equal made equal again: in one input, each to the first
    element of its key; in a pair (maximum), the second input's to the first's where the two
    keys are equal. Values only: each element keeps its gradient."""
    xs = list(inputs)
    if len(keys) != len(xs) or any(k.shape != (*x.shape, 2) for k, x in zip(keys, xs)):
        return xs
    if pair and len(xs) == 2:
        shape = torch.broadcast_shapes(xs[0].shape, xs[1].shape)  # type: ignore[no-untyped-call]
        equal = (keys[0].expand(*shape, 2) == keys[1].expand(*shape, 2)).all(-1)
        if bool(equal.any()):
            second = xs[1].expand(shape)
            gap = (xs[0].detach().expand(shape) - second.detach()).where(equal, 0.0)
            xs[1] = second + gap
        return xs
    if len(xs) > 1:
        # a max / min update (scatter, select_assign, scatter_nd): its ties are a destination
        # element and the value written onto it, never two destination elements, which land on
        # different positions; making those equal would give every element of a constant
        # destination the first one's noise (the variance of copies, 0 in float64, carries its
        # rounding per element)
        return xs
    for k, (x, key) in enumerate(zip(xs, keys)):
        flat = key.reshape(-1, 2)
        uniq, inverse = torch.unique(flat, dim=0, return_inverse=True)
        if uniq.shape[0] == flat.shape[0]:
            continue
        first = torch.full((uniq.shape[0],), flat.shape[0], dtype=torch.long)
        first = first.scatter_reduce(0, inverse, torch.arange(flat.shape[0]), reduce="amin")
        held = x.detach().reshape(-1)
        xs[k] = x + (held[first[inverse]] - held).reshape(x.shape)
    return xs


def tie_references(program: Program, reference: Observation,
                   observed: Observation | None) -> dict[str, list[torch.Tensor]]:
    """Per op that keeps ties (OpSpec.splits_ties), by statement, the tie keys of its inputs: each
    element's float64 value and its value in PyTorch's own run (`observed`, in the program's
    dtype), stacked on a last dim of 2. A tie is kept where both have it: a float64 tie that the
    real run breaks (x * y - y * x is 0 in float64, a fused multiply-add's residue in float32)
    routes the real gradient to one element, as the noise runs' independent draws then do."""
    out: dict[str, list[torch.Tensor]] = {}
    if observed is None:
        return out
    for st in program.statements:
        spec = CATALOG.get(st.op) if isinstance(st, OpCall) else None
        if spec is None or not spec.splits_ties or not isinstance(st, OpCall):
            continue
        keys = []
        for i in st.inputs:
            ref, own = reference.value(i), observed.value(i)
            if ref is None or own is None or ref.value is None or own.value is None \
                    or len(ref.value.data) != len(own.value.data):
                break
            pair = [torch.tensor(v.value.data, dtype=torch.float64).reshape(v.value.shape) for v in (ref, own)]
            keys.append(torch.stack(pair, dim=-1))
        else:
            out[st.id] = keys
    return out


def _finite(diff: torch.Tensor) -> torch.Tensor:
    """A measured difference where float32 overflowed is no noise estimate (such an element is
    judged as a non-finite result instead): zero there, never an infinite budget."""
    return torch.nan_to_num(diff, nan=0.0, posinf=0.0, neginf=0.0)


@dataclass
class _Measure:
    """What _Measured needs: the op, the hooks (random numbers), and the op's inputs as they
    arrived, before the input noise (its float32 error is measured there)."""

    compute: Callable[[Sequence[torch.Tensor]], torch.Tensor]
    hooks: NoiseHooks
    site: OpSite
    arrived: list[torch.Tensor]
    inputs: list[torch.Tensor] = field(default_factory=list)


def _vjp(compute: Callable[[Sequence[torch.Tensor]], torch.Tensor], xs: Sequence[torch.Tensor],
         needs: Sequence[bool], g: torch.Tensor, dtype: torch.dtype) -> list[torch.Tensor]:
    """The op's vector-Jacobian product in `dtype`, as float64, one per input that needs it."""
    with torch.enable_grad():
        leaves = [x.detach().to(dtype).clone().requires_grad_(n) for x, n in zip(xs, needs)]
        wanted = [x for x, n in zip(leaves, needs) if n]
        grads = torch.autograd.grad(compute(leaves), wanted, g.to(dtype), allow_unused=True)
    return [gr.double() if gr is not None else torch.zeros_like(x, dtype=torch.float64)
            for gr, x in zip(grads, wanted)]


class _Measured(torch.autograd.Function):
    """The op in float64 on the noisy inputs, plus its own float32 rounding (float32 minus
    float64, measured on the inputs as they arrived) times a random factor; the same for its
    vector-Jacobian product."""

    @staticmethod
    def forward(ctx: Any, m: _Measure, *inputs: torch.Tensor) -> torch.Tensor:
        ctx.m = m
        m.inputs = [x.detach() for x in inputs]
        return m.hooks.measured(m.compute, m.inputs, m.arrived, m.site.dtype)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        m: _Measure = ctx.m
        g = grads[0]
        needs = list(ctx.needs_input_grad[1:])
        # the arrived inputs expanded like the noisy ones (broadcast operands are expanded)
        arrived = [a.expand_as(x) for a, x in zip(m.arrived, m.inputs)]
        g64 = _vjp(m.compute, m.inputs, needs, g, torch.float64)
        ref64 = _vjp(m.compute, arrived, needs, g, torch.float64)
        ref32 = _vjp(m.compute, arrived, needs, g, DTYPES[tol.measured_in(m.site.dtype)])
        terms = m.site.grad_terms(m.inputs, g.abs()) if m.site.grad_terms is not None else None
        size = tol.accumulation_noise(m.site.extent, m.site.dtype) * tol.GRAD_TERMS_FACTOR
        out: list[torch.Tensor | None] = [None]
        k = 0
        for i, n in enumerate(needs):
            if not n:
                out.append(None)
                continue
            a = g64[k]
            err = _finite(ref32[k] - ref64[k]).abs() * tol.measured_scale(m.site.dtype)
            draw = m.hooks.uniform(a.shape)  # one draw for both estimates of this rounding (site_draw)
            noisy = a + err * draw * tol.MEASURED_FACTOR
            # an elementwise op's declared terms are not injected: the budget allows for them,
            # TERMS_ULPS ulps of them, once (tolerance.py); the noise would multiply them by
            # NOISE_FACTOR on top
            if terms is not None and not m.site.declared_terms:
                t = size * terms[i].to(noisy.dtype).expand_as(noisy).abs()
                noisy = noisy + t * draw
            k += 1
            out.append(noisy)
        return tuple(out)


class NoiseHooks(SiteHooks):
    """Site hooks (sites.py) that inject the noise described above."""

    def __init__(self, seed: int, ties: dict[str, list[torch.Tensor]] | None = None,
                 reads: dict[str, torch.Tensor] | None = None) -> None:
        self.gen = torch.Generator().manual_seed(seed)
        self.seed = seed
        self.ties = ties or {}  # tie_references: the float64 inputs of the ops that keep ties
        self.reads = reads or {}  # read_errors: per gradient read, the error it carries onward
        # the draw that scaled the current site's measured rounding (measured), which its
        # accumulation noise reuses: both estimate the rounding of one op's result, which an
        # implementation incurs once, so they add coherently and never cancel each other (with
        # independent draws of equal size, every sample of an element could by chance be ~0)
        self.site_draw: torch.Tensor | None = None

    def uniform(self, shape: torch.Size) -> torch.Tensor:
        return torch.rand(shape, generator=self.gen, dtype=torch.float64) * 2.0 - 1.0

    def _factor(self, shape: torch.Size, size: float) -> torch.Tensor:
        return 1.0 + size * self.uniform(shape)

    def measured(self, compute: Callable[[Sequence[torch.Tensor]], torch.Tensor],
                 xs: Sequence[torch.Tensor], arrived: Sequence[torch.Tensor], dtype: str = "float32") -> torch.Tensor:
        """compute(xs) in float64 plus the op's own rounding in `dtype` (the program's) measured
        at the inputs as they arrived (float64's through float32, tolerance.measured_in), randomly
        scaled."""
        y64 = compute(xs)
        r64 = compute(arrived)
        r32 = compute([x.to(DTYPES[tol.measured_in(dtype)]) for x in arrived]).double()
        factor = tol.MEASURED_FACTOR * tol.measured_scale(dtype)
        self.site_draw = self.uniform(y64.shape)
        return y64 + _finite(r32 - r64).abs() * self.site_draw * factor

    def uniform_draws(self) -> Callable[[torch.Size], torch.Tensor] | None:
        return self.uniform

    def carried(self, st: Statement, t: torch.Tensor) -> torch.Tensor:
        """A gradient read as later statements see it: its value plus its allowed error
        (read_errors) times a uniform draw per element. The draws come from a generator of the
        read's own, so every other draw of the run is what it is without them, and the read's
        own value (what the run observes of it) keeps its budget unchanged."""
        size = self.reads.get(st.id)
        if size is None or size.shape != t.shape:
            return t
        gen = torch.Generator().manual_seed(self.seed ^ zlib.crc32(st.id.encode()))
        u = torch.rand(t.shape, generator=gen, dtype=torch.float64) * 2.0 - 1.0
        return t + (size * u).to(t.dtype)

    def on_site(self, site: OpSite, inputs: Sequence[torch.Tensor],
                compute: Callable[[Sequence[torch.Tensor]], torch.Tensor]) -> torch.Tensor:
        cls = site.tolerance
        k = tol.scale(site.dtype)  # 1.0 for float32
        rel, input_rel = cls.rel * k, cls.input_rel * k
        recording = site.region == "grad" and torch.is_grad_enabled()
        bwd = max(rel, tol.BACKWARD_REL * k)
        self.site_draw = None
        if site.ties and site.id in self.ties:
            inputs = _keep_ties(inputs, self.ties[site.id], site.elementwise)
        out_shape = torch.broadcast_shapes(*(x.shape for x in inputs)) if site.elementwise else None  # type: ignore[no-untyped-call]
        xs: list[torch.Tensor] = []
        for x in inputs:
            if recording and x.requires_grad:
                if out_shape is not None and x.shape != out_shape:
                    x = x.expand(out_shape)
                fwd = self._factor(x.shape, input_rel) if input_rel else None
                x = _Jitter.apply(x, fwd, self._factor(x.shape, bwd))
            elif input_rel:
                x = x * self._factor(x.shape, input_rel)
            xs.append(x)
        arrived = [x.detach() for x in inputs]
        if not site.measure:
            y = compute(xs)
        elif recording and any(x.requires_grad for x in xs):
            y = _Measured.apply(_Measure(compute, self, site, arrived), *xs)
        elif recording or rel or input_rel:
            y = self.measured(compute, xs, arrived, site.dtype)
        else:
            y = compute(xs)  # an exact op outside a recording region: keep PyTorch's view semantics
        add = None
        if site.magnitude is not None:
            with torch.no_grad():
                terms = site.magnitude(inputs).to(torch.float64)
                draw = self.site_draw
                if draw is None or draw.shape != terms.shape:
                    draw = self.uniform(terms.shape)
                add = tol.accumulation_noise(site.extent, site.dtype) * terms.abs() * draw
        if recording and y.requires_grad:
            fwd = self._factor(y.shape, rel) if rel else None
            y = _Jitter.apply(y, fwd, self._factor(y.shape, bwd))
        elif rel:
            y = y * self._factor(y.shape, rel)
        if add is not None:
            y = y + add
        if site.shared is not None:
            shared = site.shared(xs, self.uniform)
            if shared is not None:
                y = y + shared
        return y


class _Magnitude(torch.autograd.Function):
    """Forward: the op. Backward: the sum of the magnitudes of the terms the op's
    vector-Jacobian product adds up, |J|^T |g|, so that a float64 backward of the whole program
    gives, per gradient element, the size of the terms that may cancel in it."""

    @staticmethod
    def forward(ctx: Any, m: _Measure, *inputs: torch.Tensor) -> torch.Tensor:
        ctx.m = m
        m.inputs = [x.detach() for x in inputs]
        return m.compute(m.inputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        m: _Measure = ctx.m
        g = grads[0].abs()
        needs = list(ctx.needs_input_grad[1:])
        if m.site.grad_terms is not None:
            terms = [t.expand_as(x) if t.shape != x.shape else t
                     for t, x in zip(m.site.grad_terms(m.inputs, g), m.inputs)]
        else:  # selections, shape ops and elementwise ops: |VJP| at the inputs themselves
            vjps = iter(_vjp(m.compute, m.inputs, needs, g, torch.float64))
            terms = [next(vjps).abs() if n else torch.zeros_like(x) for x, n in zip(m.inputs, needs)]
        out: list[torch.Tensor | None] = [None]
        out.extend(t.abs() if n else None for t, n in zip(terms, needs))
        return tuple(out)


class MagnitudeHooks(SiteHooks):
    """Site hooks for the magnitude run: values exact, the backward of every op replaced by the
    magnitudes of its terms (operands broadcast by an elementwise op are expanded first, so the
    sum over broadcast dims adds magnitudes too)."""

    exact_param_grads = False  # a module's parameters' terms go through the site's param_path

    def on_site(self, site: OpSite, inputs: Sequence[torch.Tensor],
                compute: Callable[[Sequence[torch.Tensor]], torch.Tensor]) -> torch.Tensor:
        recording = site.region == "grad" and torch.is_grad_enabled()
        if site.param_path is not None and recording:
            # a module: the value through _Magnitude (the input's terms), the parameters' terms
            # through the forward on |input| (zero in value, gradient only)
            with torch.no_grad():
                y = compute(inputs)
            if any(x.requires_grad for x in inputs):
                y = _Magnitude.apply(_Measure(compute, NoiseHooks(0), site, []), *inputs)
            yp = site.param_path(inputs)
            return y + (yp - yp.detach()) if yp.requires_grad else y
        if not recording or not any(x.requires_grad for x in inputs):
            return compute(inputs)
        xs = list(inputs)
        if site.elementwise:
            shape = torch.broadcast_shapes(*(x.shape for x in xs))  # type: ignore[no-untyped-call]
            xs = [x.expand(shape) if x.requires_grad and x.shape != shape else x for x in xs]
        out: torch.Tensor = _Magnitude.apply(_Measure(compute, NoiseHooks(0), site, []), *xs)
        return out


def magnitude_run(program: Program, upto: int | None = None) -> Observation:
    """The program in float64 with the magnitude backward (see _Magnitude); of its first `upto`
    statements only, when given (a run is statement by statement, so each of them gets what
    the whole program's run gives it)."""
    return run_torch(program if upto is None else program.prefix(upto), "float64", hooks=MagnitudeHooks())


def read_errors(program: Program, magnitudes: Observation) -> dict[str, torch.Tensor]:
    """Per gradient read that a later statement uses, the error it may carry into the values
    computed from it. A read is judged with `TERMS_ULPS` ulps of the terms its gradient sums
    (the magnitude run's value of the read) on top of its measured noise, and the noise runs do
    not inject an elementwise op's declared terms (tolerance.py): a value made from the read,
    budgeted on its own noise, would allow none of that error, and the read's float64 rounding
    where 1 - tanh(x)**2 cancels becomes a false "burn-wrong" in 0.5 * read. Injected at
    TERMS_ULPS / NOISE_FACTOR ulps, the budget's NOISE_FACTOR gives the value downstream about
    the read's own allowance, carried through whatever it is made of."""
    used = {i for st in program.statements for i in value_inputs(st)}
    out: dict[str, torch.Tensor] = {}
    for st in program.statements:
        seen = magnitudes.value(st.id) if isinstance(st, Grad) and st.id in used else None
        if seen is None or seen.value is None:
            continue
        size = tol.TERMS_ULPS / tol.NOISE_FACTOR * tol.F32_EPS * tol.scale(dtype_of(program, st.id))
        terms = torch.tensor(seen.value.data, dtype=torch.float64).reshape(seen.value.shape)
        out[st.id] = size * torch.nan_to_num(terms.abs(), nan=0.0, posinf=0.0)
    return out


def feeds_on_read(program: Program, upto: int) -> bool:
    """Whether one of the program's first `upto` statements computes from a gradient read."""
    reads = {st.id for st in program.statements[:upto] if isinstance(st, Grad)}
    return any(i in reads for st in program.statements[:upto] for i in value_inputs(st))


def program_seed(program: Program) -> int:
    return zlib.crc32(dumps(program_to_dict(program)).encode())


def noisy_runs(program: Program, samples: int = tol.NOISE_SAMPLES, start: int = 0,
               reference: Observation | None = None, observed: Observation | None = None,
               upto: int | None = None, magnitudes: Observation | None = None) -> list[Observation]:
    """Runs `start` to `samples` - 1 of `program`'s float64 runs with rounding noise,
    deterministically seeded: run k is the same whichever others are made. `reference`: the
    plain float64 run (made here when not given), and `observed`: PyTorch's run of the program
    in its own dtype; the exact ties both have are kept (tie_references; none without
    `observed`). `upto`: run only the first `upto` statements. The seed is the whole
    program's and the noise is drawn statement by statement, in order, so each of those
    statements gets exactly what it gets in a run of the whole program: arbitration asks for
    the statements up to its last mismatch, not the backwards after a value mismatch.
    `magnitudes`: the magnitude run, covering those statements, when a gradient read feeds a
    later statement (read_errors)."""
    seed = program_seed(program)
    if start >= samples:
        return []
    ties = tie_references(program, reference if reference is not None else run_torch(program, "float64"), observed)
    ran = program if upto is None else program.prefix(upto)
    reads = read_errors(program, magnitudes) if magnitudes is not None else None
    return [run_torch(ran, "float64", hooks=NoiseHooks(seed + k, ties, reads)) for k in range(start, samples)]
