"""Two edits that race on one task (issue 30's fresh review, findings 5 and 3; docs/decisions.md E71-E75), on a
directory and on a real SeaweedFS bucket: two merges of overlapping sources into one existing task add each
episode once (the second re-plans once it owns the target's journal); a bucket rename holds its old task until it
is committed or resumed; ``edit abandon`` drops an unfinished target and frees its sources."""

from __future__ import annotations

import json

import pytest
from backends import TaskAt, paused, run_cli
from edit_support import assert_stats_recount, at, record

from egopool.meta.info import read_info


@pytest.fixture(params=["dir", "bucket"])
def backend(request):
    if request.param == "bucket":
        request.getfixturevalue("s3_server")
    return request.param


def _origins(t: TaskAt) -> list[dict]:
    return [json.loads(line) for line in t.read("meta/edit_origins.jsonl").decode().splitlines() if line.strip()]


def test_two_merges_of_overlapping_sources_into_one_task_add_each_episode_once(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "t", episodes=2), request)
    first = at(backend, record(tmp_path / "first", episodes=3), request)  # 1, 2: the target's; 3: new
    second = at(backend, record(tmp_path / "second", episodes=4), request)  # 1-3: as `first`; 4: new
    with paused(tmp_path / "state", "edit", "planned", "edit", "merge", second.location, "--into", t.location,
                "--json") as late:  # planned N 3, 4 from the target as it was; its journal not created yet
        r = run_cli("edit", "merge", first.location, "--into", t.location, "--json")
        assert r.returncode == 0, r.stderr
        assert [(e["index"], e["new_index"]) for e in json.loads(r.stdout)["episodes"]] == [(3, 3)]
        done = late.release()
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [(e["index"], e["new_index"]) for e in doc["episodes"]] == [(4, 4)]  # re-planned on the target as it is
    assert [(s["index"], s["same_as"]) for s in doc["skipped"]] == [(1, 1), (2, 2), (3, 3)]
    assert t.errors() == [] and read_info(t.location)["total_episodes"] == 4
    digests = [o["digest"] for o in _origins(t)]
    assert [o["episode_index"] for o in _origins(t)] == [3, 4] and len(set(digests)) == 2
    assert_stats_recount(t.location)
    assert not t.store.exists("meta/.edit.json")


def test_a_merge_whose_episodes_all_arrived_meanwhile_does_nothing(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "t", episodes=2), request)
    first = at(backend, record(tmp_path / "first", episodes=3), request)
    second = at(backend, record(tmp_path / "second", episodes=3), request)  # the same episodes as `first`
    with paused(tmp_path / "state", "edit", "planned", "edit", "merge", second.location, "--into",
                t.location) as late:
        assert run_cli("edit", "merge", first.location, "--into", t.location).returncode == 0
        done = late.release()
    assert done.returncode == 0, done.stderr
    assert "nothing to do" in done.stdout, done.stdout
    assert t.errors() == [] and read_info(t.location)["total_episodes"] == 3
    assert [o["episode_index"] for o in _origins(t)] == [3]
    assert_stats_recount(t.location)
    assert not t.store.exists("meta/.edit.json") and not second.store.exists("meta/.edit.json")
