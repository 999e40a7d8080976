"""A campaign counts dismissals by kind (campaign/loop.dismissals): without the numbers and
statement ids of each element's own reason, an ill-conditioned one under the op whose kink
reached it, so that the summary's line has a handful of entries after any number of programs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from difftest.campaign.loop import dismissals
from difftest.exec.burn_worker import BurnWorker
from difftest.oracle.check import check
from difftest.program.jsonio import program_from_dict

DATA = Path(__file__).parent / "data"


def test_dismissals_are_counted_by_kind(burn_worker: BurnWorker) -> None:
    program = program_from_dict(json.loads((DATA / "remainder-bf16-rounded-kink-limits.json").read_text()))
    verdict = check(program, burn_worker)
    assert verdict.ok and verdict.dismissals, verdict.report()
    keys = dismissals(verdict)
    assert "ill-conditioned: near a kink of remainder" in keys, keys
    # the element's own reason names the statement and its limits; the key does not
    assert any("statement" in str(m.evidence.get("reason", "")) for m in verdict.dismissals)
    assert not any(re.search(r"statement|\d\.\d", k) for k in keys), keys
