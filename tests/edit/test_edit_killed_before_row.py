"""An in-place edit SIGKILLed between an episode's file write (a data parquet rewritten, a video deleted or moved)
and its row write: `edit resume` finishes the row from the journal (the files' recorded sha256), so `validate`
is clean (issue 30 review; docs/decisions.md E39), on a directory and on SeaweedFS."""

from __future__ import annotations

import json

import pytest
from backends import kill_at, run_cli
from edit_support import assert_stats_recount, at, record

from egopool.meta.info import read_info

_OPS = {
    "remove-column": ("observation.right_glove",),
    "rename-column": ("observation.right_glove", "observation.left_glove"),
    "remove-slot": ("cam",),
    "rename-slot": ("cam", "head_rgb"),
}


@pytest.mark.parametrize("op", sorted(_OPS))
def test_killed_between_file_and_row_then_resumed_validates(tmp_path, backend, request, op):
    t = at(backend, record(tmp_path / "s", episodes=2), request)
    kill_at(tmp_path / "state", "edit", "row", "edit", op, t.location, *_OPS[op])
    assert t.store.exists("meta/.edit.json")
    r = run_cli("edit", "resume", t.location, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["resumed"] is True
    assert t.errors() == [] and not t.store.exists("meta/.edit.json")
    assert_stats_recount(t.location)
    features = read_info(t.location)["features"]
    if op == "remove-column":
        assert "observation.right_glove" not in features
    elif op == "rename-column":
        assert "observation.left_glove" in features and "observation.right_glove" not in features


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_add_column_refuses_non_finite_values_in_one_line(tmp_path, bad):
    import numpy as np
    from backends import TaskAt
    from edit_support import digests

    local = record(tmp_path / "s", episodes=1, rows=30)
    t = TaskAt("dir", str(local), local)
    values = np.arange(30, dtype=np.float64)
    values[7] = bad
    np.save(tmp_path / "v.npy", values)
    before = digests(t)
    r = run_cli("edit", "add-column", t.location, "1", "observation.grip_label", "--from", str(tmp_path / "v.npy"))
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and f"v.npy: row 7 holds {bad!r}" in r.stderr, r.stderr
    assert "terminate" not in r.stderr
    assert digests(t) == before and not t.store.exists("meta/.edit.json")
