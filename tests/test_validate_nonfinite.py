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


# -- numbers beyond float64 in metadata (issue 15 G) ---------------------------------------------------------------

HUGE = "-1" + "0" * 400  # a valid JSON integer; float() of it raises OverflowError
_ODD = [HUGE, "1" + "0" * 400, "1e308", "[]", "{}", '"x"', "null", "true", '{"a": ' + HUGE + "}",
        '{"cam_rejected_count": 1' + "0" * 400 + ', "rows_rejected": 1e308}']


def _stopped(report) -> list[str]:
    return [f.message for f in report.findings
            if "could not finish" in f.message or "could not be fully checked" in f.message
            or "stopped early" in f.message]


def test_created_at_beyond_float64_is_one_finding_and_every_check_runs(tmp_path: Path) -> None:
    """The example: info.json created_at = -1 followed by 400 zeros stopped check_info_keys with OverflowError."""
    task = _task(tmp_path)
    info = task / "meta/info.json"
    info.write_text(info.read_text().replace('"created_at": ', f'"created_at": {HUGE}, "was": ', 1))
    report = validate_task(task)
    assert _stopped(report) == []
    errors = [f.message for f in report.findings if f.severity == "error"]
    assert errors == ["holds integers beyond float64 at created_at (other JSON readers read them as Infinity or "
                      "refuse them); replace them with numbers in range"]


def test_no_odd_json_value_in_any_metadata_key_stops_a_check(tmp_path: Path) -> None:
    """Every key (and nested key) of info.json and stats.json, and every JSON column of the episode row, set to
    numbers beyond float64, wrong JSON types and nested odd values: the validator reports, it never stops."""
    task = _task(tmp_path / "ref")
    work = tmp_path / "w" / "t"

    def paths(doc, at=()):
        out = [at]
        items = doc.items() if isinstance(doc, dict) else enumerate(doc[:2]) if isinstance(doc, list) else ()
        for k, v in items:
            out += paths(v, at + (k,))
        return out

    def put(doc, at, text):
        slot = "@@slot@@"
        node = doc
        for k in at[:-1]:
            node = node[k]
        if at:
            node[at[-1]] = slot
        else:
            doc = slot
        return json.dumps(doc).replace(json.dumps(slot), text)

    def fresh():
        shutil.rmtree(work.parent, ignore_errors=True)
        shutil.copytree(task, work)

    tried, stopped = 0, []
    for rel in ("meta/info.json", "meta/stats.json"):
        for at in paths(json.loads((task / rel).read_text())):
            for text in _ODD:
                fresh()
                (work / rel).write_text(put(json.loads((task / rel).read_text()), at, text))
                stopped += [(rel, at, text[:8], m) for m in _stopped(validate_task(work, fast=True))]
                tried += 1
    row = "meta/episodes/chunk-000/episode-000.parquet"
    table = pq.read_table(task / row)
    for col in ("drop_stats", "video_codec", "calibration", "force_matrix_specs", "slam_specs"):
        for at in paths(json.loads(table.column(col)[0].as_py())):
            for text in _ODD:
                fresh()
                doc = put(json.loads(table.column(col)[0].as_py()), at, text)
                pq.write_table(table.set_column(table.column_names.index(col), col, pa.array([doc])), work / row)
                stopped += [(col, at, text[:8], m) for m in _stopped(validate_task(work, fast=True))]
                tried += 1
    assert tried > 300
    assert stopped == []


# -- NaN / Infinity in every float column (issue 15 G) -------------------------------------------------------------

def test_strict_writer_stores_non_finite_values_of_a_non_stats_column_counted_and_validate_reports_them(tmp_path):
    """A caller's deliberate NaN (a hand joint a tracker lacks) is stored as given, counted, warned and reported."""
    from egopool import ValueChangedWarning, hand_pose_column

    tw = TaskWriter(tmp_path, "t", registry=False)
    ep = tw.begin_episode([vector_column("observation.glove", [4]), hand_pose_column("right")], sensors=["glove"],
                          created_at=1_790_000_000.0)
    for i in range(4):
        pose = np.full(63, 0.25, np.float32)
        if i in (1, 3):
            pose[3:6] = np.nan if i == 1 else np.inf
        ep.add_frame({"observation.glove": np.full(4, i, np.float32), "observation.right_hand_pose": pose})
    with pytest.warns(ValueChangedWarning, match=r"episode 1: 6 value\(s\) of right_hand_pose are NaN/Infinity, "
                                                 r"stored as given.*\(first: row 1: nan\)"):
        result = ep.finish()
    assert result.drop_stats == {"right_hand_pose_nonfinite_count": 6}
    stored = np.asarray(pq.read_table(tmp_path / "t" / DATA).column("observation.right_hand_pose").to_pylist())
    assert np.isnan(stored[1, 3:6]).all() and np.isinf(stored[3, 3:6]).all()
    report = validate_task(tmp_path / "t")
    assert [f.severity for f in report.findings] == ["warning"]
    assert report.findings[0].message == (
        "column 'observation.right_hand_pose': 6 value(s) in 2 row(s) (first row 1) are NaN/Infinity; a missing "
        "sample is zeros / [] (multi_device_storage.md §5.5), so a reader computing with this column gets NaN; the "
        "writer stored them as given and counted 6 in drop_stats")


def test_non_finite_data_written_by_another_tool_is_found_in_the_data(tmp_path: Path) -> None:
    """Another writer's NaN: in a stats column an error (stats.json cannot hold it), elsewhere a warning."""
    from egopool import hand_pose_column

    tw = TaskWriter(tmp_path, "t", registry=False)
    ep = tw.begin_episode([vector_column("observation.glove", [4]), hand_pose_column("right")], sensors=["glove"],
                          created_at=1_790_000_000.0)
    for i in range(4):
        ep.add_frame({"observation.glove": np.full(4, i, np.float32)})
    ep.finish()
    task = tmp_path / "t"
    t = pq.read_table(task / DATA)
    glove = [list(v) for v in t.column("observation.glove").to_pylist()]
    glove[2][1] = float("inf")
    pose = [list(v) for v in t.column("observation.right_hand_pose").to_pylist()]
    pose[3][0] = float("nan")
    t = t.set_column(t.column_names.index("observation.glove"), "observation.glove",
                     pa.array(glove, t.schema.field("observation.glove").type))
    t = t.set_column(t.column_names.index("observation.right_hand_pose"), "observation.right_hand_pose",
                     pa.array(pose, t.schema.field("observation.right_hand_pose").type))
    pq.write_table(t, task / DATA)
    found = {(f.severity, f.message.split(";")[0]) for f in validate_task(task).findings}
    assert found == {
        ("error", "column 'observation.glove': 1 value(s) in 1 row(s) (first row 2) are NaN/Infinity"),
        ("warning", "column 'observation.right_hand_pose': 1 value(s) in 1 row(s) (first row 3) are NaN/Infinity")}
    assert any("drop_stats does not count them" in f.message for f in validate_task(task).findings)
