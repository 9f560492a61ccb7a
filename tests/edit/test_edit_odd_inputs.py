"""Odd inputs of ``egopool edit`` (issue-30 follow-up review, docs/decisions.md E34), on a directory and a real
SeaweedFS bucket: a task whose episodes were all deleted (only tombstones), locations with spaces, a target inside
a source task, a task merged into itself, an edit that changes nothing, ``s3://`` with no bucket."""

from __future__ import annotations

import json

from backends import run_cli
from edit_support import SENSOR, assert_stats_recount, at, digests, record, target_of

from egopool.meta.info import read_info
from egopool.meta.retired import retired


def _ok(r) -> dict:
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if r.stdout.startswith("{") else {}


def _refused(r, *words: str) -> None:
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


def test_a_task_with_only_tombstones(tmp_path, backend, request):
    """Every episode deleted: merged into, it numbers after its retired N; as a source it brings nothing; a split
    of it is refused; an in-place edit leaves it valid."""
    t = at(backend, record(tmp_path / "t", episodes=2), request)
    _ok(run_cli("delete", t.location, "1", "2"))
    other = at(backend, record(tmp_path / "o", episodes=1, first_value=60.0), request)
    r = run_cli("edit", "split", t.location, "--into", target_of(backend, tmp_path, t, "part"), "--where", "length>0")
    _refused(r, "no episode of", "matches the selection")
    doc = _ok(run_cli("edit", "merge", t.location, other.location, "--into", target_of(backend, tmp_path, t, "m"),
                      "--json"))
    assert [(e["source"], e["new_index"]) for e in doc["episodes"]] == [(other.location, 1)]
    doc = _ok(run_cli("edit", "merge", other.location, "--into", t.location, "--json"))
    assert [(e["index"], e["new_index"]) for e in doc["episodes"]] == [(1, 3)]  # 1 and 2 stay retired
    assert retired(t.store, 1) and retired(t.store, 2) and t.errors() == []
    _ok(run_cli("edit", "rename-column", t.location, SENSOR, "observation.left_glove"))
    assert t.errors() == [] and "observation.left_glove" in read_info(t.location)["features"]


def test_locations_with_spaces(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a b", name="pick up", episodes=2), request)
    b = at(backend, record(tmp_path / "c d", name="pick up", episodes=1, first_value=30.0), request)
    assert " " in a.location
    new = target_of(backend, tmp_path, a, "put down")
    doc = _ok(run_cli("edit", "merge", a.location, b.location, "--into", new, "--json"))
    assert [e["new_index"] for e in doc["episodes"]] == [1, 2, 3]
    _ok(run_cli("edit", "rename-slot", new, "cam", "head_rgb"))
    part = target_of(backend, tmp_path, a, "part two")
    _ok(run_cli("edit", "split", new, "--into", part, "--episodes", "2-3", "--move"))
    for where, total in ((new, 3), (part, 2)):
        assert read_info(where)["total_episodes"] == total
        assert run_cli("validate", where).returncode == 0
    assert_stats_recount(part)  # (the source's accumulator still counts the moved episodes, §4 / E4)


def test_a_target_inside_a_source_or_the_source_itself_is_refused(tmp_path, backend, request):
    a = at(backend, record(tmp_path / "a", episodes=2), request)
    b = at(backend, record(tmp_path / "b", episodes=1, first_value=30.0), request)
    before = digests(a)
    inner = a.location + "/part"
    _refused(run_cli("edit", "split", a.location, "--into", inner, "--episodes", "1"), "is inside the task",
             a.location)
    _refused(run_cli("edit", "merge", a.location, b.location, "--into", a.location + "/videos/x"),
             "is inside the task")
    _refused(run_cli("edit", "merge", a.location, "--into", a.location), f"cannot merge {a.location} into itself")
    assert digests(a) == before


def test_an_edit_that_changes_nothing_says_so(tmp_path, backend, request):
    t = at(backend, record(tmp_path / "t", episodes=1), request)
    before = digests(t)
    r = run_cli("edit", "set-task", t.location, "pick")  # the task string it has
    assert r.returncode == 0 and "nothing to do" in r.stdout, (r.stdout, r.stderr)
    assert digests(t) == before


def test_an_s3_uri_without_a_bucket_is_one_line(tmp_path):
    for args in (("rename-column", "s3://", SENSOR, "observation.x"), ("resume", "s3:///task")):
        _refused(run_cli("edit", *args), "names no bucket")


def _uvc_task(root):
    """Two episodes with a UVC-like slot ``cam`` and its ``status.cam`` connection column (§3)."""
    import numpy as np

    from egopool import StreamSpec, TaskWriter, vector_column
    from egopool.schema import status_column

    tw = TaskWriter(root, "uvc", fps=30.0, registry=False)
    for k in range(2):
        ep = tw.begin_episode(columns=[vector_column(SENSOR, [4]), status_column("cam")],
                              streams=[StreamSpec("cam", "rgb", 32, 24)], sensors=["right_glove"], sensor_dim=4,
                              created_at=1_700_000_000.0 + k)
        for i in range(3):
            ep.add_frame({SENSOR: np.full(4, k + i, np.float32), "status.cam": "connected"},
                         images={"cam": np.full((24, 32, 3), 9 * k + i, np.uint8)})
        ep.finish()
    return root / "uvc"


def _data_columns(t) -> set[str]:
    import io

    import pyarrow.parquet as pq

    return {c for k in t.keys() if k.startswith("data/") for c in pq.read_schema(io.BytesIO(t.read(k))).names}


def test_a_slots_status_column_follows_its_rename_and_goes_with_its_removal(tmp_path, backend, request):
    t = at(backend, _uvc_task(tmp_path / "s"), request)
    assert "status.cam" in _data_columns(t)
    before = digests(t)
    _refused(run_cli("edit", "rename-slot", t.location, "cam", "头部"), "status.cam", "no column name")
    assert digests(t) == before
    _ok(run_cli("edit", "rename-slot", t.location, "cam", "head_rgb"))
    cols = _data_columns(t)
    assert "status.head_rgb" in cols and "status.cam" not in cols and t.errors() == []
    _ok(run_cli("edit", "remove-slot", t.location, "head_rgb"))
    assert not [c for c in _data_columns(t) if c.startswith("status.")] and t.errors() == []


def test_an_s3_task_without_credentials_is_one_line(tmp_path):
    """No AWS credentials anywhere: boto3's chain finds none (obstore raised a ValueError traceback)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_EC2_METADATA_DISABLED="true", AWS_ENDPOINT_URL="http://127.0.0.1:9")
    a = record(tmp_path / "a", episodes=1)
    b = record(tmp_path / "b", episodes=1, first_value=20.0)
    r = subprocess.run([sys.executable, "-m", "egopool", "edit", "merge", str(a), str(b), "--into", "s3://bkt/p/t"],
                       capture_output=True, text=True, env=env, timeout=300)
    _refused(r, "no S3 credentials", "AWS_ACCESS_KEY_ID")


def test_new_task_names_follow_the_writers_rule(tmp_path):
    a = at("dir", record(tmp_path / "a", episodes=1), None)
    b = at("dir", record(tmp_path / "b", episodes=1, first_value=20.0), None)
    before = digests(a)
    for args in (("rename", a.location, "_hidden"), ("rename", a.location, "trailing "),
                 ("split", a.location, "--into", str(tmp_path / "_part"), "--episodes", "1"),
                 ("merge", a.location, b.location, "--into", str(tmp_path / "tab\there"))):
        _refused(run_cli("edit", *args), "invalid task name")
    assert digests(a) == before and not (tmp_path / "_part").exists()


def test_a_split_naming_no_episode_shows_the_list_syntax(tmp_path):
    a = at("dir", record(tmp_path / "a", episodes=1), None)
    _refused(run_cli("edit", "split", a.location, "--into", str(tmp_path / "p"), "--episodes", ","),
             "an empty item between commas", "--episodes 1,3,5-7")  # E96: an empty item is refused as such
    assert not (tmp_path / "p").exists()


def test_a_bucket_rename_leaves_an_old_task_that_changed_during_the_copy(tmp_path, request):
    """A delete in the old task while the bucket rename copies it is refused (the old task is held, E72); an object
    a writer that honours no hold adds meanwhile: the old task is not deleted (it would have lost what changed), the
    run says so in one line; a task with a publish claim is not renamed at all."""
    from backends import paused

    t = at("bucket", record(tmp_path / "t", episodes=2), request)
    new = t.location.rsplit("/", 1)[0] + "/renamed"
    with paused(tmp_path / "state", "edit", "committed", "edit", "rename", t.location, "renamed") as ren:
        r = run_cli("delete", t.location, "1")
        assert r.returncode == 1 and "`egopool edit rename` is in progress" in r.stderr, r.stderr
        t.store.put("notes.txt", b"a hand copy")  # the old task changes under the copy
        done = ren.release()
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "changed during the copy" in done.stderr and "left in place" in done.stderr
    assert t.errors() == [] and read_info(t.location)["total_episodes"] == 2  # the old task, whole
    assert run_cli("validate", new).returncode == 0 and read_info(new)["task_name"] == "renamed"
    other = at("bucket", record(tmp_path / "o", episodes=1), request)  # unchanged during the copy: renamed whole
    _ok(run_cli("edit", "rename", other.location, "moved"))
    assert not other.store.exists("meta/info.json") and not other.store.exists("data/chunk-000/episode-000.parquet")
    assert read_info(other.location.rsplit("/", 1)[0] + "/moved")["task_name"] == "moved"
