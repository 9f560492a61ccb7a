"""The import path's own bookkeeping (issue 15 H, docs/decisions.md U13), on the real Importer and disk.

* every file of a published episode has its bytes fsynced exactly once, before its commit object
  (the ``meta/episodes`` row) is renamed into place — the extraction writes them unsynced;
* the answer's ``files`` are the sha256 of the files as published, also for a renumbered episode
  whose parquet files were rewritten after extraction (hash once, but never a stale hash);
* a finished staging tree leaves ``staging/`` at once and is removed by a background thread; a
  tree a killed server left in ``trash/`` is removed at start-up.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from transfer_helpers import write_task

from egopool.registry import sha256_file
from egopool.server.importer import Importer
from egopool.server.store import ServerStore as Store
from egopool.transfer import pack_episodes


def _zip(root: Path, name: str, first_value: float) -> Path:
    task = write_task(root / name, "pick", 1, rows=4, registry=False, first_value=first_value)
    return pack_episodes(task, [1], root / f"{name}-zips", registry=False)[0].path


def _import(store: Store, zip_path: Path):
    sha = hashlib.sha256(zip_path.read_bytes()).hexdigest()
    upload_id = store.db.start_upload(None, "127.0.0.1")
    return Importer(store).import_zip(zip_path, task="pick", form_index=None, zip_sha256=sha, upload_id=upload_id)


@pytest.fixture
def zips(tmp_path: Path) -> tuple[Path, Path]:
    """Two PCs' episode N=1 of one task name, different content: the second is renumbered to 2."""
    return _zip(tmp_path, "pc_a", 0.0), _zip(tmp_path, "pc_b", 100.0)


def test_each_published_file_is_fsynced_once_before_the_commit(tmp_path: Path, zips, monkeypatch) -> None:
    store = Store(tmp_path / "store")
    _import(store, zips[0])
    synced: list[int] = []  # inodes of regular files fsynced, in order
    commit_at: list[int] = []  # len(synced) when the meta/episodes row was linked into place (the commit)
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            synced.append(st.st_ino)
        real_fsync(fd)

    def link(src, dst, *a, **k) -> None:  # type: ignore[no-untyped-def]  # a directory store's CREATE
        if str(dst).startswith(f"{store.root / 'pick' / 'meta' / 'episodes'}{os.sep}"):
            commit_at.append(len(synced))
        real_link(src, dst, *a, **k)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    result = _import(store, zips[1])
    monkeypatch.undo()

    assert result.status == "imported" and result.renumbered and result.episode_index == 2
    task = store.root / "pick"
    published = {rel: (task / rel).stat().st_ino for rel in result.files}
    assert sorted(published) == ["data/chunk-000/episode-001.parquet", "meta/episodes/chunk-000/episode-001.parquet",
                                 "videos/chunk-000/cam/episode-001.mp4"]
    assert len(commit_at) == 1
    before_commit = synced[:commit_at[0]]
    for rel, ino in published.items():
        assert before_commit.count(ino) == 1, (rel, before_commit.count(ino))
        assert synced.count(ino) == 1, rel


def test_the_answer_hashes_the_files_as_published(tmp_path: Path, zips) -> None:
    store = Store(tmp_path / "store")
    for z in zips:
        result = _import(store, z)
        task = store.root / "pick"
        assert result.files == {rel: sha256_file(task / rel) for rel in result.files}
        assert len(result.files) == 3
    assert result.renumbered  # the second one: its parquet files were rewritten with episode_index 2


def test_a_finished_staging_tree_is_removed_off_the_request_path(tmp_path: Path, zips) -> None:
    store = Store(tmp_path / "store")
    _import(store, zips[0])
    assert not list(store.staging_dir.iterdir())  # renamed away before the answer
    deadline = time.monotonic() + 60
    while list(store.trash_dir.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not list(store.trash_dir.iterdir())


def test_a_tree_left_in_trash_by_a_killed_server_is_removed_at_start_up(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    left = store.trash_dir / "0123abcd" / "pick" / "videos"
    left.mkdir(parents=True)
    (left / "episode-000.mp4").write_bytes(b"x" * 1000)
    store.clean_scratch()
    assert not list(store.trash_dir.iterdir())


def test_a_journal_of_a_server_before_issue_24_is_read_by_ls_and_undone_at_start_up(tmp_path: Path, zips) -> None:
    """A directory store a killed pre-issue-24 server left: its journal ``journals/import-<hash>-<token>.json``
    (task-relative files) still hides the uncommitted group from ``validate`` (U16) and is rolled back by the
    start-up sweep, byte for byte (docs/decisions.md O26)."""
    import json as _json

    from egopool.meta.server_imports import journal_prefix, publishing
    from egopool.server.legacy_journals import recover_legacy_journals
    from egopool.validate import validate_task

    store = Store(tmp_path / "store")
    _import(store, zips[0])
    task = store.root / "pick"
    before = sorted(p.relative_to(task).as_posix() for p in task.rglob("*"))
    placed = task / "data" / "chunk-000" / "episode-001.parquet"
    placed.write_bytes((task / "data" / "chunk-000" / "episode-000.parquet").read_bytes())
    journal = store.state / "journals" / f"{journal_prefix('pick')}0123456789ab.json"
    journal.write_text(_json.dumps({"task": "pick", "index": 2, "new_task": False,
                                    "files": ["data/chunk-000/episode-001.parquet",
                                              "meta/episodes/chunk-000/episode-001.parquet"],
                                    "commit": "meta/episodes/chunk-000/episode-001.parquet"}))
    assert publishing(task) == {2: ["data/chunk-000/episode-001.parquet",
                                    "meta/episodes/chunk-000/episode-001.parquet"]}
    assert validate_task(task).ok  # the group the old journal names is being published, not damaged
    assert recover_legacy_journals(store) == ["pick: rolled back the interrupted import of episode 2"]
    assert not journal.exists() and not placed.exists()
    assert sorted(p.relative_to(task).as_posix() for p in task.rglob("*")) == before
