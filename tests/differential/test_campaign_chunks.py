"""A seeded campaign inside the default suite, split into chunks that pytest-xdist spreads.

Program k is `difftest.campaign.program_at(SEED, k)`, i.e. `generate(RandomChoices(SEED *
1_000_003 + k), GenConfig())`, checked with its root probes (difftest/oracle/probe_run.py): a
failure names a program that `difftest fuzz --seed SEED` checks at the same index. Chunk c
checks programs c * PER_CHUNK ... (c + 1) * PER_CHUNK - 1 and fails at its first finding
with the verdict's report (saved to corpus/findings/ like any property failure, unless
DIFFTEST_NO_SAVE=1).

The property (tests/differential/test_property.py) shrinks what it finds; these chunks add breadth at
RandomChoices speed. Together they are what the detection-power suite (tests/quality) runs
against deliberately faulty interpreters.
"""

from __future__ import annotations

import os

import pytest

from difftest.campaign.loop import program_at
from difftest.exec.burn_worker import BurnWorker
from difftest.oracle.probe_run import check_with_probes
from difftest.pytest_plugin import assert_agrees

SEED = 0
CHUNKS = 8
PER_CHUNK = 750
DETECTION_LOG = "DIFFTEST_DETECTION_LOG"  # tests/quality: where to note the first failing program


def program_index(chunk: int, i: int) -> int:
    return chunk * PER_CHUNK + i


@pytest.mark.parametrize("chunk", range(CHUNKS), ids=[f"chunk{c:02d}" for c in range(CHUNKS)])
def test_campaign_chunk(chunk: int, burn_worker: BurnWorker) -> None:
    for i in range(PER_CHUNK):
        k = program_index(chunk, i)
        program = program_at(SEED, k)
        # as `difftest fuzz` checks it, but with probe outcomes only: screening the probes'
        # gradients doubles a chunk's time (benchmarks/throughput.py), and what it adds is tested
        # by tests/differential/test_root_probes.py and used by every `difftest fuzz` campaign
        verdict, probed = check_with_probes(program, burn_worker, values=False)
        # every verdict: its dismissals are counted for the session summary; a finding fails
        # (one a known bug explains does not, nor is it the detection log's first failing program)
        probe = f", {probed.probe.describe()}" if probed.probe is not None else ""
        try:
            assert_agrees(verdict, f"tests/differential/test_campaign_chunks.py (seed {SEED}, program {k}{probe})",
                          burn_worker)
        except AssertionError:
            log = os.environ.get(DETECTION_LOG)
            if log:
                with open(log, "a") as f:
                    f.write(f"campaign chunk={chunk} program={k} checked={i + 1} kind={verdict.kind}\n")
            raise
