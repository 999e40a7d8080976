"""A known bug's record explains the error its bug makes, not any error at its site: where the
bug's error can be bounded from what the program computes, a second fault beyond it is news."""

from __future__ import annotations

import numpy as np

from difftest.divergences.known_bugs import KNOWN_BUGS, Fault
from difftest.findings.explaining import explains
from difftest.program.ir import Apply, InlineTensor, Module, Program
from tests.programs import leaf, op

RMS = next(b for b in KNOWN_BUGS if b.name == "rms-norm-f64-rms-in-f32")
PROGRAM = Program((
    leaf("x", [1.2, -0.9, 1.1, -0.8], rg=True, shape=[1, 4]),
    Module("m", "rms_norm", InlineTensor((4,), (1.0, 0.9, 1.1, 0.7)), attrs={"d_model": 4, "epsilon": 1e-5}),
    Apply("y", "m", "x"),
), dtype="float64")


def _fault(kind: str, relative: float) -> Fault:
    pairs = tuple((r, r * (1 + relative)) for r in (1.13, -0.76, 1.02, -0.51))
    return Fault(kind, "y", PROGRAM, "float64", "-", pairs=pairs, elements=(0, 1, 2, 3), verdict="burn-wrong")


def test_rms_norm_values_are_explained_within_the_rms_rounding_only() -> None:
    """At the RmsNorm forward, the record explains what an rms computed in f32 makes (under d + 4
    units of f32 rounding, relative: 4.8e-7 at d = 4), not an epsilon added after the square root
    (3e-6 at an rms of 2), which the generic 64 units (3.8e-6) explained."""
    assert explains(RMS, _fault("value", 1e-7))
    assert explains(RMS, _fault("value", -4e-7))
    assert not explains(RMS, _fault("value", 3e-6))
    assert not explains(RMS, _fault("value", 1e-6))
    # the gradient may cancel: it keeps the generic bound
    assert explains(RMS, _fault("grad", 3e-6))
    assert not explains(RMS, _fault("grad", 1e-4))


DIV = next(b for b in KNOWN_BUGS if b.name == "div-scalar-grad-f32-reciprocal")


def _div_fault(scalar: float, relative: float, site: str = "y") -> Fault:
    program = Program((leaf("x", [1.0, -2.0, 0.5], rg=True), op("y", "div_scalar", "x", scalar=scalar),
                       op("z", "var", "x")), dtype="float64")
    pairs = tuple((r, r * (1 + relative)) for r in (1.0 / scalar, -0.25 / scalar, 2.0 / scalar))
    return Fault("grad", site, program, "float64", "-", input=(0,), pairs=pairs, elements=(0, 1, 2),
                 verdict="burn-wrong")


def test_div_scalars_gradient_is_explained_by_its_f32_reciprocal_only() -> None:
    """At div_scalar itself the record explains a gradient scaled by s * f32(1 / f32(s)) (3e-8
    at s = 3, -2e-8 at s = 0.7), the bug's own error, and not a second fault of the gradient,
    however small (1e-7, 1e-6: within the generic 64 units, 3.8e-6, which explained them)."""
    for s in (3.0, 0.7, -12.5):
        q = float(np.float32(1.0) / np.float32(s))
        assert explains(DIV, _div_fault(s, s * q - 1)), s
        assert not explains(DIV, _div_fault(s, s * q - 1 + 1e-7)), s
        assert not explains(DIV, _div_fault(s, 1e-6)), s
    # a power of two's reciprocal is exact in f32: no error at all is the bug's there
    assert not explains(DIV, _div_fault(4.0, 1e-8))
    # ops burn composes with a div_scalar among others keep the generic bound
    assert explains(DIV, _div_fault(3.0, 1e-6, site="z"))
    assert not explains(DIV, _div_fault(3.0, 1e-4, site="z"))


HARD = next(b for b in KNOWN_BUGS if b.name == "hard-sigmoid-autodiff-f64-in-f32")
XS = (0.1, -0.4, 0.9, 2.5, -2.98138)


def _hard_fault(relative: float, site: str = "y") -> Fault:
    program = Program((leaf("x", list(XS), rg=True), op("y", "hard_sigmoid", "x"), op("z", "exp", "y")),
                      dtype="float64")
    burn = [float(np.clip(np.float32(np.float32(x) * np.float32(1.0 / 6.0)) + np.float32(0.5), 0, 1)) for x in XS]
    pairs = tuple((x / 6 + 0.5, b * (1 + relative)) for x, b in zip(XS, burn, strict=True))
    return Fault("value", site, program, "float64", "-", pairs=pairs, elements=tuple(range(len(XS))),
                 inputs=(XS,), verdict="burn-wrong")


def test_hard_sigmoids_value_is_explained_by_its_float32_computation_only() -> None:
    """At hard_sigmoid itself the record explains burn's float32 result (x * f32(1/6) + 0.5,
    each step rounded), not that result off by a second fault of 1e-6 or 2e-7 (within the
    generic 64 units, 3.8e-6 relative, which explained them)."""
    assert explains(HARD, _hard_fault(0.0))
    assert not explains(HARD, _hard_fault(1e-6))
    assert not explains(HARD, _hard_fault(2e-7))
    # seen downstream (its site is not the op), 4 units of f32 rounding of the largest value
    assert explains(HARD, _hard_fault(2e-7, site="z"))
    assert not explains(HARD, _hard_fault(1e-6, site="z"))
