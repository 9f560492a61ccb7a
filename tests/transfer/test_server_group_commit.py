"""The group commit of the publishes waiting for one task's guard (issue 15 H, docs/decisions.md U18), on the
real Importer, database and disk.

* uploads that queue while the guard is held are published as one group: one ``server.db`` transaction
  and one info/stats merge for all of them (spies on the real functions), each episode its own distinct N,
  its own journal and row; ``stats.json`` equals a recomputation from data/;
* a refused upload in a group gets its own refusal and the others publish; the same content twice in one
  group is imported once and answered ``duplicate`` once;
* a server SIGKILLed between two commits of one group, then restarted: the committed episode stays (its
  database row recorded, the merge replayed), the uncommitted ones are rolled back byte for byte, and the
  clients' retries import them;
* a full disk before one episode's commit rolls back that episode and the group's higher N (507 each), the
  lower N is published, and the next upload takes the first free N (no gap, U2).
"""

from __future__ import annotations

import errno
import hashlib
import json
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from transfer_helpers import ServerProc, store_files, write_task

from egopool import StreamSpec, TaskWriter, vector_column
from egopool.errors import UploadRejectedError
from egopool.layout import list_task_episodes
from egopool.meta.stats import recalc_stats
from egopool.registry import sha256_file
from egopool.publish import commit as publish_mod
from egopool.server.db import ServerDB
from egopool.server.importer import Importer, ImportResult, Verified
from egopool.server.store import ServerStore as Store
from egopool.transfer import pack_episodes
from egopool.validate import validate_task

TASK = "pick"


def _zip(root: Path, name: str, first_value: float, fps: float = 30.0) -> Path:
    if fps == 30.0:
        task = write_task(root / name, TASK, 1, rows=4, registry=False, first_value=first_value)
    else:  # the same columns at another rate: a declaration the task cannot take (409, U3)
        tw = TaskWriter(root / name, TASK, fps=fps, registry=False)
        ep = tw.begin_episode(columns=[vector_column("observation.right_glove", [4])],
                              streams=[StreamSpec("cam", "rgb", 32, 24)], sensors=["right_glove"], sensor_dim=4,
                              created_at=1_700_000_000.0)
        for i in range(4):
            ep.add_frame({"observation.right_glove": np.arange(4, dtype=np.float32) + first_value + i},
                         images={"cam": np.full((24, 32, 3), 10 * i, np.uint8)})
        ep.finish()
        task = root / name / TASK
    return pack_episodes(task, [1], root / f"{name}-zips", registry=False)[0].path


def _import(imp: Importer, zip_path: Path) -> ImportResult:
    v, sha = _verify(imp, zip_path)
    return imp.publish(v, zip_sha256=sha)


def _verify(imp: Importer, zip_path: Path) -> tuple[Verified, str]:
    upload_id = imp.store.db.start_upload(None, "127.0.0.1")
    return (imp.verify(zip_path, task=TASK, form_index=None, upload_id=upload_id),
            hashlib.sha256(zip_path.read_bytes()).hexdigest())


def _publish_as_one_group(imp: Importer, verified: list[tuple[Verified, str]]) -> list[ImportResult | Exception]:
    """Publish every upload from its own thread while the test holds the task's guard, so that all of them
    queue behind it, in the order given; released once all are queued, they are taken by one leader."""
    out: list[Any] = [None] * len(verified)

    def run(i: int) -> None:
        try:
            out[i] = imp.publish(verified[i][0], zip_sha256=verified[i][1])
        except Exception as exc:  # the refusal this upload gets, in its own thread
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(verified))]
    with imp.store.task_guard(TASK):
        for i, t in enumerate(threads):  # one after the other: they queue in this order
            t.start()
            deadline = time.monotonic() + 120
            while imp._groups.waiting(TASK) < i + 1:
                assert time.monotonic() < deadline, "the publish never queued"
                time.sleep(0.01)
    for t in threads:
        t.join(120)
    return out


class _Spy:
    """Counts the calls of a real function (and keeps their arguments) and runs it."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.calls = fn, []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(args)
        return self.fn(*args, **kwargs)


@pytest.fixture
def spies(monkeypatch) -> tuple[_Spy, _Spy]:
    """The database transactions recording imported episodes, and the info/stats merges."""
    db_spy = _Spy(ServerDB.add_episodes_imported)
    merge_spy = _Spy(publish_mod.merge_meta)
    monkeypatch.setattr(ServerDB, "add_episodes_imported", lambda self, rows: db_spy(self, rows))
    monkeypatch.setattr(publish_mod, "merge_meta", merge_spy)
    return db_spy, merge_spy


def _journals(store: Path | None) -> list[Path]:
    """The publish journals in a directory store (``.egopool-server/journals/<task hash>/<N>.json``)."""
    assert store is not None
    return sorted((store / ".egopool-server/journals").rglob("*.json"))


def _stats_match(task: Path) -> None:
    stored = json.loads((task / "meta/stats.json").read_text())
    fresh = recalc_stats(task)
    assert stored.keys() == fresh.keys()
    for col in fresh:
        assert stored[col]["count"] == fresh[col]["count"], col
        for k in ("mean", "std", "min", "max"):
            assert np.allclose(stored[col][k], fresh[col][k], rtol=0, atol=1e-9), (col, k)


def _db_episodes(store: Store) -> list[tuple[int, int, str]]:
    return [(r.episode_index, r.client_episode_index, r.episode_digest) for r in store.db.episodes(TASK).values()]


@pytest.fixture(params=["directory", "bucket"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A server store in a directory, or in a fresh prefix of the test bucket with its state in tmp_path (O26:
    one publish on both)."""
    if request.param == "directory":
        return Store(tmp_path / "store")
    pytest.importorskip("boto3")
    s3 = request.getfixturevalue("s3_server")
    s3.create_bucket("pool")
    return Store(f"s3://pool/{uuid.uuid4().hex[:10]}", state=tmp_path / "state")


def _task_copy(store: Store, dest: Path) -> Path:
    """The task as a local directory: the store's own (a directory store) or a download of its objects."""
    if store.root is not None:
        return store.root / TASK
    for o in store.objects.list(f"{TASK}/"):
        got = store.objects.get(o.key)
        assert got is not None
        (dest / o.key).parent.mkdir(parents=True, exist_ok=True)
        (dest / o.key).write_bytes(got[0])
    return dest / TASK


def test_uploads_waiting_for_the_guard_are_published_as_one_group(tmp_path: Path, spies, any_store: Store) -> None:
    db_spy, merge_spy = spies
    store = any_store
    imp = Importer(store)
    first = _import(imp, _zip(tmp_path, "pc0", 0.0))  # creates the task (published alone)
    assert (first.status, first.episode_index) == ("imported", 1)
    db_spy.calls.clear()
    merge_spy.calls.clear()

    verified = [_verify(imp, _zip(tmp_path, f"pc{k}", 100.0 * k)) for k in range(1, 7)]
    results = _publish_as_one_group(imp, verified)

    assert all(isinstance(r, ImportResult) and r.status == "imported" for r in results), results
    ns = sorted(r.episode_index for r in results)  # type: ignore[union-attr]
    assert ns == [2, 3, 4, 5, 6, 7]  # all renumbered (every PC's client N is 1), distinct, no gap
    assert all(r.renumbered and r.client_episode_index == 1 for r in results)  # type: ignore[union-attr]
    assert len(db_spy.calls) == 1 and len(db_spy.calls[0][1]) == 6  # one database transaction for the group
    assert sorted(row.episode_index for row, _ in db_spy.calls[0][1]) == ns
    assert len(merge_spy.calls) == 1  # one info/stats merge for the group
    assert sorted(n for n, _, _ in merge_spy.calls[0][2]) == ns

    task = _task_copy(store, tmp_path / "copy")
    assert [g.index for g in list_task_episodes(task)] == [1, *ns]
    assert not list(store.objects.list(".egopool-server/journals/"))  # every journal gone
    assert not list((task / "meta").glob(".pending-*"))
    assert json.loads((task / "meta/info.json").read_text())["total_episodes"] == 7
    _stats_match(task)
    assert validate_task(task).ok
    assert sorted(_db_episodes(store)) == sorted(
        [(1, 1, first.episode_digest)] + [(r.episode_index, 1, r.episode_digest) for r in results])  # type: ignore
    assert len({r.episode_digest for r in results}) == 6  # type: ignore[union-attr]
    for r in results:  # the answer's files are the files as published
        assert r.files == {rel: sha256_file(task / rel) for rel in r.files}  # type: ignore[union-attr]
        assert len(r.files) == 3  # type: ignore[union-attr]
    uploads = {u.id: u for u in store.db.uploads(limit=20)}
    for r in results:
        assert (uploads[r.upload_id].outcome, uploads[r.upload_id].server_episode_index) == (  # type: ignore
            "imported", r.episode_index)  # type: ignore[union-attr]


def test_a_refusal_in_a_group_is_that_uploads_alone(tmp_path: Path, spies) -> None:
    db_spy, merge_spy = spies
    store = Store(tmp_path / "store")
    imp = Importer(store)
    _import(imp, _zip(tmp_path, "pc0", 0.0))
    db_spy.calls.clear()
    merge_spy.calls.clear()
    before = store_files(store.root)
    a_zip = _zip(tmp_path, "pc1", 100.0)
    verified = [_verify(imp, a_zip), _verify(imp, _zip(tmp_path, "pc2", 200.0, fps=15.0)),
                _verify(imp, _zip(tmp_path, "pc3", 300.0)), _verify(imp, a_zip)]  # the last: pc1's again

    a, refused, c, again = _publish_as_one_group(imp, verified)

    assert isinstance(refused, UploadRejectedError)
    assert (refused.status, refused.reason) == (409, "declaration_conflict") and "fps" in refused.message
    assert isinstance(a, ImportResult) and isinstance(c, ImportResult)
    assert (a.status, c.status) == ("imported", "imported")
    assert sorted([a.episode_index, c.episode_index]) == [2, 3]  # the refused upload took no N
    assert isinstance(again, ImportResult)  # the same content twice: imported once, then a duplicate
    assert (again.status, again.episode_index, again.files) == ("duplicate", a.episode_index, a.files)
    assert len(db_spy.calls) == 1 and sorted(r.episode_index for r, _ in db_spy.calls[0][1]) == [2, 3]
    assert len(merge_spy.calls) == 1
    task = store.root / TASK
    assert [g.index for g in list_task_episodes(task)] == [1, 2, 3]
    after = store_files(store.root)
    assert {k: v for k, v in after.items() if k in before and not k.startswith(("pick/meta/info.json",
                                                                                  "pick/meta/stats.json"))} == \
        {k: v for k, v in before.items() if not k.startswith(("pick/meta/info.json", "pick/meta/stats.json"))}
    assert json.loads((task / "meta/info.json").read_text())["fps"] == 30.0
    _stats_match(task)
    assert validate_task(task).ok


_KILL_BETWEEN_COMMITS = r"""
import os, signal, sys, threading, time
from pathlib import Path
from egopool.server.importer import Importer
from egopool.server.store import ServerStore
import errno
import hashlib

store = ServerStore(Path(sys.argv[1]))
imp = Importer(store)
verified = []
for z in sys.argv[2:]:
    uid = store.db.start_upload(None, "127.0.0.1")
    verified.append((imp.verify(Path(z), task="pick", form_index=None, upload_id=uid),
                     hashlib.sha256(Path(z).read_bytes()).hexdigest()))
rows = f"{store.root / 'pick' / 'meta' / 'episodes'}{os.sep}"
real_link, commits = os.link, []

def link(src, dst, *a, **k):  # a directory store's CREATE: the row's link is the commit
    if str(dst).startswith(rows):
        if commits:  # the group's second commit: the server dies right before it
            os.kill(os.getpid(), signal.SIGKILL)
        commits.append(dst)
    return real_link(src, dst, *a, **k)

os.link = link
threads = [threading.Thread(target=lambda v=v: imp.publish(v[0], zip_sha256=v[1])) for v in verified]
with store.task_guard("pick"):
    for t in threads:
        t.start()
    while imp._groups.waiting("pick") < len(verified):
        time.sleep(0.01)
for t in threads:
    t.join()
print("not killed")
"""


@pytest.mark.extra("server")
def test_a_server_killed_between_two_commits_of_a_group_keeps_the_committed_one(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from egopool.transfer import upload_episodes
    pcs = [write_task(tmp_path / f"pc{k}", TASK, 1, rows=4, first_value=100.0 * k) for k in range(4)]
    store = tmp_path / "store"
    with ServerProc(store) as srv:
        assert upload_episodes(pcs[0], [1], server=srv.url).ok
    before = store_files(store)
    zips = [pack_episodes(pc, [1], tmp_path / f"zips{k}", registry=False)[0].path for k, pc in enumerate(pcs[1:], 1)]

    proc = subprocess.run([sys.executable, "-c", _KILL_BETWEEN_COMMITS, str(store), *map(str, zips)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9, proc.stdout + proc.stderr  # SIGKILLed mid-group
    journals = _journals(store)
    assert len(journals) == 3  # one journal per episode of the group
    mid = store_files(store)
    assert "pick/meta/episodes/chunk-000/episode-001.parquet" in mid  # N=2 committed
    assert "pick/meta/episodes/chunk-000/episode-002.parquet" not in mid  # N=3, 4 placed, not committed
    assert "pick/data/chunk-000/episode-002.parquet" in mid and "pick/data/chunk-000/episode-003.parquet" in mid

    with ServerProc(store) as srv:  # start-up recovery
        assert not _journals(store)
        after = store_files(store)
        assert [g.index for g in list_task_episodes(store / TASK)] == [1, 2]
        n2 = {k for k in after if "episode-001." in k and "/chunk-000/" in k}
        assert n2 == {"pick/data/chunk-000/episode-001.parquet", "pick/meta/episodes/chunk-000/episode-001.parquet",
                      "pick/videos/chunk-000/cam/episode-001.mp4"}
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)} - n2
        assert changed == {"pick/meta/info.json", "pick/meta/stats.json"}  # N=3, 4 rolled back byte for byte
        assert json.loads((store / "pick/meta/info.json").read_text())["total_episodes"] == 2
        _stats_match(store / TASK)
        con = sqlite3.connect(store / ".egopool-server/server.db")
        try:  # the committed episode's row, recorded from its journal
            assert con.execute("SELECT episode_index FROM episodes WHERE task = ? ORDER BY 1", (TASK,)).fetchall() == \
                [(1,), (2,)]
        finally:
            con.close()
        # the clients' retries: the committed one is a duplicate, the rolled-back ones are imported
        outcomes = [upload_episodes(pc, [1], server=srv.url).outcomes[0] for pc in pcs[1:]]
        assert sorted(o.status for o in outcomes) == ["duplicate", "uploaded", "uploaded"]
        assert sorted(o.server_episode_index for o in outcomes) == [2, 3, 4]
    assert [g.index for g in list_task_episodes(store / TASK)] == [1, 2, 3, 4]
    assert validate_task(store / TASK).ok
    _stats_match(store / TASK)


def test_a_disk_fault_before_a_commit_rolls_back_that_episode_and_the_higher_ones(tmp_path: Path, spies,
                                                                                   monkeypatch) -> None:
    """A full disk while N=3's data parquet is put: N=3 and N=4 (uncommitted, above it) are
    rolled back and answered 507, N=2 is published — no N stays free below a published one (U2)."""
    db_spy, merge_spy = spies
    store = Store(tmp_path / "store")
    imp = Importer(store)
    _import(imp, _zip(tmp_path, "pc0", 0.0))
    before = store_files(store.root)
    real_put = publish_mod._put

    def put(store: Any, path: Path, key: str, sha: Any, synced: bool = False) -> None:
        if key == "pick/data/chunk-000/episode-002.parquet":  # N=3's data parquet
            raise OSError(errno.ENOSPC, "No space left on device")
        real_put(store, path, key, sha, synced)

    monkeypatch.setattr(publish_mod, "_put", put)
    db_spy.calls.clear()
    results = _publish_as_one_group(imp, [_verify(imp, _zip(tmp_path, f"pc{k}", 100.0 * k)) for k in (1, 2, 3)])

    ok, full1, full2 = results
    assert isinstance(ok, ImportResult) and (ok.status, ok.episode_index) == ("imported", 2)
    for r in (full1, full2):
        assert isinstance(r, UploadRejectedError) and (r.status, r.reason) == (507, "insufficient_storage")
    task = store.root / TASK
    assert [g.index for g in list_task_episodes(task)] == [1, 2]
    after = store_files(store.root)
    assert {k for k in after if k not in before} == {"pick/data/chunk-000/episode-001.parquet",
                                                     "pick/meta/episodes/chunk-000/episode-001.parquet",
                                                     "pick/videos/chunk-000/cam/episode-001.mp4"}
    assert not _journals(store.root) and not list((task / "meta").glob(".pending-*"))
    assert len(db_spy.calls) == 1 and [r.episode_index for r, _ in db_spy.calls[0][1]] == [2]
    assert json.loads((task / "meta/info.json").read_text())["total_episodes"] == 2
    _stats_match(task)
    monkeypatch.setattr(publish_mod, "_put", real_put)  # the disk has room again: N=3 is next
    assert _import(imp, _zip(tmp_path, "pc4", 400.0)).episode_index == 3
