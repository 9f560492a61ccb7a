"""A column's companions follow it (docs/decisions.md E83; review 30c findings 1 and 2), on a directory and on
SeaweedFS, on a simulated ``--rig full`` task (S80C IMU, two grippers, two USB gloves): ``remove-column
observation.imu`` takes ``imu_ts_ns``, a glove sensor's ``_imu_quat`` / ``_imu_valid`` / ``status.<sensor>`` are
removed or renamed with ``observation.<sensor>``; ``observation.imu`` and ``imu_ts_ns`` are never renamed. Each:
``--dry-run`` names the companions and writes nothing, then ``validate`` clean, stats equal a recount, only the data
parquets, rows and meta documents change; a refusal is one line and writes nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from backends import TaskAt, run_cli
from edit_support import assert_stats_recount, at, digests

from egopool.meta.info import read_info
from egopool.meta.stats import read_stats

GLOVE = ("observation.left_glove", "observation.left_glove_imu_quat", "observation.left_glove_imu_valid",
         "status.left_glove")


@pytest.fixture(scope="module")
def full_task(tmp_path_factory) -> Path:
    """Two short episodes of the simulated full rig (built once; each test copies it)."""
    root = tmp_path_factory.mktemp("sim")
    r = run_cli("simulate", "--rig", "full", "-n", "2", "-s", "0.3", "--scale", "8", "--fast", "--out", str(root),
                "--task", "full", "--seed", "5")
    assert r.returncode == 0, r.stderr
    return root / "full"


@pytest.fixture(params=["dir", "bucket"])
def task(request, tmp_path, full_task) -> TaskAt:
    import shutil

    local = tmp_path / "full"
    shutil.copytree(full_task, local)
    return at(request.param, local, request)


def _schemas(t: TaskAt) -> list[list[str]]:
    keys = sorted(k for k in t.all_keys() if k.startswith("data/") and k.endswith(".parquet"))
    assert len(keys) == 2
    return [pq.read_schema(io.BytesIO(t.read(k))).names for k in keys]


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {k for k in set(before) | set(after) if before.get(k) != after.get(k)}


def _rewritten(t: TaskAt) -> set[str]:
    """What a column edit may rewrite: data parquets, rows, info.json, stats.json (videos never)."""
    return {k for k in t.all_keys() if k.startswith(("data/", "meta/episodes/")) and k.endswith(".parquet")} | \
        {"meta/info.json", "meta/stats.json"}


def _clean(t: TaskAt) -> None:
    assert t.errors() == []
    assert [w for w in t.warnings() if "task_name" not in w] == []  # the copy's directory name aside
    assert_stats_recount(t.location)


def _dry_run_names(t: TaskAt, args: list[str], companions: list[str]) -> None:
    before = digests(t)
    r = run_cli("edit", args[0], t.location, *args[1:], "--dry-run")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("companions of") and all(repr(c) in first for c in companions), r.stdout
    r = run_cli("edit", args[0], t.location, *args[1:], "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    assert all(repr(c) in json.loads(r.stdout)["notes"][0] for c in companions)
    assert digests(t) == before


def _refused(t: TaskAt, *args: str, words: tuple[str, ...]) -> None:
    before = digests(t)
    r = run_cli("edit", args[0], t.location, *args[1:])
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    assert digests(t) == before


def test_remove_imu_takes_its_stamps(task):
    """Review 30c #1: ``imu_ts_ns`` stayed and every episode failed validate ("exists without")."""
    t = task
    assert all({"observation.imu", "imu_ts_ns"} <= set(s) for s in _schemas(t))
    _dry_run_names(t, ["remove-column", "observation.imu"], ["imu_ts_ns"])
    before = digests(t)
    r = run_cli("edit", "remove-column", t.location, "observation.imu")
    assert r.returncode == 0, r.stderr
    assert "'imu_ts_ns'" in r.stdout.splitlines()[0]
    for names in _schemas(t):
        assert "observation.imu" not in names and "imu_ts_ns" not in names
        assert "observation.left_glove" in names  # the others stay
    info = read_info(t.location)
    assert "observation.imu" not in info["features"] and "imu_ts_ns" not in info["features"]
    assert "observation.imu" not in read_stats(t.location)
    assert _changed(before, digests(t)) <= _rewritten(t)
    _clean(t)


def test_imu_names_are_fixed_and_its_stamps_never_go_alone(task):
    t = task
    _refused(t, "rename-column", "observation.imu", "observation.head_imu",
             words=("'observation.imu' and 'imu_ts_ns'", "named by the spec", "nothing was changed"))
    _refused(t, "rename-column", "imu_ts_ns", "observation.head_imu_ts", words=("named by the spec",))
    _refused(t, "rename-column", "observation.left_hand_pose", "observation.imu", words=("named by the spec",))
    _refused(t, "remove-column", "imu_ts_ns",
             words=("holds the stamps of 'observation.imu'", "remove-column TASK observation.imu"))
    _refused(t, "rename-column", "raw_hw_ns", "host_clock", words=("frame-key column", "its name is fixed"))
    assert t.errors() == []


def test_rename_glove_sensor_renames_its_columns(task):
    """Review 30c #2: ``status.left_glove`` and ``observation.left_glove_imu_quat/_imu_valid`` kept the old name."""
    t = task
    new = ("observation.lglove", "observation.lglove_imu_quat", "observation.lglove_imu_valid", "status.lglove")
    _dry_run_names(t, ["rename-column", "observation.left_glove", "observation.lglove"], list(GLOVE[1:]))
    old_stats = read_stats(t.location)
    before = digests(t)
    r = run_cli("edit", "rename-column", t.location, "observation.left_glove", "observation.lglove")
    assert r.returncode == 0, r.stderr
    for names in _schemas(t):
        assert not set(GLOVE) & set(names) and set(new) <= set(names)
        assert "status.right_glove" in names and "observation.right_glove_imu_quat" in names
    info = read_info(t.location)
    assert info["sensors"] == ["lglove", "right_glove"]
    assert {"observation.lglove", "observation.lglove_imu_quat", "observation.lglove_imu_valid"} <= set(
        info["features"]) and not set(GLOVE) & set(info["features"])
    stats = read_stats(t.location)
    assert stats["observation.lglove"] == old_stats["observation.left_glove"]
    assert _changed(before, digests(t)) <= _rewritten(t)
    _clean(t)


def test_remove_glove_sensor_removes_its_columns(task):
    t = task
    _dry_run_names(t, ["remove-column", "observation.left_glove"], list(GLOVE[1:]))
    before = digests(t)
    r = run_cli("edit", "remove-column", t.location, "observation.left_glove")
    assert r.returncode == 0, r.stderr
    for names in _schemas(t):
        assert not set(GLOVE) & set(names)
        assert "observation.left_hand_pose" in names and "status.right_glove" in names  # no companion / not its
    info = read_info(t.location)
    assert info["sensors"] == ["right_glove"] and not set(GLOVE) & set(info["features"])
    assert "observation.left_glove" not in read_stats(t.location)
    assert _changed(before, digests(t)) <= _rewritten(t)
    _clean(t)


def test_a_sensor_companion_is_renamed_only_with_its_sensor(task):
    t = task
    _refused(t, "rename-column", "status.left_glove", "status.lg",
             words=("is the companion of 'observation.left_glove'", "rename 'observation.left_glove'"))
    _refused(t, "rename-column", "observation.left_glove_imu_quat", "observation.lg_imu_quat",
             words=("is the companion of 'observation.left_glove'",))
    _refused(t, "rename-column", "observation.left_glove", "observation.lg.x", words=("one segment",))
    _refused(t, "rename-column", "observation.left_glove", "observation.gripper_pose",
             words=("'gripper_pose' is a slot or sensor",))
    # a companion may go alone: a BLE glove has no IMU columns, a status column is sparse
    r = run_cli("edit", "remove-column", t.location, "status.left_glove")
    assert r.returncode == 0, r.stderr
    assert all("status.left_glove" not in s and "observation.left_glove" in s for s in _schemas(t))
    _clean(t)


@pytest.mark.parametrize("stage", ["episode", "committed"])
def test_a_killed_sensor_rename_is_finished_by_its_rerun(task, tmp_path, stage):
    """The companions are resolved from ``sensors`` at each run (E86): killed after the first episode (``sensors``
    still old) or after the final ``info.json`` (``sensors`` new already), the re-run leaves the same task."""
    from backends import kill_at

    t = task
    args = ("edit", "rename-column", t.location, "observation.left_glove", "observation.lglove")
    kill_at(tmp_path / "state", "edit", stage, *args)
    r = run_cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["resumed"] is True and not t.store.exists("meta/.edit.json")
    new = {"observation.lglove", "observation.lglove_imu_quat", "observation.lglove_imu_valid", "status.lglove"}
    for names in _schemas(t):
        assert not set(GLOVE) & set(names) and new <= set(names)
    info = read_info(t.location)
    assert info["sensors"] == ["lglove", "right_glove"] and not set(GLOVE) & set(info["features"])
    _clean(t)
