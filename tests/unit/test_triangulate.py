"""Triangulated campaigns (`difftest fuzz --backend flex,ndarray`) without a built interpreter:
a finding's key carries the layer class of the backends that show it, and the summary counts
each backend and keeps each finding's backends and layer through JSON and `merge`. The
campaigns themselves run in tests/backends/test_triangulated.py (--run-backends)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from difftest.findings.backends import SHARED, class_key, layer_class, split_class, where
from difftest.findings.summary import Summary, merge, print_summary, write_json

SIG = "burn-wrong:-:exp:grad:small #bddc11def863"


def test_the_layer_class_says_which_backends_show_it() -> None:
    assert layer_class({"flex": True, "ndarray": True}) == SHARED
    assert layer_class({"flex": False, "ndarray": True}) == "only:ndarray"
    assert layer_class({"flex": True, "ndarray": True, "wgpu": False}) == "some:flex,ndarray"
    assert layer_class({"flex": True}) is None  # one backend tested: nothing to locate
    assert layer_class({"flex": False, "ndarray": False}) is None


def test_the_same_fault_on_one_backend_and_on_all_is_two_keys() -> None:
    alone, everywhere = class_key(SIG, "only:ndarray"), class_key(SIG, SHARED)
    assert alone != everywhere and SIG in alone and SIG in everywhere
    assert split_class(alone) == (SIG, "only:ndarray") and split_class(everywhere) == (SIG, SHARED)
    assert class_key(SIG, None) == SIG and split_class(SIG) == (SIG, None)  # one backend: as before
    known = class_key("known-bug:ndarray-sigmoid-f64-in-f32", "only:ndarray")
    assert split_class(known) == ("known-bug:ndarray-sigmoid-f64-in-f32", "only:ndarray")
    # a key whose text has an " @" is split at a layer class only
    for odd in ("outcome:burn:matmul:outcome a @ b #0123456789ab", "outcome:burn:matmul:outcome a @b"):
        assert split_class(odd) == (odd, None)


def test_where_keeps_its_wording_for_each_class() -> None:
    alone = where({"flex": False, "ndarray": True})
    assert alone.startswith("shows on ndarray only (not on flex)") and "burn-ndarray" in alone
    assert where({"flex": True, "ndarray": True}).startswith("shows on every backend tested (flex, ndarray)")


def _campaign(new_on_ndarray: int) -> Summary:
    """A summary as a triangulated campaign builds it (parallel.py: one note per program)."""
    s = Summary(seed=1)
    layer = where({"flex": False, "ndarray": True})
    for k in range(4):
        s.programs += 1
        if k < new_on_ndarray:
            s.verdicts["burn-wrong"] += 1
            s.note_backends({"flex": ("pass", None), "ndarray": ("burn-wrong", False)})
            f = s.finding(class_key(SIG, "only:ndarray"), "burn-wrong")
            f.count += 1
            f.backends, f.layer = ["ndarray"], layer
        else:
            s.verdicts["outcome"] += 1
            s.note_backends({"flex": ("outcome", True), "ndarray": ("outcome", True)})
            f = s.finding(class_key("known-bug:backward-of-used-leaf-panics", SHARED), "outcome")
            f.count += 1
            f.bug, f.backends, f.layer = "backward-of-used-leaf-panics", ["flex", "ndarray"], "shared"
    return s


def test_the_summary_counts_each_backend_and_locates_each_new_finding(tmp_path: Path) -> None:
    s = _campaign(new_on_ndarray=1)
    flex, ndarray = s.backends["flex"], s.backends["ndarray"]
    assert (dict(flex.verdicts), flex.known, flex.new) == ({"pass": 1, "outcome": 3}, 3, 0)
    assert (dict(ndarray.verdicts), ndarray.known, ndarray.new) == ({"burn-wrong": 1, "outcome": 3}, 3, 1)
    out = io.StringIO()
    print_summary(s, Console(file=out, width=200, markup=False))
    text = out.getvalue()
    assert "on flex: outcome 3, pass 1; known 3, new 0" in text
    assert "on ndarray: outcome 3, burn-wrong 1; known 3, new 1" in text
    assert f"new on ndarray: {SIG} @only:ndarray" in text and "burn-ndarray" in text
    path = tmp_path / "s.json"
    write_json(s, path)
    doc = json.loads(path.read_text())
    assert doc["backends"]["ndarray"] == {"verdicts": {"outcome": 3, "burn-wrong": 1}, "known": 3, "new": 1}
    new = next(f for f in doc["findings"] if f["bug"] is None)
    assert new["backends"] == ["ndarray"] and new["layer"].startswith("shows on ndarray only")
    back = Summary.from_dict(doc)
    assert back.backends["ndarray"].new == 1 and back.findings[f"{SIG} @only:ndarray"].backends == ["ndarray"]


def test_shards_of_a_triangulated_campaign_merge_per_backend(tmp_path: Path) -> None:
    paths = []
    for i, n in enumerate((1, 2)):
        paths.append(tmp_path / f"shard{i}.json")
        write_json(_campaign(new_on_ndarray=n), paths[-1])
    total = merge(paths)
    assert total.programs == 8
    assert (total.backends["ndarray"].new, total.backends["ndarray"].known) == (3, 5)
    assert total.backends["flex"].verdicts["pass"] == 3 and total.backends["flex"].new == 0
    merged = total.findings[f"{SIG} @only:ndarray"]
    assert merged.count == 3 and merged.backends == ["ndarray"] and merged.layer is not None


def test_a_campaign_on_one_backend_has_no_backend_counts(tmp_path: Path) -> None:
    s = Summary(seed=1, programs=1)
    s.verdicts["pass"] += 1
    path = tmp_path / "s.json"
    write_json(s, path)
    doc = json.loads(path.read_text())
    assert "backends" not in doc  # the summary of a campaign on one backend is as before
    out = io.StringIO()
    print_summary(s, Console(file=out, width=200, markup=False))
    assert "  on flex" not in out.getvalue()
