"""Sessions in the generator: what happens between backwards, and training loops.

After a backward, the values of the graph it consumed are marked (`_Value.consumed`): later
ops take them only rarely (`GenConfig.p_reuse_consumed`), so most later forwards start from
leaves, detached values and gradients read from the handle, as training code does, and some
reach into a consumed graph (which the model says must fail, and where). A training loop is a
Linear on fresh data, a loss, (usually) zero_grad, a backward and an SGD step, 1 to 3 times,
each step on the module the previous one returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from difftest.ops.domains import MAX_MAGNITUDE
from difftest.oracle.model import predict_burn
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import (
    Apply,
    Backward,
    Grad,
    InlineTensor,
    Leaf,
    Module,
    OpCall,
    Optimizer,
    Param,
    Program,
    Statement,
    Step,
    ZeroGrad,
    ancestors,
    descendants,
)
from difftest.strategies.choices import weighted
from difftest.strategies.values import _Value

if TYPE_CHECKING:
    from difftest.strategies.generator import _Builder

# SGD settings, exact in float32 (burn's weight-decay penalty is an f32)
LEARNING_RATES = (0.125, 0.0625, 0.25, 0.03125)
MOMENTA = (0.0, 0.9, 0.5)
# float64 programs: momenta exact in f32 (burn-optim keeps the momentum as an f32: known bug
# sgd-momentum-f32-in-float64)
MOMENTA_F32_EXACT = (0.0, 0.875, 0.5)
WEIGHT_DECAYS = (0.0, 0.0078125, 0.03125)
# dampening of the momentum (exact in f32 and its complement too; PyTorch refuses it with
# nesterov, as burn's config does)
DAMPENINGS = (0.0, 0.5, 0.25)


def consume(b: _Builder, root: str) -> None:
    """Mark the op results the backward of `root` walked (its graph is consumed)."""
    reached = ancestors(b.statements_by_id(), root)
    walked = {v.id for v in b.values if v.depth > 0 and v.id in reached}
    reaching = descendants(b.statements, walked)
    for v in b.values:  # and what was computed from them (its graph reaches a consumed node)
        if v.depth > 0 and v.id in reaching:
            v.consumed = True


def stale(b: _Builder) -> set[str]:
    """The values whose graph reaches a node an earlier backward consumed."""
    consumed = {v.id for v in b.values if v.consumed}
    if not consumed:
        return set()
    reaching = descendants(b.statements, consumed)
    return {v.id for v in b.values if v.depth > 0 and v.id in reaching}


def after_backward(b: _Builder) -> None:
    """Between two backwards: maybe read 1 or 2 gradients from the last handle (they become
    values later ops may use), maybe zero_grad."""


    c, cfg = b.c, b.cfg
    bw = next(s for s in reversed(b.statements) if isinstance(s, Backward))
    if c.boolean(cfg.p_grad_read):
        program = Program(tuple(b.statements), b.dtype)
        obs = run_torch(program)
        handle = obs.backwards[-1] if obs.error is None and obs.backwards else None
        # gradients both frameworks have (the model's prediction for burn: a region, a cut or a
        # module rule may keep one from burn's handle, which would end burn's run there)
        in_burn = predict_burn(program).grads.get(bw.id, {})
        present = [k for k, g in handle.grads.items() if g is not None and in_burn.get(k)] if handle else []
        for _ in range(c.integer(1, 2) if present else 0):
            of = c.choice(present)
            g = handle.grads[of] if handle is not None else None
            assert g is not None
            tensor = torch.tensor(g.data, dtype=torch.float32).reshape(g.shape)
            if not bool(torch.isfinite(tensor).all()) or float(tensor.abs().max()) > MAX_MAGNITUDE:
                continue
            st = Grad(b.fresh("g"), bw.id, of)
            b.statements.append(st)
            b.values.append(_Value(st.id, tuple(g.shape), tensor))
            c.note("grad-read")
    if c.boolean(cfg.p_zero_grad):
        b.statements.append(ZeroGrad(b.fresh("z")))
        c.note("zero_grad")


def training_loop(b: _Builder) -> None:
    """A Linear trained by SGD on fresh data: forward, a mean-squared (or summed-squared) error
    against a target, zero_grad (usually: without it PyTorch's `.grad` accumulates, rule
    grad-accumulates), backward, step; 1 to 3 times. The loop's values join the program."""


    c, cfg = b.c, b.cfg
    n, d_in, d_out = c.integer(1, 4), c.integer(1, cfg.max_dim), c.integer(1, cfg.max_dim)
    x = Leaf(b.fresh("x"), (n, d_in), tuple(b.floats(n * d_in, -2.0, 2.0)))
    t = Leaf(b.fresh("x"), (n, d_out), tuple(b.floats(n * d_out, -2.0, 2.0)))
    weight = InlineTensor((d_out, d_in), tuple(b.floats(d_out * d_in, -1.0, 1.0)))
    bias = InlineTensor((d_out,), tuple(b.floats(d_out, -1.0, 1.0))) if c.boolean(0.8) else None
    module = Module(b.fresh("m"), "linear", weight, bias)
    f32_exact = b.dtype == "float64" and not b.visits("sgd-momentum")
    momentum = weighted(c, MOMENTA_F32_EXACT if f32_exact else MOMENTA, (3.0, 2.0, 1.0))
    nesterov = momentum > 0 and c.boolean(0.25)
    dampening = weighted(c, DAMPENINGS, (3.0, 1.0, 1.0)) if momentum > 0 and not nesterov else 0.0
    opt = Optimizer(b.fresh("o"), "sgd", momentum, dampening, nesterov, weighted(c, WEIGHT_DECAYS, (3.0, 1.0, 1.0)))
    lr = weighted(c, LEARNING_RATES, (3.0, 2.0, 1.0, 1.0))
    new: list[Statement] = [x, t, module, opt]
    handle = module.id
    reduce = "mean" if c.boolean(0.7) else "sum"
    for step in range(c.integer(1, 3)):
        # usually one batch a step; sometimes two whose gradients PyTorch accumulates in .grad
        # (no zero_grad between them) while burn's step reads the last handle (grad-accumulates)
        batches = 2 if c.boolean(0.1) else 1
        for batch in range(batches):
            y = Apply(b.fresh("y"), handle, x.id)
            d = OpCall(b.fresh("v"), "sub", (y.id, t.id))
            q = OpCall(b.fresh("v"), "square", (d.id,))
            loss = OpCall(b.fresh("v"), reduce, (q.id,))
            new += [y, d, q, loss]
            if batch == 0 and (step == 0 or c.boolean(0.85)):
                new.append(ZeroGrad(b.fresh("z")))
            backwards = sum(isinstance(s, Backward) for s in [*b.statements, *new])
            bw = Backward("bw" if backwards == 0 else f"bw{backwards}", loss.id)
            new.append(bw)
        stepped = Step(b.fresh("m"), opt.id, handle, bw.id, lr)
        new.append(stepped)
        handle = stepped.id
        if c.boolean(0.5):
            new.append(Param(b.fresh("p"), handle, "bias" if bias is not None and c.boolean(0.3) else "weight"))
    obs = run_torch(Program(tuple([*b.statements, *new]), b.dtype))
    if obs.error is not None:
        return
    values = {v.id: v for v in obs.values}
    b.statements.extend(new)
    for st in new:
        v = values.get(st.id)
        if v is None:
            continue
        tensor = torch.tensor(v.value.data, dtype=torch.float32).reshape(v.value.shape)
        in_graph = isinstance(st, (Apply, OpCall))
        b.values.append(_Value(st.id, tuple(v.value.shape), tensor, tracked=in_graph, depth=int(in_graph),
                               consumed=in_graph))
    b.leaves += 2
    c.note(f"training:{reduce}:momentum={momentum}:dampening={dampening}:wd={opt.weight_decay}")
