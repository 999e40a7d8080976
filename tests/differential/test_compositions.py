"""The compositions the catalog declares (difftest/ops/compositions.py) are how burn computes its
composites, and the localiser names a part at fault inside a composite (findings/composed.py)
only where burn computes the composite as its parts.

Each declaration is checked against the real burn: on calls the generator draws, in float32 and
float64, burn's result and gradients for the op and for its parts agree within a few units of
rounding (`same_numbers`), and PyTorch's parts give the op's result. A fault in a part is named by
the part (float64 var, var_bias and var_mean end in a div_scalar, whose backward burn 0.22.1
computes through an f32 reciprocal: known bug div-scalar-grad-f32-reciprocal); a composite with a
fault of its own keeps its own name.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.composed import as_parts, same_numbers
from difftest.findings.one_op import cotangent
from difftest.ops.catalog import CATALOG
from difftest.ops.validate import check_program
from difftest.oracle.check import check
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import Backward, Leaf, OpCall, Program, ProgramError, Statement
from difftest.program.modules import MODULE_KINDS
from tests.differential.test_catalog import _recorded_calls
from tests.differential.triaging import triaged

COMPOSED = sorted(name for name, spec in CATALOG.items() if spec.composed is not None)
# exponents whose composition the generator's draws rarely hit: each branch of burn's powi_scalar
EXTRA_ATTRS: dict[str, list[dict[str, Any]]] = {"powi_scalar": [{"exponent": e} for e in (2, -1, -2, 3)],
               "powf_scalar": [{"exponent": e} for e in (2.0, -1.0, -2.0)]}


def _one_op(st: OpCall, values: list[torch.Tensor], dtype: str, attrs: dict[str, Any] | None = None) -> Program:
    leaves = [Leaf(f"a{k}", tuple(v.shape), tuple(v.reshape(-1).double().tolist()), "autodiff", True)
              for k, v in enumerate(values)]
    y = OpCall("y", st.op, tuple(x.id for x in leaves), dict(attrs if attrs is not None else st.attrs))
    return Program((*leaves, y, Backward("bw", "y")), dtype)


def _calls(name: str) -> list[tuple[OpCall, list[torch.Tensor], dict[str, Any]]]:
    calls = [(st, values, dict(st.attrs)) for st, values in _recorded_calls(name, 4)]
    st, values = calls[0][0], calls[0][1]
    return calls + [(st, values, a) for a in EXTRA_ATTRS.get(name, [])]


@pytest.mark.parametrize("name", COMPOSED)
def test_burn_computes_the_composite_as_its_declared_parts(name: str, burn_worker: BurnWorker) -> None:
    composed = 0
    for st, values, attrs in _calls(name):
        for dtype in ("float32", "float64"):
            p = _one_op(st, values, dtype, attrs)
            try:
                check_program(p)
            except ProgramError:
                continue  # the op does not run in this dtype (value_dtypes)
            q = as_parts(p)
            if q is None:
                continue
            composed += 1
            whole, parts = check(p, burn_worker), check(q, burn_worker)
            assert same_numbers(whole, parts), (name, attrs, dtype, whole.burn.value("y"), parts.burn.value("y"))
            # PyTorch's parts compute the op too (the declaration is the op, not only burn's)
            t_whole, t_parts = run_torch(p).value("y"), run_torch(q).value("y")
            assert t_whole is not None and t_parts is not None
            a, b = torch.tensor(t_whole.value.data), torch.tensor(t_parts.value.data)
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True), (name, attrs, dtype)
    assert composed, f"{name}: no drawn call has a composition"


def test_parts_replace_the_op_and_keep_its_id() -> None:
    x = Leaf("a0", (5, 2), tuple(float(k) for k in range(10)), "autodiff", True)
    p = Program((x, OpCall("y", "chunk", ("a0",), {"chunks": 3, "dim": 0, "part": 2}), Backward("bw", "y")))
    q = as_parts(p)
    assert q is not None
    # burn's chunk of 5 into 3: pieces of 2, the last of 5 % 2 = 1, from 4
    assert [(s.id, getattr(s, "op", None), getattr(s, "attrs", None)) for s in q.statements[1:-1]] == [
        ("y", "slice", {"ranges": [[4, 5]]})]
    y = Leaf("a1", (1, 3), cotangent(3), "autodiff", True)
    s = Program((y, x, OpCall("y", "softmax", ("a1",), {"dim": 1}), Backward("bw", "y")))
    parts = as_parts(s)
    assert parts is not None
    assert [st.kind for st in parts.statements] == ["leaf", "leaf", "cut", "op", "op", "op", "op", "op", "backward"]
    assert parts.statements[-2].id == "y"
    sq = Program((x, OpCall("y", "sigmoid", ("a0",)), Backward("bw", "y")))
    assert as_parts(sq) is None  # sigmoid has a node of its own


@pytest.mark.parametrize("name,attrs", [("var", {"dim": 0}), ("var_bias", {"dim": 1}),
                                        ("var_mean", {"dim": 0, "part": 0})])
def test_a_fault_in_a_part_is_named_by_the_part(name: str, attrs: dict[str, int],
                                                 workers: dict[str, BurnWorker]) -> None:
    """A float64 variance over 4 (or 3) elements divides by 3 in a div_scalar, whose gradient burn
    computes through f32(1 / 3): the finding is div_scalar's, with div_scalar's signature, inside the
    composite, and the known bug's record (its site: div_scalar) explains it."""
    data = [0.3, -0.7, 1.1, 0.9, 2.3, -1.4, 0.2, 0.5, -0.1, 1.7, -2.2, 0.05]
    p = Program((Leaf("x", (4, 3), tuple(data), "autodiff", True), OpCall("v", name, ("x",), dict(attrs)),
                 OpCall("s", "sum", ("v",)), Backward("bw", "s")), "float64")
    t = triaged(workers, p, None)
    alone = triaged(workers, Program((Leaf("x", (4, 3), tuple(data), "autodiff", True),
                                      OpCall("v", "div_scalar", ("x",), {"scalar": 3.0}),
                                      OpCall("s", "sum", ("v",)), Backward("bw", "s")), "float64"), None)
    loc = t.localisation
    assert loc is not None and loc.where == "div_scalar" and loc.inside == (name,) and loc.statement == "v"
    assert t.signature == alone.signature
    assert t.known is not None and t.known.name == "div-scalar-grad-f32-reciprocal"
    # the reproducer is the part alone
    assert loc.program is not None and [s.op for s in loc.program.statements if isinstance(s, OpCall)] == ["div_scalar"]


@pytest.mark.parametrize("fault,name", [("grad-scale:var:1e-3", "var"), ("grad-scale:square:1e-3", "square"),
                                        ("value-scale:silu:1e-3", "silu")])
def test_a_composite_with_a_fault_of_its_own_keeps_its_name(fault: str, name: str,
                                                            workers: dict[str, BurnWorker]) -> None:
    """The fault changes the composite's numbers, not its parts': burn no longer computes the
    composite as its parts, and the finding stays the composite's."""
    attrs = {"dim": 1} if name == "var" else {}
    p = Program((Leaf("x", (2, 3), (0.3, -0.7, 1.1, 0.9, 2.3, -1.4), "autodiff", True),
                 OpCall("v", name, ("x",), attrs), OpCall("s", "sum", ("v",)), Backward("bw", "s")))
    t = triaged(workers, p, fault)
    assert t.localisation is not None and t.localisation.where == name and t.localisation.inside == ()


def _module_one_ops(kind: str, dtype: str, n: int = 3) -> list[Program]:
    """One-op programs of `kind`'s forward (as the localiser builds them) from generated programs."""
    from difftest.findings.one_op import one_op_program
    from difftest.program.ir import Apply, Module
    from difftest.strategies.choices import RandomChoices
    from difftest.strategies.config import GenConfig
    from difftest.strategies.generator import generate

    out: list[Program] = []
    for seed in range(400):
        program = generate(RandomChoices(seed), GenConfig(module_weight=4.0, norm_weight=4.0, dtype=dtype))
        table = program.by_id()
        applies = [s for s in program.statements if isinstance(s, Apply)
                   and isinstance(table.get(s.module), Module) and getattr(table[s.module], "module", "") == kind]
        if not applies:
            continue
        torch_obs = run_torch(program)
        for st in applies[:1]:
            built = one_op_program(program, st, torch_obs, torch_obs, grads=True)
            if built is not None:
                out.append(built[0])
        if len(out) >= n:
            break
    return out


MODULES_COMPOSED = sorted(k for k, kind in MODULE_KINDS.items() if kind.composed is not None)


def _inference_variants(p: Program) -> list[Program]:
    """A stateful module's one-op program as burn's inference path runs it: its input off the
    autodiff device, and its handle frozen (burn's training flag off)."""
    from dataclasses import replace

    from difftest.program.ir import Apply, Param, Transform

    table = p.by_id()
    y = table["y"]
    assert isinstance(y, Apply)
    x = table[y.input]
    assert isinstance(x, Leaf)
    plain = p.with_statements(tuple(replace(s, device="plain", require_grad=False) if s is x else s
                                    for s in p.statements))
    out: list[Statement] = []
    for s in p.statements:
        if isinstance(s, Apply) and s.id == "y":
            out += [Transform("frozen", "freeze", s.module), replace(s, module="frozen")]
        elif isinstance(s, Param) and s.module == y.module:
            out.append(replace(s, module="frozen"))
        else:
            out.append(s)
    return [plain, p.with_statements(tuple(out))]


@pytest.mark.parametrize("kind", MODULES_COMPOSED)
def test_burn_computes_the_module_forward_as_its_declared_parts(kind: str, burn_worker: BurnWorker) -> None:
    composed = 0
    for dtype in ("float32", "float64"):
        ones = _module_one_ops(kind, dtype)
        if MODULE_KINDS[kind].stateful:  # its training forward is a node of its own: no parts
            assert all(as_parts(p) is None for p in ones)
            ones = [v for p in ones for v in _inference_variants(p)]
        for p in ones:
            q = as_parts(p)
            if q is None:
                continue
            composed += 1
            whole, parts = check(p, burn_worker), check(q, burn_worker)
            assert same_numbers(whole, parts), (kind, dtype, whole.burn.value("y"), parts.burn.value("y"))
            t_whole, t_parts = run_torch(p).value("y"), run_torch(q).value("y")
            assert t_whole is not None and t_parts is not None
            a, b = torch.tensor(t_whole.value.data), torch.tensor(t_parts.value.data)
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True), (kind, dtype)
    assert composed, f"{kind}: no generated forward has a composition"


def test_a_module_forward_as_parts_reads_its_parameters_as_leaves() -> None:
    """The handle and its parameter reads give way to one leaf per parameter, of the read's id, so
    that the parameters' gradients are compared under the same names; a handle the program uses
    otherwise (a transform) is no forward alone."""
    from difftest.program.ir import Apply, InlineTensor, Module, Param, Transform

    m = Module("m", "rms_norm", weight=InlineTensor((3,), (1.0, 0.5, 2.0)), attrs={"d_model": 3, "epsilon": 1e-3})
    x = Leaf("a0", (2, 3), (0.3, -0.7, 1.1, 0.9, 2.3, -1.4), "autodiff", True)
    p = Program((m, x, Apply("y", "m", "a0"), Param("param_weight", "m", "weight"), Backward("bw", "y")))
    q = as_parts(p)
    assert q is not None
    leaves = [s for s in q.statements if isinstance(s, Leaf)]
    assert [(s.id, s.data, s.require_grad) for s in leaves] == [
        ("param_weight", (1.0, 0.5, 2.0), True), ("a0", x.data, True)]
    assert not any(isinstance(s, (Module, Param, Apply)) for s in q.statements)
    assert [s.op for s in q.statements if isinstance(s, OpCall)][-1] == "mul"
    # a frozen module's parameters are constants; a valid() one runs off autodiff, no forward of parts
    frozen = as_parts(Program((m, Transform("f", "freeze", "m"), x, Apply("y", "f", "a0"),
                               Param("param_weight", "f", "weight"), Backward("bw", "y"))))
    assert frozen is not None and not frozen.by_id()["param_weight"].require_grad  # type: ignore[union-attr]
    t = Program((m, Transform("v", "valid", "m"), x, Apply("y", "v", "a0"), Backward("bw", "y")))
    assert as_parts(t) is None


@pytest.mark.parametrize("shape,d_out,merges", [
    ((4,), 3, False),  # rank 1: unsqueezed to [1, in], run as rank 2, squeezed back
    ((3, 4), 3, False),  # rank 2: one batch, a plain matmul
    ((2, 3, 4), 3, False),  # 6 x 3 is no squarer than 3 x 3: batched, the weight given a leading dim
    ((5, 2, 4), 8, True),  # 10 x 8 is squarer than 2 x 8: the batches are folded into the rows
    ((2, 32, 4), 3, False),  # rows that fill a row tile stay batched
    ((1, 3, 4), 3, False),  # one batch
    ((2, 2, 3, 4), 1, False),  # 12 x 1 is no squarer than 3 x 1: batched, the weight given leading dims
    ((2, 2, 1, 4), 4, True),  # 4 x 4 is squarer than 1 x 4: rank 4 folded into the rows
])
def test_linear_is_computed_as_burn_backends_default_linear(shape: tuple[int, ...], d_out: int, merges: bool,
                                                            burn_worker: BurnWorker) -> None:
    """Linear's declared parts follow burn's two paths (a rank-1 input aside): the batches folded
    into the rows where burn-std's policy merges them, else a batched matmul against the weight
    given leading dims. burn computes the module's forward and gradients as those parts, with and
    without a bias."""
    from difftest.program.ir import Apply, InlineTensor, Module, Param
    from difftest.program.modules.linear import _merges

    d_in = shape[-1]
    if len(shape) > 2:
        assert _merges(math.prod(shape[:-2]), shape[-2], d_out) is merges
    n = math.prod(shape)
    weight = InlineTensor((d_out, d_in), tuple(0.25 * ((3 * k) % 7) - 0.6 for k in range(d_out * d_in)))
    for bias in (None, InlineTensor((d_out,), tuple(0.5 - 0.125 * k for k in range(d_out)))):
        m = Module("m", "linear", weight=weight, bias=bias)
        x = Leaf("a0", shape, tuple(0.3 + 0.1 * (k % 9) for k in range(n)), "autodiff", True)
        reads = [Param("param_weight", "m", "weight")] + ([Param("param_bias", "m", "bias")] if bias else [])
        p = Program((m, x, Apply("y", "m", "a0"), *reads, Backward("bw", "y")))
        q = as_parts(p)
        assert q is not None
        ops = [s.op for s in q.statements if isinstance(s, OpCall)]
        assert ops[0] == "transpose" and "matmul" in ops and ("add" in ops) is (bias is not None), ops
        whole, parts = check(p, burn_worker), check(q, burn_worker)
        assert whole.ok and parts.ok, (whole.findings, parts.findings)
        assert same_numbers(whole, parts), (shape, d_out, bias)
