"""The tape choice source and its mutations (difftest/strategies/tape.py), which guided
campaigns generate programs from."""

from __future__ import annotations

import random

from difftest.program.jsonio import program_to_dict
from difftest.strategies.choices import RandomChoices
from difftest.strategies.generator import generate
from difftest.strategies.tape import TapeChoices, replace, shrink_then_grow, splice


def test_an_empty_tape_is_the_random_campaigns_program() -> None:
    for seed in range(40):
        assert program_to_dict(generate(TapeChoices(seed))) == program_to_dict(generate(RandomChoices(seed)))


def test_a_recorded_tape_replays_its_program_whatever_the_seed() -> None:
    for seed in range(40):
        first = TapeChoices(seed)
        program = generate(first)
        again = TapeChoices(seed + 12345, first.tape)
        assert program_to_dict(generate(again)) == program_to_dict(program)
        assert again.replayed == len(first.tape) and again.tape == first.tape


def test_entries_that_do_not_fit_are_drawn_afresh() -> None:
    c = TapeChoices(0, [7, "x", True, 2.5, [0.5, 3.0], None])  # type: ignore[list-item]
    x = c.integer(0, 3)  # 7 is out of range: drawn afresh
    assert 0 <= x <= 3 and c.tape[0] == x
    assert isinstance(c.boolean(), bool)  # "x" is no bool
    assert c.choice(["a", "b"]) in ("a", "b") and c.tape[2] in (0, 1)  # True is no index
    assert 0.0 <= c.fraction() < 1.0 and c.tape[3] != 2.5
    assert len(c.floats(3, -1.0, 1.0)) == 3 and c.tape[4] != [0.5, 3.0]  # 3.0 is no fraction
    assert c.replayed == 0


def test_floats_replay_and_extend() -> None:
    c = TapeChoices(1, [[0.0, 0.5]])
    xs = c.floats(3, 0.0, 2.0)
    assert xs[:2] == [0.0, 1.0] and len(c.tape[0]) == 3  # type: ignore[arg-type]


def test_mutations_give_programs_that_generate() -> None:
    rng = random.Random(3)
    tapes = []
    for seed in range(12):
        c = TapeChoices(seed)
        generate(c)
        tapes.append((c.tape, c.spans))
    for i in range(60):
        a, a_spans = tapes[i % len(tapes)]
        b, b_spans = tapes[(i * 7 + 1) % len(tapes)]
        for tape in (replace(a, rng), splice(a, a_spans, b, b_spans, rng), shrink_then_grow(a, a_spans, rng)):
            c = TapeChoices(1000 + i, tape)
            generate(c)  # any tape is a valid program: what does not fit is drawn afresh
            assert c.tape


def test_mutation_shapes() -> None:
    rng = random.Random(0)
    tape = list(range(20))
    spans = [(0, 5), (5, 12), (12, 20)]
    r = replace(tape, rng, most=1)  # type: ignore[arg-type]
    assert len(r) == 20 and sum(x is None for x in r) == 1
    s = splice(tape, spans, [100, 101, 102], [(0, 1), (1, 3)], rng)  # type: ignore[arg-type]
    b = [100, 101, 102]
    assert s in [tape[:i] + b[j:] for i in (0, 5, 12) for j in (0, 1)]  # cut at statements only
    g = shrink_then_grow(tape, spans, rng)  # type: ignore[arg-type]
    assert 1 <= len(g) < 20
