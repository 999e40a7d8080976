"""A choice source that records its decisions as a tape and replays a tape, for guided
campaigns: a program is `generate(TapeChoices(seed, tape))`, and mutating a program means
mutating its tape (the generator's decisions, not the program), as HypoFuzz mutates
Hypothesis's choice sequences.

A tape is a list of entries, one per decision: an int (`integer`, and `choice`'s index), a
bool (`boolean`), a float in [0, 1) (`fraction`) or a list of such floats (`floats`: each
element's position in its range). Replaying takes the entries in order; an entry that does not
fit the decision asked for (another kind, out of range) or a missing one (`None`, or past the
tape's end) is drawn fresh from the seeded PRNG, exactly as `RandomChoices` of the same seed
would draw it, so the empty tape gives the campaign's own random program. `group` spans (one
per statement, as the generator groups them) are recorded so that mutations cut the tape at
statement boundaries.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from difftest.strategies.choices import RandomChoices, _f32_inward, from_fraction

T = TypeVar("T")
Entry = int | bool | float | list[float] | None
Tape = list[Entry]


class TapeChoices(RandomChoices):
    def __init__(self, seed: int, tape: Sequence[Entry] = ()) -> None:
        super().__init__(seed)
        self._replay = list(tape)
        self._pos = 0
        self.tape: Tape = []  # what was decided, replayed or fresh
        self.spans: list[tuple[int, int]] = []  # [start, end) of each group, in tape positions
        self.replayed = 0  # entries taken from the tape given

    def _take(self) -> Entry:
        entry = self._replay[self._pos] if self._pos < len(self._replay) else None
        self._pos += 1
        return entry

    def _keep(self, value: Entry, fits: bool) -> bool:
        self.replayed += fits
        return fits

    def integer(self, lo: int, hi: int) -> int:
        v = self._take()
        x = v if self._keep(v, type(v) is int and lo <= v <= hi) else self.rng.randint(lo, hi)  # type: ignore[operator]
        assert isinstance(x, int)
        self.tape.append(x)
        return x

    def boolean(self, p_true: float = 0.5) -> bool:
        v = self._take()
        x = v if self._keep(v, type(v) is bool) else self.rng.random() < p_true
        assert isinstance(x, bool)
        self.tape.append(x)
        return x

    def choice(self, options: Sequence[T]) -> T:
        v = self._take()
        n = len(options)
        i = v if self._keep(v, type(v) is int and 0 <= v < n) else self.rng.randrange(n)  # type: ignore[operator]
        assert isinstance(i, int)
        self.tape.append(i)
        return options[i]

    def fraction(self) -> float:
        v = self._take()
        x = v if self._keep(v, type(v) is float and 0.0 <= v < 1.0) else self.rng.random()  # type: ignore[operator]
        assert isinstance(x, float)
        self.tape.append(x)
        return x

    def floats(self, n: int, lo: float, hi: float) -> list[float]:
        v = self._take()
        ok = isinstance(v, list) and all(type(t) is float and 0.0 <= t < 1.0 for t in v)
        self._keep(v, ok)
        old: list[float] = list(v) if ok else []  # type: ignore[arg-type]
        fractions = old[:n] + [self.rng.random() for _ in range(n - len(old[:n]))]
        self.tape.append(fractions)
        lo, hi = _f32_inward(lo, hi)
        return [from_fraction(t, lo, hi) for t in fractions]

    def group(self, fn: Callable[[], T]) -> T:
        start = len(self.tape)
        out = fn()
        if len(self.tape) > start:
            self.spans.append((start, len(self.tape)))
        return out


# ------------------------------------------------------------------ mutations


def _cut(spans: Sequence[tuple[int, int]], n: int, rng: random.Random) -> int:
    """A position to cut a tape of length n at: a span's start, else anywhere."""
    starts = [s for s, _ in spans if s < n]
    return rng.choice(starts) if starts else rng.randrange(max(n, 1))


def replace(tape: Tape, rng: random.Random, most: int = 4) -> Tape:
    """Some entries (1 to `most`) drawn afresh."""
    out = list(tape)
    for _ in range(rng.randint(1, most)):
        if out:
            out[rng.randrange(len(out))] = None
    return out


def splice(a: Tape, a_spans: Sequence[tuple[int, int]], b: Tape, b_spans: Sequence[tuple[int, int]],
           rng: random.Random) -> Tape:
    """A's tape up to a statement of A, then B's from a statement of B."""
    return a[:_cut(a_spans, len(a), rng)] + b[_cut(b_spans, len(b), rng):]


def shrink_then_grow(tape: Tape, spans: Sequence[tuple[int, int]], rng: random.Random) -> Tape:
    """One statement's span deleted, and the tape cut after a later statement: the rest of the
    program is drawn afresh (the tape grows back from there)."""
    out = list(tape)
    if spans:
        s, e = rng.choice(list(spans))
        out = out[:s] + out[e:]
    keep = _cut([(s, e) for s, e in spans if s > 0], len(out), rng) if out else 0
    return out[:max(keep, 1)]


MUTATIONS = ("replace", "splice", "shrink_then_grow")
