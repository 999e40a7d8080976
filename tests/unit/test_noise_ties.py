"""The noise runs keep the exact ties that the float64 run and PyTorch's own run both have, at ops
that split their gradient among equal elements by convention (oracle/noise.py): such a tie is a
fact of the program, not rounding; a float64 tie the real run breaks is left to the draws."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from difftest.ops.catalog import CATALOG
from difftest.oracle.noise import NoiseHooks, _keep_ties, tie_references
from difftest.oracle.pytorch import run as run_torch
from difftest.oracle.sites import _op_site
from difftest.program.jsonio import program_from_dict

CASE = Path(__file__).parents[2] / "corpus" / "findings" / "93f9d7c272de1196.json"


def _keys(ref: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    return torch.stack([ref, own], dim=-1)


def test_one_input_ties_are_restored_and_each_element_keeps_its_gradient() -> None:
    ref = torch.tensor([1.0, 2.0, 1.0, 1.0], dtype=torch.float64)
    x = torch.tensor([1.1, 2.0, 0.9, 1.05], dtype=torch.float64, requires_grad=True)
    (y,) = _keep_ties([x], [_keys(ref, ref)], pair=False)
    assert y.tolist() == [1.1, 2.0, 1.1, 1.1]
    (y * torch.arange(1.0, 5.0, dtype=torch.float64)).sum().backward()  # type: ignore[no-untyped-call]
    assert x.grad is not None and x.grad.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_a_float64_tie_the_real_run_breaks_is_left_to_the_draws() -> None:
    # cross(x, x) is 0 in float64; PyTorch's float32 has a fused multiply-add's residue in one
    ref = torch.zeros(3, dtype=torch.float64)
    own = torch.tensor([0.0, 4.3e-11, 0.0], dtype=torch.float64)
    x = torch.tensor([1e-9, -2e-9, 3e-9], dtype=torch.float64)
    (y,) = _keep_ties([x], [_keys(ref, own)], pair=False)
    assert y[1].item() == -2e-9 and y[2].item() == pytest.approx(1e-9, rel=1e-12)


def test_a_pair_is_tied_where_the_reference_has_equal_elements_only() -> None:
    a = torch.tensor([1.0, 3.0], dtype=torch.float64)
    b = torch.tensor([1.2, 2.0], dtype=torch.float64, requires_grad=True)
    first_ref, second_ref = torch.tensor([1.0, 3.0]).double(), torch.tensor([1.0, 2.5]).double()
    refs = [_keys(first_ref, first_ref), _keys(second_ref, second_ref)]
    first, second = _keep_ties([a, b], refs, pair=True)
    assert first is a and second.tolist() == [1.0, 2.0]


def test_a_min_over_exact_ties_splits_its_gradient_in_a_noise_run() -> None:
    # min over elements that the float64 run has equal (cos of a vanishing angle): a noise run
    # that broke the tie would send the whole gradient through one element
    x = torch.tensor([1.0 + 1e-9, 1.0 - 1e-9, 1.0], dtype=torch.float64, requires_grad=True)
    site = _op_site("min", "v4", "grad", [x], {}, "float32")
    for seed in range(4):
        hooks = NoiseHooks(seed, {"v4": [torch.ones(3, 2, dtype=torch.float64)]})
        with torch.enable_grad():
            y = hooks.on_site(site, [x], lambda xs: CATALOG["min"].lower(list(xs), {}))
        (g,) = torch.autograd.grad(y.sum(), x)
        assert torch.allclose(g, torch.full((3,), 1 / 3, dtype=torch.float64))


def test_the_case_of_min_over_exact_ties_passes() -> None:
    # the quality suite's false alarm: min(cos(atanh(cross(x, x)))), whose gradient PyTorch
    # splits over six exact ties; the case replays as a pass (the corpus test), and its
    # program has the tie at the min's input in the float64 run and in PyTorch's own
    program = program_from_dict(json.loads(CASE.read_text())["program"])
    (keys,) = tie_references(program, run_torch(program, "float64"), run_torch(program))["v4"]
    assert keys.shape == (3, 2, 1, 2) and keys.reshape(-1, 2).unique(dim=0).shape[0] == 1  # type: ignore[no-untyped-call]
