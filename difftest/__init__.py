"""difftest: property-based differential testing of burn's autodiff against PyTorch."""

from __future__ import annotations

__version__ = "0.1.0"
PROTOCOL_VERSION = 1
