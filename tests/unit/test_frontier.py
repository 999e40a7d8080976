"""Guided campaigns' frontier and guide (difftest/campaign/guided.py), with a stand-in worker
whose `edges` answer is given: entries kept on new edges only, written, resumed, merged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from difftest.campaign.guided import Frontier, FrontierError, Guide, is_frontier, merge_frontiers
from difftest.campaign.loop import program_at
from difftest.program.jsonio import program_to_dict
from difftest.strategies.config import GenConfig
from difftest.strategies.generator import generate
from difftest.strategies.tape import TapeChoices


class EdgesWorker:
    """Answers `edges` with the set it was last given."""

    binary = "stand-in"

    def __init__(self) -> None:
        self.edges: list[int] = []
        self.restarts = self.recycled = 0

    def request(self, kind: str, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        assert kind == "edges"
        return {"ok": True, "edges": self.edges}


def _run(guide: Guide, worker: EdgesWorker, k: int, edges: list[int]) -> bool:
    program = guide.program(k)
    worker.edges = edges
    return guide.observe(program, worker)  # type: ignore[arg-type]


def test_programs_with_new_edges_become_entries_and_a_campaign_resumes(tmp_path: Path) -> None:
    d = tmp_path / "frontier"
    guide = Guide(Frontier.load(d), GenConfig(), seed=5, share=0.0)
    w = EdgesWorker()
    assert _run(guide, w, 0, [1, 2, 3])
    assert not _run(guide, w, 1, [2, 3])  # nothing new
    assert _run(guide, w, 2, [3, 4])
    assert len(guide.frontier.entries) == 2 and guide.frontier.edges == {1, 2, 3, 4}
    assert is_frontier(d) and len(list(d.glob("*.json"))) == 2
    # share 0: program k is the random campaign's program k
    assert program_to_dict(guide.frontier.entries[0].program()) == program_to_dict(program_at(5, 0))
    again = Frontier.load(d)  # a later campaign resumes: the entries and their edges
    assert again.edges == {1, 2, 3, 4} and len(again.entries) == 2
    resumed = Guide(again, GenConfig(), seed=6, share=0.0)
    assert not _run(resumed, w, 0, [1, 4])
    assert _run(resumed, w, 1, [5])


def test_an_entrys_tape_regenerates_its_program(tmp_path: Path) -> None:
    guide = Guide(Frontier.load(tmp_path / "f"), GenConfig(), seed=1, share=1.0)
    w = EdgesWorker()
    _run(guide, w, 0, [1])  # empty frontier: fresh
    for k in range(1, 30):  # then mutations of the entries
        _run(guide, w, k, [k + 1])
    assert guide.fresh == 1 and sum(guide.mutations.values()) == 29
    for e in Frontier.load(tmp_path / "f").entries:
        assert program_to_dict(generate(TapeChoices(0, e.tape), GenConfig())) == e.doc


def test_the_choice_of_program_k_is_seeded(tmp_path: Path) -> None:
    w = EdgesWorker()
    docs = []
    for name in ("a", "b"):
        guide = Guide(Frontier.load(tmp_path / name), GenConfig(), seed=3, share=0.5)
        out = []
        for k in range(20):
            program = guide.program(k)
            w.edges = [k % 7]
            guide.observe(program, w)  # type: ignore[arg-type]
            out.append(program_to_dict(program))
        docs.append(out)
    assert docs[0] == docs[1]


def test_merge_and_bad_frontiers(tmp_path: Path) -> None:
    w = EdgesWorker()
    for name, edges in (("s0", [1]), ("s1", [2])):
        g = Guide(Frontier.load(tmp_path / name), GenConfig(), seed=0 if name == "s0" else 1, share=0.0)
        _run(g, w, 0, edges)
    assert merge_frontiers([tmp_path / "s0", tmp_path / "s1"], tmp_path / "all") == 2
    assert Frontier.load(tmp_path / "all").edges == {1, 2}
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.json").write_text(json.dumps({"format": "something else"}))
    assert not is_frontier(tmp_path / "bad")
    with pytest.raises(FrontierError, match=r"x\.json: not a frontier entry"):
        Frontier.load(tmp_path / "bad")
    (tmp_path / "file").write_text("")
    with pytest.raises(FrontierError, match="must be a directory"):
        Frontier.load(tmp_path / "file")
    with pytest.raises(ValueError, match="share"):
        Guide(Frontier.load(tmp_path / "all"), GenConfig(), seed=0, share=1.5)


def test_a_program_during_which_the_worker_replaced_its_process_reaches_nothing(tmp_path: Path) -> None:
    """The counters after a recycle or a crash restart are the new process's start-up, not the
    program's: the program is not an entry, whatever edges the worker answers."""
    w = EdgesWorker()
    guide = Guide(Frontier.load(tmp_path / "f"), GenConfig(), seed=3, share=0.5)
    program = guide.program(0)
    w.edges = [1, 2, 3]
    before = (w.restarts, w.recycled)
    w.recycled += 1  # the worker recycled right after one of the program's answers
    assert not guide.observe(program, w, before)  # type: ignore[arg-type]
    assert guide.frontier.entries == [] and guide.unread == 1
    program = guide.program(1)
    assert guide.observe(program, w, (w.restarts, w.recycled))  # type: ignore[arg-type]
    assert guide.stats()["unread"] == 1 and guide.stats()["added"] == 1


def test_the_campaign_summary_counts_and_prints_unread_programs() -> None:
    """A guided campaign's summary adds up the jobs' unread programs and says how many there were:
    a campaign whose workers recycle often steers on fewer programs than it ran."""
    import io

    from rich.console import Console

    from difftest.findings.summary import Summary, print_summary

    s = Summary(programs=10, seconds=1.0, seed=0)
    s.add_guided({"fresh": 4, "added": 2, "unread": 1, "mutations": {"splice": 6}})
    s.add_guided({"fresh": 1, "added": 0, "unread": 2, "mutations": {"replace": 3}})
    s.guided.update(entries=5, edges=40)
    assert s.guided["unread"] == 3
    again = Summary.from_dict(s.to_dict())
    assert again.guided["unread"] == 3
    out = io.StringIO()
    print_summary(again, Console(file=out, width=200))
    assert "9 mutations (replace 3, splice 6); 2 added to the frontier (now 5 entries, 40 edges); " \
           "3 programs' edges unread" in out.getvalue()
