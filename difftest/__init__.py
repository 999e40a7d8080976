"""difftest: property-based differential testing of burn's autodiff against PyTorch.

The public API is three things: `difftest.check(program, worker)` (one program through PyTorch
and a `difftest-burn` worker, judged against the semantic model: a `Verdict`), the strategy
`difftest.strategies.programs(...)`, and the pytest plugin (`difftest.pytest_plugin`: the
`burn_worker` fixture and `assert_agrees`). Everything else is internal to difftest."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
PROTOCOL_VERSION = 1

__all__ = ["check"]

if TYPE_CHECKING:
    from difftest.oracle.check import check


def __getattr__(name: str) -> Any:
    """`difftest.check`, loaded on first use: importing difftest's program layer stays torch-free."""
    if name == "check":
        from difftest.oracle.check import check

        return check
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
