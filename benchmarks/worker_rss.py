"""Resident memory over a long campaign: does a burn worker's or a job's RSS stay flat?

Runs `difftest fuzz --programs N -j J --seed S` as a child process and reads, every `--every`
seconds, the resident set (VmRSS) of each process below it from /proc: the job processes
(Python) and their burn workers (`difftest-burn`, recycled by the job every so many runs). It
prints, per kind, the RSS of the largest process at each tenth of the run and the growth from
the first tenth to the last. Linux only; a measurement, nothing asserted.

    python benchmarks/worker_rss.py --programs 20000 -j 2 --seed 7
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rss import status  # the benchmarks' /proc reader


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children's children included), from /proc."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                parent[int(d.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        frontier += kids
    return out


def kind(pid: int) -> str | None:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if cmd and cmd[0].endswith(b"difftest-burn"):
        return "burn worker"
    if any(b"forkserver" in c or b"multiprocessing" in c for c in cmd):
        return "job (Python)"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", type=int, default=20000)
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--every", type=float, default=2.0, help="seconds between samples")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", "import sys; from difftest.cli import main; sys.exit(main())", "fuzz",
               "--programs", str(args.programs), "-j", str(args.j), "--seed", str(args.seed),
               "--corpus", str(Path(tmp) / "corpus"), "--json", str(Path(tmp) / "summary.json")]
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
        samples: list[tuple[float, str, int]] = []  # (seconds, kind, largest RSS of that kind)
        while proc.poll() is None:
            largest: dict[str, int] = {}
            for pid in descendants(proc.pid):
                k = kind(pid)
                if k is not None:
                    largest[k] = max(largest.get(k, 0), status(pid)[0])
            now = time.monotonic() - start
            samples += [(now, k, v) for k, v in largest.items()]
            time.sleep(args.every)
        total = time.monotonic() - start
    print(f"difftest fuzz --programs {args.programs} -j {args.j} --seed {args.seed}: {total:.0f} s, exit "
          f"{proc.returncode}, {len(samples)} samples")
    for k in ("job (Python)", "burn worker"):
        series = [(t, v) for t, kk, v in samples if kk == k]
        if not series:
            continue
        tenths = []
        for i in range(10):
            part = [v for t, v in series if i * total / 10 <= t < (i + 1) * total / 10]
            tenths.append(max(part) if part else 0)
        mib = [f"{v / 2**20:.0f}" for v in tenths]
        first = next((v for v in tenths if v), 0)
        growth = (tenths[-1] / first - 1) if first and tenths[-1] else float("nan")
        print(f"  {k:<13} largest RSS per tenth of the run (MiB): {' '.join(mib)}; "
              f"max {max(v for _, v in series) / 2**20:.0f} MiB; last tenth vs first {growth:+.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
