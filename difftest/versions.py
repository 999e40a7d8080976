"""Versions of everything a finding depends on."""

from __future__ import annotations

from functools import lru_cache
from importlib import metadata

BURN_VERSION = "0.22.1"


@lru_cache(maxsize=1)
def difftest_version() -> str:
    try:
        return metadata.version("difftest")
    except metadata.PackageNotFoundError:
        return "0.1.0+src"


def torch_version() -> str:
    import torch

    return str(torch.__version__)


def versions(burn_reported: dict[str, object] | None = None) -> dict[str, object]:
    out: dict[str, object] = {
        "difftest": difftest_version(),
        "torch": torch_version(),
        "burn": BURN_VERSION,
    }
    if burn_reported:
        out["burn"] = burn_reported.get("burn", BURN_VERSION)
        out["difftest_burn"] = burn_reported.get("difftest_burn")
        out["protocol"] = burn_reported.get("protocol")
    return out
