"""Readers count an episode from its commit on, its meta/episodes row (docs/decisions.md #5, U5; issue 15 A):
``open_task`` and ``list_task_episodes(committed_only=True)`` leave out a group still being published (data and
videos, no row), ``ls`` / ``show`` still show it as incomplete."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool import list_task_episodes, open_task
from egopool.cli.app import main as cli
from egopool.errors import EpisodeNotFoundError
from egopool.layout import TaskLayout, find_episode_files
from egopool.meta.episodes import write_episode_row
from egopool.meta.info import new_info, read_info, write_info


def _task(tmp_path: Path) -> Path:
    """N=1 whole, N=2 being published (data + video, no row), N=3 a row whose data is gone."""
    root = tmp_path / "pick"
    write_info(root, new_info("pick", fps=30.0, app_version="0.1.0", created_at=1.0))
    layout = TaskLayout.from_info(root, read_info(root))
    for n in (1, 2):
        path = layout.data_file(n)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"episode_index": pa.array([n, n], pa.int64()),
                                 "frame_index": pa.array([0, 1], pa.int64())}), path)
        video = layout.video_file(n, "head_left_rgb", "mp4")
        video.parent.mkdir(parents=True, exist_ok=True)
        video.write_bytes(b"not decoded here")
    for n in (1, 3):
        write_episode_row(layout.episodes_file(n), {"episode_index": n, "start_frame_index": 0, "end_frame_index": 1,
                                                    "length": 2, "created_at": 1.0, "duration_sec": 0.1})
    return root


def test_readers_list_committed_episodes_only(tmp_path: Path) -> None:
    root = _task(tmp_path)
    assert [g.index for g in list_task_episodes(root)] == [1, 2, 3]
    assert [(g.index, g.committed, g.complete) for g in list_task_episodes(root, committed_only=True)] == [
        (1, True, True), (3, True, False)]
    task = open_task(root)
    assert [ep.index for ep in task.episodes()] == [1, 3]
    assert [ep.index for ep in task.episodes(uncommitted=True)] == [1, 2, 3]
    assert task.episode(1).meta["length"] == 2
    with pytest.raises(EpisodeNotFoundError, match="no episode 2"):
        task.episode(2)
    assert task.episode(2, uncommitted=True).files.data == task.layout.data_file(2)
    g = find_episode_files(root, task.layout, 2)
    assert g is not None and not g.committed


def test_ls_and_show_still_show_an_uncommitted_group_as_incomplete(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = _task(tmp_path)
    assert cli(["ls", str(root), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["episode_index"], r["complete"]) for r in rows] == [(1, True), (2, False), (3, False)]
    assert cli(["show", str(root), "2", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["episode_index"] == 2 and shown["complete"] is False
    assert (shown["finished"], shown["damaged"]) == (False, False)
    assert [(r["finished"], r["damaged"]) for r in rows] == [(True, False), (False, False), (True, True)]
    assert any("meta" in p for p in shown["problems"])
