"""The op catalog: one declarative entry per op (metadata, domains, tolerance classes, strides)
and its PyTorch lowering."""
