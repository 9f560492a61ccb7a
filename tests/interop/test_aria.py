"""``egopool import aria``: the bundled AEA VRS and MPS sample import, validate, and match projectaria-tools."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from egopool import open_task
from egopool.arrowutil import list_column_to_numpy
from egopool.cli.app import main
from egopool.errors import FormatError
from egopool.interop.aria import ARIA_TO_MEDIAPIPE, import_aria
from egopool.validate import validate_task

DATA = Path(__file__).resolve().parent.parent / "data"
VRS = DATA / "aria_aea_recording" / "recording.vrs"
MPS = DATA / "aria_mps_sample"


def _provider():
    pytest.importorskip("projectaria_tools")
    from projectaria_tools.core import data_provider

    return data_provider.create_vrs_data_provider(str(VRS))


@pytest.fixture(scope="module")
def aea(tmp_path_factory):
    p = _provider()
    root = tmp_path_factory.mktemp("aria")
    return p, import_aria(VRS, root, task="aea")


@pytest.mark.extra("interop")
def test_vrs_counts_equal_projectaria_tools(aea):
    p, result = aea
    task = open_task(result.task_dir)
    assert not validate_task(task.path).errors
    ep = task.episode(1)
    n_rgb = p.get_num_data(p.get_stream_id_from_label("camera-rgb"))
    assert ep.length == n_rgb == 8
    table = ep.table
    for slot, label in (("aria_slam_left", "camera-slam-left"), ("aria_slam_right", "camera-slam-right")):
        sid = p.get_stream_id_from_label(label)
        stamps = [p.get_image_data_by_index(sid, i)[1].capture_timestamp_ns for i in range(p.get_num_data(sid))]
        stored = table.column(f"observation.{slot}_frame_ns").to_pylist()
        assert sorted(set(stored)) == stamps and len(stamps) == 4  # every SLAM frame, each at its own stamp
        assert len(list(ep.video(slot))) == ep.length
    rgb_id = p.get_stream_id_from_label("camera-rgb")
    assert table.column("hardware_ns").to_pylist() == [
        p.get_image_data_by_index(rgb_id, i)[1].capture_timestamp_ns for i in range(n_rgb)]
    imu = ep.imu_samples()
    right = p.get_stream_id_from_label("imu-right")
    assert len(imu) == p.get_num_data(right) == 400
    first = p.get_imu_data_by_index(right, 0)
    assert imu.ts_ns[0] == first.capture_timestamp_ns
    np.testing.assert_allclose(imu.values[0], [*first.gyro_radsec, *first.accel_msec2], rtol=1e-6)
    left = p.get_stream_id_from_label("imu-left")
    left_ts = list_column_to_numpy(table.column("observation.imu_left"), depth=2)
    assert left_ts.shape == (p.get_num_data(left), 6) == (319, 6)
    frame0 = next(iter(ep.video("aria_rgb"))).astype(float)
    src = p.get_image_data_by_index(rgb_id, 0)[0].to_numpy_array().astype(float)
    assert frame0.shape == src.shape and np.abs(frame0 - src).mean() < 4.0
    assert "head_stereo" in ep.meta["calibration"] and ep.meta["calibration"]["head_stereo"]["resolution"] == [640, 480]


@pytest.mark.extra("interop")
def test_mps_alone_imports_trajectory_gaze_and_hands(tmp_path):
    pytest.importorskip("projectaria_tools")
    from projectaria_tools.core import mps

    poses = mps.read_closed_loop_trajectory(str(MPS / "trajectory" / "closed_loop_trajectory.csv"))
    result = import_aria(None, tmp_path, task="mps", mps_dir=MPS, fps=30.0)
    task = open_task(result.task_dir)
    assert not validate_task(task.path).errors
    ep = task.episode(1)
    tr = ep.trajectory("observation.ego_slam_trajectory")
    assert len(tr.points) == len(poses) == result.counts["trajectory_points"] == 2000
    assert tr.frame == "forward_left_up" and tr.frame_axes == {"+X": "forward", "+Y": "left", "+Z": "up"}
    assert tr.host_ns[0] == round(poses[0].tracking_timestamp.total_seconds() * 1e6) * 1000
    world = np.stack([np.asarray(p.transform_world_device.to_matrix())[:3, 3] for p in poses])
    np.testing.assert_allclose(np.linalg.norm(np.diff(tr.positions, axis=0), axis=1),
                               np.linalg.norm(np.diff(world, axis=0), axis=1), atol=1e-9)  # a rotation only
    np.testing.assert_allclose(tr.positions[:, 2], world[:, 2], atol=1e-12)                 # about gravity
    from egopool.importers import quaternion_to_rotation

    fwd = quaternion_to_rotation(tr.quaternions[0])[:, 2]  # the device's +Z at the first pose
    assert fwd[0] > 0.99 and abs(fwd[1]) < 1e-9
    table = ep.table
    gaze_ns = table.column("observation.eye_gaze_ns").to_numpy()
    assert np.count_nonzero(gaze_ns) == result.counts["gaze_samples"] > 0
    assert task.info["features"]["observation.eye_gaze"]["names"][0] == "yaw"
    # the sample's hand tracking is on another stretch of the device clock than its trajectory: counted
    assert result.counts["left_hand_samples"] == 0 and any("left hand: 3 of 3" in n for n in result.notes)
    assert ep.meta["created_at"] == pytest.approx(poses[0].utc_timestamp.total_seconds())


def test_aria_to_mediapipe_covers_every_joint_once():
    kept = [a for a in ARIA_TO_MEDIAPIPE if a >= 0]
    assert ARIA_TO_MEDIAPIPE[0] == 5 and sorted(kept) == list(range(20))  # wrist first; palm centre (20) left out


@pytest.mark.extra("interop")
def test_mps_of_another_recording_is_refused_and_nothing_written(tmp_path, capsys):
    _provider()
    with pytest.raises(FormatError, match="not computed from this recording"):
        import_aria(VRS, tmp_path / "rec", task="both", mps_dir=MPS)
    assert not (tmp_path / "rec" / "both").exists()
    assert main(["import", "aria", "--task", "x", "--out", str(tmp_path / "rec")]) == 1
    assert "pass RECORDING.vrs and/or --mps DIR" in capsys.readouterr().err
    assert main(["import", "aria", str(MPS / "eye_gaze" / "summary.json"), "--task", "x",
                 "--out", str(tmp_path / "rec")]) == 1
    err = capsys.readouterr().err
    assert "summary.json" in err and err.count("\n") == 1


@pytest.mark.extra("interop")
def test_cli_import_aria_json(tmp_path, capsys):
    _provider()
    assert main(["import", "aria", "--mps", str(MPS), "--task", "m", "--out", str(tmp_path), "--fps", "10",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"]["trajectory_points"] == 2000 and doc["episodes"][0]["episode_index"] == 1
    assert any("grid" in s for s in doc["synthesised"])


@pytest.mark.extra("interop")
@pytest.mark.parametrize("args", [["--mps", str(MPS)], [str(VRS)]])
def test_json_output_is_only_json_and_the_library_chatter_stays_off_the_terminal(tmp_path, args):
    """Issue 15 E: projectaria-tools prints "Loaded #..." from C++ on file descriptor 1, below Python's
    sys.stdout: with --json stdout is the JSON document alone, and without --verbose its lines are not
    shown at all; --verbose shows them on stderr."""
    import os
    import subprocess
    import sys

    _provider()
    run = [sys.executable, "-m", "egopool", "import", "aria", *args, "--out", str(tmp_path), "--json"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    quiet = subprocess.run([*run, "--task", "q"], capture_output=True, text=True, env=env, timeout=600)
    assert quiet.returncode == 0, quiet.stderr
    doc = json.loads(quiet.stdout)  # the whole of stdout
    assert doc["episodes"][0]["episode_index"] == 1 and "Loaded #" not in quiet.stdout + quiet.stderr
    loud = subprocess.run([*run, "--task", "v", "--verbose"], capture_output=True, text=True, env=env, timeout=600)
    assert loud.returncode == 0 and json.loads(loud.stdout)["counts"] == doc["counts"]
    if args[0] == "--mps":
        assert "projectaria-tools: Loaded #EyeGazes: 123" in loud.stderr.splitlines()


def _mps_copy(tmp_path: Path, edit) -> Path:
    import shutil

    out = tmp_path / "mps"
    shutil.copytree(MPS, out)
    edit(out)
    return out


def _blank(csv_path: Path, column: str, rows) -> list[int]:
    """Empty ``column`` in the given data rows (0-based); returns their tracking_timestamp_us."""
    import csv

    with open(csv_path, newline="") as fh:
        table = list(csv.reader(fh))
    j, t = table[0].index(column), table[0].index("tracking_timestamp_us")
    for i in rows:
        table[1 + i][j] = ""
    with open(csv_path, "w", newline="") as fh:
        csv.writer(fh).writerows(table)
    return [int(table[1 + i][t]) for i in rows]


@pytest.mark.extra("interop")
def test_empty_mps_fields_are_stored_as_missing_and_counted(tmp_path):
    """Issue 15 E: the public sample leaves eye-gaze depth_m empty in every row, and some rows may have a blank
    yaw; projectaria-tools reads both as 0.0. A missing value is not a zero: NaN (the feature's missing_value),
    counted in the import's counts, its notes and drop_stats."""
    import pyarrow.parquet as pq

    pytest.importorskip("projectaria_tools")
    gaze_csv = "eye_gaze/generalized_eye_gaze.csv"
    blank_us: list[int] = []
    mps = _mps_copy(tmp_path, lambda d: blank_us.extend(_blank(d / gaze_csv, "yaw_rads_cpf", range(0, 123, 2))))
    result = import_aria(None, tmp_path / "rec", task="g", mps_dir=mps, fps=30.0)
    ep = open_task(result.task_dir).episode(1)
    gaze = list_column_to_numpy(ep.table.column("observation.eye_gaze")).reshape(-1, 7)
    ns = ep.table.column("observation.eye_gaze_ns").to_numpy()
    stored = ns != 0
    assert stored.sum() == result.counts["gaze_samples"] == 20
    assert np.isnan(gaze[stored, 6]).all() and not np.isnan(gaze[~stored]).any()  # depth: every stored sample
    blank_yaw = np.isin(ns, np.asarray(blank_us, np.int64) * 1000) & stored
    assert 0 < blank_yaw.sum() < 20
    np.testing.assert_array_equal(np.isnan(gaze[:, 0]), blank_yaw)  # yaw: exactly the rows left blank
    assert np.isfinite(gaze[stored][:, 1:6]).all()
    assert result.counts["gaze_depth_missing"] == 20 and result.counts["gaze_yaw_missing"] == blank_yaw.sum()
    drop = json.loads(pq.read_table(result.task_dir / "meta/episodes/chunk-000/episode-000.parquet")
                      .column("drop_stats")[0].as_py())
    assert drop["eye_gaze_missing_count"] == 20 + blank_yaw.sum()
    assert any(n.startswith("MPS eye gaze: empty fields in the 20 stored samples (yaw in") for n in result.notes)
    assert "NaN" in open_task(result.task_dir).info["features"]["observation.eye_gaze"]["missing_value"]
    assert validate_task(result.task_dir).ok
    # a LeRobot export keeps the NaN in its data; its stats.json (JSON: no NaN) skips the missing values
    from egopool.interop import export_lerobot

    out = export_lerobot(result.task_dir, tmp_path / "lr", lerobot="0.4").out
    block = json.loads((out / "meta/stats.json").read_text())["observation.eye_gaze"]
    present = gaze[stored & ~np.isnan(gaze[:, 0]), 0]
    assert block["max"][0] == pytest.approx(float(present.max())) and block["max"][6] == 0.0


@pytest.mark.extra("interop")
def test_a_trajectory_pose_with_an_empty_field_is_left_out_and_counted(tmp_path):
    import pyarrow.parquet as pq

    pytest.importorskip("projectaria_tools")
    blank_us: list[int] = []
    mps = _mps_copy(tmp_path, lambda d: blank_us.extend(
        _blank(d / "trajectory/closed_loop_trajectory.csv", "tx_world_device", [700, 701, 1500])))
    result = import_aria(None, tmp_path / "rec", task="t", mps_dir=mps, fps=30.0)
    tr = open_task(result.task_dir).episode(1).trajectory("observation.ego_slam_trajectory")
    assert len(tr.points) == result.counts["trajectory_points"] == 1997 and result.counts["trajectory_blank_poses"] == 3
    assert not set(tr.host_ns.tolist()) & {u * 1000 for u in blank_us} and np.isfinite(tr.positions).all()
    drop = json.loads(pq.read_table(result.task_dir / "meta/episodes/chunk-000/episode-000.parquet")
                      .column("drop_stats")[0].as_py())
    assert drop["ego_slam_trajectory_rejected_count"] == 3


@pytest.mark.extra("interop")
def test_an_empty_hand_landmark_coordinate_is_missing_not_zero(tmp_path):
    """The sample's hand results lie outside its trajectory's span: moved into it (stamps + the offset),
    with the x of left landmark 3 emptied in the first row, the stored pose holds NaN there and it is counted."""
    import csv

    import pyarrow.parquet as pq

    pytest.importorskip("projectaria_tools")

    def edit(d: Path) -> None:
        path = d / "hand_tracking/hand_tracking_results_v2.csv"
        with open(path, newline="") as fh:
            table = list(csv.reader(fh))
        for i, row in enumerate(table[1:]):
            row[0] = str(149_500_000 + 200_000 * i)  # inside the trajectory (149.20-151.18 s)
        table[1][table[0].index("tx_left_landmark_3_device")] = ""
        with open(path, "w", newline="") as fh:
            csv.writer(fh).writerows(table)

    mps = _mps_copy(tmp_path, edit)
    result = import_aria(None, tmp_path / "rec", task="h", mps_dir=mps, fps=30.0)
    ep = open_task(result.task_dir).episode(1)
    pose = list_column_to_numpy(ep.table.column("observation.left_hand_pose")).reshape(-1, 21, 3)
    ns = ep.table.column("observation.left_hand_pose_ns").to_numpy()
    assert result.counts["left_hand_samples"] == 3 and result.counts["left_hand_missing_values"] == 1
    first = int(np.flatnonzero(ns == 149_500_000_000)[0])
    mp_joint = ARIA_TO_MEDIAPIPE.index(3)  # Aria landmark 3 (the ring fingertip) in MediaPipe order
    assert np.isnan(pose[first, mp_joint, 0]) and np.isfinite(pose[first, mp_joint, 1:]).all()
    assert np.isnan(pose[ns != 0][:, 1]).all()  # joint 1 (no Aria landmark) is NaN in every sample, not counted
    assert np.isfinite(np.delete(pose[ns != 0], 1, axis=1)).sum() == 3 * 20 * 3 - 1
    drop = json.loads(pq.read_table(result.task_dir / "meta/episodes/chunk-000/episode-000.parquet")
                      .column("drop_stats")[0].as_py())
    assert drop["left_hand_pose_missing_count"] == 1 and "right_hand_pose_missing_count" not in drop


def test_importing_the_same_mps_output_twice_is_refused(tmp_path, capsys):
    pytest.importorskip("projectaria_tools")
    args = ["import", "aria", "--mps", str(MPS), "--task", "mps", "--out", str(tmp_path)]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"egopool: error: {tmp_path}/mps: {MPS} is already in this task as episode N=1 ")
    assert [ep.index for ep in open_task(tmp_path / "mps").episodes()] == [1]
