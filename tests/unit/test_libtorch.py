"""The LibTorch a tch build gets (difftest/exec/libtorch.py): made in the cache on the first tch
build, handed to torch-sys through the build's environment and to a tch build's workers through
LD_LIBRARY_PATH; a caller's own LibTorch wins. Nothing is downloaded here: the environment is a
stand-in directory, pip and cargo are replaced."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from difftest.exec import burn_builds, libtorch
from difftest.exec.burn_builds import BuildError, BurnSpec


def _provisioned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "libtorch"
    lib = d / "lib" / "python3.11" / "site-packages" / "torch" / "lib"
    lib.mkdir(parents=True)
    (d / libtorch.COMPLETE).write_text("2.9.0+cu128\n")
    (d / "bin").mkdir()
    (d / "bin" / "python3").write_text("")  # the venv is there: only pip runs again
    monkeypatch.setenv(libtorch.ENV_DIR_ENV, str(d))
    for var in ("LIBTORCH", "LIBTORCH_USE_PYTORCH", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(var, raising=False)
    return lib


def test_a_tch_builds_worker_finds_the_provisioned_libtorch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = _provisioned(tmp_path, monkeypatch)
    tch = "/cache/burn-versions/0.22.1+tch/target/release/difftest-burn"
    assert libtorch.worker_env(tch)["LD_LIBRARY_PATH"] == str(lib)
    assert libtorch.worker_env(tch)["OMP_NUM_THREADS"] == "1"
    for other in ("/cache/burn-versions/0.22.1+ndarray/target/release/difftest-burn", "/usr/bin/difftest-burn"):
        assert "LD_LIBRARY_PATH" not in libtorch.worker_env(other), other
    # a caller's own LibTorch (torch-sys pointed at it, or on their library path) is kept
    own = tmp_path / "own"
    own.mkdir()
    (own / "libtorch_cpu.so").write_text("")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(own))
    assert libtorch.worker_env(tch)["LD_LIBRARY_PATH"] == str(own)
    monkeypatch.delenv("LD_LIBRARY_PATH")
    monkeypatch.setenv("LIBTORCH_USE_PYTORCH", "1")
    assert "LD_LIBRARY_PATH" not in libtorch.worker_env(tch)


def test_an_environment_not_made_to_the_end_is_made_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a checked install writes the marker: an interrupted or failed pip leaves none, and
    the next tch build runs pip again (into the same environment)."""
    lib = _provisioned(tmp_path, monkeypatch)
    marker = lib.parents[4] / libtorch.COMPLETE
    assert libtorch.ensure() == lib.parents[4]
    marker.unlink()
    ran: list[list[str]] = []

    def fake_run(args: list[str], log: Path, on_line: Any) -> None:
        ran.append(args)
        raise libtorch.LibTorchError("pip: no network")

    monkeypatch.setattr(libtorch, "_run", fake_run)
    with pytest.raises(libtorch.LibTorchError, match="no network"):
        libtorch.ensure()
    assert any("torch==2.9.0" in a for a in ran[-1]) and not marker.exists()


def test_a_tch_build_gives_cargo_the_environment_and_says_why_it_cannot(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    lib = _provisioned(tmp_path, monkeypatch)
    seen: list[dict[str, str] | None] = []

    def fake_cargo(args: list[str], cwd: Path, log: Path, on_line: Any,
                   extra_env: dict[str, str] | None = None) -> None:
        seen.append(extra_env)
        raise BuildError("stop here")

    monkeypatch.setattr(burn_builds, "_run_cargo", fake_cargo)
    monkeypatch.setattr(burn_builds, "_resolve", lambda *a: "0.22.1")
    spec = BurnSpec(version="0.22.1", backends=("tch",))
    with pytest.raises(BuildError, match="stop here"):
        burn_builds.build(spec, cache=tmp_path / "builds")
    env = seen[-1]
    assert env is not None and env["LIBTORCH_USE_PYTORCH"] == "1"
    assert env["PATH"].split(os.pathsep)[0] == str(lib.parents[4] / "bin")
    # no environment and no way to make one: a build error that names what is missing
    (lib.parents[4] / libtorch.COMPLETE).unlink()
    monkeypatch.setattr(libtorch, "_run", lambda *a: (_ for _ in ()).throw(libtorch.LibTorchError("pip failed")))
    with pytest.raises(BuildError, match=r"the LibTorch a tch build needs \(PyTorch 2.9.0\): pip failed"):
        burn_builds.build(spec, cache=tmp_path / "builds")
