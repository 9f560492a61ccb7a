"""Next-N allocation (DESIGN §1, file_format.md §2, §7.5, decisions.md #3, #4) and abort."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from egopool import StorageError, StreamSpec, TaskWriter, list_task_episodes, open_task
from egopool.meta.info import read_info

W, H = 32, 24


def _finish(tw: TaskWriter, rows: int = 2) -> int:
    ep = tw.begin_episode()
    for _ in range(rows):
        ep.add_frame()
    return ep.finish().index


def _all_files(task_dir: Path) -> set[str]:
    return {p.relative_to(task_dir).as_posix() for p in task_dir.rglob("*") if p.is_file()}


def _temps(task_dir: Path) -> list[str]:
    return sorted(f for f in _all_files(task_dir) if f.endswith(".tmp") or "/.reserved-" in f)


def test_abort_writes_the_marker_and_leaves_no_temp(tmp_path):
    tw = TaskWriter(tmp_path, "t")
    assert _finish(tw) == 1
    before = _all_files(tmp_path / "t")
    ep = tw.begin_episode(streams=[StreamSpec("head_left_rgb", "rgb", W, H), StreamSpec("d", "depth", W, H)])
    for _ in range(3):
        ep.add_frame(images={"head_left_rgb": np.zeros((H, W, 3), np.uint8), "d": np.ones((H, W), np.uint16)})
    assert ep.index == 2
    ep.abort()
    marker = json.loads((tmp_path / "t" / "meta" / "recycled_episode.json").read_text())
    assert marker["episode_index"] == 2 and set(marker) == {"episode_index", "freed_at"}
    assert marker["freed_at"].endswith("+00:00")
    after = _all_files(tmp_path / "t")
    assert after - before == {"meta/recycled_episode.json"}
    assert _temps(tmp_path / "t") == []
    assert [g.index for g in list_task_episodes(tmp_path / "t")] == [1]
    # the next recording reuses N=2 and clears the marker on finish (§7.5)
    assert tw.next_episode_index() == 2
    assert _finish(tw) == 2
    assert not (tmp_path / "t" / "meta" / "recycled_episode.json").exists()
    assert _finish(tw) == 3


def test_recycled_marker_is_reused_first_even_when_the_watermark_is_ahead(tmp_path):
    tw = TaskWriter(tmp_path, "t")
    assert _finish(tw) == 1
    a = tw.begin_episode()
    b = tw.begin_episode()  # a second recorder on the same task takes the next N
    assert (a.index, b.index) == (2, 3)
    b.add_frame()
    b.finish()
    a.add_frame()
    a.abort()
    assert read_info(tmp_path / "t")["total_episodes"] == 3
    # a fresh writer (rescans the task) still takes the recycled N before the watermark (§2 "不跳号")
    tw2 = TaskWriter(tmp_path, "t")
    assert _finish(tw2) == 2
    assert _finish(tw2) == 4
    assert read_info(tmp_path / "t")["total_episodes"] == 4


def test_occupied_recycled_marker_is_discarded(tmp_path):
    tw = TaskWriter(tmp_path, "t")
    _finish(tw)
    _finish(tw)
    marker = tmp_path / "t" / "meta" / "recycled_episode.json"
    marker.write_text(json.dumps({"episode_index": 1, "freed_at": "2026-01-01T00:00:00+00:00"}))
    assert _finish(tw) == 3
    assert not marker.exists()


def test_corrupt_marker_is_ignored(tmp_path):
    tw = TaskWriter(tmp_path, "t")
    _finish(tw)
    (tmp_path / "t" / "meta" / "recycled_episode.json").write_text("{not json")
    assert _finish(tw) == 2


def test_watermark_never_goes_back_after_deleting_the_highest_episode(tmp_path):
    tw = TaskWriter(tmp_path, "t")
    for n in (1, 2, 3):
        assert _finish(tw) == n
    task = open_task(tmp_path / "t")
    for p in task.episode(3).files.paths():
        p.unlink()
    assert [g.index for g in list_task_episodes(tmp_path / "t")] == [1, 2]
    assert _finish(tw) == 4
    for p in open_task(tmp_path / "t").episode(4).files.paths():
        p.unlink()
    # a new writer rescans (max found = 2) but the watermark in info.json says 4
    tw2 = TaskWriter(tmp_path, "t")
    assert tw2.next_episode_index() == 5
    assert _finish(tw2) == 5
    assert read_info(tmp_path / "t")["total_episodes"] == 5


def test_files_beyond_the_watermark_are_never_overwritten(tmp_path):
    """A file group copied in by hand (N=7) with an old watermark: allocation skips it."""
    tw = TaskWriter(tmp_path, "t")
    _finish(tw)
    stray = tmp_path / "t" / "data" / "chunk-000" / "episode-001.parquet"
    stray.write_bytes(b"not ours")
    assert _finish(tw) == 3
    assert stray.read_bytes() == b"not ours"


def test_failed_finish_publishes_nothing_and_frees_n(tmp_path, monkeypatch):
    """A failure while publishing (disk full, ...) must not leave a partial file group under
    final names nor temp files, and N is free for the next recording (§2 "异常终止不占号")."""
    tw = TaskWriter(tmp_path, "t")
    _finish(tw)
    before = _all_files(tmp_path / "t")
    ep = tw.begin_episode(streams=[StreamSpec("head_left_rgb", "rgb", W, H)])
    ep.add_frame(images={"head_left_rgb": np.zeros((H, W, 3), np.uint8)})
    real = os.replace

    def failing(src, dst, *a, **kw):
        if str(dst).endswith(".parquet") and "/data/" in str(dst):
            raise OSError(28, "No space left on device")
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(StorageError, match="episode-001.parquet: cannot publish: No space left on device"):
        ep.finish()
    monkeypatch.setattr(os, "replace", real)
    after = _all_files(tmp_path / "t")
    assert after - before == {"meta/recycled_episode.json"}
    assert _temps(tmp_path / "t") == []
    assert [g.index for g in list_task_episodes(tmp_path / "t")] == [1]
    assert _finish(tw) == 2


def test_failed_encoder_close_frees_n(tmp_path, monkeypatch):
    from egopool.codecs import video
    from egopool.errors import CodecError

    tw = TaskWriter(tmp_path, "t")
    ep = tw.begin_episode(streams=[StreamSpec("head_left_rgb", "rgb", W, H)])
    ep.add_frame(images={"head_left_rgb": np.zeros((H, W, 3), np.uint8)})

    def broken(self):
        raise CodecError("encoder flush failed")

    monkeypatch.setattr(video.RgbEncoder, "close", broken)
    with pytest.raises(CodecError):
        ep.finish()
    assert _temps(tmp_path / "t") == []
    assert list_task_episodes(tmp_path / "t") == []
    monkeypatch.undo()
    assert _finish(tw) == 1


def _snapshot(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.parametrize("content", [{"format": "other_v9"}, {"chunks_size": 1000}, "not json"])
def test_writer_refuses_a_foreign_task_and_writes_nothing(tmp_path, content):
    from egopool.errors import FormatError

    meta = tmp_path / "t" / "meta"
    meta.mkdir(parents=True)
    (meta / "info.json").write_text(content if isinstance(content, str) else json.dumps(content))
    before = _snapshot(tmp_path)
    with pytest.raises(FormatError, match="info.json"):
        TaskWriter(tmp_path, "t")
    assert _snapshot(tmp_path) == before


def test_writer_refuses_the_legacy_per_session_layout(tmp_path):
    from egopool.errors import LegacyLayoutError

    (tmp_path / "t" / "t_000001").mkdir(parents=True)
    (tmp_path / "t" / "t_000001" / "metadata.json").write_text("{}")
    before = _snapshot(tmp_path)
    with pytest.raises(LegacyLayoutError, match="v1.0"):
        TaskWriter(tmp_path, "t")
    assert _snapshot(tmp_path) == before


def test_writer_creates_a_task_in_an_existing_empty_directory(tmp_path):
    (tmp_path / "t").mkdir()
    assert _finish(TaskWriter(tmp_path, "t")) == 1
