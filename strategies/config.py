"""The generator's knobs (`GenConfig`) and named profiles (`difftest fuzz --profile`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from difftest.choices import Choices
from difftest.ops import catalog
from difftest.ops.catalog import OpSpec
from difftest.ops.dtype_support import supported
from difftest.program.dtypes import FLOAT_DTYPES, check_dtype
from difftest.program.ir import (
    MAX_RANK,
)
from difftest.strategies.choices import weighted

DEFAULT_KNOWN_SITES = 0.5  # GenConfig.p_known_site's default (`difftest fuzz --known-sites`)


@dataclass(frozen=True)
class GenConfig:
    """Knobs of the default strategy (all keyword-only in `programs()`)."""

    ops: tuple[str, ...] | None = None  # restrict to these ops (None: the whole catalog)
    weights: dict[str, float] = field(default_factory=dict)  # per-op weight, default 1
    max_statements: int = 10
    max_leaves: int = 6
    max_dim: int = 4
    max_rank: int = MAX_RANK
    # after each statement another one (up to max_statements): with p_continue_short while the
    # program has fewer than `short_ops` ops (few programs end before their ops), else p_continue
    p_continue: float = 0.85
    p_continue_short: float = 0.98
    short_ops: int = 5
    p_backward: float = 0.95
    # the backward's root: a tracked op result (one that depends on a require-grad leaf through
    # recorded ops), the deepest first, with this probability when there is one; else any value
    p_tracked_root: float = 0.95
    # an op's inputs: a tracked value, with this probability when there is one of the right
    # shape; else any value
    p_tracked_input: float = 0.9
    p_deepest_input: float = 0.75  # of those tracked inputs, the deepest one (else any)
    p_deepest_root: float = 0.9  # of the tracked roots, the deepest one (else any)
    op_attempts: int = 4  # a drawn op is tried on this many inputs before it is given up
    p_plain_leaf: float = 0.08
    p_require_grad: float = 0.85
    p_plain_require_grad: float = 0.05  # asks burn to panic (rule plain-leaf-require-grad)
    region_weights: tuple[float, float, float] = (10.0, 1.5, 1.0)  # grad, no_grad, inference_mode
    kind_weights: tuple[float, float, float] = (10.0, 2.0, 1.0)  # op, cut, leaf
    cut_weights: tuple[float, float, float] = (3.0, 2.0, 1.0)  # detach, without_autodiff, autodiff
    module_weight: float = 0.5  # next to kind_weights: an nn module (built, transformed, used)
    # Each module kind's weight in the module draw (module_draws.py: the kind first, then a value
    # it fits; dropout's is 1). Every kind about as often as the others, linear (the one sessions
    # train) more; a kind no value fits gives its draw to linear or dropout.
    linear_weight: float = 3.0
    norm_weight: float = 1.0  # each normalisation: batch_norm, layer_norm, rms_norm, group_norm
    conv_weight: float = 1.0  # conv2d, on an image [N, C, H, W]
    embedding_weight: float = 1.0  # embedding, its indices a leaf of its own
    prelu_weight: float = 1.0  # prelu, on a value off its kink at 0
    dropout_p_weights: tuple[float, float, float] = (1.0, 2.0, 0.5)  # p = 0, 0.5, 1 (burn panics)
    transform_weights: tuple[float, ...] = (2.0, 2.0, 1.0, 1.0, 1.0)  # valid train no_grad freeze unfreeze
    # a valid() module's forward of a value on the autodiff device takes it off first (a
    # without_autodiff cut, as inference feeds a model plain tensors): only there does burn run
    # the inner backend's own module kernels (Flex's fused layer_norm), not autodiff's
    p_valid_inner: float = 0.5
    avoid_known_bugs: bool = True  # skip triggers listed in difftest/divergences/known_bugs.py
    # ...except with this probability at each trigger: the statement is kept and the known bug's
    # site stays under test for new bugs there (its record explains the known one; a different
    # error at the site is news). 0: every trigger avoided (no choice drawn for it), a blind spot:
    # at 0.5 a gradient fault in float64 div_scalar is found in 209 of 400 programs, at 0 in 1
    p_known_site: float = DEFAULT_KNOWN_SITES
    # sessions (strategies/sessions.py): after a backward, another forward and backward with
    # this probability (up to max_backwards); each later forward has up to segment_statements
    max_backwards: int = 4
    p_another_backward: float = 0.3
    segment_statements: int = 5
    p_grad_read: float = 0.5  # after a backward that is not the last: read 1 or 2 gradients
    p_zero_grad: float = 0.4
    p_retain_graph: float = 0.05
    p_reuse_consumed: float = 0.1  # an input from a graph an earlier backward consumed
    p_consumed_root: float = 0.1  # a later backward's root may reach a consumed graph
    p_leaf_root: float = 0.03  # a backward of a require-grad leaf itself
    p_training: float = 0.06  # a training loop (Linear, loss, backward, SGD step; 1 to 3 times)
    # the program's dtype (difftest/program/dtypes.py): drawn with these weights over FLOAT_DTYPES
    # (float32, float64, float16, bfloat16), or always `dtype` when given; in a dtype other than
    # float32 only the ops the catalog's dtype table supports in it are drawn (ops/dtype_support.py)
    dtype_weights: tuple[float, float, float, float] = (80.0, 10.0, 5.0, 5.0)
    dtype: str | None = None
    only_supported: bool = True  # False: draw every op in any dtype (the dtype-support measurement)
    # boundary values (strategies/boundary.py): this share of leaves gets some elements from the
    # edges of the value space (0, -0.0, ties, domain edges and kinks, tiny and subnormal
    # magnitudes), and ops accept inputs exactly at their kinks; off: continuous leaves only
    boundary: bool = True
    p_boundary_leaf: float = 0.15
    # of the calls of an op whose domain lists kink points (relu's 0, clamp's grid), the share
    # whose first input is a fresh kink leaf, elements on those points (boundary.kink_options).
    # Off by default (profile "kinks": 0.25): at 0.25 the five no-false-alarm campaigns are clean
    # (100,000 programs), but the detection tests were measured on the programs without them
    # (docs/coverage.md#boundary-values-the-value-space); at 0 no choice is drawn, so every
    # seed's programs are the ones before kink leaves existed
    p_kink_leaf: float = 0.0
    # the burn backends the programs are for (`difftest fuzz --backend`): a call one of them
    # refuses for its attribute values (a cast to half precision on NdArray:
    # ops/backend_support.py) is redrawn, as a call outside the op's domain is
    backends: tuple[str, ...] = ()
    # burn's gradient checkpointing (docs/format.md#gradient-checkpointing): this share of
    # programs runs on an autodiff device with the balanced strategy, which recomputes the
    # outputs of memory-bound ops in the backward (half of burn-autodiff's code is that
    # strategy's instance). Drawn after the statements, so a program's statements do not
    # depend on it
    p_checkpointing: float = 0.25

    @staticmethod
    def profile(name: str, **kw: object) -> GenConfig:
        """The GenConfig of a named profile (`difftest fuzz --profile`), with `kw` on top. Profiles
        compose with "+" ("sessions+checkpointing"), each part's settings over the ones before."""
        settings: dict[str, object] = {}
        for part in name.split("+"):
            if part not in PROFILES:
                raise ValueError(f"unknown profile {part!r}; known: {', '.join(PROFILES)} (combined with +)")
            settings.update(PROFILES[part])
        return GenConfig(**{**settings, **kw})  # type: ignore[arg-type]

    def op_specs(self, dtype: str = "float32") -> list[OpSpec]:
        return list(_op_specs(None if self.ops is None else tuple(self.ops), self.only_supported, dtype))

    def draw_dtype(self, c: Choices) -> str:
        if self.dtype is not None:
            return check_dtype(self.dtype, "GenConfig.dtype")
        dtype = weighted(c, FLOAT_DTYPES, self.dtype_weights)
        if self.ops is not None and not any(supported(op, dtype) for op in self.ops):
            return "float32"  # none of the restricted ops is drawn in that dtype
        return dtype


# Named distributions for campaigns: "sessions" makes most programs sessions (several backwards,
# gradient reads, training loops), for campaigns about graph lifetimes and optimizer steps.
# "float64", "float16", "bfloat16" (`difftest fuzz --dtype`): the default distribution with every
# program in that dtype. "no-half": the default distribution without float16 and bfloat16 (a
# campaign on a backend without half precision: difftest/ops/backend_support.py). "continuous": the
# default distribution without boundary values (every leaf element continuous, every op input
# off its kinks), the distribution before boundary values existed. "checkpointing": every program
# on burn's balanced gradient checkpointing; "no-checkpointing": none (the programs, statement for
# statement, and the verdicts of the distribution before checkpointing was drawn). "kinks": a
# quarter of the calls of an op with kink points (relu's 0, hard_sigmoid's +-3) on a fresh input
# with elements on them (strategies/boundary.py), so a changed convention there meets a gradient.
PROFILES: dict[str, dict[str, object]] = {
    "default": {},
    "no-half": {"dtype_weights": (80.0, 10.0, 0.0, 0.0)},
    "continuous": {"boundary": False},
    "kinks": {"p_kink_leaf": 0.25},
    "sessions": {"p_another_backward": 0.75, "p_training": 0.3, "p_grad_read": 0.7},
    "checkpointing": {"p_checkpointing": 1.0},
    "no-checkpointing": {"p_checkpointing": 0.0},
    "float32": {"dtype": "float32"},
    "float64": {"dtype": "float64"},
    "float16": {"dtype": "float16"},
    "bfloat16": {"dtype": "bfloat16"},
}
# the profiles `--profile` offers (a dtype's is `--dtype`)
CLI_PROFILES = tuple(name for name in PROFILES if name not in FLOAT_DTYPES)


@functools.lru_cache(maxsize=64)
def _op_specs(ops: tuple[str, ...] | None, only_supported: bool, dtype: str) -> tuple[OpSpec, ...]:
    """The catalog entries a generator draws from in `dtype` (GenConfig.op_specs; the catalog
    is fixed at import, so each answer is computed once per process)."""
    names = ops if ops is not None else tuple(catalog.CATALOG)
    unknown = [n for n in names if n not in catalog.CATALOG]
    if unknown:
        raise ValueError(f"unknown op(s) {unknown}; `difftest ops` lists the catalog")
    specs = [catalog.CATALOG[n] for n in names if supported(n, dtype) or not only_supported]
    if names and not specs:
        raise ValueError(f"none of the ops {list(names)} runs in {dtype} (difftest/ops/dtype_support.py)")
    return tuple(specs)
