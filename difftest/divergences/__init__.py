"""Declared knowledge, as data: one `Knowledge` record type (knowledge.py) carried by divergences
(rules.py, memory_rules.py), no-op calls (noops.py), conventions at kinks (conventions.py) and
known burn bugs (known_bugs.py); registry.py lists every record (`difftest rules`)."""
