"""The op catalog: agreement with difftest-burn, coverage by the strategy, and its data."""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from difftest.exec.burn_worker import BurnWorker
from difftest.ops import listing, spelling
from difftest.ops.catalog import CATALOG, OPS, VARIADIC
from difftest.ops.spec import ATTR_TYPES, OpSpec
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import OpCall, Program
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate

# op -> (arity, [(attribute, type), ...]): what both catalogs declare of an op's interface
Listing = dict[str, tuple[int, list[tuple[str, str]]]]


def python_listing() -> Listing:
    return {op.name: (op.arity, [(a.name, a.type) for a in op.attrs]) for op in OPS}


def burn_listing(ops: list[dict[str, Any]]) -> Listing:
    """The `ops` reply of difftest-burn (docs/format.md, worker protocol)."""
    return {o["name"]: (o["arity"], [(a["name"], a["type"]) for a in o["attrs"]]) for o in ops}


def differences(python: Listing, burn: Listing) -> list[str]:
    out = [f"{name}: only in the Python catalog" for name in python if name not in burn]
    out += [f"{name}: only in difftest-burn" for name in burn if name not in python]
    for name in python.keys() & burn.keys():
        (pa, pattrs), (ba, battrs) = python[name], burn[name]
        if pa != ba:
            out.append(f"{name}: arity {pa} in Python, {ba} in burn")
        if pattrs != battrs:
            out.append(f"{name}: attributes {pattrs} in Python, {battrs} in burn")
    return sorted(out)


@pytest.fixture(scope="module")
def burn_ops(burn_worker: BurnWorker) -> list[dict[str, Any]]:
    return burn_worker.ops()


def test_burn_declares_the_same_ops(burn_ops: list[dict[str, Any]]) -> None:
    """Names, arities, attribute names and types (in order) agree across both catalogs."""
    assert differences(python_listing(), burn_listing(burn_ops)) == []
    assert [o["name"] for o in burn_ops] == [op.name for op in OPS]  # the same order, too


def test_parity_check_catches_a_mismatch(burn_ops: list[dict[str, Any]]) -> None:
    """The check above fails when the Rust listing differs in an attribute type, an attribute
    name, an arity or an op (each a mutated copy of the real listing)."""
    python = python_listing()

    def mutated(change: Any) -> list[str]:
        ops = copy.deepcopy(burn_ops)
        change(ops)
        return differences(python, burn_listing(ops))

    def retype(ops: list[dict[str, Any]]) -> None:
        attr = next(o for o in ops if o["name"] == "repeat_dim")["attrs"][1]
        assert attr == {"name": "times", "type": "int"}
        attr["type"] = "dim"

    assert mutated(retype) == [
        "repeat_dim: attributes [('dim', 'dim'), ('times', 'int')] in Python, "
        "[('dim', 'dim'), ('times', 'dim')] in burn"
    ]

    def rename(ops: list[dict[str, Any]]) -> None:
        next(o for o in ops if o["name"] == "clamp")["attrs"][0]["name"] = "lo"

    assert mutated(rename) == ["clamp: attributes [('min', 'float'), ('max', 'float')] in Python, "
                               "[('lo', 'float'), ('max', 'float')] in burn"]

    def rearity(ops: list[dict[str, Any]]) -> None:
        next(o for o in ops if o["name"] == "cat")["arity"] = 2

    assert mutated(rearity) == ["cat: arity -1 in Python, 2 in burn"]
    assert mutated(lambda ops: ops.pop(0)) == [f"{OPS[0].name}: only in the Python catalog"]


def test_attribute_types_are_declared() -> None:
    assert {a.type for op in OPS for a in op.attrs} == set(ATTR_TYPES)


def test_ops_with_several_inputs_declare_how_to_draw_them() -> None:
    for op in OPS:
        assert (op.partners is not None) == (op.arity != 1), op.name


def test_every_op_is_generated() -> None:
    counts: Counter[str] = Counter()
    for seed in range(1500):
        c = RandomChoices(seed)
        generate(c)
        counts.update({k[3:]: n for k, n in c.events.items() if k.startswith("op:")})
    missing = sorted(set(CATALOG) - set(counts))
    assert not missing, f"never generated: {missing}; counts: {dict(counts)}"


def _example(name: str) -> tuple[list[tuple[int, ...]], dict[str, Any]]:
    """Input shapes and attributes of `name` on a [2, 2] first input (or [2, 3], for an op whose
    samplers find no attributes for [2, 2]: cross needs a dim of size 3), drawn by its entry's
    own samplers (seeded)."""
    spec = CATALOG[name]
    partners = spec.partners
    for first in ((2, 2), (2, 3)):
        c = RandomChoices(0)
        shapes: list[tuple[int, ...]] = [first]
        if partners is not None and not partners.after_attrs:
            shapes += list(partners.draw(c, first, {}, 3))
        attrs = spec.sample_attrs(c, shapes)
        if attrs is not None:
            break
    assert attrs is not None, f"{name}: no attributes for {shapes}"
    if partners is not None and partners.after_attrs:
        shapes += list(partners.draw(c, first, attrs, 3))
    spec.shape(shapes, attrs)
    return shapes, attrs


@pytest.mark.parametrize("name", [op.name for op in OPS if op.arity == 2])
def test_saved_inputs_match_pytorch(name: str) -> None:
    """`saves` is data the inference-tensor rule relies on: check it against PyTorch."""
    spec = CATALOG[name]
    shapes, attrs = _example(name)
    for i in range(2):
        for other_has_edge in (True, False):
            args = []
            for j, shape in enumerate(shapes):
                if j == i:
                    with torch.inference_mode():
                        args.append(torch.full(shape, 1.5))
                    continue
                base = torch.full(shape, 0.75, requires_grad=True)
                if other_has_edge:
                    args.append(base)
                else:  # requires_grad, but a view made under no_grad has no autograd edge
                    with torch.no_grad():
                        args.append(base.view(shape))
            try:
                spec.lower(args, attrs)
                raised = False
            except RuntimeError as e:
                assert "Inference tensors cannot be saved" in str(e)
                raised = True
            expected = i in spec.saves and (other_has_edge or i not in spec.saved_for_other)
            assert raised == expected, (
                f"{name}: input {i} (other input has an edge: {other_has_edge}) saved={raised}; "
                f"catalog: saves={spec.saves} saved_for_other={spec.saved_for_other}"
            )


def _recorded_calls(op: str, n: int = 6) -> list[tuple[OpCall, list[torch.Tensor]]]:
    """`n` calls of `op` from the default strategy, with their inputs' values."""
    out: list[tuple[OpCall, list[torch.Tensor]]] = []
    for seed in range(3000):
        p = generate(RandomChoices(seed), GenConfig(ops=(op,)))
        for i, st in enumerate(p.statements):
            if isinstance(st, OpCall) and st.op == op:
                vals = {v.id: v.value for v in run_torch(Program(p.statements[:i])).values}
                if set(st.inputs) <= vals.keys():  # else PyTorch's run failed before the call (a backward)
                    out.append((st, [torch.tensor(vals[x].data).reshape(vals[x].shape).float() for x in st.inputs]))
                break
        if len(out) == n:
            return out
    assert out, f"the strategy never generated {op}"
    return out


def _recorded_call(op: str) -> tuple[OpCall, list[torch.Tensor]]:
    """A call of `op` from the default strategy, with its inputs' values."""
    return _recorded_calls(op, 1)[0]


@pytest.mark.parametrize("name", [op.name for op in OPS])
def test_saved_tensors_match_pytorch(name: str) -> None:
    """`frees_on_backward` (saves / saves_tensors) is data the session model relies on: a second
    backward through the op without retain_graph raises in PyTorch exactly when it is true."""
    spec = CATALOG[name]
    for st, values in _recorded_calls(name):
        _check_saved(spec, st, values)


def _check_saved(spec: OpSpec, st: OpCall, values: list[torch.Tensor]) -> None:
    name = spec.name
    shapes = [tuple(v.shape) for v in values]
    for needs in itertools.product((True, False), repeat=len(values)):
        if not any(needs):
            continue
        ins = [v.clone().requires_grad_(n) for v, n in zip(values, needs)]
        y = spec.lower(ins, st.attrs)
        y.sum().backward()  # type: ignore[no-untyped-call]
        try:
            y.sum().backward()  # type: ignore[no-untyped-call]
            raised = False
        except RuntimeError as e:
            assert "second time" in str(e), e
            raised = True
        assert raised == spec.frees_on_backward_for(needs, st.attrs, shapes), (
            f"{name} (inputs requiring grad: {needs}, attrs {st.attrs}, shapes {shapes}): a second backward "
            f"{'raised' if raised else 'ran'}; the "
            f"catalog says saves={spec.saves} saves_tensors={spec.saves_tensors} saves_only_for={spec.saves_only_for}")


def test_arity_is_declared() -> None:
    for op in OPS:
        assert op.arity in (1, 2, VARIADIC)


def test_format_doc_lists_the_catalog() -> None:
    """docs/format.md's op table is the one the catalog renders (regenerate it with
    `python -m difftest.ops.listing --update docs/format.md`)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "format.md").read_text()
    assert listing.table_in(doc) == listing.markdown()


def test_every_attribute_type_is_spelled_in_both_languages() -> None:
    assert set(spelling.TORCH_ATTR) == set(spelling.BURN_ATTR) == set(ATTR_TYPES)
