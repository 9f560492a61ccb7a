"""Atomic writes and the task lock (DESIGN §5, file_format.md §6.1, §7.4)."""

from __future__ import annotations

import fcntl
import json
import multiprocessing as mp
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from egopool import _atomic
from egopool._atomic import atomic_write_bytes, atomic_write_json, publish, task_lock, temp_path_for
from egopool.meta.episodes import write_episode_row
from egopool.meta.info import new_info, read_info, write_info
from egopool.meta.stats import read_stats, write_stats


def _entries(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def _fail_replace(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(src, dst, *a, **kw):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(_atomic.os, "replace", boom)


def test_temp_name_is_a_dotfile_beside_the_target(tmp_path):
    t = temp_path_for(tmp_path / "info.json")
    assert t.parent == tmp_path and t.name.startswith(".info.json.") and t.name.endswith(".tmp")
    assert temp_path_for(tmp_path / "info.json") != t  # unique per call


def test_atomic_write_bytes_replaces_content(tmp_path):
    target = tmp_path / "sub" / "f.bin"
    atomic_write_bytes(target, b"one")
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert _entries(target.parent) == ["f.bin"]


def test_failed_replace_keeps_the_old_file_and_removes_the_temp(tmp_path, monkeypatch):
    target = tmp_path / "f.json"
    atomic_write_json(target, {"v": 1})
    old = target.read_bytes()
    _fail_replace(monkeypatch)
    with pytest.raises(OSError, match="Input/output"):
        atomic_write_json(target, {"v": 2})
    assert target.read_bytes() == old
    assert _entries(tmp_path) == ["f.json"]


def test_failed_write_midway_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "f.bin"
    atomic_write_bytes(target, b"old content")

    def no_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_atomic.os, "fsync", no_fsync)
    with pytest.raises(OSError, match="No space"):
        atomic_write_bytes(target, b"x" * 100_000)
    assert target.read_bytes() == b"old content"
    assert _entries(tmp_path) == ["f.bin"]


@pytest.mark.parametrize("which", ["info", "stats", "episodes_row"])
def test_meta_writers_are_atomic(tmp_path, monkeypatch, which):
    task = tmp_path / "t"
    info = new_info("t", app_version="0", created_at=1.0)
    write_info(task, info)
    write_stats(task, {"action": {"count": 0}})
    row_path = task / "meta" / "episodes" / "chunk-000" / "episode-000.parquet"
    row = {"episode_index": 1, "start_frame_index": 0, "end_frame_index": 0, "length": 1, "created_at": 1.0,
           "duration_sec": 0.1}
    write_episode_row(row_path, row)
    target = {"info": task / "meta" / "info.json", "stats": task / "meta" / "stats.json",
              "episodes_row": row_path}[which]
    old = target.read_bytes()
    before = _entries(target.parent)
    _fail_replace(monkeypatch)
    with pytest.raises(OSError):
        if which == "info":
            write_info(task, {**info, "total_episodes": 9})
        elif which == "stats":
            write_stats(task, {"action": {"count": 5}})
        else:
            write_episode_row(row_path, {**row, "length": 2})
    assert target.read_bytes() == old
    assert _entries(target.parent) == before
    monkeypatch.undo()
    assert read_info(task)["total_episodes"] == 0
    assert read_stats(task) == {"action": {"count": 0}}
    assert pq.read_table(row_path).column("length").to_pylist() == [1]


def test_publish_moves_the_temp_onto_the_final_name(tmp_path):
    temp, final = tmp_path / ".x.tmp", tmp_path / "x.parquet"
    temp.write_bytes(b"data")
    final.write_bytes(b"older")
    publish(temp, final)
    assert final.read_bytes() == b"data" and not temp.exists()


def _hold_lock(task_dir: str, ready, release) -> None:
    with task_lock(task_dir):
        ready.set()
        release.wait(10)


def _try_lock(anchor: Path) -> bool:
    fd = os.open(anchor, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing the fd drops a lock we may have taken
    return True


def test_task_lock_is_exclusive_across_processes(tmp_path):
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold_lock, args=(str(tmp_path), ready, release))
    p.start()
    anchor = tmp_path / "meta" / "episodes" / ".lock"
    try:
        assert ready.wait(10)
        assert not _try_lock(anchor)  # held by the other process
    finally:
        release.set()
        p.join(10)
    assert _try_lock(anchor)  # released when the holder left the with-block
    assert anchor.read_bytes() == b""  # the anchor stays empty (§7.4)


def test_atomic_json_keeps_non_ascii(tmp_path):
    target = tmp_path / "info.json"
    atomic_write_json(target, {"task_name": "裸手_抓杯子"})
    assert "裸手_抓杯子" in target.read_text(encoding="utf-8")
    assert json.loads(target.read_text(encoding="utf-8")) == {"task_name": "裸手_抓杯子"}
    assert os.stat(target).st_size == len(target.read_bytes())
