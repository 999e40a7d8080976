"""Guided campaigns (`difftest fuzz --guided`): a frontier of programs that reached burn edges
no earlier program had, and a share of the budget spent mutating them.

Programs are generated from tapes (difftest/strategies/tape.py): program k of a guided campaign
is either the random campaign's own program k (a fresh tape) or, with probability `share` once
the frontier has entries, a mutation of a frontier entry's tape: some decisions drawn afresh
(replace), a prefix of one entry's statements followed by a suffix of another's (splice), or
one statement deleted and the tail drawn afresh (shrink-then-grow). After a program has run
(probes included) its burn edges are asked from the worker (a coverage build,
exec/coverage_map.py); a program with an edge no entry has becomes an entry.

The frontier is a directory with one JSON file per entry (its tape, program and edges, named by
the program's digest), so jobs of one campaign, shards and later campaigns share it: each job
reads the directory at the start and again every `SYNC_EVERY` programs, and writes its entries
as it finds them; merging shards' frontiers is copying their files into one directory.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from difftest.campaign.loop import program_seed
from difftest.exec.burn_worker import BurnWorker
from difftest.exec.coverage_map import CoverageError, hit_edges, worker_marks
from difftest.exec.inflight import program_digest
from difftest.program.files import JsonFileError, read_json
from difftest.program.ir import Program
from difftest.program.jsonio import program_from_dict, program_to_dict
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate
from difftest.strategies.tape import MUTATIONS, Tape, TapeChoices, replace, shrink_then_grow, splice

ENTRY_FORMAT = "difftest-frontier-entry"
ENTRY_VERSION = 1
SYNC_EVERY = 100  # programs between reads of the frontier directory (other jobs' entries)
DEFAULT_SHARE = 0.5  # of the programs, mutations of frontier entries (once there are entries)
_MUTATION_SALT = 0x9E3779B1


class FrontierError(ValueError):
    """A frontier directory or entry that cannot be read."""


@dataclass
class Entry:
    tape: Tape
    spans: list[tuple[int, int]]
    edges: frozenset[int]
    origin: str
    doc: dict[str, Any]  # the program's JSON

    def program(self) -> Program:
        return program_from_dict(self.doc)

    def to_dict(self, new: int) -> dict[str, Any]:
        return {"format": ENTRY_FORMAT, "version": ENTRY_VERSION, "origin": self.origin, "new_edges": new,
                "tape": self.tape, "spans": [list(s) for s in self.spans], "edges": sorted(self.edges),
                "program": self.doc}

    @staticmethod
    def from_dict(d: dict[str, Any], where: Path) -> Entry:
        if d.get("format") != ENTRY_FORMAT:
            raise FrontierError(f"{where}: not a frontier entry (\"format\" must be {ENTRY_FORMAT!r})")
        try:
            return Entry(list(d["tape"]), [(int(s), int(e)) for s, e in d["spans"]],
                         frozenset(int(i) for i in d["edges"]), str(d.get("origin", "")), dict(d["program"]))
        except (KeyError, TypeError, ValueError) as e:
            raise FrontierError(f"{where}: a frontier entry that cannot be read: {e!r}") from e


@dataclass
class Frontier:
    """The entries of a frontier directory (read so far) and the edges they reached."""

    directory: Path
    entries: list[Entry] = field(default_factory=list)
    edges: set[int] = field(default_factory=set)
    _seen: set[str] = field(default_factory=set)  # file names read or written

    @staticmethod
    def load(directory: Path) -> Frontier:
        if directory.exists() and not directory.is_dir():
            raise FrontierError(f"{directory}: a frontier must be a directory")
        f = Frontier(directory)
        f.sync()
        return f

    def sync(self) -> int:
        """Reads the entries written since the last read (by other jobs); how many."""
        if not self.directory.is_dir():
            return 0
        added = 0
        for path in sorted(self.directory.glob("*.json")):
            if path.name in self._seen:
                continue
            self._seen.add(path.name)
            try:
                doc = read_json(path, strict=False)
            except JsonFileError as e:  # its message names the file
                raise FrontierError(str(e)) from e
            entry = Entry.from_dict(doc, path)
            self.entries.append(entry)
            self.edges |= entry.edges
            added += 1
        return added

    def add(self, entry: Entry) -> bool:
        """Keeps `entry` if it reached an edge no entry has (written to the directory); whether it did."""
        new = entry.edges - self.edges
        if not new:
            return False
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"{program_digest(entry.doc)}.json"
        path = self.directory / name
        if name in self._seen or path.exists():  # the same program again (a mutation can undo itself)
            return False
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entry.to_dict(len(new))))
        os.replace(tmp, path)
        self._seen.add(name)
        self.entries.append(entry)
        self.edges |= entry.edges
        return True


def is_frontier(path: Path) -> bool:
    """A directory whose first JSON file is a frontier entry."""
    if not path.is_dir():
        return False
    first = next(iter(sorted(path.glob("*.json"))), None)
    if first is None:
        return False
    try:
        return bool(read_json(first, strict=False).get("format") == ENTRY_FORMAT)
    except (JsonFileError, AttributeError):
        return False


def merge_frontiers(sources: Iterable[Path], out: Path) -> int:
    """Copies the entries of frontier directories into `out` (one file per program); how many."""
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for src in sources:
        for entry in Frontier.load(src).entries:
            target = out / f"{program_digest(entry.doc)}.json"
            if not target.exists():
                target.write_text(json.dumps(entry.to_dict(0)))
                n += 1
    return n


class Guide:
    """A job's guidance: which tape program k is generated from, and what its run reached."""

    def __init__(self, frontier: Frontier, cfg: GenConfig, seed: int, share: float = DEFAULT_SHARE,
                 burn_edges: frozenset[int] | None = None) -> None:
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"the guided share must be in [0, 1], got {share}")
        self.frontier = frontier
        self.cfg = cfg
        self.seed = seed
        self.share = share
        self.burn_edges = burn_edges  # novelty counts these edges only (None: all)
        self.mutations: dict[str, int] = {m: 0 for m in MUTATIONS}
        self.fresh = 0
        self.added = 0
        self._current: tuple[TapeChoices, str] | None = None
        self._since_sync = 0
        self.unread = 0  # programs whose edges could not be read (the worker's process was replaced)

    def choices(self, k: int) -> TapeChoices:
        """The choice source of program k (remembered for `observe`)."""
        s = program_seed(self.seed, k)
        rng = random.Random(s ^ _MUTATION_SALT)
        entries = self.frontier.entries
        tape: Tape = []
        origin = f"program {k}"
        if entries and rng.random() < self.share:
            a = rng.choice(entries)
            how = rng.choice(MUTATIONS)
            if how == "replace":
                tape = replace(a.tape, rng)
            elif how == "splice":
                b = rng.choice(entries)
                tape = splice(a.tape, a.spans, b.tape, b.spans, rng)
            else:
                tape = shrink_then_grow(a.tape, a.spans, rng)
            self.mutations[how] += 1
            origin = f"program {k}: {how}"
        else:
            self.fresh += 1
        c = TapeChoices(s, tape)
        self._current = (c, origin)
        return c

    def program(self, k: int) -> Program:
        return generate(self.choices(k), self.cfg)

    def observe(self, program: Program, worker: BurnWorker, before: tuple[int, int] | None = None) -> bool:
        """After the program of the last `choices` ran: keeps it if it reached new edges.
        `before`: the worker's marks (coverage_map.worker_marks) taken before the program ran."""
        assert self._current is not None, "observe without choices"
        c, origin = self._current
        self._current = None
        if before is not None and before != worker_marks(worker):
            # the process was replaced while this program ran (a crash, or a recycle right after
            # one of its answers): the counters are the new process's start-up, not the program's
            self.unread += 1
            edges: frozenset[int] = frozenset()
        else:
            try:
                edges = hit_edges(worker)
            except CoverageError:  # the worker died answering: the program counts as reaching nothing
                edges = frozenset()
        if self.burn_edges is not None:
            edges = edges & self.burn_edges
        added = self.frontier.add(Entry(c.tape, c.spans, edges, origin, program_to_dict(program)))
        self.added += added
        self._since_sync += 1
        if self._since_sync >= SYNC_EVERY:
            self._since_sync = 0
            self.frontier.sync()
        return added

    def stats(self) -> dict[str, Any]:
        return {"fresh": self.fresh, "mutations": dict(self.mutations), "added": self.added,
                "unread": self.unread}
