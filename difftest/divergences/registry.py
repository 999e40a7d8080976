"""Every declared record, of every kind, in one tuple (`difftest rules` lists it)."""

from __future__ import annotations

from difftest.divergences.conventions import CONVENTIONS
from difftest.divergences.knowledge import Knowledge
from difftest.divergences.known_bugs import KNOWN_BUGS
from difftest.divergences.memory_rules import MEMORY_RULES
from difftest.divergences.noops import NOOPS
from difftest.divergences.rules import RULES
from difftest.divergences.running_stats import RUNNING_STAT_CONVENTIONS

KNOWLEDGE: tuple[Knowledge, ...] = (
    *(r.knowledge for r in RULES),
    *(n.knowledge for n in NOOPS),
    *(m.knowledge for m in MEMORY_RULES),
    *(c.knowledge for c in CONVENTIONS),
    *(b.knowledge for b in KNOWN_BUGS),
    *(r.knowledge for r in RUNNING_STAT_CONVENTIONS),
)
