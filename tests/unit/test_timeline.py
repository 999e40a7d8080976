"""The throughput time series of a campaign summary (`difftest fuzz --json`, read by `difftest report`)."""

from __future__ import annotations

from difftest.findings.summary import Summary, Timeline


def test_points_are_spaced_and_thinned() -> None:
    t = Timeline("run", [(0.0, 0)], every=1.0)
    for k in range(1, 2001):
        t.note(k * 0.25, k)  # 4 programs a second for 500 s
    assert len(t.points) <= Timeline.MAX_POINTS
    assert t.every > 1.0  # thinned at least once
    gaps = [b[0] - a[0] for a, b in zip(t.points, t.points[1:])]
    assert min(gaps) >= 1.0
    t.close(500.1, 2001)
    assert t.points[0] == (0.0, 0) and t.points[-1] == (500.1, 2001)
    assert all(n == round(s * 4) for s, n in t.points[1:-1])  # the points are the real counts


def test_round_trip_and_older_files() -> None:
    s = Summary(programs=10, seconds=2.0, timelines=[Timeline("a", [(0.0, 0), (1.5, 10)])])
    d = s.to_dict()
    assert d["throughput"] == [{"label": "a", "points": [[0.0, 0], [1.5, 10]]}]
    assert Summary.from_dict(d).timelines == s.timelines
    del d["throughput"]  # a summary written before the time series was recorded
    assert Summary.from_dict(d).timelines == []


def test_merge_keeps_each_campaigns_series() -> None:
    total = Summary()
    for label in ("shard 0", "shard 1"):
        total.absorb(Summary(programs=5, seconds=1.0, timelines=[Timeline(label, [(0.0, 0), (1.0, 5)])]))
    assert [t.label for t in total.timelines] == ["shard 0", "shard 1"]
    assert Summary.from_dict(total.to_dict()).timelines == total.timelines
