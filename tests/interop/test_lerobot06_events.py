"""Reviewers' events reach lerobot 0.6.1 (docs/decisions.md P17): ``export lerobot --events-from`` writes them as
``language_events`` rows that LeRobotDataset reads back on the frame where each range starts, and lerobot's own
``language_events`` arrow type is the one written. Runs in the lerobot 0.6 venv like test_lerobot06.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from egopool import TaskWriter, vector_column
from egopool.cli.app import main

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
