"""Variable names of the reproducers: one per statement id, valid in Python and Rust."""

from __future__ import annotations

import builtins
import keyword

from difftest.ops.catalog import OPS
from difftest.ops.spelling import burn_locals
from difftest.program.ir import Program

RUST_KEYWORDS = frozenset(
    "as break const continue crate else enum extern false fn for if impl in let loop match mod move "
    "mut pub ref return self Self static struct super trait true type unsafe use where while async "
    "await dyn abstract become box do final macro override priv typeof unsized virtual yield try gen "
    "union".split()
)
# Names the emitted code itself uses (helpers, types, block locals).
EMITTER_NAMES = frozenset(
    "torch F sys t e show show_grad fail device plain input lhs rhs indices mask Tensor TensorData Device "
    "Int Bool Shape Slice Gradients activation burn std core alloc f32 f64 i64 usize bool vec println "
    "assert _ copy_module show_param show_grad_param Linear Dropout DropoutConfig Param Module nn Some None "
    "raw".split()
)
# the names the catalog's burn templates bind in their blocks
TEMPLATE_LOCALS = frozenset(name for op in OPS for name in burn_locals(op.burn))
RESERVED = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | RUST_KEYWORDS | EMITTER_NAMES | TEMPLATE_LOCALS


def variable_names(program: Program) -> dict[str, str]:
    """A variable name per statement id, valid in Python and Rust: the id itself unless it is a
    keyword or a name the emitted code uses, then the id with trailing underscores."""
    ids = {s.id for s in program.statements}
    taken: set[str] = set()
    out: dict[str, str] = {}
    for st in program.statements:
        name = st.id
        while name in RESERVED or name in taken or (name != st.id and name in ids):
            name += "_"
        taken.add(name)
        out[st.id] = name
    return out


def count(program: Program) -> str:
    return f"({len(program)} statements)"
