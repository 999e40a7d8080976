"""`batch_norm` over the channels (dim 1) of [N, C, *]: PyTorch's weight/bias are burn's
gamma/beta, running_mean/running_var its running statistics (buffers).

burn-nn 0.22.1 norm/batch.rs: `forward<const D>` asserts [_, num_features, ..] (rank >= 2);
train mode normalises with the batch statistics and updates the running ones (only on the
autodiff device), eval mode uses the running ones. The PyTorch side is BurnBatchNorm, which
follows burn's running-state conventions (difftest/divergences/running_stats.py): the
executor's class (difftest/exec/torch_modules.py) and, in reproducer scripts, the standalone
one below; both take (num_features, epsilon, momentum, dtype)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from difftest.program.literals import burn_vector, py_float, rust_f64
from difftest.program.modules.kind import (
    AttrSpec,
    ModuleError,
    ModuleKind,
    TensorSpec,
    features,
    in_unit,
    norm_half,
    positive_finite,
    positive_int,
)
from difftest.program.parts import Call, Part
from difftest.program.shapes import Shape

if TYPE_CHECKING:
    from difftest.program.statements import Module


def _out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    c = attrs["num_features"]
    if x[1] != c:
        raise ModuleError(f"batch_norm with num_features = {c} applied to an input of shape {list(x)} "
                          f"(dim 1, the channels, must be {c})")
    return x


def _parts(call: Call) -> tuple[Part, ...] | None:
    # burn-backend 0.22.1 src/backend/ops/modules/base.rs, ModuleOps::batch_norm (burn-autodiff
    # does not override it; the training path, batch_norm_train, is a node of its own): gamma,
    # beta, the running mean and variance reshaped to [1, C, 1, ...], then
    # (x - mean) / sqrt(variance + epsilon) * gamma + beta
    if not call.inference:
        return None
    shape = [1] * len(call.shapes[0])
    shape[1] = call.shapes[0][1]
    return (Part("reshape", ("param:weight",), {"shape": shape}), Part("reshape", ("param:bias",), {"shape": shape}),
            Part("reshape", ("buffer:running_mean",), {"shape": shape}),
            Part("reshape", ("buffer:running_var",), {"shape": shape}),
            Part("add_scalar", ("p3",), {"scalar": call.attrs["epsilon"]}), Part("sqrt", ("p4",)),
            Part("sub", (0, "p2")), Part("div", ("p6", "p5")), Part("mul", ("p7", "p0")), Part("add", ("p8", "p1")))


def _pytorch(st: Module, dtype: str) -> str:
    a = st.attrs
    return f"BurnBatchNorm({a['num_features']}, {py_float(a['epsilon'])}, {py_float(a['momentum'])}{dtype})"


def _rust(st: Module, var: str, dtype: str) -> str:
    a = st.attrs
    lines = [f"let mut {var} = BatchNormConfig::new({a['num_features']}).with_epsilon({rust_f64(a['epsilon'])})"
             f".with_momentum({rust_f64(a['momentum'])}).init(&device);",
             "// PyTorch's weight/bias are burn's gamma/beta"]
    for name, t in st.tensors().items():
        field = {"weight": "gamma", "bias": "beta"}.get(name, name)
        wrapper = "RunningState::new" if name.startswith("running_") else "Param::from_tensor"
        lines.append(f"{var}.{field} = {wrapper}({burn_vector(t.data, dtype)});")
    return "\n".join(lines)


# The reproducer script's BurnBatchNorm: difftest's executor reports the running statistics
# under burn's declared convention (the biased batch variance in running_var; PyTorch's
# nn.BatchNorm takes the unbiased one) and keeps burn's pending update.
_SCRIPT_CLASS = '''

class BurnBatchNorm(torch.nn.Module):
    """F.batch_norm; a train-mode forward's running-statistics update is burn's (biased batch
    variance) and stays pending, as in burn's RunningState, until a sync: the next train-mode
    forward, a read (value_sync), valid() or train(); eval-mode forwards read the lagging value."""

    def __init__(self, n, epsilon, momentum, dtype=torch.float32):
        super().__init__()
        self.epsilon, self.momentum = epsilon, momentum
        self.weight = torch.nn.Parameter(torch.ones(n, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.zeros(n, dtype=dtype))
        self.register_buffer("running_mean", torch.zeros(n, dtype=dtype))
        self.register_buffer("running_var", torch.ones(n, dtype=dtype))
        self.pending = {}

    def sync(self, names=("running_mean", "running_var")):
        for name in names:
            new = self.pending.pop(name, None)
            if new is not None:
                with torch.no_grad():
                    getattr(self, name).copy_(new)

    def read(self, name):
        self.sync((name,))
        return getattr(self, name).clone()  # burn's read is a tensor of its own

    def forward(self, x, burn_inference=False):
        # burn trains only on an input on its autodiff device (burn_inference: one off it)
        if not self.training or burn_inference:
            # a snapshot: a later sync updates the buffers in place
            mean, var = self.running_mean.clone(), self.running_var.clone()
            return torch.nn.functional.batch_norm(x, mean, var, self.weight, self.bias,
                                                  training=False, eps=self.epsilon)
        out = torch.nn.functional.batch_norm(x, None, None, self.weight, self.bias, training=True, eps=self.epsilon)
        self.sync()
        with torch.no_grad():
            x = x.detach()
            dims = [d for d in range(x.dim()) if d != 1]
            m = self.momentum
            mean = (1.0 - m) * self.running_mean + m * x.mean(dim=dims)
            var = (1.0 - m) * self.running_var + m * x.var(dim=dims, unbiased=False)
        self.pending.update(running_mean=mean, running_var=var)
        return out
'''

BATCH_NORM = ModuleKind(
    "batch_norm",
    (AttrSpec("num_features", int, positive_int("num_features")),
     AttrSpec("epsilon", float, positive_finite("epsilon")),
     AttrSpec("momentum", float, in_unit("momentum"))),
    (TensorSpec("weight"), TensorSpec("bias"), TensorSpec("running_mean", buffer=True),
     TensorSpec("running_var", buffer=True)),
    features("num_features"), input_ranks=(2, 3, 4), out_shape=_out, pytorch=_pytorch, rust=_rust,
    burn_fields={"weight": "gamma.val()", "bias": "beta.val()", "running_mean": "running_mean.value_sync()",
                 "running_var": "running_var.value_sync()"},
    burn_uses=frozenset({"Module", "Param", "RunningState", "BatchNormConfig"}), noise="norm:channels",
    imprecise=norm_half("batch_norm"), pytorch_helper=_SCRIPT_CLASS, stateful=True, saves_input=True,
    layout="batch_norm", composed=_parts)
