"""``egopool repair clean`` on a directory and on a bucket (issue 24): in a bucket it handles what killed bucket
writers leave: stale journals (a publish rolled back, a delete rolled forward), incomplete multipart uploads,
orphan objects of an uncommitted N; ``--dry-run`` lists and writes nothing; a live writer's young journal stays."""

from __future__ import annotations

import json
import time

import pytest
from backends import kill_at, make_task_at, run_cli
from ops_helpers import write_task

from egopool.meta.retired import retired
from egopool.ops.task_store import claim_key
from egopool.storage import open_store


@pytest.fixture(params=["dir", "bucket"])
def backend(request):
    if request.param == "bucket":
        request.getfixturevalue("s3_server")
    return request.param


def _task(tmp_path, backend, request, episodes=2):
    local = write_task(tmp_path / "rec", episodes=episodes)
    return make_task_at(backend, local, request.getfixturevalue("s3_server") if backend == "bucket" else None)


def test_a_clean_task_has_nothing_to_clean(tmp_path, backend, request):
    t = _task(tmp_path, backend, request)
    before = t.all_keys()
    r = run_cli("repair", "clean", t.location)
    assert r.returncode == 0, r.stderr
    assert "nothing to clean" in r.stdout
    assert t.all_keys() == before and t.errors() == []


def _journal(t, n: int, *, age: float, files: list[str], op: str | None = None) -> str:
    name = t.location.rsplit("/", 1)[1]
    parent = open_store(t.location.rsplit("/", 1)[0])
    doc = {"task": name, "index": n, "owner": "dead-server", "created_at": time.time() - age,
           "files": [f"{name}/{k}" for k in files], "commit": f"{name}/meta/episodes/chunk-000/episode-{n - 1:03d}.parquet"}
    if op:
        doc["op"] = op
    key = claim_key(name, n)
    parent.put(key, json.dumps(doc).encode())
    return key


def test_bucket_leftovers_of_dead_writers_are_listed_then_cleaned(tmp_path, s3_server):
    t = make_task_at("bucket", write_task(tmp_path / "rec", episodes=3), s3_server)
    store = t.store
    # a publish of N=9 killed after its data (journal 7 h old): rolled back
    store.put("data/chunk-000/episode-008.parquet", b"PAR1 partial")
    _journal(t, 9, age=7 * 3600, files=["data/chunk-000/episode-008.parquet"])
    # a publish of N=10 at work right now: left alone
    store.put("data/chunk-000/episode-009.parquet", b"PAR1 live")
    _journal(t, 10, age=5, files=["data/chunk-000/episode-009.parquet"])
    # orphans of N=12 (no row, no journal)
    store.put("videos/chunk-000/cam/episode-011.mp4", b"\x00" * 10)
    # a delete of N=2 killed after its journal (8 h old): rolled forward
    _journal(t, 2, age=8 * 3600, op="delete", files=["data/chunk-000/episode-001.parquet"])
    # an incomplete multipart upload under the task
    from egopool.storage.bucket import Bucket

    b = Bucket(t.location)
    up = b.client.create_multipart_upload(Bucket=b.name, Key=b.key("videos/chunk-000/cam/episode-012.mp4"))
    before = t.all_keys()
    r = run_cli("repair", "clean", t.location, "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert t.all_keys() == before
    assert doc["orphans"] == ["videos/chunk-000/cam/episode-011.mp4"]
    assert doc["in_progress"] == [10]
    assert sorted(doc["journals"]) == ["would finish the interrupted delete of episode 2",
                                       "would roll back the interrupted publish of episode 9"]
    assert doc["uploads"] == []  # begun just now: a live writer's
    r = run_cli("repair", "clean", t.location, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    keys = t.keys()
    assert "data/chunk-000/episode-008.parquet" not in keys and "videos/chunk-000/cam/episode-011.mp4" not in keys
    assert "data/chunk-000/episode-009.parquet" in keys  # the live publish's object
    assert not any("episode-001" in k for k in keys) and retired(store, 2)
    assert [u[1] for u in b.incomplete_uploads("")] == [up["UploadId"]]
    names = {m.key for m in open_store(t.location.rsplit("/", 1)[0]).list(".egopool-server/")}
    assert names == {claim_key(t.location.rsplit("/", 1)[1], 10)}


def test_an_old_incomplete_multipart_upload_is_aborted(tmp_path, s3_server):
    from egopool.storage.bucket import Bucket

    t = make_task_at("bucket", write_task(tmp_path / "rec", episodes=1), s3_server)
    b = Bucket(t.location)
    b.client.create_multipart_upload(Bucket=b.name, Key=b.key("videos/chunk-000/cam/episode-003.mp4"))
    r = run_cli("repair", "clean", t.location, "--dry-run", "--stale-after", "0")
    assert r.returncode == 0 and "would abort 1 incomplete multipart upload" in r.stdout, r.stdout + r.stderr
    assert len(b.incomplete_uploads("")) == 1
    r = run_cli("repair", "clean", t.location, "--json", "--stale-after", "0")
    assert json.loads(r.stdout)["uploads"] == ["videos/chunk-000/cam/episode-003.mp4"]
    assert b.incomplete_uploads("") == []


def test_sigkill_during_clean_then_rerun(tmp_path, s3_server):
    t = make_task_at("bucket", write_task(tmp_path / "rec", episodes=2), s3_server)
    t.store.put("data/chunk-000/episode-004.parquet", b"PAR1 partial")
    _journal(t, 5, age=7 * 3600, files=["data/chunk-000/episode-004.parquet"])
    t.store.put("videos/chunk-000/cam/episode-007.mp4", b"\x00")
    found = t.errors()
    assert found and all("episode 8" in e for e in found)  # the orphan (N=5's objects are under its journal)
    kill_at(tmp_path / "state", "clean", "journals", "repair", "clean", t.location)
    assert set(t.errors()) <= set(found)  # a killed clean makes nothing worse
    r = run_cli("repair", "clean", t.location, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["orphans"] == ["videos/chunk-000/cam/episode-007.mp4"]
    assert t.errors() == [] and not any("episode-00" + d in k for k in t.keys() for d in "47")


def test_directory_clean_is_unchanged_by_the_bucket_path(tmp_path):
    t = make_task_at("dir", write_task(tmp_path / "rec", episodes=1), None)
    stale = t.local / "data" / "chunk-000" / ".episode-000.parquet.0123abcd.tmp"
    stale.write_bytes(b"x")
    r = run_cli("repair", "clean", t.location, "--json")
    assert r.returncode == 0, r.stderr
    assert not stale.exists()


def test_sigkill_during_a_directory_clean_then_rerun(tmp_path):
    """A dead recorder's reservation of N=3 (no row): rolled back; killed right after, the re-run finds nothing."""

    t = make_task_at("dir", write_task(tmp_path / "rec", episodes=2), None)
    stale = t.local / "data" / "chunk-000" / ".episode-002.parquet.0123abcd.tmp"
    stale.write_bytes(b"x")
    (t.local / "meta" / ".reserved-3").write_text(str(2**22 + 12345))  # no such pid
    kill_at(tmp_path / "state", "clean", "reclaimed", "repair", "clean", t.location)
    assert t.errors() == []
    r = run_cli("repair", "clean", t.location, "--json")
    assert r.returncode == 0, r.stderr
    assert not stale.exists() and not (t.local / "meta" / ".reserved-3").exists()
    assert t.errors() == []
