"""`cast` between float dtypes on both sides (burn `Tensor::cast`, PyTorch `.to`), measured:
values in the cast's dtype, gradients in the leaf's, a cast to the own dtype returning its
input, inputs of mixed dtypes refused (dtype_support.MIXED), and the float64 arbiter running
casts in float64."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from difftest.exec.burn_worker import BurnWorker, WorkerError
from difftest.ops.dtype_support import MIXED
from difftest.ops.validate import check_program
from difftest.ops.value_dtypes import value_dtypes
from difftest.oracle.check import check
from difftest.oracle.noise import noisy_runs
from difftest.oracle.pytorch import run as run_torch
from difftest.program.dtypes import FLOAT_DTYPES, round_to
from difftest.program.ir import Backward, Leaf, OpCall, Program, ProgramError

DATA = (0.5, -1.25, 2.75)  # values of every float dtype
ODD = (0.1, -1.7, 2.9)  # rounded differently by each dtype


@pytest.fixture(scope="module")
def burn_worker() -> Iterator[BurnWorker]:
    try:
        worker = BurnWorker()
        worker.start()
    except WorkerError as e:
        pytest.skip(f"difftest-burn is not available: {e}")
    yield worker
    worker.close()


def _program(src: str, dst: str, data: tuple[float, ...] = DATA) -> Program:
    data = tuple(round_to(x, src) for x in data)
    return Program((Leaf("x", (3,), data, require_grad=True), OpCall("h", "cast", ("x",), {"dtype": dst}),
                    OpCall("y", "sin", ("h",)), OpCall("z", "mul", ("y", "h")), Backward("bw", "z")), src)


@pytest.mark.parametrize("src", FLOAT_DTYPES)
@pytest.mark.parametrize("dst", FLOAT_DTYPES)
def test_cast_between_dtypes(src: str, dst: str, burn_worker: BurnWorker) -> None:
    """Both sides agree (verdict ok); the cast rounds to `dst` exactly as round_to does; values
    after it are in `dst`; the leaf's gradient is in the leaf's dtype (burn casts it back)."""
    p = _program(src, dst, ODD)
    v = check(p, burn_worker)
    assert v.ok, v.report()
    assert value_dtypes(p) == {"x": src, "h": dst, "y": dst, "z": dst}
    for obs in (v.torch, v.burn):
        h = obs.value("h")
        assert h is not None and h.value.dtype == dst, obs.framework
        assert h.value.data == tuple(round_to(round_to(x, src), dst) for x in ODD), obs.framework
        g = obs.backwards[0].grads["x"]
        assert g is not None and g.dtype == src, (obs.framework, g)


def test_cast_to_the_own_dtype_returns_the_input(burn_worker: BurnWorker) -> None:
    """PyTorch's .to returns the tensor itself, and so does burn's cast (both declared rules):
    the result of a require-grad leaf is that leaf, which receives the gradient."""
    x = torch.tensor(DATA, requires_grad=True)
    assert x.to(torch.float32) is x
    with torch.no_grad():
        assert x.to(torch.float32) is x
    p = Program((Leaf("x", (3,), DATA, require_grad=True), OpCall("s", "cast", ("x",), {"dtype": "float32"}),
                 OpCall("y", "exp", ("s",)), Backward("bw", "y")))
    v = check(p, burn_worker)
    assert v.ok, v.report()
    s = v.burn.value("s")
    assert s is not None and s.flags["is_require_grad"]  # a require-grad leaf, not a node
    st = v.torch.value("s")
    assert st is not None and st.flags["is_leaf"] and st.flags["requires_grad"]
    fired = {(f.rule, f.framework) for f in v.prediction.firings}
    assert {("cast-same-dtype-returns-input", "burn"), ("to-same-dtype-returns-input", "torch")} <= fired


def test_mixed_dtypes_are_measured_and_refused(burn_worker: BurnWorker) -> None:
    """PyTorch promotes an add of float16 and float32 to float32; burn-flex panics: the program
    is refused before it runs, naming the statement."""
    p = Program((Leaf("x", (3,), DATA, require_grad=True), OpCall("h", "cast", ("x",), {"dtype": "float16"}),
                 OpCall("y", "add", ("h", "x"))))
    t = run_torch(p)
    y = t.value("y")
    assert t.error is None and y is not None and y.value.dtype == "float32"
    b = burn_worker.submit(p).result()
    assert b.error is not None and b.error.kind == "panic" and "dtype mismatch" in b.error.message
    assert "dtype mismatch" in MIXED
    with pytest.raises(ProgramError, match="statement 2 \\(id 'y'\\): op 'add' mixes dtypes float16, float32"):
        check_program(p)


def test_unknown_cast_dtype_is_refused() -> None:
    p = Program((Leaf("x", (3,), DATA), OpCall("h", "cast", ("x",), {"dtype": "float8"})))
    with pytest.raises(ValueError, match="'dtype'='float8' is not of type dtype"):
        check_program(p)


def test_the_arbiter_runs_casts_in_float64() -> None:
    """The float64 reference skips the casts' rounding (the noise runs measure it at the cast):
    every value of the arbiter's run is float64 and the cast is exact."""
    p = _program("float32", "float16", ODD)
    ref = run_torch(p, "float64")
    assert ref.error is None
    assert {v.value.dtype for v in ref.values} == {"float64"}
    h, x = ref.value("h"), ref.value("x")
    assert h is not None and x is not None and h.value.data == x.value.data


def test_noise_runs_keep_a_same_dtype_cast_the_input() -> None:
    """In the noise runs a cast to the own dtype is its input itself, as on both sides: its
    gradient is the leaf's noisy one (a campaign, seed 9, found burn 'wrong' against a noise of 0
    when the noise runs made it a node of its own)."""
    p = Program((Leaf("x", (3,), DATA, require_grad=True), OpCall("s", "cast", ("x",), {"dtype": "float32"}),
                 OpCall("y", "softplus", ("s",), {"beta": 0.5}), OpCall("z", "mul", ("y", "y")), Backward("bw", "z")))
    check_program(p)
    runs = noisy_runs(p)
    assert runs
    for obs in runs:
        g = obs.backwards[0].grads
        assert g["s"] is not None and g["s"] == g["x"]
    assert any(obs.backwards[0].grads["x"] != runs[0].backwards[0].grads["x"] for obs in runs[1:])
