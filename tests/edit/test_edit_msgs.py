"""Issue 30's third review, on a directory and on SeaweedFS (docs/decisions.md E55-E61): a target whose parent
directory is missing, what the dry runs of set-task and remove-slot say, the new task of an interrupted merge as
other commands see it, a task string on two lines, a slot name that says the wrong kind, a merged tasks.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from backends import TaskAt, kill_at, run_cli
from edit_support import at, digests, record, target_of

from egopool import StreamSpec, TaskWriter
from egopool.meta.info import read_info
from egopool.meta.tasks import read_tasks

V1, V2 = "videos/chunk-000/cam/episode-000.mp4", "videos/chunk-000/cam/episode-001.mp4"


def _one_line(r, *says: str) -> None:
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.count("\n") <= 2 and "Traceback" not in r.stderr, r.stderr
    for s in says:
        assert s in r.stderr, r.stderr


@pytest.mark.parametrize("dry", [False, True])
def test_merge_and_split_refuse_a_target_whose_parent_directory_is_missing(tmp_path, dry):
    a, b = record(tmp_path / "a"), record(tmp_path / "b", first_value=50.0)
    into = tmp_path / "nonexistent" / "dir" / "x"
    extra = ("--dry-run",) if dry else ()
    for args in (("merge", str(a), str(b)), ("split", str(a), "--episodes", "1")):
        r = run_cli("edit", *args, "--into", str(into), *extra)
        _one_line(r, f"the parent directory {into.parent} does not exist", f"mkdir -p {into.parent}")
        assert not (tmp_path / "nonexistent").exists()  # nothing written, not even a directory
    (tmp_path / "nonexistent" / "dir").mkdir(parents=True)  # the fix
    r = run_cli("edit", "merge", str(a), str(b), "--into", str(into))
    assert r.returncode == 0, r.stderr
    assert read_info(into)["total_episodes"] == 4


def test_set_task_shows_each_string_it_changes(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "s", episodes=2), request)
    before = digests(t)
    r = run_cli("edit", "set-task", t.location, "pick up the red cup", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "would set task_index 0: 'pick' -> 'pick up the red cup'" in r.stdout, r.stdout
    r = run_cli("edit", "set-task", t.location, "pick up the red cup", "--dry-run", "--json")
    assert json.loads(r.stdout)["tasks"] == [{"task_index": 0, "old": "pick", "new": "pick up the red cup"}]
    assert digests(t) == before
    r = run_cli("edit", "set-task", t.location, "pick up the red cup", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["tasks"] == [{"task_index": 0, "old": "pick", "new": "pick up the red cup"}] and not doc["dry_run"]
    assert read_tasks(t.location) == [{"task_index": 0, "task": "pick up the red cup"}]


def test_remove_slot_says_delete_for_the_videos_it_deletes(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "s", episodes=2), request)
    before = digests(t)
    r = run_cli("edit", "remove-slot", t.location, "cam", "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert f"would delete episode 1: {V1}" in lines and f"would delete episode 2: {V2}" in lines, r.stdout
    rewrite = [ln for ln in lines if ln.startswith("would rewrite")]
    assert rewrite and not any(".mp4" in ln for ln in rewrite), r.stdout  # the rows (their digests) are rewritten
    r = run_cli("edit", "remove-slot", t.location, "cam", "--dry-run", "--json")
    doc = json.loads(r.stdout)
    assert doc["deleted"] == {"1": [V1], "2": [V2]}
    assert not any(k.endswith(".mp4") for keys in doc["episodes"].values() for k in keys)
    assert digests(t) == before
    r = run_cli("edit", "remove-slot", t.location, "cam", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["deleted"] == {"1": [V1], "2": [V2]}
    assert V1 not in t.keys() and t.errors() == []


def test_the_new_task_of_an_interrupted_merge_names_the_edit_and_resume(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a", episodes=1), request)
    b = at(backend, record(tmp_path / "b", episodes=1, first_value=50.0), request)
    into = target_of(backend, tmp_path, a, "half")
    kill_at(tmp_path / "state", "edit", "episode", "edit", "merge", a.location, b.location, "--into", into)
    fix = f"`egopool edit resume {into}` finishes it"
    r = run_cli("validate", into)
    assert r.returncode != 0 and "interrupted `egopool edit merge`" in r.stdout + r.stderr, r.stdout + r.stderr
    assert fix in r.stdout + r.stderr and "does not exist" not in r.stdout + r.stderr, r.stdout + r.stderr
    for args in (("info", into), ("edit", "set-task", into, "x"), ("edit", "merge", a.location, "--into", into)):
        r = run_cli(*args)
        _one_line(r, "interrupted `egopool edit merge`", fix)
    r = run_cli("edit", "resume", into)
    assert r.returncode == 0, r.stderr
    assert TaskAt(backend, into, tmp_path).errors() == []


def test_set_task_refuses_a_string_another_line_holds_and_a_merged_task_validates_clean(tmp_path, backend,
                                                                                         request):
    a = at(backend, record(tmp_path / "a", episodes=1), request)
    b = at(backend, record(tmp_path / "b", "place", episodes=1, first_value=50.0), request)
    into = target_of(backend, tmp_path, a, "both")
    assert run_cli("edit", "merge", a.location, b.location, "--into", into).returncode == 0
    t = TaskAt(backend, into, tmp_path)
    assert read_tasks(into) == [{"task_index": 0, "task": "pick"}, {"task_index": 1, "task": "place"}]
    assert t.errors() == [] and t.warnings() == []  # two instructions, one line each: the spec's (E61)
    before = digests(t)
    r = run_cli("edit", "set-task", into, "pick", "--task-index", "1")
    _one_line(r, "'pick' is task_index 0 of", "another string")
    assert digests(t) == before
    r = run_cli("edit", "set-task", into, "place it", "--task-index", "1")
    assert r.returncode == 0, r.stderr
    assert read_tasks(into)[1] == {"task_index": 1, "task": "place it"} and t.warnings() == []


def _depth_task(root: Path, slot: str) -> Path:
    tw = TaskWriter(root, "d", fps=30.0, registry=False)
    ep = tw.begin_episode(streams=[StreamSpec("cam_rgb", "rgb", 32, 24), StreamSpec(slot, "depth", 32, 24,
                                                                                   codec="ffv1")])
    for i in range(3):
        ep.add_frame({}, images={"cam_rgb": np.full((24, 32, 3), 9 * i, np.uint8),
                                 slot: np.full((24, 32), 500 + i, np.uint16)})
    ep.finish()
    return root / "d"


def test_a_slot_name_says_its_stream_kind(tmp_path, backend, request):
    t = at(backend, _depth_task(tmp_path / "s", "d"), request)  # a depth slot named "d": its codec says depth
    before = digests(t)
    _one_line(run_cli("edit", "rename-slot", t.location, "cam_rgb", "cam_depth"),
              "'cam_rgb' holds an RGB stream", "'cam_depth' is a depth slot name", "e.g. cam_rgb")
    _one_line(run_cli("edit", "rename-slot", t.location, "d", "e"), "'d' holds a depth stream",
              "<prefix>_depth", "e.g. d_depth")
    assert digests(t) == before
    assert run_cli("edit", "rename-slot", t.location, "d", "head_depth").returncode == 0
    _one_line(run_cli("edit", "rename-slot", t.location, "head_depth", "head_rgb"), "'head_depth' holds a depth",
              "e.g. head_depth")
    assert run_cli("edit", "rename-slot", t.location, "head_depth", "head_depth_2").returncode == 0
    assert run_cli("edit", "rename-slot", t.location, "cam_rgb", "wrist_rgb").returncode == 0
    assert set(read_info(t.location)["video_extensions"]) == {"wrist_rgb", "head_depth_2"}
    assert t.errors() == []
