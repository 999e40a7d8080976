"""Triangulated campaigns: `difftest fuzz --backend flex,ndarray` on one build with both
backends (docs/backends.md). Each program runs in PyTorch once and on each backend; a finding
records the backends that show it and the layer that points to, and its key carries that class.

Marked `backends`: skipped unless `pytest --run-backends flex,ndarray tests/backends -p no:xdist`.
A fault scoped to NdArray (`on:ndarray:<spec>`, rust/src/fault.rs) stands for a bug in
burn-ndarray's kernels; the same fault unscoped for one in code every backend shares.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from difftest.campaign.parallel import FuzzOptions, fuzz
from difftest.cli.backends import fit_campaign
from difftest.exec.backends import extra_features, parse_backends
from difftest.exec.burn_builds import BurnSpec, build
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.backends import SHARED, triangulate
from difftest.findings.corpus import load_case
from difftest.findings.summary import Summary
from difftest.oracle.check import check, check_on
from difftest.program.ir import Program
from difftest.program.statements import Backward, Leaf, OpCall

pytestmark = pytest.mark.backends

BOTH = ("flex", "ndarray")
OPS = ("exp", "sum", "mul", "add", "mean")
FAULT = "grad-scale:exp:1e-3"  # exp's gradient scaled by 1 + 1e-3: a wrong derivative


@pytest.fixture(scope="module")
def binary(request: pytest.FixtureRequest) -> str:
    backends = parse_backends(str(request.config.getoption("--run-backends")))
    if not set(BOTH) <= set(backends):
        pytest.skip("needs the flex and ndarray backends")
    return str(build(BurnSpec(version="0.22.1", backends=extra_features(backends))).binary)


@pytest.fixture(scope="module")
def workers(binary: str) -> Iterator[dict[str, BurnWorker]]:
    ws = {b: BurnWorker(binary, backend=b) for b in BOTH}
    yield ws
    for w in ws.values():
        w.close()


def _fuzz(binary: str, tmp: Path, *, fault: str | None, programs: int, seed: int,
          ops: tuple[str, ...] | None = OPS) -> Summary:
    opts = FuzzOptions(seed=seed, programs=programs, ops=ops, jobs=1, corpus=tmp / "corpus", binary=binary,
                       fault=fault, inflight_dir=tmp / "inflight", profile="no-half", backends=BOTH)
    return fuzz(opts, Console(file=io.StringIO(), markup=False, width=200))


def test_a_fault_in_ndarray_alone_is_an_ndarray_only_finding(binary: str, tmp_path: Path) -> None:
    s = _fuzz(binary, tmp_path, fault=f"on:ndarray:{FAULT}", programs=40, seed=5)
    assert not s.errors
    (new,) = s.unexplained()
    assert new.signature.endswith(" @only:ndarray") and new.signature.startswith("burn-wrong:-:exp:grad")
    assert new.backends == ["ndarray"]
    assert new.layer is not None and new.layer.startswith("shows on ndarray only (not on flex)")
    assert "burn-ndarray" in new.layer
    assert s.backends["flex"].new == 0 and s.backends["flex"].verdicts["burn-wrong"] == 0
    assert s.backends["ndarray"].new == new.count > 0
    # the saved case runs on a backend that shows it (`replay` runs it there) and says where it lives
    assert new.path is not None and new.path in s.saved
    case = load_case(Path(new.path))
    assert case.backend == "ndarray" and case.record["signature"] == new.signature
    assert case.record["shown_on"] == {"backends": ["ndarray"], "where": new.layer}
    with BurnWorker(binary, backend="ndarray", fault=f"on:ndarray:{FAULT}") as faulty:
        assert not check(case.program, faulty).ok


def test_the_same_fault_on_every_backend_is_a_shared_finding(binary: str, tmp_path: Path) -> None:
    s = _fuzz(binary, tmp_path, fault=FAULT, programs=40, seed=5)
    assert not s.errors
    (new,) = s.unexplained()
    assert new.signature.endswith(f" @{SHARED}") and new.backends == list(BOTH)
    assert new.layer is not None and new.layer.startswith("shows on every backend tested (flex, ndarray)")
    assert s.backends["flex"].new == s.backends["ndarray"].new == new.count > 0
    summary = json.loads(json.dumps(s.to_dict()))
    assert summary["backends"]["flex"]["new"] == new.count
    assert load_case(Path(str(new.path))).record["shown_on"]["backends"] == list(BOTH)


def test_a_triangulated_campaign_on_the_correct_build_has_no_unexplained_finding(binary: str,
                                                                                  tmp_path: Path) -> None:
    """200 programs of the whole catalog NdArray runs: every finding on either backend is a known
    bug declared for that backend (NdArray's own defaults there, the shared ones on both)."""
    ops, _ = fit_campaign("ndarray", "", "no-half")
    s = _fuzz(binary, tmp_path, fault=None, programs=200, seed=11, ops=tuple(ops.split(",")))
    assert s.programs == 200 and not s.errors
    assert not s.unexplained(), [(f.signature, f.backends, f.path) for f in s.unexplained()]
    assert not s.saved
    for b in BOTH:
        counts = s.backends[b]
        assert counts.new == 0 and sum(counts.verdicts.values()) == 200
        assert counts.known == sum(n for k, n in counts.verdicts.items() if k != "pass")


def test_check_on_judges_each_backend_as_check_does_alone(workers: dict[str, BurnWorker]) -> None:
    """The model and PyTorch run once for both backends: each verdict is the one a check on
    that backend alone gives (a float64 sigmoid: NdArray's f32 default is a known bug there)."""
    program = Program((Leaf("x", (3,), (0.3, -1.2, 2.0), "autodiff", True), OpCall("y", "sigmoid", ("x",)),
                       OpCall("s", "sum", ("y",)), Backward("bw", "s")), dtype="float64")
    together = check_on(program, workers)
    for b, w in workers.items():
        alone = check(program, w)
        assert together[b].kind == alone.kind
        assert [m.to_dict() for m in together[b].mismatches] == [m.to_dict() for m in alone.mismatches]
    assert together["flex"].ok and not together["ndarray"].ok
    shown = triangulate(together, workers)
    assert set(shown) == {"ndarray"}  # triaged on NdArray's worker: the record declared for NdArray
    assert shown["ndarray"].known and shown["ndarray"].key == "known-bug:ndarray-sigmoid-f64-in-f32 @only:ndarray"


def test_a_guided_campaign_takes_one_backend(binary: str, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A guided campaign steers by one coverage build's edges: several backends are refused."""
    from difftest.cli.main import main
    from difftest.exec.backends import BACKEND_ENV

    monkeypatch.setenv("DIFFTEST_BURN", binary)  # main points these at the build it uses
    monkeypatch.setenv(BACKEND_ENV, "flex")
    assert main(["fuzz", "--backend", "flex,ndarray", "--guided", "--programs", "1", "-j", "1"]) == 2
    assert "--guided" in capsys.readouterr().err
