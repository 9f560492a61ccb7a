"""Validator findings the QA of issue 2 missed: NaN times, NaN/Infinity in meta JSON, an RGB file in a depth slot."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool import StreamSpec, TaskWriter, vector_column
from egopool.codecs.depth import hevc12_available
from egopool.validate import validate_task

W, H = 32, 24
DATA = "data/chunk-000/episode-000.parquet"


def _task(root: Path) -> Path:
    tw = TaskWriter(root, "t", registry=False)
    depth_codec = "hevc12" if hevc12_available() else "ffv1"
    ep = tw.begin_episode([vector_column("observation.glove", [4])],
                          [StreamSpec("cam", "rgb", W, H), StreamSpec("d435_depth", "depth", W, H, codec=depth_codec)],
                          sensors=["glove"], created_at=1_790_000_000.0)
    for i in range(4):
        ep.add_frame({"observation.glove": np.full(4, i, np.float32)},
                     images={"cam": np.full((H, W, 3), 30 * i, np.uint8), "d435_depth": np.full((H, W), 800, np.uint16)})
    ep.finish()
    return root / "t"


def _errors(task: Path) -> list[tuple[str, str, str]]:
    report = validate_task(task)
    return [(f.rule, str(f.path), f.message) for f in report.findings if f.severity == "error"]


@pytest.mark.parametrize("column", ["timestamp", "wall_time"])
def test_nan_time_is_an_error(tmp_path: Path, column: str) -> None:
    task = _task(tmp_path)
    t = pq.read_table(task / DATA)
    values = t.column(column).to_numpy().copy()
    values[2] = np.nan
    t = t.set_column(t.column_names.index(column), column, pa.array(values, t.schema.field(column).type))
    pq.write_table(t, task / DATA)
    errors = _errors(task)
    assert len(errors) == 1, errors
    rule, path, message = errors[0]
    assert (rule, path) == ("file_format.md §7.3", str(task / DATA))
    assert message.startswith(f"column {column!r} row 2 holds nan (1 non-finite value(s))")


def test_nan_and_infinity_in_meta_json_are_errors(tmp_path: Path) -> None:
    task = _task(tmp_path)
    stats = task / "meta/stats.json"
    doc = json.loads(stats.read_text())
    doc["observation.glove"]["mean"][1] = float("nan")
    stats.write_text(json.dumps(doc))  # Python writes the non-standard NaN token
    info = task / "meta/info.json"
    doc = json.loads(info.read_text())
    doc["fps"] = float("inf")
    info.write_text(json.dumps(doc))
    errors = {(rule, Path(path).name): message for rule, path, message in _errors(task)}
    assert errors[("file_format.md §4", "stats.json")].startswith(
        "holds NaN/Infinity at observation.glove.mean[1], which is not JSON")
    assert errors[("file_format.md §3", "info.json")].startswith("holds NaN/Infinity at fps, which is not JSON")


def test_rgb_video_in_a_depth_slot_says_the_file_is_wrong(tmp_path: Path) -> None:
    task = _task(tmp_path)
    depth = next((task / "videos/chunk-000/d435_depth").iterdir())
    shutil.copyfile(task / "videos/chunk-000/cam/episode-000.mp4", depth)  # colour bytes under the depth name
    errors = _errors(task)
    assert len(errors) == 1, errors
    rule, path, message = errors[0]
    assert (rule, path) == ("file_format.md §8", str(depth))
    assert message.startswith("stream 'd435_depth' is a depth slot (its video_codec entry describes ")
    assert "its file holds a colour video (h264 yuv420p): the file has the wrong content" in message
    assert not any("cameras" in m for _, _, m in errors)
