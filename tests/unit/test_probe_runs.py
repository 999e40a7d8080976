"""PyTorch's side of the root probes served by a run of the whole program
(torch_probes.probes_before_backwards, which a campaign's check uses): the same results as a run
of each prefix (torch_probe_grads), and the run's own observation unchanged. PyTorch only."""

from __future__ import annotations

from difftest.exec.torch_probes import ProbeResult, probes_before_backwards, torch_probe_grads
from difftest.oracle.burn_devices import stateful_forwards
from difftest.oracle.probe_run import _ahead_roots
from difftest.oracle.probes import root_probes
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import Backward, Program
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate


def test_a_run_of_the_program_serves_every_backwards_probes_as_runs_of_its_prefixes_do() -> None:
    served_any = 0
    for k in range(60):
        program = generate(RandomChoices(7_000 + k), GenConfig(p_another_backward=0.6, p_training=0.3))
        if stateful_forwards(program):
            continue
        wanted = _ahead_roots(root_probes(program))
        served: dict[int, list[ProbeResult]] = {}
        hooked = run_torch(program, before_backward=probes_before_backwards(program, dict(wanted), served))
        assert repr(hooked) == repr(run_torch(program)), k  # repr: NaN equals NaN
        for index, roots in wanted.items():
            bw = program.statements[index]
            assert isinstance(bw, Backward)
            prefix = Program(program.statements[:index], program.dtype)
            alone = torch_probe_grads(prefix, bw, roots, burn_inference=frozenset())
            if index in served:
                served_any += 1
                assert repr(served[index]) == repr(alone), (k, index)
            else:  # the run failed before this backward: so does the prefix's
                assert hooked.error is not None and hooked.error.index is not None and hooked.error.index < index
                assert all(r == hooked.error for r in alone), (k, index)
    assert served_any > 20
