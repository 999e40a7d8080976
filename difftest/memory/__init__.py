"""The memory differential: graphs retained until backward (docs/semantics.md#golden-memory).

A PyTorch graph dies with its output; burn keeps the saved tensors of every recorded forward in
a process-wide graph until the next `backward()` (the memory rule graph-retained-until-backward).
This package measures that in both frameworks, one fresh process per measurement, and checks
each observation against what the model predicts: `model` (bytes saved and retained, the
expectation per reported row), `server` (the measuring processes), `table` (the seed's table),
`checks` (generated checks), `session` (the training-session experiment: RSS flat over SGD
steps, the seed's drop/keep rows within a session), `experiment` (the corpus case type), `cli`
(`difftest memory`).
"""
