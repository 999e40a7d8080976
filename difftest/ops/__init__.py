"""The op catalog: one declarative entry per op (catalog.py; what an entry is: spec.py) with its
shape rule (shape_rules.py), attribute and input sampling (sampling.py), domain (domains.py),
tolerance class (tolerance.py), view strides (strides.py), PyTorch and burn spellings
(spelling.py), the PyTorch lowering that evaluates them (lowering.py, the only module here that
imports torch) and the catalog listings (listing.py)."""
