"""The generator's value-level trigger of the known bug minmax-update-tie-grad-to-both: a max / min
update of two tracked values that a gradient of each carries back to one tracked source, writing
a value equal to the destination element it lands on (the tie whose gradient burn counts twice).
The record's own trigger is the update of a value by itself; this one is the same tie reached
through other ops (a gather, a reshape, a product over a size-1 dim). The generator avoids it but
for GenConfig.p_known_site of the times, as it avoids every known trigger."""

from __future__ import annotations

from difftest.divergences.bug_sites import MINMAX_UPDATES, written_pairs
from difftest.oracle.pytorch import run
from difftest.program.ir import OpCall, Program, gradient_sources
from difftest.strategies.choices import RandomChoices
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate

# ops that keep a value's elements (or equal ones), so that updates often tie with their own source
OPS = ("select_max", "scatter_min", "scatter_nd_max", "gather_nd", "reshape", "flip", "gather_argmax", "exp")


def _one_source_ties(p: Program) -> int:
    obs = run(p)
    table = p.by_id()
    n = 0
    for st in p.statements:
        if not isinstance(st, OpCall) or st.op not in MINMAX_UPDATES or st.inputs[0] == st.inputs[1]:
            continue
        if st.region != "grad":
            continue
        a, b = (obs.value(x) for x in st.inputs)
        if a is None or b is None or a.value is None or b.value is None:
            continue
        if not (a.flags.get("requires_grad") and b.flags.get("requires_grad")):
            continue
        tracked = {x for x in table if (v := obs.value(x)) is not None and v.flags.get("requires_grad")}
        if not gradient_sources(table, st.inputs[0]) & gradient_sources(table, st.inputs[1]) & tracked:
            continue
        pairs = written_pairs(st, [a.value.shape, b.value.shape])
        n += any(a.value.data[i] == b.value.data[j] for i, j in pairs)
    return n


def _count(p_known_site: float, programs: int = 400) -> int:
    cfg = GenConfig.profile("default", ops=OPS, p_known_site=p_known_site)
    return sum(_one_source_ties(generate(RandomChoices(k), cfg)) for k in range(programs))


def test_the_generator_keeps_one_source_ties_at_max_min_updates_only_as_known_sites() -> None:
    assert _count(1.0) > 0  # the trigger is reachable with these ops
    assert _count(0.0) == 0
