"""Where burn holds a value, when an executor of the other framework needs to follow burn's
device-dependent behaviour (record batch-norm-trains-on-autodiff-device-only). Torch-free."""

from __future__ import annotations

from difftest.program.ir import Apply, Program, root_module


def batch_norm_plain_inputs(program: Program) -> frozenset[str]:
    """The values a batch_norm forward takes that burn holds off its autodiff device (the
    model's prediction): there burn takes the inference path whatever the module's mode."""
    by_id = program.by_id()
    inputs = {st.input for st in program.statements if isinstance(st, Apply)
              and root_module(program, st.module, by_id).module == "batch_norm"}
    if not inputs:
        return frozenset()
    from difftest.oracle.model import predict  # the model imports the executors' modules

    states = predict(program).burn.states
    return frozenset(x for x in inputs if x in states and not getattr(states[x], "is_autodiff", True))
