"""In-place edits (issue 30) on a directory and on SeaweedFS: set-task, remove/rename/add a column, remove/rename a
stream slot, rename a task. Each: validate clean, stats equal to a recount, untouched objects byte-identical;
SIGKILL at each journal step then a re-run completes; bad input one line, nothing written."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from backends import TaskAt, kill_at, paused, run_cli
from edit_support import assert_stats_recount, at, digests, mid_edit, record

from egopool.meta.info import read_info, write_info
from egopool.meta.tasks import read_tasks

V1, V2 = "videos/chunk-000/cam/episode-000.mp4", "videos/chunk-000/cam/episode-001.mp4"
D1 = "data/chunk-000/episode-000.parquet"


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {k for k in set(before) | set(after) if before.get(k) != after.get(k)}


def test_rename_column_everywhere(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "s", episodes=2), request)
    before = digests(t)
    r = run_cli("edit", "rename-column", t.location, "observation.right_glove", "observation.left_glove", "--json")
    assert r.returncode == 0, r.stderr
    assert t.errors() == []
    info = read_info(t.location)
    assert "observation.left_glove" in info["features"] and "observation.right_glove" not in info["features"]
    assert info["sensors"] == ["left_glove"]
    assert_stats_recount(t.location)
    table = pq.read_table(io.BytesIO(t.read(D1)))
    assert "observation.left_glove" in table.column_names and "observation.right_glove" not in table.column_names
    # only the data parquets, the rows recording their new checksums (X1, E13) and the meta documents changed;
    # videos keep their bytes
    assert _changed(before, digests(t)) == {D1, "data/chunk-000/episode-001.parquet", "meta/info.json",
                                            "meta/stats.json", "meta/episodes/chunk-000/episode-000.parquet",
                                            "meta/episodes/chunk-000/episode-001.parquet"}


def test_remove_column_and_its_stats(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "s", episodes=2), request)
    r = run_cli("edit", "remove-column", t.location, "observation.right_glove")
    assert r.returncode == 0, r.stderr
    assert t.errors() == []
    assert "observation.right_glove" not in read_info(t.location)["features"]
    assert_stats_recount(t.location)


def test_rename_slot_moves_videos_byte_for_byte(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "s", episodes=2), request)
    before = digests(t)
    r = run_cli("edit", "rename-slot", t.location, "cam", "head_rgb")
    assert r.returncode == 0, r.stderr
    after = digests(t)
    assert t.errors() == []
    assert after["videos/chunk-000/head_rgb/episode-000.mp4"] == before[V1]
    assert V1 not in after and V2 not in after
    info = read_info(t.location)
    assert set(info["video_extensions"]) == {"head_rgb"} and set(info["cameras"]) == {"head_rgb"}
    assert before[D1] == after[D1]
    if backend == "dir":
        assert not (t.local / "videos" / "chunk-000" / "cam").exists()


def test_remove_slot(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "s", episodes=2), request)
    r = run_cli("edit", "remove-slot", t.location, "cam")
    assert r.returncode == 0, r.stderr
    assert t.errors() == []
    assert not any(k.startswith("videos/") for k in digests(t))
    assert "cam" not in read_info(t.location)["video_extensions"]


def test_add_column_from_a_file_and_set_task(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "s", episodes=2, rows=4), request)
    np.save(tmp_path / "v.npy", np.arange(8, dtype=np.float32).reshape(4, 2))
    r = run_cli("edit", "add-column", t.location, "2", "observation.grip_label", "--from", str(tmp_path / "v.npy"))
    assert r.returncode == 0, r.stderr
    table = pq.read_table(io.BytesIO(t.read("data/chunk-000/episode-001.parquet")))
    assert table.column("observation.grip_label").to_pylist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert read_info(t.location)["features"]["observation.grip_label"] == {"dtype": "float32", "shape": [2]}
    r = run_cli("edit", "set-task", t.location, "pick up the red cup")
    assert r.returncode == 0, r.stderr
    assert read_tasks(t.location) == [{"task_index": 0, "task": "pick up the red cup"}]
    assert t.errors() == []
    assert_stats_recount(t.location)


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, backend, request):
    local = record(tmp_path / "s", episodes=2, rows=4)
    info = read_info(local)
    info["devices"] = [{"key": "uvc:wrist", "kind": "uvc", "name": "wrist", "slots": ["wrist_rgb"]},
                       {"key": "ble:glove", "kind": "ble_glove", "name": "glove", "slots": ["right_glove"]}]
    write_info(local, info)
    t = at(backend, local, request)
    before = digests(t)
    (tmp_path / "v.txt").write_text("1\n2\n3\n")
    (tmp_path / "empty.txt").write_text("")
    np.save(tmp_path / "cube.npy", np.zeros((4, 2, 2), np.float32))
    cases = [(("rename-slot", t.location, "cam", "wrist_rgb"), "used already (device uvc:wrist)"),
             (("remove-column", t.location, "observation.nope"), "no column 'observation.nope'"),
             (("rename-column", t.location, "observation.right_glove", "observation.Bad"), "observation.Bad"),
             (("add-column", t.location, "1", "observation.x", "--from", str(tmp_path / "v.txt")),
              "3 value(s) for episode 1, which has 4 rows"),
             (("add-column", t.location, "7", "observation.x", "--from", str(tmp_path / "v.txt")), "no episode 7"),
             (("remove-slot", t.location, "nope"), "no stream slot 'nope'"),
             (("remove-column", t.location, "observation.right_glove"), "written by device 'ble:glove'"),
             (("rename-column", t.location, "observation.right_glove", "observation.g"), "written by device"),
             (("add-column", t.location, "1", "observation.x", "--from", str(tmp_path / "empty.txt")),
              "holds no values"),
             (("add-column", t.location, "1", "observation.x", "--from", str(tmp_path / "cube.npy")),
              "(rows,) or (rows, d)"),
             (("split", t.location, "--into", str(tmp_path / "n"), "--episodes", "3"), "no episode 3")]
    for args, want in cases:
        r = run_cli("edit", *args)
        assert r.returncode == 1 and want in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)
    assert digests(t) == before


def test_rename_task_keeps_n_and_the_retired_ones(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "s", episodes=3), request)
    assert run_cli("delete", t.location, "3").returncode == 0
    before = digests(t)
    r = run_cli("edit", "rename", t.location, "place", "--json")
    assert r.returncode == 0, r.stderr
    new = t.location.rsplit("/", 1)[0] + "/place"
    n = TaskAt(backend, new, tmp_path / "s" / "place")
    assert n.errors() == []
    info = read_info(new)
    assert info["task_name"] == "place" and info["total_episodes"] == 3
    after = digests(n)
    same = {k for k in before if k not in ("meta/info.json",) and not k.endswith(".lock")}
    assert {k: after.get(k) for k in same} == {k: before[k] for k in same}  # every other object as it was
    assert "meta/edit_origins.jsonl" not in after  # a rename keeps N in the same task: no origins (E80)
    assert "meta/info.json" in json.loads(r.stdout)["writes"]  # its task_name was rewritten (E79)
    if backend == "bucket":
        from egopool.meta.retired import retired

        assert retired(n.store, 3)
        assert digests(t) == {}
    else:
        assert not (tmp_path / "s" / "pick").exists()


@pytest.mark.parametrize("stage", ["journal", "declared", "episode", "committed"])
def test_rename_slot_killed_at_each_step_then_rerun(tmp_path, backend, request, stage):
    t = at(backend, record(tmp_path / "s", episodes=2), request)
    args = ("edit", "rename-slot", t.location, "cam", "head_rgb")
    kill_at(tmp_path / "state", "edit", stage, *args)
    assert mid_edit(t, "rename-slot")  # until it is finished (E63)
    r = run_cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["resumed"] is True
    assert t.errors() == [] and not t.store.exists("meta/.edit.json")
    assert set(read_info(t.location)["video_extensions"]) == {"head_rgb"}
    assert {k for k in digests(t) if k.startswith("videos/")} == {"videos/chunk-000/head_rgb/episode-000.mp4",
                                                               "videos/chunk-000/head_rgb/episode-001.mp4"}


@pytest.mark.parametrize("stage", ["journal", "renamed"])
def test_rename_dir_killed_then_resumed(tmp_path, stage):
    local = record(tmp_path / "s", episodes=2)
    kill_at(tmp_path / "state", "edit", stage, "edit", "rename", str(local), "place")
    new = tmp_path / "s" / "place"
    if stage == "journal":  # killed before rename(2): the old task holds the journal; a re-run takes it over
        assert TaskAt("dir", str(local), local).errors() == []
        r = run_cli("edit", "rename", str(local), "place")
    else:  # killed after rename(2): task_name is set by resume (or the same command again)
        r = run_cli("edit", "resume", str(new))
    assert r.returncode == 0, r.stderr
    assert not local.exists()
    assert read_info(new)["task_name"] == "place" and TaskAt("dir", str(new), new).errors() == []


def test_a_second_edit_of_a_task_is_refused_while_the_first_runs(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "s", episodes=2), request)
    with paused(tmp_path / "state", "edit", "episode", "edit", "rename-slot", t.location, "cam", "head_rgb") as first:
        before = digests(t)
        second = run_cli("edit", "remove-column", t.location, "observation.right_glove")
        assert second.returncode == 1 and second.stderr.count("\n") == 1, second.stderr
        assert "`egopool edit rename-slot` is in progress" in second.stderr and "resume" not in second.stderr
        assert digests(t) == before  # the second wrote nothing
        done = first.release()
        assert done.returncode == 0, done.stderr
    assert t.errors() == [] and set(read_info(t.location)["video_extensions"]) == {"head_rgb"}


_KILLED = {  # op -> (its arguments after the task, the keys it may change; every other object stays byte-identical)
    "remove-column": (("observation.right_glove",), ("data/", "meta/episodes/", "meta/info.json", "meta/stats.json")),
    "add-column": (("2", "observation.grip_label", "--from", "{npy}"),
                   ("data/chunk-000/episode-001.parquet", "meta/episodes/chunk-000/episode-001.parquet",
                    "meta/info.json")),
    "set-task": (("pick up the red cup",), ("meta/tasks.jsonl",)),
}


@pytest.mark.parametrize("stage", ["journal", "declared", "episode", "committed"])
@pytest.mark.parametrize("op", sorted(_KILLED))
def test_inplace_change_killed_at_each_step_then_rerun(tmp_path, backend, request, op, stage):
    t = at(backend, record(tmp_path / "s", episodes=2, rows=4), request)
    np.save(tmp_path / "v.npy", np.arange(8, dtype=np.float32).reshape(4, 2))
    extra, may_change = _KILLED[op]
    args = ("edit", op, t.location, *(a.format(npy=tmp_path / "v.npy") for a in extra))
    before = digests(t)
    kill_at(tmp_path / "state", "edit", stage, *args)
    assert mid_edit(t, op) and t.store.exists("meta/.edit.json")  # until it is finished (E63)
    r = run_cli("edit", "resume", t.location, "--json") if op == "set-task" else run_cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["resumed"] is True
    assert t.errors() == [] and not t.store.exists("meta/.edit.json")
    after = digests(t)
    assert {k for k in set(before) | set(after) if before.get(k) != after.get(k)
            and not k.startswith(may_change)} == set()
    assert_stats_recount(t.location)
    info = read_info(t.location)
    if op == "remove-column":
        assert "observation.right_glove" not in info["features"]
    elif op == "add-column":
        table = pq.read_table(io.BytesIO(t.read("data/chunk-000/episode-001.parquet")))
        assert table.column("observation.grip_label").to_pylist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    else:
        assert read_tasks(t.location) == [{"task_index": 0, "task": "pick up the red cup"}]
