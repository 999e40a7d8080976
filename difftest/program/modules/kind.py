"""What a module kind declares (`ModuleKind`): one entry per `module` statement kind, as the op
catalog has one per op. An entry holds, in one place:

* the statement's configuration attributes and inline tensors (parameters and buffers, in
  PyTorch's names and layouts, with the shapes the configuration gives them), the input ranks
  its forward accepts and its output shape (the IR's checks, JSON, the schema read these);
* its PyTorch constructor as source text (`pytorch`): the executor evaluates it
  (difftest/exec/torch_modules.py) and the PyTorch reproducer prints it, then both copy the
  statement's tensors into it by name;
* its burn spelling (`rust`, `burn_fields`, `burn_uses`): what the Rust reproducer prints to
  build it, read a tensor and import;
* how the noise model sees its forward (`noise`, difftest/oracle/sites.py);
* where it is not comparable or does not run (`imprecise`, `unsupported`: read by
  difftest/ops/dtype_support.py).

The generator's fit of each kind (where it fits, what it draws) is the one part elsewhere:
strategies/module_fits.py, one entry per kind there too (it draws with the conv2d op's sampler
and reads values). The burn side of a kind is its file in rust/src/modules/.

Torch-free: entries are data and pure functions of the statement (difftest.program only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from difftest.program.parts import Composition
from difftest.program.shapes import Shape

if TYPE_CHECKING:
    from difftest.program.statements import Module

# the transforms whose handle shares its input's running state (burn: a clone shares its
# RunningState: no_grad, freeze, unfreeze; valid() and train() sync it, then copy it:
# rust/src/batch_norm_evidence.rs)
SHARES_BUFFERS_ACROSS = ("no_grad", "freeze", "unfreeze")

# how the noise model sees a kind's forward (difftest/oracle/sites.py): as a Linear (a dot
# product over `in` plus the bias), as the catalog op `as_op:<op>` on the input (and the
# module's parameters), as a normalisation whose affine parameters scale the channels (dim 1)
# or the last dim, or as exact (it rounds nothing: dropout)
NOISE_CLASSES = ("linear", "as_op:", "norm:channels", "norm:last", "exact")


class ModuleError(ValueError):
    """A module statement or a forward that does not fit its kind (the message says what)."""


@dataclass(frozen=True)
class AttrSpec:
    """A configuration attribute, written as a top-level field of the module statement."""

    name: str
    kind: type  # float, int, or list (of ints, one per spatial dim: conv2d)
    check: Callable[[Any], str | None]  # an error message, or None when the value is fine


@dataclass(frozen=True)
class TensorSpec:
    """A parameter (require-grad, stepped by optimizers) or a buffer (running state: not
    require-grad, updated by train-mode forwards), inline in the module statement."""

    name: str
    buffer: bool = False
    optional: bool = False  # may be `null` (JSON) / None (IR)
    layout: str = ""  # PyTorch's layout of a tensor of rank > 1 (the reproducer's comment)


Shapes = Callable[[dict[str, Any], dict[str, Shape]], dict[str, Shape]]
OutShape = Callable[[dict[str, Any], dict[str, Shape], Shape], Shape]


@dataclass(frozen=True)
class ModuleKind:
    name: str
    attrs: tuple[AttrSpec, ...]
    tensors: tuple[TensorSpec, ...]
    # the shape each tensor must have, from the attributes and the tensors given (Linear's
    # sizes are its weight's, as the format has always had them)
    shapes: Shapes
    input_ranks: tuple[int, ...]
    # the forward's output shape for an input shape (raises ModuleError with the reason)
    out_shape: OutShape
    # PyTorch: the constructor's source for a statement; `dtype` is the text of its dtype
    # keyword argument (", dtype=torch.float64"; empty for the default dtype), which a kind
    # whose module holds no tensors leaves out. Evaluated with `torch`, `F` and the executor's
    # own classes (BurnBatchNorm) in scope; the statement's tensors are then copied in by name
    pytorch: Callable[[Module, str], str]
    # burn: the Rust statements that bind the module to `var` (`let …;`, a program of `dtype`);
    # literals and tensors spelled with difftest/program/literals.py
    rust: Callable[[Module, str, str], str]
    # burn's accessor of each tensor, from the module (`gamma.val()`, `running_mean.value_sync()`)
    burn_fields: Mapping[str, str] = field(default_factory=dict)
    # the names the Rust statements use from burn::module and burn::nn
    burn_uses: frozenset[str] = frozenset()
    noise: str = "exact"  # one of NOISE_CLASSES (`as_op:` with the op's name)
    # dtype -> why the generator does not draw the kind there: it runs, but the noise model
    # cannot bound the difference (`imprecise`), or it does not run (`unsupported`, measured)
    imprecise: Mapping[str, str] = field(default_factory=dict)
    unsupported: Mapping[str, str] = field(default_factory=dict)
    # Python source a reproducer script defines before it builds the kind (a class its
    # constructor names; the executor has its own, difftest/exec/torch_modules.py), or ""
    pytorch_helper: str = ""
    # the statement as `difftest show` writes it (None: `kind(attr=…) tensor=…`)
    text: Callable[[Module], str] | None = None
    stateful: bool = False  # train-mode forwards update buffers (running statistics)
    steppable: bool = False  # optimizer steps act on it (rust/src/optim.rs)
    saves_input: bool = False  # its backward saves the input itself, whatever needs grad (an inference
    # input cannot be saved); rms_norm (a composite in PyTorch) saves intermediates instead
    burn_transposed: tuple[str, ...] = ()  # parameters burn stores transposed (rust/src/modules/)
    # its forward draws random numbers (dropout): both executors and reproducers seed before
    # each forward (PyTorch: torch.manual_seed(0); burn: the device's seed, as difftest-burn does)
    random: bool = False
    # how PyTorch's forward lays out its result, which decides whether a reshape of it is a view
    # or a copy (ops/strides.MODULE_LAYOUTS): "contiguous"; "elementwise" (prelu, dropout's input
    # * mask: a transposed input gives a transposed result); "memory_format" (a channels-last
    # 4-d input gives a channels-last result); "batch_norm" (that, by batch_norm's own test)
    layout: str = "contiguous"
    # the forward's input is a tensor of indices, not a value it differentiates (embedding): it
    # must be a leaf that does not require grad, of integral entries in [0, index_bound) (see
    # check_indices); burn converts it with `.int()`, PyTorch with `.long()`
    index_bound: Callable[[dict[str, Shape]], int] | None = None
    # how burn builds the forward from catalog ops where it has no autodiff node for it
    # (program/parts.py; the parameters are `param:<name>` inputs): the localiser names the part
    # at fault where the forward fails as its parts do (findings/composed.py)
    composed: Composition | None = None

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors if not t.buffer)

    @property
    def buffers(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors if t.buffer)

    def tensor(self, name: str) -> TensorSpec | None:
        return next((t for t in self.tensors if t.name == name), None)

    def is_buffer(self, name: str) -> bool:
        t = self.tensor(name)
        return t is not None and t.buffer

    @property
    def noise_op(self) -> str | None:
        """The catalog op the noise model sees the forward as (`as_op:<op>`), or None."""
        return self.noise.removeprefix("as_op:") if self.noise.startswith("as_op:") else None


# ---------------------------------------------------------------- attribute checks

def in_unit(name: str) -> Callable[[Any], str | None]:
    def check(x: Any) -> str | None:
        return None if isinstance(x, float) and 0.0 <= x <= 1.0 else f"{name} = {x!r} is outside [0, 1]"
    return check


def positive_finite(name: str) -> Callable[[Any], str | None]:
    def check(x: Any) -> str | None:
        ok = isinstance(x, float) and math.isfinite(x) and x > 0
        return None if ok else f"{name} = {x!r} must be finite and > 0"
    return check


def positive_int(name: str) -> Callable[[Any], str | None]:
    def check(x: Any) -> str | None:
        ok = isinstance(x, int) and not isinstance(x, bool) and x >= 1
        return None if ok else f"{name} = {x!r} must be an integer >= 1"
    return check


def int_pair(name: str, least: int) -> Callable[[Any], str | None]:
    def check(x: Any) -> str | None:
        ok = isinstance(x, list) and len(x) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= least for v in x)
        return None if ok else f"{name} = {x!r} must be 2 integers >= {least} (one per spatial dim)"
    return check


# ---------------------------------------------------------------- shared shapes

def same_shape(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
    return x


def features(attr: str) -> Shapes:
    """Every tensor is [attrs[attr]]."""
    def shapes(attrs: dict[str, Any], given: dict[str, Shape]) -> dict[str, Shape]:
        n = attrs[attr]
        return {name: (n,) for name in ("weight", "bias", "running_mean", "running_var")}
    return shapes


def matrix(name: str, layout: str) -> Callable[[dict[str, Shape]], Shape]:
    """The given tensor `name`'s shape, checked to be a matrix with dims >= 1 (its sizes are the
    kind's: linear, embedding)."""
    def shape(given: dict[str, Shape]) -> Shape:
        w = given.get(name)
        if w is None or len(w) != 2 or any(d < 1 for d in w):
            raise ModuleError(f"{name} shape {list(w) if w else None} is not {layout} with dims >= 1")
        return w
    return shape


# normalisation kinds in half precision: PyTorch CPU normalises half tensors with float32
# intermediates (opmath), burn-flex in the half dtype; the normalisation noise model
# (oracle/noise.py) measures PyTorch's own kernels and does not see it
_NORM_HALF = ("PyTorch CPU computes {k} of {d} tensors with float32 intermediates (opmath); burn computes "
              "in {d}; the normalisation noise model measures PyTorch's own forwards and cannot bound the "
              "difference, so the generator builds no {k} in {d} programs (found when dtypes and module "
              "kinds met, tests/differential/test_dtype_support.py, float16: the gradient of a leaf through "
              "a layer_norm, PyTorch -0.18042, burn -0.18774, float64 -0.18769)")


def last_dim_is(kind: str, attr: str) -> Callable[[dict[str, Any], dict[str, Shape], Shape], Shape]:
    """The output shape of a forward over the last dim (layer_norm, rms_norm): the input's, whose
    last dim must be attrs[attr]."""
    def out(attrs: dict[str, Any], shapes: dict[str, Shape], x: Shape) -> Shape:
        d = attrs[attr]
        if x[-1] != d:
            raise ModuleError(f"{kind} with {attr} = {d} applied to an input of shape {list(x)} "
                              f"(the last dim must be {d})")
        return x
    return out


def norm_half(kind: str) -> dict[str, str]:
    """A normalisation's `imprecise` entry: float16 and bfloat16."""
    return {d: _NORM_HALF.format(k=kind, d=d) for d in ("float16", "bfloat16")}
