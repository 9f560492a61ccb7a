"""``egopool keypoints backfill`` on a directory and on a bucket (issue 24): the same values written, the other
columns as stored, the object's sha256 recorded; a SIGKILL at each step leaves a valid task and a re-run finishes."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from kp_helpers import write_hand_task, write_reference_mirror

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ops"))
from backends import kill_at, make_task_at, run_cli  # noqa: E402

from egopool.storage import open_store  # noqa: E402

HANDS = ("observation.left_hand_pose", "observation.right_hand_pose")


@pytest.fixture(params=["dir", "bucket"])
def backend(request):
    if request.param == "bucket":
        request.getfixturevalue("s3_server")
    return request.param


def _task(tmp_path, backend, s3):
    local = write_hand_task(tmp_path / "recordings", episodes=2, rows=40)
    mirror = tmp_path / "mirror"
    write_reference_mirror(local, 1, rows=40, offset=0, mirror_root=mirror)
    write_reference_mirror(local, 2, rows=40, offset=200, mirror_root=mirror)
    return make_task_at(backend, local, s3), mirror


def _table(t, n: int):
    return pq.read_table(io.BytesIO(t.read(f"data/chunk-000/episode-{n - 1:03d}.parquet")))


def test_backfill_writes_the_same_values_on_both(tmp_path, backend, request):
    t, mirror = _task(tmp_path, backend, request.getfixturevalue("s3_server") if backend == "bucket" else None)
    before = {n: _table(t, n) for n in (1, 2)}
    r = run_cli("keypoints", "backfill", t.location, "--mirror-root", str(mirror), "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    assert [e["status"] for e in json.loads(r.stdout)["episodes"]] == ["would write", "would write"]
    assert all(_table(t, n).equals(before[n]) for n in (1, 2))
    r = run_cli("keypoints", "backfill", t.location, "--mirror-root", str(mirror), "--json")
    assert r.returncode == 0, r.stderr
    assert [e["status"] for e in json.loads(r.stdout)["episodes"]] == ["written", "written"]
    for n in (1, 2):
        after = _table(t, n)
        right = np.asarray(after.column(HANDS[1]).combine_chunks().flatten().to_numpy(), np.float32)
        assert np.count_nonzero(right) > 0
        for name in after.column_names:
            if name not in HANDS:
                assert after.column(name).equals(before[n].column(name)), name
    assert t.errors() == []
    if backend == "bucket":
        import hashlib

        key = "data/chunk-000/episode-000.parquet"
        assert open_store(t.location).head(key).sha256 == hashlib.sha256(t.read(key)).hexdigest()
    r = run_cli("keypoints", "backfill", t.location, "--mirror-root", str(mirror), "--json")
    assert [e["status"] for e in json.loads(r.stdout)["episodes"]] == ["unchanged", "unchanged"]


def test_a_bucket_task_without_a_mirror_root_is_one_line(tmp_path, s3_server, monkeypatch):
    monkeypatch.delenv("EGOPOOL_KEYPOINTS_ROOT", raising=False)
    t, _ = _task(tmp_path, "bucket", s3_server)
    r = run_cli("keypoints", "backfill", t.location)
    assert r.returncode == 1 and "--mirror-root" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("stage", ["data"])
def test_sigkill_then_validate_then_rerun(tmp_path, backend, request, stage):
    t, mirror = _task(tmp_path, backend, request.getfixturevalue("s3_server") if backend == "bucket" else None)
    kill_at(tmp_path / "state", "backfill", stage, "keypoints", "backfill", t.location, "--mirror-root", str(mirror))
    assert t.errors() == []
    r = run_cli("keypoints", "backfill", t.location, "--mirror-root", str(mirror), "--json")
    assert r.returncode == 0, r.stderr
    assert [e["status"] for e in json.loads(r.stdout)["episodes"]] == ["unchanged", "written"]
    assert t.errors() == []
    if backend == "bucket":
        assert list(open_store(t.location.rsplit("/", 1)[0]).list(".egopool-server/")) == []


def test_sigkill_after_declaring_a_new_column_then_rerun(tmp_path, backend, request):
    """A task without the hand columns: info.json declares them before the data is replaced (a valid task)."""
    local = write_hand_task(tmp_path / "recordings", episodes=1, rows=40, hand_columns=False)
    mirror = tmp_path / "mirror"
    write_reference_mirror(local, 1, rows=40, mirror_root=mirror)
    t = make_task_at(backend, local, request.getfixturevalue("s3_server") if backend == "bucket" else None)
    kill_at(tmp_path / "state", "backfill", "declared", "keypoints", "backfill", t.location, "--mirror-root",
            str(mirror))
    assert set(HANDS) <= set(json.loads(t.read("meta/info.json"))["features"])
    assert not set(HANDS) & set(_table(t, 1).column_names)
    assert t.errors() == []
    r = run_cli("keypoints", "backfill", t.location, "--mirror-root", str(mirror), "--json")
    assert r.returncode == 0, r.stderr
    assert set(HANDS) <= set(_table(t, 1).column_names) and t.errors() == []
