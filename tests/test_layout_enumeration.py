"""list_task_episodes: the one enumerator (file_format.md §2, §6.1, §11; multi_device_storage.md §1.3), and
find_episode_files, the per-N lookup from N's own paths (checklist §12.2): every case here checks that both
agree for every N (and that the lookup finds nothing for an N the enumeration does not list)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool import FormatError, TaskLayout, list_task_episodes, open_task
from egopool.layout import find_episode_files
from egopool.meta.info import read_info
from egopool.meta.episodes import write_episode_row
from egopool.meta.info import new_info, write_info


def _data(path: Path, n: int, rows: int = 1) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"episode_index": pa.array([n] * rows, pa.int64()),
                             "frame_index": pa.array(range(rows), pa.int64())}), path)
    return path


def _row(path: Path, n: int) -> Path:
    write_episode_row(path, {"episode_index": n, "start_frame_index": 0, "end_frame_index": 0, "length": 1,
                             "created_at": 1.0, "duration_sec": 0.1})
    return path


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def _group(task: Path, c: int, f: int, n: int, keys=("head_left_rgb",)) -> None:
    _data(task / f"data/chunk-{c:03d}/episode-{f:03d}.parquet", n)
    _row(task / f"meta/episodes/chunk-{c:03d}/episode-{f:03d}.parquet", n)
    for k in keys:
        _touch(task / f"videos/chunk-{c:03d}/{k}/episode-{f:03d}.mp4")


def agree(task: Path) -> list:
    """list_task_episodes(task), after checking that find_episode_files gives each N's entry."""
    groups = list_task_episodes(task)
    layout = TaskLayout.from_info(task, read_info(task))
    exts = read_info(task).get("video_extensions")
    by_n = {g.index: g for g in groups}
    for n in sorted(set(by_n) | {1, 2, 3, 4, 5, 6, 7, 8, 999, 1000, 1001, 1002, 2001}):
        assert find_episode_files(task, layout, n, exts) == by_n.get(n), n
    return groups


@pytest.fixture
def task(tmp_path: Path) -> Path:
    t = tmp_path / "task"
    write_info(t, new_info("task", app_version="0", created_at=1.0))
    return t


def test_chunk_roll_over(task):
    _group(task, 0, 999, 1000)
    _group(task, 1, 0, 1001, keys=("head_left_rgb", "head_depth"))
    groups = agree(task)
    assert [(g.index, g.chunk, g.file) for g in groups] == [(1000, 0, 999), (1001, 1, 0)]
    g1000, g1001 = groups
    assert g1000.data == task / "data/chunk-000/episode-999.parquet"
    assert g1000.meta == task / "meta/episodes/chunk-000/episode-999.parquet" and not g1000.meta_is_shard
    assert g1000.videos == {"head_left_rgb": task / "videos/chunk-000/head_left_rgb/episode-999.mp4"}
    assert g1001.videos == {"head_left_rgb": task / "videos/chunk-001/head_left_rgb/episode-000.mp4",
                            "head_depth": task / "videos/chunk-001/head_depth/episode-000.mp4"}
    assert g1001.complete and g1000.complete
    t = open_task(task)
    assert t.episode(1001).meta["episode_index"] == 1001
    assert t.episode(1000).file == 999


@pytest.mark.parametrize("n,chunk,file", [(1, 0, 0), (999, 0, 998), (1000, 0, 999), (1001, 1, 0),
                                          (2000, 1, 999), (2001, 2, 0)])
def test_paths_and_enumeration_agree(task, n, chunk, file):
    layout = TaskLayout.from_info(task, {})
    assert layout.data_file(n) == task / f"data/chunk-{chunk:03d}/episode-{file:03d}.parquet"
    assert layout.episodes_file(n) == task / f"meta/episodes/chunk-{chunk:03d}/episode-{file:03d}.parquet"
    assert layout.video_file(n, "k", "mkv") == task / f"videos/chunk-{chunk:03d}/k/episode-{file:03d}.mkv"
    _data(layout.data_file(n), n)
    _row(layout.episodes_file(n), n)
    (g,) = agree(task)
    assert (g.index, g.chunk, g.file) == (n, chunk, file)


def test_chunks_size_is_read_from_info(tmp_path):
    t = tmp_path / "t"
    write_info(t, {**new_info("t", app_version="0", created_at=1.0), "chunks_size": 10})
    _data(t / "data/chunk-001/episode-000.parquet", 11)
    _data(t / "data/chunk-000/episode-009.parquet", 10)
    assert [(g.index, g.chunk, g.file) for g in agree(t)] == [(10, 0, 9), (11, 1, 0)]


def test_legacy_file_prefixed_per_episode_names(task):
    _data(task / "data/chunk-000/file-000.parquet", 1)
    _data(task / "data/chunk-000/file-001.parquet", 2)
    _touch(task / "videos/chunk-000/head_left_rgb/file-001.mp4")
    _row(task / "meta/episodes/chunk-000/file-001.parquet", 2)
    groups = agree(task)
    assert [g.index for g in groups] == [1, 2]
    assert groups[0].data == task / "data/chunk-000/file-000.parquet" and groups[0].meta is None
    assert groups[1].meta == task / "meta/episodes/chunk-000/file-001.parquet" and not groups[1].meta_is_shard
    assert groups[1].videos == {"head_left_rgb": task / "videos/chunk-000/head_left_rgb/file-001.mp4"}


def test_episode_prefix_wins_over_legacy_name_for_the_same_n(task):
    _data(task / "data/chunk-000/file-000.parquet", 1)
    _data(task / "data/chunk-000/episode-000.parquet", 1)
    (g,) = agree(task)
    assert g.data == task / "data/chunk-000/episode-000.parquet"


def test_legacy_multi_row_shard_rows_found_by_episode_index(task):
    shard = task / "meta/episodes/chunk-000/file-000.parquet"
    shard.parent.mkdir(parents=True)
    # rows deliberately not in file order and with a gap: only episode_index counts (§6.1)
    ns = [3, 1, 2, 5]
    pq.write_table(pa.table({
        "episode_index": pa.array(ns, pa.int64()), "task_index": pa.array([0] * 4, pa.int64()),
        "start_frame_index": pa.array([0] * 4, pa.int64()), "end_frame_index": pa.array([n * 10 - 1 for n in ns]),
        "length": pa.array([n * 10 for n in ns], pa.int64()), "created_at": pa.array([1.0] * 4),
        "duration_sec": pa.array([0.5] * 4), "drop_stats": pa.array(["{}"] * 4),
        "video_codec": pa.array(["{}"] * 4), "calibration": pa.array(["{}"] * 4),
    }), shard)
    for n in ns:
        _data(task / f"data/chunk-000/episode-{n - 1:03d}.parquet", n, rows=n * 10)
    groups = agree(task)
    assert [g.index for g in groups] == [1, 2, 3, 5]
    assert all(g.meta == shard and g.meta_is_shard for g in groups)
    assert all(shard not in g.paths() for g in groups)  # a shard is shared, never part of one group
    t = open_task(task)
    for n in ns:
        meta = t.episode(n).meta
        assert meta["episode_index"] == n and meta["length"] == n * 10
        assert meta["force_matrix_specs"] == {} and meta["slam_specs"] == {}


def test_new_per_episode_row_wins_over_a_shard_row(task):
    shard = task / "meta/episodes/chunk-000/file-000.parquet"
    shard.parent.mkdir(parents=True)
    pq.write_table(pa.table({"episode_index": pa.array([1, 2], pa.int64())}), shard)
    own = _row(task / "meta/episodes/chunk-000/episode-001.parquet", 2)
    groups = {g.index: g for g in agree(task)}
    assert groups[2].meta == own and not groups[2].meta_is_shard
    assert groups[1].meta == shard and groups[1].meta_is_shard


def test_non_architecture_entries_are_ignored(task):
    _group(task, 0, 0, 1)
    ignored = [
        "data/chunk-000/.episode-001.parquet.1a2b3c4d.tmp",
        "videos/chunk-000/head_left_rgb/.episode-001.mp4.1a2b3c4d.tmp",
        "meta/episodes/chunk-000/.episode-001.parquet.deadbeef.tmp",
        "meta/episodes/.lock",
        "meta/recycled_episode.json",
        "meta/.stats_state.json",
        "meta/.reserved-7",
        "_trash/data/chunk-000/episode-004.parquet",
        "_migrate_backup_20260101T000000/data/chunk-000/episode-005.parquet",
        "data/_trash/chunk-000/episode-006.parquet",
        "meta/episodes/chunk-000/_episodes_42_3.parquet",
        "videos/chunk-000/.hidden_slot/episode-007.mp4",
        "videos/chunk-000/_aux/episode-008.mp4",
        "data/chunk-000/notes.txt",
        "data/chunk-000/episode-001.parquet.bak",
    ]
    for rel in ignored:
        _touch(task / rel)
    groups = agree(task)
    assert [g.index for g in groups] == [1]
    assert groups[0].videos == {"head_left_rgb": task / "videos/chunk-000/head_left_rgb/episode-000.mp4"}


def test_file_number_beyond_chunks_size_is_not_an_episode(task):
    _data(task / "data/chunk-000/episode-1000.parquet", 1001)
    assert agree(task) == []


def test_partial_groups_are_listed_with_what_exists(task):
    _touch(task / "videos/chunk-000/head_left_rgb/episode-004.mp4")
    _data(task / "data/chunk-000/episode-006.parquet", 7)
    groups = agree(task)
    assert [(g.index, g.data is not None, bool(g.videos), g.meta is not None) for g in groups] == \
        [(5, False, True, False), (7, True, False, False)]
    assert not any(g.complete for g in groups)


def test_corrupt_shard_is_a_format_error_naming_it(task):
    shard = _touch(task / "meta/episodes/chunk-000/file-000.parquet")
    shard.write_bytes(b"PAR1 truncated")
    with pytest.raises(FormatError, match="file-000.parquet"):
        agree(task)


def test_per_n_lookup_reads_a_corrupt_shard_only_when_it_must(task):
    """N with its own episode- row never opens the chunk's legacy shard; N whose row is in it does."""
    shard = _touch(task / "meta/episodes/chunk-000/file-000.parquet")
    shard.write_bytes(b"PAR1 truncated")
    _group(task, 0, 4, 5)
    layout = TaskLayout.from_info(task, {})
    assert find_episode_files(task, layout, 5).meta == task / "meta/episodes/chunk-000/episode-004.parquet"
    with pytest.raises(FormatError, match="file-000.parquet"):
        find_episode_files(task, layout, 1)
    assert open_task(task).episode(5).meta["episode_index"] == 5
