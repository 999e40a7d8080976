"""The PyTorch executor: runs a program in process and reports an Observation."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

import torch

from difftest.exec.torch_modules import (
    build_torch_module,
    burn_inference_path,
    share_state,
    sync_state,
)
from difftest.exec.torch_session import MissingGradient, Session, _backward, _grad, _grad_holders, _step
from difftest.exec.torch_values import DTYPES, TorchModule, apply_module, flags, region_context, tensor_obs
from difftest.ops.catalog import CATALOG
from difftest.ops.value_dtypes import CAST_ATTR_TYPE, value_dtypes
from difftest.program.ir import (
    Apply,
    Backward,
    ByKind,
    Cut,
    Leaf,
    Module,
    OpCall,
    Optimizer,
    Program,
    Statement,
    Step,
    Transform,
    ZeroGrad,
)
from difftest.program.modules import SHARES_BUFFERS_ACROSS
from difftest.program.observation import BackwardObs, ErrorObs, Observation, ValueObs


def build_module(st: Module, dt: torch.dtype) -> TorchModule:
    """`module` statement -> a handle of its kind's PyTorch module (difftest/exec/torch_modules.py)."""
    return TorchModule(build_torch_module(st, dt), st.module)


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
        return replace(handle, module=m.eval(), no_grad=True)
    if transform == "train":
        return replace(handle, module=m.train(), no_grad=False)
    if transform == "no_grad":
        return replace(handle, module=m.requires_grad_(False))
    if transform == "freeze":
        return replace(handle, module=m.requires_grad_(False).eval())
    assert transform == "unfreeze", transform
    return replace(handle, module=m.requires_grad_(True).train())


def module_param(handle: TorchModule, name: str) -> torch.Tensor:
    sync_state(handle.module, name)  # burn's read of a running statistic: value_sync()
    t = getattr(handle.module, name)
    if name in dict(handle.module.named_buffers()):
        # burn's read is a tensor of its own; the buffer is updated in place by later syncs
        t = t.detach().clone()
    assert isinstance(t, torch.Tensor), name
    return t


class ExecHooks(Protocol):
    """How the oracle's float64 runs steer an execution (difftest/oracle/sites.py implements it):
    a value held constant (finite differences freeze what autodiff does not differentiate), and
    each op and module forward run through the hooks (Monte Carlo rounding noise, magnitudes).
    The executor knows nothing of noise: it hands over the statement and what it computes."""

    def constant(self, st: Statement) -> torch.Tensor | None:
        """A constant to use for `st` instead of computing it, or None."""
        ...

    def op(self, st: OpCall, inputs: Sequence[torch.Tensor], attrs: dict[str, Any],
           dtypes: dict[str, str], native: str) -> torch.Tensor:
        """Runs the op `st` on `inputs` with `attrs` (already in the statement's region);
        `dtypes`: every value's own dtype, `native`: the program's."""
        ...

    def module(self, st: Apply, handle: TorchModule, x: torch.Tensor, native: str) -> torch.Tensor:
        """Runs the module forward `st` of `handle` on `x` (a train-mode BatchNorm updates its
        running state)."""
        ...

    def carried(self, st: Statement, t: torch.Tensor) -> torch.Tensor:
        """The value later statements read for `st`, whose own value is `t` (what the run
        observes): `t`, or `t` with the error its computation allows and no op of the run
        injects (a gradient read's cancelling terms, in the noise runs)."""
        ...


AtEnd = Callable[[dict[str, torch.Tensor], dict[str, TorchModule], Session], None]  # run_torch's `at_end`
# run_torch's `before_backward(i, env, modules, session)`
BeforeBackward = Callable[[int, dict[str, torch.Tensor], dict[str, TorchModule], Session], None]


@dataclass
class _Exec:
    """A run under way (`run_torch`): what each statement kind's step reads and writes."""

    env: dict[str, torch.Tensor]  # the values so far
    modules: dict[str, TorchModule]  # the module handles so far
    session: Session
    backwards: list[BackwardObs]
    dt: torch.dtype  # the dtype the run creates leaves and parameters in
    native: str  # the program's own dtype
    dtypes: dict[str, str]  # every value's own dtype
    run_in: str | None  # the dtype every cast runs to instead (the float64 arbiter), or None
    hooks: ExecHooks | None
    burn_inference: frozenset[str]


def run_torch(program: Program, dtype: str | None = None, *, burn_inference: frozenset[str],
              hooks: ExecHooks | None = None, at_end: AtEnd | None = None,
              before_backward: BeforeBackward | None = None) -> Observation:
    """Execute `program` in its own dtype (`dtype` None: framework "torch") or in `dtype` (the
    float64 arbiter: "torch64"); a raised exception stops execution and becomes the error.
    `burn_inference`: the batch_norm forwards (apply ids) that follow burn onto its inference
    path whatever PyTorch's mode says (the oracle's model predicts them:
    difftest/oracle/burn_devices.py; `difftest.oracle.pytorch.run` passes them).
    `at_end(env, modules, session)`: called on the state a run without error ends in (torch_probes.py);
    `before_backward(i, env, modules, session)`: called on the state before each backward
    statement i (torch_probes.py: it must leave that state as it found it)."""
    framework = "torch" if dtype is None else ("torch64" if dtype == "float64" else "torch")
    # every value's own dtype (cast changes it); a run in another dtype (the float64 arbiter and
    # its noise runs) runs every cast to that dtype instead: the reference skips the casts'
    # rounding, which the noise runs inject and measure at each cast as its own rounding
    run = _Exec({}, {}, Session({}, {}, {}), [], DTYPES[dtype or program.dtype], program.dtype,
                value_dtypes(program), None if dtype is None else dtype, hooks, burn_inference)
    values: list[ValueObs] = []
    error: ErrorObs | None = None
    for i, st in enumerate(program.statements):
        if before_backward is not None and isinstance(st, Backward):
            before_backward(i, run.env, run.modules, run.session)
        try:
            t = _STEPS.of(st)(run, st)
        except MissingGradient as e:
            error = ErrorObs("missing-gradient", str(e), i, st.id)
            break
        except Exception as e:
            error = ErrorObs("exception", f"{type(e).__name__}: {e}".strip(), i, st.id)
            break
        if t is None:  # not a value
            continue
        run.env[st.id] = t if run.hooks is None else run.hooks.carried(st, t)
        values.append(ValueObs(st.id, tensor_obs(t), flags(t)))
    if at_end is not None and error is None:
        at_end(run.env, run.modules, run.session)
    return Observation(framework, tuple(values), tuple(run.backwards), error)


S = TypeVar("S", bound=Statement)


def _value(compute: Callable[[_Exec, S], torch.Tensor]) -> Callable[[_Exec, S], torch.Tensor]:
    """The step of a value kind: `compute`, unless the hooks hold the value constant."""
    def step(run: _Exec, st: S) -> torch.Tensor:
        frozen = run.hooks.constant(st) if run.hooks is not None else None
        return frozen if frozen is not None else compute(run, st)
    return step


def _leaf(run: _Exec, st: Leaf) -> torch.Tensor:
    t = torch.tensor(st.data, dtype=run.dt).reshape(st.shape).clone()  # a base, not a view
    return t.requires_grad_(True) if st.require_grad else t


def _op(run: _Exec, st: OpCall) -> torch.Tensor:
    with region_context(st.region):
        spec = CATALOG[st.op]
        inputs = [run.env[x] for x in st.inputs]
        attrs = st.attrs
        if run.run_in is not None and any(a.type == CAST_ATTR_TYPE for a in spec.attrs):
            if run.dtypes.get(st.id) == run.dtypes.get(st.inputs[0]):
                # a cast to its input's own dtype is that input itself, on both sides (rules
                # cast-same-dtype-returns-input, to-same-dtype-returns-input): so in the
                # arbiter's and the noise runs, where it is no op that rounds
                return inputs[0]
            attrs = {k: run.run_in if any(a.name == k and a.type == CAST_ATTR_TYPE for a in spec.attrs) else v
                     for k, v in attrs.items()}
        if run.hooks is None:
            return spec.lower(inputs, attrs)
        return run.hooks.op(st, inputs, attrs, run.dtypes, run.native)


def _cut(run: _Exec, st: Cut) -> torch.Tensor:
    with region_context(st.region):
        x = run.env[st.input]
        if st.cut in ("detach", "without_autodiff"):
            return x.detach()
        return x  # autodiff: PyTorch has no such state; identity


def _forward(run: _Exec, st: Apply) -> torch.Tensor:
    handle = run.modules[st.module]
    with burn_inference_path(handle.module, st.id in run.burn_inference):
        x = run.env[st.input]
        return apply_module(handle, x) if run.hooks is None else run.hooks.module(st, handle, x, run.native)


def _backward_step(run: _Exec, st: Backward) -> None:
    run.backwards.append(_backward(st, run.env, run.modules, run.session))


def _zero_grad(run: _Exec, st: ZeroGrad) -> None:
    for t in _grad_holders(run.env, run.modules):
        t.grad = None


def _module(run: _Exec, st: Module) -> None:
    run.modules[st.id] = build_module(st, run.dt)


def _transform(run: _Exec, st: Transform) -> None:
    run.modules[st.id] = transform_module(run.modules[st.input], st.transform)


def _optimizer(run: _Exec, st: Optimizer) -> None:
    run.session.optimizers[st.id] = st


def _optimizer_step(run: _Exec, st: Step) -> None:
    run.modules[st.id] = _step(st, run.modules, run.session)


# each statement kind's step of a run: the value it defines, or None
_STEPS: ByKind[Callable[[_Exec, Any], torch.Tensor | None]] = ByKind(
    "PyTorch executor",
    leaf=_value(_leaf),
    op=_value(_op),
    cut=_value(_cut),
    backward=_backward_step,
    module=_module,
    transform=_transform,
    apply=_value(_forward),
    param=_value(lambda run, st: module_param(run.modules[st.module], st.param)),
    grad=_value(lambda run, st: _grad(st, run.env, run.session)),
    zero_grad=_zero_grad,
    optimizer=_optimizer,
    step=_optimizer_step,
)
