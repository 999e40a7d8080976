"""The LibTorch a `tch` build of difftest-burn compiles and runs against (docs/backends.md, LibTorch).

burn-tch 0.22 uses torch-sys 0.22, whose generated bindings are PyTorch 2.9.0's: it refuses any
other version, and the project's own PyTorch is newer (its headers need C++20 and lack operators
the bindings name). So a `tch` build gets a PyTorch 2.9.0 of its own: a virtual environment in
difftest's cache (`pip install torch==2.9.0`: about 6.7 GB with its CUDA libraries, of which only
libtorch_cpu is used), made on the first tch build and reused. torch-sys finds it through that
environment's `python3` (LIBTORCH_USE_PYTORCH=1); a worker of a tch build loads its shared
libraries through LD_LIBRARY_PATH. A caller who points torch-sys at a LibTorch of their own
(LIBTORCH or LIBTORCH_USE_PYTORCH set) keeps it, and their LD_LIBRARY_PATH with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

TORCH_FOR_TCH = "2.9.0"
ENV_DIR_ENV = "DIFFTEST_LIBTORCH_DIR"  # where the environment lives (default: difftest's cache)
COMPLETE = ".complete"  # written once pip has installed and the version is checked


class LibTorchError(RuntimeError):
    pass


def env_dir() -> Path:
    env = os.environ.get(ENV_DIR_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "difftest" / f"libtorch-{TORCH_FOR_TCH}"


def caller_provides() -> bool:
    """The caller set torch-sys up with a LibTorch of their own."""
    return bool(os.environ.get("LIBTORCH") or os.environ.get("LIBTORCH_USE_PYTORCH"))


def _run(args: list[str], log: Path, on_line: Callable[[str], None] | None) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(args)}\n")
        out.flush()
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            out.flush()
            if on_line is not None and line.strip():
                on_line(line.strip())
        if proc.wait() != 0:
            raise LibTorchError(f"{' '.join(args[:4])} ... failed (exit {proc.returncode}); log: {log}")


def ensure(on_line: Callable[[str], None] | None = None) -> Path:
    """The environment holding PyTorch 2.9.0, made if it is not there yet (minutes: a large
    download; each line of pip's output goes to `on_line` and to the log beside it)."""
    d = env_dir()
    if (d / COMPLETE).is_file():
        return d
    d.mkdir(parents=True, exist_ok=True)
    log = d.parent / f"{d.name}.log"
    python = d / "bin" / "python3"
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(d)], log, on_line)
    _run([str(python), "-m", "pip", "install", "--progress-bar", "off", f"torch=={TORCH_FOR_TCH}"], log, on_line)
    got = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    if not got.stdout.startswith(TORCH_FOR_TCH):
        raise LibTorchError(f"{d}: torch {got.stdout.strip() or got.stderr.strip()[-200:]}, not {TORCH_FOR_TCH}")
    (d / COMPLETE).write_text(got.stdout)
    return d


def build_env(d: Path) -> dict[str, str]:
    """What cargo needs to build torch-sys against the environment `d`."""
    return {"LIBTORCH_USE_PYTORCH": "1", "PATH": f"{d / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}


def library_dir(d: Path) -> Path | None:
    return next(iter(sorted(d.glob("lib/python3*/site-packages/torch/lib"))), None)


def is_tch_build(binary: str) -> bool:
    """A binary of a build directory whose label names the tch backend (burn_builds.BurnSpec.label:
    <cache>/<label>/target/release/difftest-burn)."""
    parts = Path(binary).parts
    return len(parts) >= 4 and "tch" in parts[-4].split("+")[1:]


# the pid of the process a worker serves: the worker exits once it is gone (a hung worker reads no
# more requests, so it would never see its stdin close); read at the worker's start, it would
# miss a parent killed before then
PARENT_ENV = "DIFFTEST_BURN_PARENT"


def worker_env(binary: str) -> dict[str, str]:
    """The environment of a worker running `binary`: this process as its parent (PARENT_ENV),
    one OpenMP thread (the jobs fill the cores;
    LibTorch's pool per worker spun on tiny tensors, a LibTorch campaign ran 4.3x slower; an
    explicit OMP_NUM_THREADS is kept), and the provisioned LibTorch on the library path of a tch
    build, unless the caller brought their own."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env[PARENT_ENV] = str(os.getpid())  # the worker exits once this process is gone
    paths = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    theirs = caller_provides() or any((Path(p) / "libtorch_cpu.so").exists() for p in paths)
    if is_tch_build(binary) and not theirs and (env_dir() / COMPLETE).is_file():
        lib = library_dir(env_dir())
        if lib is not None:
            env["LD_LIBRARY_PATH"] = os.pathsep.join([str(lib), *paths])
    return env
