"""The reproducer emitters: an emitted script/test must observe what the executors observe.

(a) Emitted PyTorch scripts are run in a subprocess and their printout is compared, exactly, with
    `torch_exec.run_torch` on the same program. Two scripts run on their own; the rest run in
    one subprocess (one `import torch`, each script through `runpy`) to keep the suite fast.
(b) Emitted burn tests are compiled in a copy of `tests/rust_repro/` (with `rust/Cargo.lock`,
    and `CARGO_TARGET_DIR` or /root/.cache/difftest/target, so burn itself is not rebuilt),
    run one by one, and compared with what `difftest-burn` reports for the same program.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from difftest.exec.burn_worker import BurnWorker, WorkerError
from difftest.findings.reproducers import rust_test, rust_test_file, torch_script, variable_names
from difftest.findings.signature import normalize
from difftest.ops.catalog import OPS
from difftest.ops.value_dtypes import value_dtypes
from difftest.oracle.pytorch import run as run_torch
from difftest.program.dtypes import to_f32
from difftest.program.ir import Program
from difftest.program.observation import Observation, TensorObs
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate, ops_of
from tests.module_programs import MODULE_PROGRAMS
from tests.programs import backward, cut, leaf, op, program

ROOT = Path(__file__).resolve().parents[2]
REPRO_CRATE = ROOT / "tests" / "rust_repro"
DEFAULT_TARGET = Path("/root/.cache/difftest/target")

# ---------------------------------------------------------------- programs

SEED_FLAGS = program(
    leaf("w", [3.0, 4.0], True),
    cut("d", "detach", "w"),
    op("m", "mul_scalar", "w", scalar=2.0),
    cut("dm", "detach", "m"),
    cut("u", "without_autodiff", "w"),
)

SIDE_BRANCH = program(
    leaf("x", [1.0, 2.0], True),
    leaf("w", [3.0, 4.0], True),
    op("xs", "mul_scalar", "x", scalar=10.0),
    cut("side", "detach", "xs"),
    op("sw", "mul", "side", "w"),
    op("s1", "sum", "sw"),
    op("xw", "mul", "x", "w"),
    op("s2", "sum", "xw"),
    op("loss", "add", "s1", "s2"),
    backward("loss"),
)

# Non-finite data, -0.0, f32 values with long decimals, non-finite attributes.
SPECIALS = program(
    leaf("x", [math.nan, math.inf, -math.inf, -0.0, 0.1, 1e-7, 3.4e38, -1.5], True, shape=[2, 4]),
    op("y", "mul_scalar", "x", scalar=0.1),
    op("z", "mask_fill", "y", mask={"shape": [2, 4], "data": [True, False] * 4}, value=math.inf),
    op("c", "clamp", "z", min=-1e30, max=1e-30),
    op("s", "sum", "c"),
    backward("s"),
)

# Ids that are keywords or builtins in Python or Rust, or names the emitted code uses.
AWKWARD_IDS = program(
    leaf("self", [1.0, 2.0, 3.0], True),
    leaf("None", [0.5], False, device="plain"),
    op("type", "mul", "self", "None"),
    op("t", "exp", "type", region="no_grad"),
    cut("e", "detach", "type", region="inference_mode"),
    op("print", "add", "type", "t"),
    op("float", "sum", "print"),
    op("device", "mul_scalar", "float", scalar=-2.0),
    backward("device", "fn"),
)

# PyTorch raises, burn panics: the reproducers stop at the failing statement.
UNTRACKED_BACKWARD = program(
    leaf("x", [1.0, -2.0]),
    op("s", "sum", "x"),
    backward("s"),
    op("after", "neg", "s"),
)

def _sessions() -> dict[str, Program]:
    """The session cases of the corpus (several backwards, gradient reads, SGD steps)."""
    from difftest.findings.corpus import load_case

    cases = sorted((ROOT / "corpus/seed").glob("session-*.json"))
    return {p.stem.replace("-", "_"): load_case(p).program for p in cases}


HAND_WRITTEN = {
    **_sessions(),
    "seed_flags": SEED_FLAGS,
    "side_branch": SIDE_BRANCH,
    "specials": SPECIALS,
    "awkward_ids": AWKWARD_IDS,
    "untracked_backward": UNTRACKED_BACKWARD,
    **MODULE_PROGRAMS,
}


def generated(n: int = 30) -> dict[str, Program]:
    return {f"gen_{k}": generate(RandomChoices(k)) for k in range(n)}


def per_op() -> dict[str, Program]:
    """One generated program per catalog op that uses it (the op alone, plus leaves and cuts)."""
    out: dict[str, Program] = {}
    for spec in OPS:
        cfg = GenConfig(ops=(spec.name,), max_statements=6)
        for seed in range(200):
            p = generate(RandomChoices(seed), cfg)
            if spec.name in ops_of(p):
                out[f"op_{spec.name}"] = p
                break
        else:
            raise AssertionError(f"no generated program uses {spec.name}")
    return out


GENERATED = generated()
PER_OP = per_op()
ALL = {**HAND_WRITTEN, **GENERATED, **PER_OP}


def test_every_op_is_covered() -> None:
    used = {name for p in PER_OP.values() for name in ops_of(p)}
    assert used >= {spec.name for spec in OPS}


def test_variable_names_avoid_keywords_and_collisions() -> None:
    p = program(leaf("fn", [1.0]), leaf("fn_", [1.0]), op("lambda", "neg", "fn"), op("x", "add", "fn", "fn_"))
    names = variable_names(p)
    assert names["fn_"] == "fn_"
    assert names["fn"] not in ("fn", "fn_")
    assert names["lambda"] != "lambda"
    assert len(set(names.values())) == len(names)


# ---------------------------------------------------------------- parsing the printouts

VALUE_TORCH = re.compile(
    r"^(\w+) shape=\[([\d, ]*)\] requires_grad=(True|False) is_leaf=(True|False) grad_fn=(\w+) "
    r"is_inference=(True|False) values=\[(.*)\]$"
)
VALUE_BURN = re.compile(
    r"^(\w+) shape=\[([\d, ]*)\] is_autodiff=(true|false) is_tracked=(true|false) "
    r"is_require_grad=(true|false) values=\[(.*)\]$"
)
BACKWARD = re.compile(r"^backward (\w+)$")
GRAD = re.compile(r"^grad (\w+) = (?:None|\[(.*)\] shape=\[([\d, ]*)\])$")
LIBTEST_PREFIX = re.compile(r"^test \w+ \.\.\. ")
ERROR = re.compile(r"^error (\d+) (\w+): (.*)$", re.S)


@dataclass
class Printout:
    values: list[tuple[str, tuple[int, ...], dict[str, bool], tuple[float, ...]]] = field(default_factory=list)
    backwards: list[tuple[str, dict[str, TensorObs | None]]] = field(default_factory=list)
    error: tuple[int, str, str] | None = None


def _ints(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(",") if x.strip())


def _floats(s: str, f32: bool = False) -> tuple[float, ...]:
    """PyTorch prints exact doubles; Rust prints the shortest decimal that reads back as the f32."""
    xs = (float(x) for x in s.split(",") if x.strip())
    return tuple(to_f32(x) for x in xs) if f32 else tuple(xs)


def parse(text: str, framework: str, dtype: str = "float32") -> Printout:
    out = Printout()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        line = LIBTEST_PREFIX.sub("", line)  # libtest's "test name ... " shares the first line
        if framework == "torch" and line.startswith("error "):
            m = ERROR.match("\n".join(lines[i:]))
            assert m, line
            out.error = (int(m[1]), m[2], m[3])
            break
        if m := BACKWARD.match(line):
            out.backwards.append((m[1], {}))
        elif m := GRAD.match(line):
            narrow = framework == "burn" and dtype == "float32"
            grad = None if m[2] is None else TensorObs(_ints(m[3]), _floats(m[2], narrow))
            out.backwards[-1][1][m[1]] = grad
        elif framework == "torch" and (m := VALUE_TORCH.match(line)):
            flags = {"requires_grad": m[3] == "True", "is_leaf": m[4] == "True",
                     "has_grad_fn": m[5] != "None", "is_inference": m[6] == "True"}
            out.values.append((m[1], _ints(m[2]), flags, _floats(m[7])))
        elif framework == "burn" and (m := VALUE_BURN.match(line)):
            flags = {"is_autodiff": m[3] == "true", "is_tracked": m[4] == "true",
                     "is_require_grad": m[5] == "true"}
            out.values.append((m[1], _ints(m[2]), flags, _floats(m[6], dtype == "float32")))
    return out


def same_floats(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    """Bit-exact up to NaN payloads: NaN matches NaN, -0.0 does not match 0.0."""
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
        for x, y in zip(a, b, strict=True)
    )


def assert_matches(printed: Printout, obs: Observation, *, printed_error: bool = True) -> None:
    """The printout reports exactly the observation: values, flags, gradients, and the error when
    the reproducer prints it (the PyTorch script does; a burn test panics instead)."""
    assert [v[0] for v in printed.values] == [v.id for v in obs.values]
    for (ident, shape, flags, data), v in zip(printed.values, obs.values, strict=True):
        assert shape == v.value.shape, ident
        assert flags == v.flags, ident
        assert same_floats(data, v.value.data), (ident, data, v.value.data)
    assert [b[0] for b in printed.backwards] == [b.id for b in obs.backwards]
    for (ident, grads), b in zip(printed.backwards, obs.backwards, strict=True):
        assert list(grads) == list(b.grads), ident
        for k, g in grads.items():
            want = b.grads[k]
            if g is None or want is None:
                assert g is None and want is None, (ident, k, g, want)
            else:
                assert g.shape == want.shape and same_floats(g.data, want.data), (ident, k, g, want)
    if printed_error:
        if obs.error is None:
            assert printed.error is None
        else:
            assert printed.error == (obs.error.index, obs.error.statement, obs.error.message)


# ---------------------------------------------------------------- (a) PyTorch scripts

def _run_python(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name", ["seed_flags", "side_branch"])
def test_torch_script_standalone(name: str, tmp_path: Path) -> None:
    p = HAND_WRITTEN[name]
    script = tmp_path / f"{name}.py"
    script.write_text(torch_script(p, name))
    done = _run_python([str(script)])
    obs = run_torch(p)
    assert done.returncode == (0 if obs.error is None else 1), done.stderr
    assert_matches(parse(done.stdout, "torch"), obs)


MARK = "=== difftest reproducer "
BATCH_DRIVER = f"""\
import contextlib, io, runpy, sys
import torch
torch.set_num_threads(1)  # as in the test process (tests/conftest.py)
for path in sys.argv[1:]:
    buf = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(buf):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            code = e.code
    print({MARK!r} + path + " exit=" + str(code))
    print(buf.getvalue(), end="")
"""


@pytest.fixture(scope="module")
def torch_batch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """Every program's script run in one subprocess: name -> (exit code, printout)."""
    d = tmp_path_factory.mktemp("torch_scripts")
    paths = []
    for name, p in ALL.items():
        path = d / f"{name}.py"
        path.write_text(torch_script(p, name))
        paths.append(str(path))
    driver = d / "driver.py"
    driver.write_text(BATCH_DRIVER)
    done = _run_python([str(driver), *paths])
    assert done.returncode == 0, done.stderr
    out: dict[str, tuple[int, str]] = {}
    for chunk in done.stdout.split(MARK)[1:]:
        head, _, body = chunk.partition("\n")
        script, _, code = head.rpartition(" exit=")
        out[Path(script).stem] = (int(code), body)
    return out


@pytest.mark.parametrize("name", list(ALL))
def test_torch_script_matches_run_torch(name: str, torch_batch: dict[str, tuple[int, str]]) -> None:
    p = ALL[name]
    code, text = torch_batch[name]
    obs = run_torch(p)
    assert code == (0 if obs.error is None else 1), text
    assert_matches(parse(text, "torch"), obs)


def test_torch_script_imports_only_torch() -> None:
    for p in (SEED_FLAGS, SPECIALS, *PER_OP.values()):
        imports = {line for line in torch_script(p).splitlines() if line.startswith(("import", "from"))}
        assert imports == {"import torch"}


# ---------------------------------------------------------------- (b) burn tests

RUST_SET = {**HAND_WRITTEN, **dict(list(GENERATED.items())[:10]), **PER_OP}


@dataclass
class RustBuild:
    executable: Path
    seconds: float


@pytest.fixture(scope="module")
def rust_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RustBuild]:
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.skip("cargo is not on PATH: the emitted burn tests cannot be compiled")
    lock = ROOT / "rust" / "Cargo.lock"
    crate = tmp_path_factory.mktemp("rust_repro")
    shutil.copy(REPRO_CRATE / "Cargo.toml", crate / "Cargo.toml")
    shutil.copytree(REPRO_CRATE / "src", crate / "src")
    if lock.is_file():
        shutil.copy(lock, crate / "Cargo.lock")  # the versions difftest-burn was built with
    (crate / "tests").mkdir()
    (crate / "tests" / "emitted.rs").write_text(rust_test_file([(p, n) for n, p in RUST_SET.items()]))
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", str(DEFAULT_TARGET))
    started = time.monotonic()
    command = [cargo, "test", "--release", "--no-run", "--message-format=json"]
    done = subprocess.run([*command, "--offline"], cwd=crate, env=env, capture_output=True, text=True,
                          timeout=3600)
    if done.returncode != 0 and "offline" in done.stderr:  # a crate is missing from the local registry
        done = subprocess.run(command, cwd=crate, env=env, capture_output=True, text=True, timeout=3600)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        diagnostics = [json.loads(line).get("message", {}).get("rendered") for line in done.stdout.splitlines()
                       if line.startswith("{") and '"compiler-message"' in line]
        pytest.fail("the emitted burn tests do not compile:\n" + "".join(d for d in diagnostics if d)
                    + done.stderr[-4000:])
    exe = None
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            msg = json.loads(line)
            if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "emitted":
                exe = msg.get("executable")
    assert exe, done.stdout[-2000:]
    print(f"\nbuilding the emitted burn tests took {seconds:.1f}s")
    yield RustBuild(Path(exe), seconds)


@pytest.fixture(scope="module")
def burn_worker() -> Iterator[BurnWorker]:
    try:
        worker = BurnWorker()
        worker.start()
    except WorkerError as e:
        pytest.skip(f"difftest-burn is not available: {e}")
    yield worker
    worker.close()


def test_rust_test_is_self_contained() -> None:
    text = rust_test(SEED_FLAGS, "seed_flags")
    assert text.startswith("#[test]\nfn seed_flags() {")
    assert "use burn::tensor::{Device, Tensor, TensorData};" in text
    assert "Device::flex().autodiff()" in text
    assert "difftest" not in text.replace("// difftest reproducer", "")


@pytest.mark.parametrize("name", list(RUST_SET))
def test_rust_test_matches_burn_worker(name: str, rust_build: RustBuild, burn_worker: BurnWorker) -> None:
    p = RUST_SET[name]
    done = subprocess.run(
        [str(rust_build.executable), "--exact", name, "--nocapture", "--test-threads=1"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "RUST_BACKTRACE": "0"},
    )
    obs = burn_worker.run(p)
    assert obs.error is None or obs.error.kind in ("panic", "missing-gradient"), obs.error
    # the test prints f32 only when every value is float32 (a cast may make others)
    printed_in = "float32" if set(value_dtypes(p).values()) <= {"float32"} else "float64"
    assert_matches(parse(done.stdout, "burn", printed_in), obs, printed_error=False)
    if obs.error is None:
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert done.returncode != 0, done.stdout
        if obs.error.kind == "missing-gradient":  # the reproducer's `.expect(..)` on x.grad(&grads)
            assert "no gradient for" in done.stderr, done.stderr
        else:  # node ids (NodeId(N)) differ between the worker and the standalone test: numbers aside
            assert normalize(obs.error.message) in normalize(done.stderr), (obs.error.message, done.stderr)
