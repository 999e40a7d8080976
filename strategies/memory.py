"""Programs for the memory differential: large enough to measure.

`draw_memory_check` builds a `difftest.memory.checks.MemoryCheck` with the IR dataclasses: one or two
square n x n f32 leaves (n = 512 or 1024: 1 or 4 MiB each), a few ops, cuts and `no_grad`
regions, a `sum` and usually its backward, sometimes a side branch off a leaf that the sum does not read
(whose graph a backward may leave alive). Every op keeps the n x n shape, so any value can
feed any op, and every value a recorded op saves is a full-size tensor.

Ops. The model derives the bytes a forward saves for backward from the catalog's `saves`,
which lists the *inputs* PyTorch saves. burn checkpoints inputs too, so the two agree exactly
for ops that save inputs (`SAVING_OPS`) and ops that save nothing (`PLAIN_OPS`). Ops whose
backward PyTorch computes from their *output* (exp, sqrt, tanh, sigmoid, relu, recip, ...)
are left out: burn saves their input instead, which the catalog does not describe
(`tests/memory/test_memory.py::test_catalog_saves_match_burn` measures both lists).

Iterations. The number of forwards is chosen so that every growth the model can predict for
the program (bytes saved per forward in either framework, and the part of them a backward
does not free) reaches `margin` times the refusal bound of `difftest.memory.model.expectations`:
GROWS_FRACTION x bytes x iters >= margin x FLAT_SLACK_MIB. Programs that would need more
than `max_iters` forwards are redrawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from difftest.choices import Choices
from difftest.divergences.memory_rules import GRAPH_RETAINED
from difftest.divergences.states import BurnState, TorchState
from difftest.memory.checks import MemoryCheck
from difftest.memory.model import FLAT_SLACK_MIB, FRAMEWORKS, GROWS_FRACTION, MIB, predict_forward_memory
from difftest.ops.catalog import CATALOG
from difftest.oracle.model import predict
from difftest.program.ir import Backward, Cut, CutKind, Leaf, OpCall, Program, Region, Statement
from difftest.strategies.choices import RandomChoices

SAVING_OPS: tuple[str, ...] = ("sin", "cos", "log", "abs", "square", "mul", "matmul")
PLAIN_OPS: tuple[str, ...] = ("add", "sub", "neg", "add_scalar", "mul_scalar", "transpose")
SCALAR_ATTRS: dict[str, dict[str, float]] = {"add_scalar": {"scalar": 0.5}, "mul_scalar": {"scalar": 0.5}}


@dataclass(frozen=True)
class MemoryGenConfig:
    sizes: tuple[int, ...] = (512, 1024)  # leaves are n x n
    max_leaves: int = 2
    min_ops: int = 2
    max_ops: int = 5
    p_saving: float = 0.6  # an op is drawn from SAVING_OPS (else PLAIN_OPS)
    p_require_grad: float = 0.85
    p_cut: float = 0.2  # a statement (not the last) is a cut (detach 2 : without_autodiff 1)
    p_no_grad: float = 0.12  # an op runs under no_grad
    p_backward: float = 0.8  # end with the backward of the sum (when both frameworks can)
    p_latest: float = 0.6  # an input is the latest value (else any earlier value)
    p_side_branch: float = 0.25  # add a branch off a leaf that the sum does not read
    margin: float = 2.0
    min_iters: int = 8
    max_iters: int = 64
    flat_iters: int = 20  # forwards for a program nothing in either framework saves
    p_keep_flat: float = 0.2  # keep such a program (else redraw)
    attempts: int = 100


QUICK = MemoryGenConfig(sizes=(512,), max_ops=3)


def _data(n: int, salt: int) -> tuple[float, ...]:
    """Cheap deterministic values in [0.5, 1) with period 16 (memory does not depend on them;
    positive so log stays finite on leaves)."""
    period = tuple(0.5 + ((i * 7 + salt) % 16) / 32 for i in range(16))
    return (period * (n * n // 16 + 1))[: n * n]


def iters_for(program: Program, cfg: MemoryGenConfig) -> int | None:
    """The forwards needed to tell every growth the model can predict for `program` from
    noise with `cfg.margin`, or None when more than `cfg.max_iters` would be needed.
    Independent of the declared memory rules in force (they decide *whether* saved bytes are
    retained, not how many there are)."""
    quantities: list[int] = []
    for fw in FRAMEWORKS:
        fm = predict_forward_memory(program, fw, keep=False, rules=(GRAPH_RETAINED,))
        quantities += [b for b in (fm.saved_bytes, fm.surviving_bytes) if b > 0]
    if not quantities:
        return cfg.flat_iters
    per_iter_mib = GROWS_FRACTION * min(quantities) / MIB
    iters = max(cfg.min_iters, math.ceil(cfg.margin * FLAT_SLACK_MIB / per_iter_mib))
    return iters if iters <= cfg.max_iters else None


def _saves_nothing(program: Program) -> bool:
    return all(predict_forward_memory(program, fw, keep=False).saved_bytes == 0 for fw in FRAMEWORKS)


def _draw_program(c: Choices, cfg: MemoryGenConfig) -> Program:
    n = c.choice(cfg.sizes)
    statements: list[Statement] = []
    values: list[str] = []
    for k in range(c.integer(1, cfg.max_leaves)):
        ident = f"p{k}"
        statements.append(Leaf(ident, (n, n), _data(n, k), "autodiff", c.boolean(cfg.p_require_grad)))
        values.append(ident)

    def pick() -> str:
        return values[-1] if c.boolean(cfg.p_latest) else c.choice(values)

    count = c.integer(cfg.min_ops, cfg.max_ops)
    for i in range(count):
        ident = f"v{i}"
        if i < count - 1 and c.boolean(cfg.p_cut):
            kind: CutKind = c.choice(("detach", "detach", "without_autodiff"))
            statements.append(Cut(ident, kind, pick()))
        else:
            op = c.choice(SAVING_OPS if c.boolean(cfg.p_saving) else PLAIN_OPS)
            inputs = (pick(), pick()) if CATALOG[op].arity == 2 else (pick(),)
            region: Region = "no_grad" if c.boolean(cfg.p_no_grad) else "grad"
            statements.append(OpCall(ident, op, inputs, dict(SCALAR_ATTRS.get(op, {})), region))
        values.append(ident)
    last = values[-1]
    if c.boolean(cfg.p_side_branch):
        # a graph the backward may not free: off a leaf, sometimes joining an earlier value
        leaf_ids = [st.id for st in statements if isinstance(st, Leaf)]
        statements.append(OpCall("w0", c.choice(("add_scalar", "mul_scalar")), (c.choice(leaf_ids),), {"scalar": 0.5}))
        other = pick() if c.boolean(0.3) else "w0"
        statements.append(OpCall("w1", c.choice(("mul", "matmul")), ("w0", other)))
        statements.append(OpCall("w2", c.choice(("sin", "square")), ("w1",)))
    statements.append(OpCall("s", "sum", (last,)))
    program = Program(tuple(statements))
    if c.boolean(cfg.p_backward):
        pred = predict(program)
        burn, torch = pred.burn.states["s"], pred.torch.states["s"]
        if isinstance(burn, BurnState) and burn.is_tracked and isinstance(torch, TorchState) and torch.requires_grad:
            program = Program((*statements, Backward("bw", "s")))
    return program


def draw_memory_check(c: Choices, cfg: MemoryGenConfig | None = None, name: str = "") -> MemoryCheck:
    """A program both frameworks run without failing, with the forwards it needs."""
    cfg = cfg or MemoryGenConfig()
    for _ in range(cfg.attempts):
        program = _draw_program(c, cfg)
        pred = predict(program)
        if pred.burn.failure or pred.torch.failure:
            continue
        iters = iters_for(program, cfg)
        if iters is None or (_saves_nothing(program) and not c.boolean(cfg.p_keep_flat)):
            continue
        return MemoryCheck(program, iters, then_backward=True, name=name)
    raise RuntimeError(f"no measurable memory program in {cfg.attempts} attempts")


def memory_checks(seed: int, count: int, cfg: MemoryGenConfig | None = None) -> list[MemoryCheck]:
    """`count` checks from a seeded PRNG, named `mem-<seed>-<k>`."""
    return [draw_memory_check(RandomChoices(seed * 1_000_003 + k), cfg, f"mem-{seed}-{k}") for k in range(count)]
