"""Where burn computes differently by state the other framework does not have, when an executor of
the other framework needs to follow it: burn's BatchNorm takes its inference path for an input
off the autodiff device (record batch-norm-trains-on-autodiff-device-only) and for a module whose
training flag freeze() cleared (record batch-norm-freeze-survives-train). Torch-free."""

from __future__ import annotations

from difftest.oracle.model import predict
from difftest.program.ir import Apply, Program, root_module
from difftest.program.modules import module_kind
from difftest.program.recent import remembered


@remembered
def batch_norm_inference_applies(program: Program) -> frozenset[str]:
    """The batch_norm forwards (apply ids; the forwards of a kind with running state) for which
    burn takes the inference path whatever PyTorch's mode says, by the model's prediction: the
    input is off burn's autodiff device, or the handle's burn training flag is off (freeze()
    survived a train())."""
    return frozenset(i for i, torch_training in _burn_inference(program) if torch_training)


def burn_inference_forwards(program: Program) -> frozenset[str]:
    """The forwards of a kind with running state for which burn takes its inference path,
    whatever PyTorch's mode: the input off the autodiff device, or burn's training flag off."""
    return frozenset(i for i, _ in _burn_inference(program))


@remembered
def _burn_inference(program: Program) -> tuple[tuple[str, bool], ...]:
    """(apply id, whether PyTorch's module is in training mode) of each forward of a kind with
    running state that burn runs on its inference path, by the model's prediction."""
    applies = stateful_forwards(program)
    if not applies:
        return ()
    burn = predict(program).burn
    out: list[tuple[str, bool]] = []
    for st in applies:
        state = burn.states.get(st.input)
        module = burn.modules.get(st.module)
        off_device = state is not None and not getattr(state, "is_autodiff", True)
        flag_off = module is not None and not module.burn_training
        if off_device or flag_off:
            out.append((st.id, module is None or module.training))
    return tuple(out)


def stateful_forwards(program: Program) -> list[Apply]:
    """The forwards of a kind with running state (batch_norm): without any, no forward of the
    program or of a prefix of it follows burn's inference path."""
    by_id = program.by_id()
    return [st for st in program.statements if isinstance(st, Apply)
            and module_kind(root_module(program, st.module, by_id).module).stateful]
