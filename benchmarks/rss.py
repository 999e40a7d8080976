"""Memory and CPU of a benchmark's processes, read from /proc (Linux): what the benchmarks print
next to their rates. Measurements only.

* `status(pid)`: a process's current resident set (VmRSS) and its peak (VmHWM), in bytes.
* `cpu_seconds(pid)`: the user + system CPU time a process has used so far.
* `Sampler`: a thread that samples every process below this one (jobs, burn workers) every
  `interval` seconds and keeps, by kind, the largest peak seen (a process's VmHWM is read while
  it lives, so one that exits between two samples keeps its last reading).
"""

from __future__ import annotations

import os
import resource
import threading
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def status(pid: int | str = "self") -> tuple[int, int]:
    """(VmRSS, VmHWM) of `pid` in bytes; (0, 0) when it is gone."""
    rss = hwm = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, hwm


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU seconds `pid` has used; 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14 and 15 of stat)


def children_cpu_seconds() -> float:
    """CPU seconds of this process's children that have exited and been waited for (recycled
    burn workers)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def self_peak() -> int:
    """This process's peak resident set in bytes (getrusage: KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def mib(n: float) -> str:
    return f"{n / 2**20:.0f} MiB"


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        out.setdefault(ppid, []).append(int(entry.name))
    return out


def _kind(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "difftest-burn" in cmd:
        return "burn worker"
    if "forkserver" in cmd:
        return "forkserver or job"
    return "other"


@dataclass
class Sampler:
    """Samples every descendant of this process in a thread (`with Sampler() as s:`); `peaks`:
    the largest VmHWM seen by kind, `count`: the processes seen by kind."""

    interval: float = 0.5
    peaks: dict[str, int] = field(default_factory=dict)
    count: dict[str, int] = field(default_factory=dict)
    _seen: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        tree = _children()
        todo, mine = [os.getpid()], []
        while todo:
            parent = todo.pop()
            for c in tree.get(parent, []):
                mine.append((c, parent))
                todo.append(c)
        for pid, parent in mine:
            kind = _kind(pid)
            if kind == "forkserver or job":  # the forkserver is ours; a job is the forkserver's
                kind = "forkserver" if parent == os.getpid() else "job"
            _, hwm = status(pid)
            if kind == "gone" or not hwm:
                continue
            self.peaks[kind] = max(self.peaks.get(kind, 0), hwm)
            if pid not in self._seen:
                self._seen.add(pid)
                self.count[kind] = self.count.get(kind, 0) + 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def line(self) -> str:
        return "; ".join(f"{kind} {mib(peak)} (largest of {self.count.get(kind, 0)})"
                         for kind, peak in sorted(self.peaks.items())) or "no child process sampled"
