"""The validator: one test per rule, each corrupting a writer-made task in code.

Every test asserts the exact ``rule`` id, the severity, the file the finding points
at, and that the message names the offending column / file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from validate_support import (CREATED_AT, DATA, FM, META, RGB, ROWS, TRAJ, build_task, copy_task, edit_json,
                              rename_column, rewrite_parquet, set_column, snapshot)

from egopool.cli.app import main
from egopool.validate import Finding, Report, validate_task
from egopool.validate.context import wall_time_rule_applies


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_task(tmp_path_factory.mktemp("ref"))


@pytest.fixture
def task(reference: Path, tmp_path: Path) -> Path:
    return copy_task(reference, tmp_path)


def only(report: Report, rule: str, severity: str = "error") -> Finding:
    """The single finding with ``rule`` (fails listing all findings otherwise)."""
    hits = [f for f in report.findings if f.rule == rule and f.severity == severity]
    assert len(hits) == 1, [f.one_line() for f in report.findings]
    return hits[0]


def rules(report: Report) -> set[tuple[str, str]]:
    return {(f.rule, f.severity) for f in report.findings}


# -- a valid task --------------------------------------------------------------------------------

def test_writer_task_is_valid_with_no_findings(task: Path) -> None:
    report = validate_task(task)
    assert report.findings == []
    assert report.ok is True
    assert report.episodes == 1
    assert report.to_dict() == {"ok": True, "findings": [], "notes": []}


def test_two_episode_task_is_valid(tmp_path: Path) -> None:
    t = build_task(tmp_path, episodes=2)
    report = validate_task(t)
    assert report.findings == [] and report.episodes == 2


def test_report_and_finding_api() -> None:
    r = Report(task="t")
    r.warning("file_format.md §4", "t/meta/stats.json", "legacy")
    assert r.ok is True
    f = r.error("file_format.md §7.1", Path("t/data/x.parquet"), "bad\nline")
    assert r.ok is False and r.errors == [f] and len(r.warnings) == 1
    assert f.message == "bad line"  # findings are one line
    assert r.to_dict()["findings"][1] == {"rule": "file_format.md §7.1", "severity": "error",
                                          "path": "t/data/x.parquet", "message": "bad line"}
    with pytest.raises(ValueError):
        Finding("x", "fatal", "p", "m")


# -- task level: format, info.json, tasks.jsonl, stats.json --------------------------------------

def test_missing_format(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d.pop("format"))
    report = validate_task(task)
    f = only(report, "file_format.md §1")
    assert f.path == str(task / "meta/info.json") and "'format'" in f.message
    assert len(report.findings) == 1


def test_unknown_format(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d.update(format="pooled_episodes_v2"))
    f = only(validate_task(task), "file_format.md §1")
    assert "unknown format 'pooled_episodes_v2'" in f.message and f.path.endswith("meta/info.json")


def test_legacy_v1_layout(tmp_path: Path) -> None:
    (tmp_path / "pick_000001").mkdir()
    (tmp_path / "pick_000001" / "metadata.json").write_text("{}")
    f = only(validate_task(tmp_path), "file_format.md §1")
    assert "legacy v1.0" in f.message and "pick_000001" in f.message


@pytest.mark.parametrize("make", ["empty", "missing", "file"])
def test_not_a_task(tmp_path: Path, make: str) -> None:
    p = tmp_path / "x"
    if make == "empty":
        p.mkdir()
    elif make == "file":
        p.write_text("hello")
    report = validate_task(p)
    assert [f.rule for f in report.findings] == ["file_format.md §1"] and not report.ok
    if make == "empty":
        assert report.findings[0].path == str(p / "meta/info.json")
        assert "meta/info.json is missing" in report.findings[0].message


def test_info_json_not_json(task: Path) -> None:
    (task / "meta/info.json").write_text("{not json")
    f = only(validate_task(task), "file_format.md §3")
    assert f.path.endswith("meta/info.json") and "JSON" in f.message


@pytest.mark.parametrize("key", ["cameras", "sensor_dim", "video_extensions", "total_episodes"])
def test_info_must_key_missing(task: Path, key: str) -> None:
    edit_json(task / "meta/info.json", lambda d: d.pop(key))
    report = validate_task(task)
    assert f"MUST key {key!r} is missing" in only(report, "file_format.md §3").message


def test_info_key_type(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d.update(fps="30"))
    f = only(validate_task(task), "file_format.md §3")
    assert "'fps'" in f.message and "number" in f.message


def test_info_template_fields(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d.update(data_path="data/{chunk}/episode-{f:03d}.parquet"))
    f = only(validate_task(task), "file_format.md §3")
    assert "data_path" in f.message and "['c', 'f']" in f.message


def test_tasks_jsonl_pretty_printed(task: Path) -> None:
    (task / "meta/tasks.jsonl").write_text(json.dumps({"task_index": 0, "task": "demo"}, indent=2) + "\n")
    report = validate_task(task)
    f = only(report, "file_format.md §5")
    assert f.path == str(task / "meta/tasks.jsonl") and "line 1" in f.message and "one line" in f.message
    assert not report.ok


def test_tasks_jsonl_missing(task: Path) -> None:
    (task / "meta/tasks.jsonl").unlink()
    assert "missing" in only(validate_task(task), "file_format.md §5").message


def test_tasks_jsonl_two_distinct_lines_are_clean(task: Path) -> None:
    """A merged task's instructions, one object per line (§5; docs/decisions.md E61): nothing to say."""
    with open(task / "meta/tasks.jsonl", "a") as fh:
        fh.write('{"task_index": 1, "task": "other"}\n')
    report = validate_task(task)
    assert [f for f in report.findings if f.rule == "file_format.md §5"] == [] and report.ok


@pytest.mark.parametrize("line,says", [('{"task_index": 0, "task": "other"}', "lines 1 and 2 both have task_index 0"),
                                       ('{"task_index": 1, "task": "demo"}', "lines 1 and 2 hold the same task string")])
def test_tasks_jsonl_a_repeated_index_or_string_is_a_warning(task: Path, line: str, says: str) -> None:
    first = json.loads((task / "meta/tasks.jsonl").read_text().splitlines()[0])
    with open(task / "meta/tasks.jsonl", "a") as fh:
        fh.write(line.replace('"demo"', json.dumps(first["task"])) + "\n")
    report = validate_task(task)
    assert says in only(report, "file_format.md §5", "warning").message and report.ok


@pytest.mark.parametrize("name,rule,reader", [
    ("tasks.jsonl", "file_format.md §5", "json.loads(f.readline())"),
    ("info.json", "file_format.md §3", "json.load(f)"),
    ("stats.json", "file_format.md §4", "json.load(f)"),
])
def test_meta_file_with_a_byte_order_mark(task: Path, name: str, rule: str, reader: str) -> None:
    """egopool reads past a UTF-8 BOM, the spec's readers do not (issue 15 F): reported, once."""
    path = task / "meta" / name
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    with open(path, encoding="utf-8") as fh, pytest.raises(json.JSONDecodeError, match="BOM"):
        json.loads(fh.readline()) if name == "tasks.jsonl" else json.load(fh)  # the spec's own reader
    report = validate_task(task)
    f = only(report, rule)
    assert f.path == str(path) and f.severity == "error" and not report.ok
    assert f.message.startswith("begins with a UTF-8 byte order mark (EF BB BF)") and reader in f.message
    assert len(report.findings) == 1  # the rest of the file was read as it is meant


def test_stats_block_without_count_is_a_legacy_warning(task: Path) -> None:
    edit_json(task / "meta/stats.json", lambda d: d["observation.left_glove"].pop("count"))
    report = validate_task(task)
    f = only(report, "file_format.md §4", "warning")
    assert "observation.left_glove" in f.message and "egopool stats recalc" in f.message
    assert report.ok


def test_stats_missing(task: Path) -> None:
    (task / "meta/stats.json").unlink()
    assert "stats recalc" in only(validate_task(task), "file_format.md §4").message


def test_stats_block_lengths(task: Path) -> None:
    edit_json(task / "meta/stats.json", lambda d: d["observation.imu"]["std"].pop())
    assert "observation.imu" in only(validate_task(task), "file_format.md §4").message


def test_obsolete_stats_sidecar_is_a_warning(task: Path) -> None:
    (task / "meta/.stats_state.json").write_text("{}")
    report = validate_task(task)
    assert only(report, "file_format.md §11", "warning").path.endswith(".stats_state.json") and report.ok


def test_ignored_entries_give_no_finding(task: Path) -> None:
    (task / "meta/recycled_episode.json").write_text('{"episode_index": 1, "freed_at": "x"}')
    (task / "data/chunk-000/.episode-001.parquet.abcd.tmp").write_bytes(b"partial")
    (task / "_trash").mkdir()
    (task / "_trash/episode-000.parquet").write_bytes(b"junk")
    (task / "_migrate_backup_20260101").mkdir()
    (task / "meta/episodes/chunk-000/_episodes_x_1.parquet").write_bytes(b"junk")
    assert validate_task(task).findings == []


def test_stray_file_is_a_warning(task: Path) -> None:
    (task / "data/chunk-000/notes.txt").write_text("hi")
    report = validate_task(task)
    assert only(report, "file_format.md §1", "warning").path == str(task / "data/chunk-000/notes.txt")


def test_v1_leftovers_in_pooled_task(task: Path) -> None:
    (task / "timestamps.json").write_text("{}")
    assert only(validate_task(task), "file_format.md §1", "warning").path.endswith("timestamps.json")


def test_watermark_below_highest_n(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d.update(total_episodes=0))
    assert "total_episodes = 0" in only(validate_task(task), "file_format.md §2", "warning").message


# -- numbering and file groups -------------------------------------------------------------------

def test_data_episode_index_differs_from_path(task: Path) -> None:
    rewrite_parquet(task / DATA, lambda t: set_column(t, "episode_index", [7] * t.num_rows))
    f = only(validate_task(task), "file_format.md §2")
    assert f.path == str(task / DATA) and "episode_index" in f.message and "[7]" in f.message and "N=1" in f.message


def test_meta_episode_index_differs_from_path(task: Path) -> None:
    rewrite_parquet(task / META, lambda t: set_column(t, "episode_index", [3]))
    f = only(validate_task(task), "file_format.md §2")
    assert f.path == str(task / META) and "N=1" in f.message


def test_data_without_meta_row(task: Path) -> None:
    (task / META).unlink()
    f = only(validate_task(task), "multi_device_storage.md §1.2")
    assert f.path == str(task / META) and "no meta/episodes row" in f.message


def test_meta_row_without_data(task: Path) -> None:
    (task / DATA).unlink()
    f = only(validate_task(task), "multi_device_storage.md §1.2")
    assert f.path == str(task / DATA) and "no data parquet" in f.message


def test_video_without_data(task: Path) -> None:
    orphan = task / "videos/chunk-000/head_left_rgb/episode-004.mp4"
    shutil.copy(task / RGB, orphan)
    f = only(validate_task(task), "multi_device_storage.md §1.2")
    assert f.path == str(task / "data/chunk-000/episode-004.parquet") and "'head_left_rgb'" in f.message


def test_declared_stream_file_missing(task: Path) -> None:
    shutil.rmtree(task / "videos/chunk-000/d435_depth")
    f = only(validate_task(task), "multi_device_storage.md §1.2")
    assert "'d435_depth'" in f.message and f.path.endswith("d435_depth/episode-000.mkv")


def test_legacy_file_names_are_warnings(task: Path) -> None:
    (task / DATA).rename(task / "data/chunk-000/file-000.parquet")
    report = validate_task(task)
    assert only(report, "file_format.md §2", "warning").path.endswith("file-000.parquet") and report.ok


def test_legacy_meta_shard(task: Path) -> None:
    shard = task / "meta/episodes/chunk-000/file-000.parquet"
    rewrite_parquet(task / META, lambda t: pa.concat_tables(
        [t, set_column(set_column(t, "episode_index", [2]), "video_codec", ["{}"])]))
    (task / META).rename(shard)
    report = validate_task(task)
    assert "--split-episodes" in only(report, "file_format.md §6.1", "warning").message
    # episode 2 of the shard has a meta row but no data
    assert only(report, "multi_device_storage.md §1.2").path.endswith("episode-001.parquet")


# -- data parquet --------------------------------------------------------------------------------

def test_truncated_data_parquet(task: Path) -> None:
    raw = (task / DATA).read_bytes()
    (task / DATA).write_bytes(raw[: len(raw) // 2])
    report = validate_task(task)
    f = only(report, "file_format.md §7")
    assert f.path == str(task / DATA) and "truncated or corrupt" in f.message and "\n" not in f.message


def test_truncated_meta_parquet(task: Path) -> None:
    raw = (task / META).read_bytes()
    (task / META).write_bytes(raw[:40])
    f = only(validate_task(task), "file_format.md §6.1")
    assert f.path == str(task / META) and "truncated or corrupt" in f.message


def test_frame_index_hole(task: Path) -> None:
    rewrite_parquet(task / DATA, lambda t: set_column(t, "frame_index", [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12]))
    report = validate_task(task)
    f = only(report, "file_format.md §7.1")
    assert "'frame_index'" in f.message and "row 5 holds 6" in f.message
    assert "'end_frame_index' = 11" in only(report, "file_format.md §6.2").message


def test_key_column_dtype(task: Path) -> None:
    rewrite_parquet(task / DATA, lambda t: set_column(t, "timestamp", t.column("timestamp").to_numpy().astype(np.float64),
                                                                  pa.float64()))
    f = only(validate_task(task), "file_format.md §7.1")
    assert "'timestamp'" in f.message and "float" in f.message


def test_key_column_missing(task: Path) -> None:
    rewrite_parquet(task / DATA, lambda t: t.drop_columns(["hardware_ns"]))
    assert "'hardware_ns'" in only(validate_task(task), "file_format.md §7.1").message


def test_length_differs_from_rows(task: Path) -> None:
    rewrite_parquet(task / META, lambda t: set_column(t, "length", [ROWS + 1]))
    f = only(validate_task(task), "file_format.md §6.2")
    assert f.path == str(task / META) and f"'length' = {ROWS + 1}" in f.message and f"{ROWS} rows" in f.message


def test_start_frame_index(task: Path) -> None:
    rewrite_parquet(task / META, lambda t: set_column(t, "start_frame_index", [1]))
    assert "'start_frame_index' = 1" in only(validate_task(task), "file_format.md §6.2").message


def test_meta_json_column_does_not_parse(task: Path) -> None:
    rewrite_parquet(task / META, lambda t: set_column(t, "drop_stats", ["{bad"]))
    f = only(validate_task(task), "file_format.md §6.2")
    assert "'drop_stats'" in f.message and "JSON" in f.message


def test_meta_missing_required_column(task: Path) -> None:
    rewrite_parquet(task / META, lambda t: t.drop_columns(["duration_sec"]))
    assert "duration_sec" in only(validate_task(task), "file_format.md §6.2").message


def test_meta_without_force_matrix_specs_column_is_tolerated_with_warning(task: Path) -> None:
    rewrite_parquet(task / META, lambda t: t.drop_columns(["force_matrix_specs", "slam_specs"]))
    report = validate_task(task)
    f = only(report, "file_format.md §7.2.1", "warning")
    assert FM in f.message and "repair force-scale" in f.message and report.ok


def test_rows_differ_from_video_frames(task: Path) -> None:
    rewrite_parquet(task / DATA, lambda t: t.slice(0, ROWS - 1))
    rewrite_parquet(task / META, lambda t: set_column(set_column(t, "length", [ROWS - 1]), "end_frame_index",
                                                      [ROWS - 2]))
    report = validate_task(task)
    hits = sorted((f for f in report.findings if f.rule == "file_format.md §7.3"), key=lambda f: f.path)
    assert [Path(f.path).parent.name for f in hits] == ["d435_depth", "head_left_rgb"]
    assert all(f"{ROWS} frames" in f.message and f"{ROWS - 1} rows" in f.message for f in hits)
    assert len(report.findings) == 2


def test_video_not_in_video_extensions(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d["video_extensions"].pop("head_left_rgb"))
    f = only(validate_task(task), "file_format.md §8")
    assert f.path == str(task / RGB) and "'head_left_rgb'" in f.message and "video_extensions" in f.message


def test_video_extension_mismatch(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d["video_extensions"].update(head_left_rgb="mkv"))
    f = only(validate_task(task), "file_format.md §8")
    assert "'mp4'" in f.message and "'mkv'" in f.message


def test_corrupt_video(task: Path) -> None:
    (task / RGB).write_bytes((task / RGB).read_bytes()[:64])
    f = only(validate_task(task), "file_format.md §8")
    assert f.path == str(task / RGB) and "'head_left_rgb'" in f.message


def test_depth_slot_in_cameras(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d["cameras"].update(d435_depth={"height": 24, "width": 32}))
    f = only(validate_task(task), "multi_device_storage.md §4.8")
    assert "'d435_depth'" in f.message and f.path.endswith("meta/info.json")


def test_rgb_stream_not_in_cameras(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d["cameras"].pop("head_left_rgb"))
    assert "'head_left_rgb'" in only(validate_task(task), "multi_device_storage.md §6.3").message


def test_observation_column_not_declared(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d["features"].pop("observation.left_glove"))
    f = only(validate_task(task), "multi_device_storage.md §6.8.2")
    assert f.path == str(task / DATA) and "'observation.left_glove'" in f.message


def test_status_column_declared_in_features(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d["features"].update({"status.left_glove": {"dtype": "string"}}))
    assert "'status.left_glove'" in only(validate_task(task), "multi_device_storage.md §6.8.2").message


def test_feature_without_dtype(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d["features"]["observation.left_glove"].pop("dtype"))
    assert "observation.left_glove" in only(validate_task(task), "multi_device_storage.md §8.1.5").message


def test_feature_dtype_differs_from_stored(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d["features"]["observation.left_glove"].update(dtype="float64"))
    f = only(validate_task(task), "multi_device_storage.md §6.2")
    assert "'observation.left_glove'" in f.message and "float32" in f.message


def test_fixed_length_row_differs_from_feature_shape(task: Path) -> None:
    def cut(t: pa.Table) -> pa.Table:
        rows = t.column("observation.left_glove").to_pylist()
        rows[3] = rows[3][:255]
        return set_column(t, "observation.left_glove", rows)
    rewrite_parquet(task / DATA, cut)
    f = only(validate_task(task), "multi_device_storage.md §6.2")
    assert "'observation.left_glove' row 3 has 255 values" in f.message and "256" in f.message


@pytest.mark.parametrize("new_name,needle", [
    ("observation.Left_Glove", "[a-z0-9_]"),
    ("observation.gripper_1_state", "gripper_1_"),
    ("observation.images.head", "observation.images"),
    ("observation.slam_pose", "slam_pose"),
])
def test_column_grammar(task: Path, new_name: str, needle: str) -> None:
    rewrite_parquet(task / DATA, lambda t: rename_column(t, "observation.left_glove", new_name))
    edit_json(task / "meta/info.json",
              lambda d: d["features"].update({new_name: d["features"].pop("observation.left_glove")}))
    report = validate_task(task)
    data_hits = [f for f in report.findings if f.rule == "multi_device_storage.md §2.4" and f.path == str(task / DATA)]
    info_hits = [f for f in report.findings if f.rule == "multi_device_storage.md §2.4" and f.path.endswith("info.json")]
    assert len(data_hits) == 1 and len(info_hits) == 1, [f.one_line() for f in report.findings]
    assert new_name in data_hits[0].message and needle in data_hits[0].message


def test_reserved_suffix_with_wrong_kind(task: Path) -> None:
    # a 3-float vector named like a force timestamp (int64 scalar)
    rewrite_parquet(task / DATA, lambda t: rename_column(t, "observation.left_glove", "observation.paw_force_ns"))
    edit_json(task / "meta/info.json",
              lambda d: d["features"].update({"observation.paw_force_ns": d["features"].pop("observation.left_glove")}))
    f = only(validate_task(task), "multi_device_storage.md §2.4")
    assert "'observation.paw_force_ns'" in f.message and "force_ns" in f.message and "int64" in f.message


@pytest.mark.parametrize("name", ["Robot_Speed", "robot.speed", "robot-speed", "gripper.raw_ns"])
def test_top_level_column_breaking_the_grammar(task: Path, name: str) -> None:
    """A top-level name outside the key-column form is an error (an unknown one of that form: see
    tests/test_validate_hardening.py, a warning)."""
    rewrite_parquet(task / DATA, lambda t: set_column(t, name, np.zeros(ROWS), pa.float64()))
    f = only(validate_task(task), "multi_device_storage.md §2.2")
    assert f"'{name}'" in f.message and "breaks the column grammar" in f.message


def test_status_column_not_string(task: Path) -> None:
    rewrite_parquet(task / DATA, lambda t: set_column(t, "status.left_glove", np.ones(ROWS, np.int64), pa.int64()))
    assert "'status.left_glove'" in only(validate_task(task), "multi_device_storage.md §3").message


def test_null_row(task: Path) -> None:
    def null(t: pa.Table) -> pa.Table:
        rows = t.column("observation.right_hand_pose").to_pylist()
        rows[4] = None
        return set_column(t, "observation.right_hand_pose", rows)
    rewrite_parquet(task / DATA, null)
    f = only(validate_task(task), "multi_device_storage.md §5.5")
    assert "'observation.right_hand_pose' row 4 is null" in f.message


# -- trajectories --------------------------------------------------------------------------------

def test_trajectory_ns_lockstep(task: Path) -> None:
    def extra_stamp(t: pa.Table) -> pa.Table:
        ns = t.column(TRAJ + "_ns").to_pylist()
        ns[1] = ns[1] + [0]  # row 1 has one point, now two stamps
        return set_column(t, TRAJ + "_ns", ns)
    rewrite_parquet(task / DATA, extra_stamp)
    f = only(validate_task(task), "multi_device_storage.md §8.1.3")
    assert f"'{TRAJ}_ns'" in f.message and "row 1" in f.message and "1 points, 2 stamps" in f.message


def test_trajectory_ns_without_trajectory(task: Path) -> None:
    rewrite_parquet(task / DATA, lambda t: t.drop_columns([TRAJ]))
    f = only(validate_task(task), "multi_device_storage.md §8.1.3")
    assert f"'{TRAJ}_ns'" in f.message


def test_trajectory_row_not_multiple_of_8(task: Path) -> None:
    def short(t: pa.Table) -> pa.Table:
        pts = t.column(TRAJ).to_pylist()
        pts[2] = pts[2][:-1]
        return set_column(t, TRAJ, pts)
    rewrite_parquet(task / DATA, short)
    report = validate_task(task)
    f = only(report, "multi_device_storage.md §4.6")
    assert f"'{TRAJ}' row 2 has 15 values" in f.message
    assert only(report, "multi_device_storage.md §8.1.3")  # 15 values are not 2 points either


def test_trajectory_without_frame_is_legacy_warning(task: Path) -> None:
    def drop_frame(d: dict[str, Any]) -> None:
        for k in ("frame", "frame_axes"):
            d["features"][TRAJ].pop(k)
        d.pop("slam_frames")
    edit_json(task / "meta/info.json", drop_frame)
    rewrite_parquet(task / META, lambda t: set_column(t, "slam_specs", ["{}"]))
    report = validate_task(task)
    f = only(report, "file_format.md §3.1", "warning")
    assert TRAJ in f.message and "right_forward_up" in f.message and report.ok


def test_trajectory_frame_axes_disagree_with_frame(task: Path) -> None:
    edit_json(task / "meta/info.json",
              lambda d: d["features"][TRAJ].update(frame_axes={"+X": "down", "+Y": "left", "+Z": "forward"}))
    f = only(validate_task(task), "file_format.md §3.1")
    assert TRAJ in f.message and "'ego_cam_optical'" in f.message


def test_trajectory_frame_without_axes(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d["features"][TRAJ].pop("frame_axes"))
    assert TRAJ in only(validate_task(task), "multi_device_storage.md §8.1.6").message


def test_slam_frames_disagree_with_features(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d["slam_frames"].update({TRAJ: "down_left_forward"}))
    assert TRAJ in only(validate_task(task), "multi_device_storage.md §6.6").message


def test_slam_specs_frame_axes_checked(task: Path) -> None:
    spec = {TRAJ: {"frame": "down_left_forward", "frame_axes": {"+X": "up", "+Y": "up", "+Z": "up"}}}
    rewrite_parquet(task / META, lambda t: set_column(t, "slam_specs", [json.dumps(spec)]))
    f = only(validate_task(task), "file_format.md §3.1")
    assert f.path == str(task / META) and "slam_specs" in f.message


# -- IMU and force matrices ----------------------------------------------------------------------

def test_imu_ts_not_one_to_one(task: Path) -> None:
    def drop(t: pa.Table) -> pa.Table:
        ts = t.column("imu_ts_ns").to_pylist()
        ts[6] = ts[6][:1]
        return set_column(t, "imu_ts_ns", ts)
    rewrite_parquet(task / DATA, drop)
    f = only(validate_task(task), "file_format.md §7.2")
    assert "'imu_ts_ns'" in f.message and "row 6" in f.message and "2 samples, 1 stamps" in f.message


def test_force_matrix_feature_lacks_scale(task: Path) -> None:
    edit_json(task / "meta/info.json", lambda d: d["features"][FM].pop("scale"))
    f = only(validate_task(task), "multi_device_storage.md §8.1.4")
    assert FM in f.message and "scale" in f.message and f.path.endswith("info.json")


def test_force_matrix_specs_lack_column_is_warning(task: Path) -> None:
    rewrite_parquet(task / META, lambda t: set_column(t, "force_matrix_specs", ["{}"]))
    report = validate_task(task)
    assert "repair force-scale" in only(report, "file_format.md §7.2.1", "warning").message and report.ok


def test_force_matrix_row_length(task: Path) -> None:
    def cut(t: pa.Table) -> pa.Table:
        rows = t.column(FM).to_pylist()
        rows[0] = rows[0][:1000]
        return set_column(t, FM, rows)
    rewrite_parquet(task / DATA, cut)
    f = only(validate_task(task), "file_format.md §7.2.1")
    assert f"'{FM}' row 0 has 1000 values" in f.message and "187500" in f.message


# -- wall_time (§7.3) ----------------------------------------------------------------------------

def _shift_wall(t: pa.Table, row: int, delta: float) -> pa.Table:
    wall = t.column("wall_time").to_numpy().copy()
    wall[row] += delta
    return set_column(t, "wall_time", wall)


def test_wall_time_offset_not_constant(task: Path) -> None:
    rewrite_parquet(task / DATA, lambda t: _shift_wall(t, 5, 0.02))  # still increasing: rows are 33 ms apart
    f = only(validate_task(task), "file_format.md §7.3")
    assert "wall_time - timestamp is not constant: at row 5 it changes by +0.020000 s" in f.message


def test_wall_time_not_strictly_increasing(task: Path) -> None:
    rewrite_parquet(task / DATA, lambda t: _shift_wall(t, 6, -1.0 / 30))
    report = validate_task(task)
    msgs = [f.message for f in report.findings if f.rule == "file_format.md §7.3"]
    assert any("not strictly increasing: row 6" in m for m in msgs) and len(msgs) == 2


@pytest.mark.parametrize("version,applies", [("0.1.0", True), ("1.3.16", False), ("1.3.17", True), ("1.4.0", True),
                                             ("1.2", False), ("v1.3.9", False), ("2.0.0", True), (None, True)])
def test_wall_time_rule_versions(version: str | None, applies: bool) -> None:
    assert wall_time_rule_applies(version) is applies


def test_wall_time_rule_skipped_before_1_3_17(task: Path) -> None:
    rewrite_parquet(task / DATA, lambda t: _shift_wall(t, 5, 0.02))
    edit_json(task / "meta/info.json", lambda d: d.update(app_version="1.3.16"))
    assert validate_task(task).findings == []
    edit_json(task / "meta/info.json", lambda d: d.update(app_version="1.3.17"))
    assert only(validate_task(task), "file_format.md §7.3")


def test_wall_time_tolerates_float32_timestamps(task: Path) -> None:
    """A writer that adds the float64 time and stores the float32 timestamp is within tolerance."""
    t64 = 3000.0 + np.arange(ROWS) / 30.0 + 1e-6  # an hour-long recording's tail
    ts32 = t64.astype(np.float32)
    wall = CREATED_AT + t64
    assert np.abs((wall - ts32.astype(np.float64)) - CREATED_AT).max() > 1e-5  # beyond the base tolerance
    rewrite_parquet(task / DATA, lambda t: set_column(set_column(t, "timestamp", ts32), "wall_time", wall))
    assert validate_task(task).findings == []
    # ...but a real 5 ms jump at that magnitude is still caught
    rewrite_parquet(task / DATA, lambda t: _shift_wall(t, 3, 0.005))
    assert "row 3" in only(validate_task(task), "file_format.md §7.3").message


# -- read-only -----------------------------------------------------------------------------------

def test_validate_is_read_only(task: Path) -> None:
    rewrite_parquet(task / DATA, lambda t: set_column(t, "frame_index", list(range(1, ROWS + 1))))
    (task / "meta/tasks.jsonl").write_text('{\n  "task_index": 0\n}\n')
    before = snapshot(task)
    report = validate_task(task)
    assert not report.ok
    assert snapshot(task) == before


# -- CLI -----------------------------------------------------------------------------------------

def test_cli_valid_task_json(task: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(task), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["findings"] == []
    assert out["tasks"] == [{"task": str(task), "ok": True, "episodes": 1, "errors": 0, "warnings": 0, "notes": []}]


def test_cli_several_tasks_combined_json(task: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["validate", str(task), str(empty), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False
    assert [(f["rule"], f["severity"], f["path"]) for f in out["findings"]] == [
        ("file_format.md §1", "error", str(empty / "meta/info.json"))]
    assert [(t["task"], t["ok"]) for t in out["tasks"]] == [(str(task), True), (str(empty), False)]


def test_cli_human_output(task: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rewrite_parquet(task / META, lambda t: set_column(t, "length", [99]))
    assert main(["validate", str(task)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ERROR   file_format.md §6.2  " + str(task / META) + ": meta column 'length' = 99")
    assert lines[-1] == "FAILED: 1 error in 1 of 1 task"
    assert main(["validate", str(task.parent / "nope")]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "FAILED: 1 error in 1 of 1 task"


def test_historical_slam_pose_column_is_a_warning(task: Path) -> None:
    # UMIGripper_Action_AI still holds observation.slam_pose; readers ignore it (multi_device_storage.md §9.1)
    rewrite_parquet(task / DATA, lambda t: rename_column(t, "observation.left_glove", "observation.slam_pose"))
    edit_json(task / "meta/info.json",
              lambda d: d["features"].update({"observation.slam_pose": d["features"].pop("observation.left_glove")}))
    hits = [f for f in validate_task(task).findings if f.path == str(task / DATA) and "slam_pose" in f.message]
    assert [f.severity for f in hits] == ["warning"]


def test_null_hardware_ns_is_an_error(task: Path) -> None:
    # 0 means "unknown stamp" (file_format.md §7.1); null is never a valid key value
    rewrite_parquet(task / DATA, lambda t: set_column(t, "hardware_ns", pa.nulls(t.num_rows, pa.int64()), pa.int64()))
    f = only(validate_task(task), "file_format.md §7.1")
    assert "'hardware_ns'" in f.message and f"{ROWS} null" in f.message
