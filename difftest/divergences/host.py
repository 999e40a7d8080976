"""The machine a check runs on, as far as declared knowledge depends on it: a PyTorch kernel that
is wrong only on CPUs with some instruction set (oneDNN picks its kernels by the CPU's features).

`HostCondition` is what a known-bug record and its corpus case declare (`cpu_has("amx_bf16")`);
it holds on this machine when every CPU flag it names is in the kernel's list (Linux
/proc/cpuinfo, as `lscpu` shows them). `DIFFTEST_CPU_FLAGS` (comma-separated) replaces the
machine's list, so a test or a user can ask what a record does on another machine."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

CPU_FLAGS_ENV = "DIFFTEST_CPU_FLAGS"


@functools.cache
def _proc_cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86 / arm64
            return frozenset(value.split())
    return frozenset()


def cpu_flags() -> frozenset[str]:
    """This machine's CPU flags (`DIFFTEST_CPU_FLAGS` when set)."""
    forced = os.environ.get(CPU_FLAGS_ENV)
    if forced is not None:
        return frozenset(f.strip() for f in forced.split(",") if f.strip())
    return _proc_cpu_flags()


@dataclass(frozen=True)
class HostCondition:
    """The CPU flags a behaviour needs, all of them."""

    cpu_flags: tuple[str, ...]

    def holds(self) -> bool:
        have = cpu_flags()
        return all(f in have for f in self.cpu_flags)

    def missing(self) -> tuple[str, ...]:
        have = cpu_flags()
        return tuple(f for f in self.cpu_flags if f not in have)

    def describe(self) -> str:
        return "a CPU with " + " and ".join(self.cpu_flags)

    def to_dict(self) -> dict[str, list[str]]:
        return {"cpu_flags": list(self.cpu_flags)}

    @classmethod
    def from_dict(cls, doc: object) -> HostCondition:
        """From a corpus case's `host` (`{"cpu_flags": [...]}`); raises ValueError otherwise."""
        flags = doc.get("cpu_flags") if isinstance(doc, dict) else None
        if not isinstance(flags, list) or not flags or not all(isinstance(f, str) and f for f in flags):
            raise ValueError(f"host must be {{\"cpu_flags\": [flag, ...]}}, not {doc!r}")
        return cls(tuple(flags))


def cpu_has(*flags: str) -> HostCondition:
    return HostCondition(flags)
