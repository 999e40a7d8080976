"""Detection power: the default suite must fail against each deliberately faulty interpreter.

Run with `python -m pytest -m quality tests/quality/test_detection.py -s` (not part of the
default run; the whole list takes a while, each fault one pytest run). Each fault is compiled
into difftest-burn and switched on by DIFFTEST_BURN_FAULT (docs/format.md). For each, this
runs the default suite's differential tests — the property (tests/differential/test_property.py, the same
derandomized examples) and the seeded campaign chunks (tests/differential/test_campaign_chunks.py) — in a
subprocess against the faulty build (`-n 2`), and requires that they fail. Nothing in those
tests knows about the faults. The table printed at the end lists, per fault, the property's
first failing example and the campaign's first failing program (each chunk stops at its first
finding, so this is the number of programs a sequential campaign needs), and in how many of
the chunks the fault shows.

The shared burn worker of the pytest plugin starts `$DIFFTEST_BURN` and does not pass
DIFFTEST_BURN_FAULT on, so the subprocess gets a wrapper script as DIFFTEST_BURN that sets the
fault and runs the real interpreter. DIFFTEST_NO_SAVE=1 and a temporary DIFFTEST_CORPUS keep
corpus/ untouched; the Hypothesis profile `quality` (tests/quality/noshrink.py) skips shrinking.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from difftest.campaign.loop import run_campaign
from difftest.exec.burn_worker import BurnWorker, find_binary
from difftest.findings.table import report as table_report
from difftest.findings.triage import triage
from difftest.ops.catalog import OPS
from tests.differential.test_campaign_chunks import CHUNKS

ROOT = Path(__file__).resolve().parents[2]
TESTS = ["tests/differential/test_property.py::test_burn_agrees_with_pytorch",
         "tests/differential/test_campaign_chunks.py"]
TIMEOUT = 1200.0  # seconds per fault (the two test files pass in about 2 minutes on 2 cores)

BINARY = [o.name for o in OPS if o.arity == 2]
DIM_REDUCTIONS = [o.name for o in OPS if o.family == "reduction" and any(a.name == "dim" for a in o.attrs)]
# one op per tolerance class and family (exact, rounded, transcendental, accumulate x unary,
# binary, scalar, reduction, shape, index, matmul)
GRAD_SCALE_OPS = [
    "abs",
    "maximum",
    "max_dim",
    "permute",
    "gather",
    "mul",
    "mul_scalar",
    "exp",
    "softmax",
    "matmul",
    "sum_dim",
]

FAULTS: list[tuple[str, str]] = [
    *[(f"grad-drop-input:{op}:{i}", f"no gradient reaches operand {i} of {op}") for op in BINARY for i in (0, 1)],
    *[(f"wrong-dim:{op}", f"{op} along another dim of the same extent") for op in DIM_REDUCTIONS],
    *[
        (f"promote-trailing:{op}", f"{op} broadcasts the lower-rank operand with trailing 1s")
        for op in ("add", "mul", "sub", "div")
    ],
    ("lowering:tanh=sigmoid", "tanh computed as sigmoid"),
    ('lowering:relu=leaky_relu{"slope":0.01}', "relu computed as leaky_relu(0.01)"),
    ("value-scale:mean:-0.2", "mean 20% too small"),
    ("value-scale:tanh:1e-3", "tanh off by 1e-3 (relative)"),
    *[(f"grad-scale:{op}:1e-3", f"gradient of {op} off by 1e-3 (relative)") for op in GRAD_SCALE_OPS],
    *[(f"grad-scale-beside-constant:{op}:1e-3", f"gradient of {op} off by 1e-3 only beside a constant input")
      for op in ("mul", "cat")],
    ("grad-sign:tanh", "gradient of tanh with the wrong sign"),
    ("broadcast-grad-scale:1e-3", "gradient of every implicitly broadcast operand off by 1e-3 (the reduction "
     "every broadcasting op shares)"),
    ("grad-drop:sum", "no gradient through sum"),
    *[
        (f"flag-after:{where}", f"is_tracked negated after {where}")
        for where in ("detach", "without_autodiff", "autodiff", "no_grad", "inference_mode", "valid")
    ],
    ("flag-without-autodiff", "without_autodiff stays on the autodiff device"),
    ("detach-like-torch", "detach of a require-grad leaf behaves like PyTorch's"),
]

RESULTS: dict[str, tuple[str, str]] = {}  # fault -> (what, caught by)
FAILED_LINE = re.compile(r"^FAILED (\S+)", re.M)
PROPERTY_NOTE = re.compile(r"^property example=(\d+) kind=(\S+)$")
CHUNK_NOTE = re.compile(r"^campaign chunk=(\d+) program=(\d+) checked=\d+ kind=(\S+)$")


def detection(notes: list[str]) -> str:
    """What the detection log says: the property's first failing example, and the campaign's
    first failing program in index order (each chunk stops at its first), with how many of the
    chunks found something."""
    parts = []
    for line in notes:
        m = PROPERTY_NOTE.match(line)
        if m:
            parts.append(f"property: example {m[1]} ({m[2]})")
    found = [(int(m[2]), m[3], int(m[1])) for m in map(CHUNK_NOTE.match, notes) if m]
    if found:
        k, kind, _ = min(found)
        chunks = {c for _, _, c in found}
        parts.append(f"campaign: program {k + 1} ({kind}), {len(chunks)}/{CHUNKS} chunks")
    return "; ".join(parts)


def _wrapper(tmp: Path, fault: str) -> Path:
    script = tmp / "difftest-burn"
    script.write_text(
        "#!/bin/sh\n"
        f"DIFFTEST_BURN_FAULT={shlex.quote(fault)}\n"
        "export DIFFTEST_BURN_FAULT\n"
        f'exec {shlex.quote(find_binary())} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


@pytest.fixture(scope="module", autouse=True)
def _table() -> Iterator[None]:
    yield
    if not RESULTS:
        return
    print("\n\nDetection power of the default suite (tests/differential/test_property.py + "
          "tests/differential/test_campaign_chunks.py)")
    print(f"{'fault':<40} {'what':<58} first failure")
    for fault, (what, caught) in RESULTS.items():
        print(f"{fault:<40} {what:<58} {caught}")


@pytest.mark.quality
@pytest.mark.parametrize("fault,what", FAULTS, ids=[f for f, _ in FAULTS])
def test_default_suite_fails_against_fault(fault: str, what: str, tmp_path: Path) -> None:
    wrapper = _wrapper(tmp_path, fault)
    version = subprocess.run([str(wrapper), "--version"], capture_output=True, text=True, timeout=60)
    if version.returncode != 0:
        RESULTS[fault] = (what, "not available in this build")
        pytest.skip(f"difftest-burn does not know {fault!r}: {version.stderr.strip()}")
    assert f"fault {fault}" in version.stdout, version.stdout
    log = tmp_path / "detection.log"
    env = dict(os.environ)
    env.update(
        DIFFTEST_BURN=str(wrapper),
        DIFFTEST_NO_SAVE="1",
        DIFFTEST_CORPUS=str(tmp_path / "corpus"),
        DIFFTEST_DETECTION_LOG=str(log),
        HYPOTHESIS_PROFILE="quality",
    )
    # no -x: each chunk stops at its own first finding, so the campaign's first failing program
    # and the number of chunks that fail are known
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *TESTS,
        "-q",
        "-rf",
        "-n",
        "2",
        "-p",
        "no:cacheprovider",
        "-p",
        "tests.quality.noshrink",
    ]
    try:
        run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        RESULTS[fault] = (what, f"NOT CAUGHT (timeout after {TIMEOUT:.0f}s)")
        pytest.fail(f"{fault}: the default suite did not finish within {TIMEOUT:.0f}s")
    failed = FAILED_LINE.findall(run.stdout)
    notes = log.read_text().splitlines() if log.exists() else []
    caught = detection(notes) if failed else "NOT CAUGHT"
    RESULTS[fault] = (what, caught)
    print(f"\n{fault:<40} {caught}")
    assert run.returncode in (0, 1), (
        f"{fault}: pytest exited with {run.returncode}\n{run.stdout[-2000:]}{run.stderr[-3000:]}"
    )
    assert run.returncode != 0 and failed, (
        f"{fault} ({what}): the default suite passed against the faulty build\n{run.stdout[-3000:]}"
    )
    assert notes, f"{fault}: tests failed without a finding (errors?)\n{run.stdout[-3000:]}"


@pytest.mark.quality
def test_no_false_alarms_on_the_correct_build() -> None:
    """The flake check: the default strategy on the correct build finds nothing that a known
    burn bug (difftest/divergences/known_bugs.py) does not explain."""
    worker = BurnWorker()
    worker.start()
    try:
        stats = run_campaign(worker, seed=7, programs=3000)
        triaged = [(v, triage(v, worker)) for v in stats.findings]
    finally:
        worker.close()
    known = Counter(t.known.name for _, t in triaged if t.known is not None)
    print(f"\n{stats.programs} programs in {stats.seconds:.0f}s: {dict(stats.verdicts)}; known bugs: {dict(known)}")
    unexplained = [v for v, t in triaged if t.known is None]
    assert not unexplained, table_report(unexplained[0])
