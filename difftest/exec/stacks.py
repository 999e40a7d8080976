"""Where a hung burn worker is: its threads' stacks, read with gdb before the worker is killed.

A hung worker answers nothing, so the program alone cannot say what never returned. Bisecting
the program's prefixes (findings/hangs.py) names the op a hang starts at, but a kernel several
ops share (burn-flex's cumulative kernel serves cumsum, cumprod, cummin and cummax) then gives
one finding per op: four reports of one bug. The stack names the function itself.

`stopped_in(pid)` attaches gdb in batch mode (a well-kept tool that reads the binary's own
debug information, inlined frames included: difftest-burn's release profile keeps line tables,
rust/Cargo.toml), prints every thread's backtrace and detaches; the worker is killed after. The
site is the innermost frame in one of burn's crates (`burn`, `burn_*`) on the thread that is
running rather than waiting (a kernel spinning on a rayon thread leaves the main thread parked
in a join). A hang outside burn (the interpreter's own test fault) names no site, and the
caller keeps what the program says. Without gdb, or when gdb cannot attach, there is no stack
and nothing else changes.

A crashed worker is gone, so `crashed_in` runs the request it crashed on again, in a fresh worker
under gdb, and reads the stack of the thread the signal stopped: a kernel several ops share that
aborts or faults is one finding too, signed by its burn function. A crash that does not happen
again (a memory limit the re-run does not have) keeps the op bisection.
"""

from __future__ import annotations

import re
import resource
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from difftest.exec.libtorch import PARENT_ENV
from difftest.program.observation import ErrorObs

GDB_TIMEOUT = 30.0  # seconds: gdb reads the binary's debug info once (2.3 s measured here, beside a build)
SHOWN_FRAMES = 12  # frames of the site's thread kept for a report, innermost first

_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(?P<rest>.+)$")
_AT = re.compile(r" at (?P<file>\S+):(?P<line>\d+)$")
_FROM = re.compile(r" from \S+$")
_HASH = re.compile(r"::h[0-9a-f]{16}$")
_IMPL = re.compile(r"\{impl#\d+\}")
_CLOSURE = re.compile(r"\{\{closure\}\}|\{closure#\d+\}")
_SOURCE_ROOT = re.compile(r"^.*/registry/src/[^/]+/|^/rustc/[0-9a-f]+/")  # cargo's registry, rustc's sources
_BURN = re.compile(r"^<?burn(?:_[a-z0-9]+)*::")
# a thread blocked rather than running: parked in a join, a lock, a sleep or a read
_WAITING = re.compile(r"futex|pthread_cond|syscall|epoll|nanosleep|::park|::sleep|__GI___libc_read|"
                      r"__libc_recv|clock_nanosleep|sched_yield")


@dataclass(frozen=True)
class Frame:
    function: str  # normalised: no symbol hash, generic arguments dropped, `<impl>` for impl blocks
    file: str | None = None
    line: int | None = None

    def text(self) -> str:
        """`function (file:line)`, a registry crate's file as `burn-flex-0.22.1/src/...`."""
        return self.function + (f" ({_SOURCE_ROOT.sub('', self.file)}:{self.line})" if self.file else "")


@dataclass(frozen=True)
class Stopped:
    """Where a hung worker was: the burn function (`site`, None when no thread was in burn) and
    the frames of its thread, innermost first, for a report."""
    site: str | None
    frames: tuple[str, ...]


def _skip_group(text: str, i: int) -> int:
    """The index just past the `<...>` group opening at `text[i]` (`->` inside does not close it)."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == "<":
            depth += 1
        elif c == ">" and not (i > 0 and text[i - 1] == "-"):
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def function_name(raw: str) -> str:
    """A demangled Rust symbol as a stable name: without its hash, generic arguments dropped,
    an impl block as `<impl>`, a closure as `{closure}`, a qualified path `<T as Trait>` as `<T>`.
    One kernel monomorphised for two dtypes or closures is one name, and the name is the same
    read from debug info or from the symbol table."""
    # gdb names from debug info (`{impl#0}`, `{closure#1}`) as from symbols (`<impl ...>`, `{{closure}}`)
    text = _IMPL.sub("<impl>", _CLOSURE.sub("{closure}", _HASH.sub("", raw.strip())))
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "<":
            out.append(text[i])
            i += 1
            continue
        end = _skip_group(text, i)
        inner = text[i + 1: end - 1]
        if inner == "impl" or inner.startswith("impl "):
            out.append("<impl>")
        elif not out and " as " in inner:  # <T as Trait>::f, where T names the type
            out.append(f"<{function_name(inner.split(' as ', 1)[0])}>")
        i = end
    return "".join(out)


def parse(text: str) -> list[list[Frame]]:
    """The threads of gdb's `thread apply all bt` output, each its frames innermost first."""
    threads: list[list[Frame]] = []
    for line in text.splitlines():
        if line.startswith("Thread "):
            threads.append([])
            continue
        m = _FRAME.match(line.strip())
        if m is None or not threads:
            continue
        rest = m.group("rest")
        at = _AT.search(rest)
        file, lineno = (at.group("file"), int(at.group("line"))) if at else (None, None)
        rest = _FROM.sub("", rest[: at.start()] if at else rest)
        threads[-1].append(Frame(function_name(_without_arguments(rest)), file, lineno))
    return threads


def _without_arguments(text: str) -> str:
    """`f (a=1, b=...)` without its argument list (the last parenthesised group that ends it)."""
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                return text[:i].rstrip()
    return text


def site_of(threads: list[list[Frame]]) -> Stopped | None:
    """The innermost burn frame of the first running thread that has one (else of the first
    waiting one: a deadlock waits everywhere), with that thread's frames; None when no thread
    is in burn."""
    def in_burn(frames: list[Frame]) -> Frame | None:
        return next((f for f in frames if _BURN.match(f.function)), None)

    def waiting(frames: list[Frame]) -> bool:
        return any(_WAITING.search(f.function) for f in frames[:3])

    candidates = [t for t in threads if in_burn(t) is not None]
    if not candidates:
        return None
    thread = next((t for t in candidates if not waiting(t)), candidates[0])
    site = in_burn(thread)
    assert site is not None
    return Stopped(site.function, tuple(f.text() for f in thread[:SHOWN_FRAMES]))


def threads_of(pid: int, timeout: float = GDB_TIMEOUT) -> list[list[Frame]] | None:
    """Process `pid`'s threads, each its frames innermost first, read with gdb (attached in
    batch mode, detached after); None without gdb, or when gdb cannot attach or takes longer
    than `timeout`."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return None
    try:
        out = subprocess.run([gdb, "-nx", "-batch", "-p", str(pid), "-ex", "set pagination off",
                              "-ex", "thread apply all bt"],
                             capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse(out.stdout) or None


def stopped_in(pid: int, timeout: float = GDB_TIMEOUT) -> Stopped | None:
    """Where process `pid` is (`site_of` its threads); None without a stack or when no thread
    is in burn."""
    threads = threads_of(pid, timeout)
    return site_of(threads) if threads else None


def crashed_in(argv: Sequence[str], env: Mapping[str, str], request: str,
               timeout: float = GDB_TIMEOUT, limit: int | None = None) -> Stopped | None:
    """Where the worker `argv` crashes on `request` (one JSON line): the innermost burn frame of
    the crashing thread (`crash_frames`); None without such a stack or without a frame in burn."""
    frames = crash_frames(argv, env, request, timeout, limit)
    return site_of([frames]) if frames else None


def crash_frames(argv: Sequence[str], env: Mapping[str, str], request: str,
                 timeout: float = GDB_TIMEOUT, limit: int | None = None) -> list[Frame] | None:
    """The frames, innermost first, of the thread the worker `argv` crashes in on `request`: the
    worker run again under gdb in batch mode with that line as its input, and the backtrace of
    the thread the signal stopped. A crashed process is gone, so its stack can only be read from
    a run that crashes again; `limit` is the worker's address-space limit, kept (a worker that
    died past it dies past it again, and an unlimited re-run could take the machine's memory).
    None without gdb, when the run does not crash again (gdb then has no stack) or takes longer
    than `timeout`."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return None
    # gdb is the inferior's parent: the campaign's pid would make the worker exit (exit_with_parent)
    env = {k: v for k, v in env.items() if k != PARENT_ENV}
    with tempfile.TemporaryDirectory(prefix="difftest-crash-") as tmp:
        line = Path(tmp) / "request.jsonl"
        line.write_text(request.rstrip("\n") + "\n")
        try:
            # `run ARGS` sets the arguments (ones given with --args would be replaced by the redirection)
            run = " ".join(["run", *map(shlex.quote, argv[1:]), "<", shlex.quote(str(line))])
            gdb_run = subprocess.Popen([gdb, "-nx", "-batch", "-ex", "set pagination off", "-ex", run,
                                        "-ex", "bt", argv[0]], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)
        except OSError:
            return None
        try:
            if limit:  # before gdb has read the binary's debug info and started the worker
                resource.prlimit(gdb_run.pid, resource.RLIMIT_AS, (limit, limit))
            stdout, _ = gdb_run.communicate(timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            gdb_run.kill()
            gdb_run.communicate()
            return None
    if "received signal" not in stdout:
        return None  # it did not crash again: no stack to read
    # `bt` prints the signalled thread only; gdb may head it "Thread 1 ... received signal"
    threads = [t for t in parse("Thread (the signalled one)\n" + stdout) if t]
    return threads[-1] if threads else None


def failure(kind: str, message: str, stopped: Stopped | None) -> ErrorObs:
    """The error of a crashed or hung worker; with where it was stopped (a hang) or where it
    crashed, in the message for a reader and as `site` and `stack` for its signature."""
    if stopped is None:
        return ErrorObs(kind, message)
    verb = "crashed" if kind == "crash" else "stopped"
    shown = f"{message}\n{verb} in {stopped.site}, innermost first:\n  " + "\n  ".join(stopped.frames)
    return ErrorObs(kind, shown, site=stopped.site, stack=stopped.frames)
