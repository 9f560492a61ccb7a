"""``egopool repair force-scale`` on a directory and on a bucket (issue 24): the same evidence and result, only
the rows change (backed up first), a SIGKILL at each step leaves a valid task and a re-run finishes."""

from __future__ import annotations

import json

import pytest
from backends import kill_at, make_task_at, run_cli
from test_ops_repair import FM, strip_specs, write_force_episode

from egopool import TaskWriter
from egopool.storage import open_store


@pytest.fixture(params=["dir", "bucket"])
def backend(request):
    if request.param == "bucket":
        request.getfixturevalue("s3_server")
    return request.param


def _task(tmp_path, backend, s3):
    tw = TaskWriter(tmp_path / "rec", "umi")
    ns = {s: write_force_episode(tw, s, seed=s) for s in (10, 100)}
    local = tmp_path / "rec" / "umi"
    strip_specs(local, ns[10])
    strip_specs(local, ns[100], drop_column=True)
    return make_task_at(backend, local, s3), ns


def _scale(t, n: int) -> float | None:
    import io

    import pyarrow.parquet as pq

    key = f"meta/episodes/chunk-000/episode-{n - 1:03d}.parquet"
    row = pq.read_table(io.BytesIO(t.read(key))).to_pylist()[0]
    specs = json.loads(row.get("force_matrix_specs") or "{}")
    return (specs.get(FM) or {}).get("scale")


def test_scales_come_back_rows_only_with_a_backup(tmp_path, backend, request):
    t, ns = _task(tmp_path, backend, request.getfixturevalue("s3_server") if backend == "bucket" else None)
    data = {k: t.read(k) for k in t.keys() if k.startswith("data/")}
    r = run_cli("repair", "force-scale", t.location, "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    assert [e["status"] for e in json.loads(r.stdout)["episodes"]] == ["would repair", "would repair"]
    assert _scale(t, ns[10]) is None
    r = run_cli("repair", "force-scale", t.location, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [e["status"] for e in doc["episodes"]] == ["repaired", "repaired"]
    assert doc["backup"].startswith(".egopool_backup/repair-force-scale-")
    assert _scale(t, ns[10]) == 10 and _scale(t, ns[100]) == 100
    assert {k: t.read(k) for k in t.keys() if k.startswith("data/")} == data
    backups = [k for k in t.all_keys() if k.startswith(".egopool_backup/")]
    assert len(backups) == 2
    assert t.errors() == []
    r = run_cli("repair", "force-scale", t.location, "--json")
    assert json.loads(r.stdout)["already_ok"] == 2


@pytest.mark.parametrize("stage", ["backup", "row"])
def test_sigkill_then_validate_then_rerun(tmp_path, backend, request, stage):
    """Killed after the first row's backup, and after the first row's rewrite."""
    t, ns = _task(tmp_path, backend, request.getfixturevalue("s3_server") if backend == "bucket" else None)
    kill_at(tmp_path / "state", "force-scale", stage, "repair", "force-scale", t.location)
    assert t.errors() == []
    assert _scale(t, ns[10]) == (10 if stage == "row" else None)
    r = run_cli("repair", "force-scale", t.location, "--json")
    assert r.returncode == 0, r.stderr
    assert _scale(t, ns[10]) == 10 and _scale(t, ns[100]) == 100
    assert t.errors() == []
    if backend == "bucket":
        parent = t.location.rsplit("/", 1)[0]
        assert list(open_store(parent).list(".egopool-server/")) == []  # the killed run's claim was released
