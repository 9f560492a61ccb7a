"""Reviewers' events reach lerobot 0.6.1 (docs/decisions.md P17): ``export lerobot --events-from`` writes them as
``language_events`` rows that LeRobotDataset reads back on the frame where each range starts, and lerobot's own
``language_events`` arrow type is the one written. Language columns written by lerobot's annotation writer come
back the same after import + export (I22, I23). Runs in the lerobot 0.6 venv like test_lerobot06.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from egopool import TaskWriter, vector_column
from egopool.cli.app import main
from egopool.interop import import_lerobot

pytestmark = [pytest.mark.lerobot06, pytest.mark.extra("lerobot06")]


def _task(root: Path) -> Path:
    tw = TaskWriter(root, "pour", fps=30.0)
    for k in range(2):
        ep = tw.begin_episode(columns=[vector_column("observation.state.joints", [3])], created_at=1.7e9 + k)
        for i in range(45):  # 1.5 s at 30 fps
            ep.add_frame({"observation.state.joints": np.full(3, i + k, np.float32)})
        ep.finish()
    return root / "pour"


def test_lerobot06_reads_the_events_export_wrote(tmp_path: Path) -> None:
    pytest.importorskip("torchcodec")
    lerobot = pytest.importorskip("lerobot")
    if tuple(int(x) for x in lerobot.__version__.split(".")[:2]) < (0, 6):
        pytest.skip(f"lerobot {lerobot.__version__} is installed; this test is of lerobot >= 0.6")
    from lerobot.datasets.language import LANGUAGE_EVENTS, column_for_style, language_events_arrow_type
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    task = _task(tmp_path / "pc")
    events = tmp_path / "events.json"
    events.write_text(json.dumps({"events": [
        {"id": 1, "task": "pour", "episode_index": 2, "t0": 10 / 30, "t1": 21 / 30, "label": "slip",
         "note": "cup slides", "token_id": "anna"},
        {"id": 2, "task": "pour", "episode_index": 1, "t0": 0.0, "t1": 0.5, "label": "reach", "note": ""},
        {"id": 3, "task": "pour", "episode_index": 1, "t0": 0.0, "t1": 0.2, "label": "look", "note": ""},
        {"id": 4, "task": "other", "episode_index": 1, "t0": 0.0, "t1": 0.2, "label": "elsewhere"}],
        "next_cursor": None}))
    out = tmp_path / "lr"
    assert main(["export", "lerobot", str(task), str(out), "--events-from", str(events)]) == 0
    assert pq.read_schema(out / "data" / "chunk-000" / "file-001.parquet").field(LANGUAGE_EVENTS).type == \
        language_events_arrow_type()
    ds = LeRobotDataset("local/pour", root=out, video_backend="torchcodec")
    seen = {}
    for i in range(len(ds)):
        item = ds[i]
        rows = item[LANGUAGE_EVENTS]
        if rows:
            seen[(int(item["episode_index"]), int(item["frame_index"]))] = [
                (r["role"], r["style"], r["content"], r["camera"]) for r in rows]
            assert all(column_for_style(r["style"]) == LANGUAGE_EVENTS for r in rows)
    # one frame, two events: ordered by (t0, t1, id)
    assert seen == {(0, 0): [("user", "interjection", "look", None), ("user", "interjection", "reach", None)],
                    (1, 10): [("user", "interjection", "slip: cup slides", None)]}
    mapping = json.loads((out / "egopool_mapping.json").read_text())
    assert [(e["label"], e["lerobot_episode_index"], e["frames"]) for e in mapping["events"]["events"]] == [
        ("look", 0, [0, 6]), ("reach", 0, [0, 15]), ("slip", 1, [10, 21])]
    assert mapping["events"]["left_out"] == 0 and mapping["events"]["from"] == str(events)
    assert json.loads((out / "meta" / "info.json").read_text())["features"][LANGUAGE_EVENTS]["dtype"] == "language"


def _annotate(root: Path) -> None:
    """Language rows written into a dataset by lerobot 0.6.1's own annotation writer (the steerable pipeline's
    ``LanguageColumnsWriter`` over staged module outputs, then its ``info.json`` step: features and ``tools``)."""
    from lerobot.annotations.steerable_pipeline.executor import Executor
    from lerobot.annotations.steerable_pipeline.reader import iter_episodes
    from lerobot.annotations.steerable_pipeline.staging import EpisodeStaging
    from lerobot.annotations.steerable_pipeline.writer import LanguageColumnsWriter, speech_atom

    records = list(iter_episodes(root))
    staging = root.parent / "staging"
    for r in records:
        ts = r.frame_timestamps
        EpisodeStaging(staging, r.episode_index).write("plan", [
            {"role": "user", "content": "pour the tea", "style": "task_aug", "timestamp": ts[0], "tool_calls": None},
            {"role": "user", "content": "tip the pot over the cup", "style": "task_aug", "timestamp": ts[0],
             "tool_calls": None},
            {"role": "assistant", "content": f"reach the pot {r.episode_index}", "style": "subtask",
             "timestamp": ts[0], "tool_calls": None},
            {"role": "assistant", "content": "tilt", "style": "subtask", "timestamp": ts[4], "tool_calls": None}])
        if r.episode_index == 1:
            EpisodeStaging(staging, r.episode_index).write("interjections", [
                {"role": "user", "content": "slower, please", "style": "interjection", "timestamp": ts[2],
                 "tool_calls": None}, speech_atom(ts[2], "slowing down")])
    LanguageColumnsWriter().write_all(records, staging, root)
    Executor._ensure_annotation_metadata_in_info(root)


def test_language_columns_round_trip_lerobot06_writer_import_export_reader(tmp_path: Path) -> None:
    """lerobot 0.6.1's writer and annotation writer -> import lerobot -> export lerobot -> lerobot 0.6.1's reader:
    the same language rows on every frame (and the same state, RGB and depth); with --events-from, a reviewer's
    row comes after the imported ones on its frame (docs/decisions.md I22, I23)."""
    from .test_lerobot06 import _lerobot06, _write_own

    LeRobotDataset = _lerobot06()
    from lerobot.datasets.language import LANGUAGE_EVENTS, LANGUAGE_PERSISTENT

    features = {"observation.state": {"dtype": "float32", "shape": [3], "names": ["a", "b", "c"]},
                "observation.images.cam": {"dtype": "video", "shape": [48, 64, 3],
                                           "names": ["height", "width", "channels"]},
                "observation.images.depth": {"dtype": "video", "shape": [48, 64, 1],
                                             "names": ["height", "width", "channels"], "info": {"is_depth_map": True}}}
    _write_own(tmp_path / "own", features, 2, 15, 11)
    _annotate(tmp_path / "own")
    own = LeRobotDataset("local/own", root=tmp_path / "own", video_backend="torchcodec")
    assert own.meta.info.tools and own[7 + 2][LANGUAGE_EVENTS][0]["tool_calls"] is not None
    result = import_lerobot(tmp_path / "own", tmp_path / "rec", task="pour")
    assert "renamed language_persistent -> observation.language_persistent" in " ".join(result.notes)
    assert main(["validate", str(tmp_path / "rec" / "pour")]) == 0
    assert main(["export", "lerobot", str(tmp_path / "rec" / "pour"), str(tmp_path / "back"),
                 "--state", "observation.state"]) == 0
    back = LeRobotDataset("local/back", root=tmp_path / "back", video_backend="torchcodec")
    assert len(back) == len(own) == 14 and back.meta.info.tools == own.meta.info.tools
    for i in range(len(own)):
        a, b = own[i], back[i]
        assert b[LANGUAGE_PERSISTENT] == a[LANGUAGE_PERSISTENT] and b[LANGUAGE_EVENTS] == a[LANGUAGE_EVENTS], i
        for k in ("observation.state", "observation.images.cam", "observation.images.depth"):
            np.testing.assert_array_equal(b[k].numpy(), a[k].numpy())
    assert sum(len(own[i][LANGUAGE_EVENTS]) for i in range(len(own))) == 2
    assert len(own[0][LANGUAGE_PERSISTENT]) == 4
    events = tmp_path / "events.json"
    events.write_text(json.dumps([{"id": 1, "task": "pour", "episode_index": 2, "t0": 2 / 15, "t1": 0.3,
                                   "label": "spill", "note": "a drop"}]))
    assert main(["export", "lerobot", str(tmp_path / "rec" / "pour"), str(tmp_path / "ev"), "--events-from",
                 str(events)]) == 0
    ev = LeRobotDataset("local/ev", root=tmp_path / "ev", video_backend="torchcodec")
    assert ev[7 + 2][LANGUAGE_EVENTS] == own[7 + 2][LANGUAGE_EVENTS] + [
        {"role": "user", "content": "spill: a drop", "style": "interjection", "camera": None, "tool_calls": None}]
