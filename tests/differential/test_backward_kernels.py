"""The backward kernels the catalog declares (difftest/ops/backward_kernels.py) are how burn
computes those ops' gradients: on the correct build, burn's gradient of the op's input seeded
with a cotangent is the declared forward's result on that cotangent, which passes against
PyTorch, repeated indices included (findings/backward_as.py relies on both). A fault in the op's
own backward keeps the op's name; a burn whose shared kernel is wrong names the kernel's op once:
tests/quality/test_one_case_per_fault.py."""

from __future__ import annotations

from typing import Any

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.backward_as import ROOT, kernel_programs
from difftest.findings.composed import close
from difftest.findings.localisation import Localisation
from difftest.findings.triage import triage
from difftest.ops.catalog import CATALOG
from difftest.oracle.check import check
from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.ir import Backward, Leaf, OpCall, Program

X = tuple(0.25 * ((5 * k) % 11) - 1.1 for k in range(12))
# repeated indices: where an index add differs from an assignment
CALLS: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {
    "select": ((4, 3), {"dim": 0, "indices": [1, 3, 1, 0, 1]}),
    "gather": ((4, 3), {"dim": 1, "indices": {"shape": [4, 2], "data": [0, 0, 2, 1, 1, 1, 0, 2]}}),
    "embedding": ((4, 3), {"indices": {"shape": [2, 3], "data": [1, 3, 1, 0, 1, 2]}}),
    # a running extreme held over several positions: its source index repeats
    "cummax": ((4, 3), {"dim": 1}),
    "cummin": ((3, 4), {"dim": 1}),
}


def _one_op(name: str) -> Program:
    shape, attrs = CALLS[name]
    return Program((Leaf("a0", shape, X, "autodiff", True), OpCall(ROOT, name, ("a0",), attrs), Backward("bw", ROOT)))


def test_every_declared_kernel_is_covered() -> None:
    assert {n for n, s in CATALOG.items() if s.backward_kernel is not None} == set(CALLS)


@pytest.mark.parametrize("name", list(CALLS))
def test_burns_gradient_is_the_declared_kernels_forward(name: str, burn_worker: BurnWorker) -> None:
    built = kernel_programs(_one_op(name))
    assert built is not None
    seeded, kernel = built
    vs, vk = check(seeded, burn_worker), check(kernel, burn_worker)
    assert vs.ok and vk.ok, (vs.findings, vk.findings)
    grad, value = vs.burn.backwards[-1].grads.get("a0"), vk.burn.value(ROOT)
    assert grad is not None and value is not None and close(grad, value.value, "float32")
    assert len(set(grad.data)) > 2  # a cotangent that is not constant, summed at repeated indices


@pytest.mark.parametrize("name", list(CALLS))
def test_a_fault_in_the_ops_own_backward_keeps_its_name(name: str, workers: dict[str, BurnWorker]) -> None:
    """The kernel's forward is right under a fault of the op's own gradient: nothing is renamed."""
    fault = f"grad-scale:{name}:0.25"
    if fault not in workers:
        workers[fault] = BurnWorker(fault=fault)
    v = check(_one_op(name), workers[fault])
    assert not v.ok
    t = triage(v, workers[fault])
    assert t.signature.startswith(f"burn-wrong:-:{name}:grad:wrong "), t.signature


def test_a_wrong_kernel_forward_names_nothing_unless_it_is_burns_gradient(workers: dict[str, BurnWorker]) -> None:
    """Two unrelated faults at once: select's own gradient scaled, and select_assign's forward
    scaled otherwise. The kernel's forward is wrong, but burn's gradient is not its result, so
    the gradient finding is not handed to select_assign (kernel_fault's consistency check)."""
    from difftest.findings.backward_as import kernel_fault
    from difftest.findings.localise import localise

    own, other = "grad-scale:select:0.25", "value-scale:select_assign:0.5"
    for f in (own, other):
        if f not in workers:
            workers[f] = BurnWorker(fault=f)
    v = check(_one_op("select"), workers[own])
    found = localise(v, workers[own])
    assert found is not None and found.where == "select" and found.kind == "grad", found

    def judge(q: Program) -> Verdict:  # the kernel's forward on the build whose select_assign is wrong
        has_backward = any(isinstance(s, Backward) for s in q.statements)
        return check(q, workers[own] if has_backward else workers[other])

    def named(u: Verdict, m: Mismatch) -> Localisation | None:
        return localise(u, workers[other], m, same_kind=True)

    kernel = kernel_programs(_one_op("select"))
    assert kernel is not None and not judge(kernel[1]).ok  # the forward is wrong there
    assert kernel_fault(found, judge, named) is None
