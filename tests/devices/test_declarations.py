"""info.json and episodes-row declarations of recorded rigs (multi_device_storage.md §6, §7, Appendix B/C)."""

import json
from pathlib import Path

import numpy as np
import pytest

from egopool import TaskWriter, open_task
from egopool.devices import Device, Rig, SimulatedRig, build_rig
from egopool.recorder import Recorder

APPENDIX_B = json.loads((Path(__file__).parent.parent / "data" / "appendix_b_info.json").read_text("utf-8"))


def _record(tmp_path, rig, seconds=0.2, episodes=1, task="t", **sim):
    rec = Recorder(TaskWriter(tmp_path, task), rig)
    simr = SimulatedRig(rig, **sim)
    done = [simr.record(rec, seconds) for _ in range(episodes)]
    return open_task(tmp_path / task), done


@pytest.fixture(scope="module")
def full_task(tmp_path_factory):
    """The --rig full combination at Appendix B's real frame sizes (0.2 s: 6 rows)."""
    tmp = tmp_path_factory.mktemp("full")
    task, done = _record(tmp, build_rig("full"), 0.2)
    return task, done[0]


def test_full_rig_info_matches_appendix_b_key_by_key(full_task):
    task, _ = full_task
    info = task.info
    assert set(info) == set(APPENDIX_B)
    for key in ("format", "chunks_size", "data_path", "video_path", "episodes_path", "codebase_version", "fps",
                "video", "sensors", "sensor_dim", "total_episodes", "gripper_slam_frame", "slam_frames",
                "cameras", "video_extensions", "devices", "device_names", "calibration"):
        assert info[key] == APPENDIX_B[key], key
    assert set(info["features"]) == set(APPENDIX_B["features"])
    for col, decl in APPENDIX_B["features"].items():
        assert info["features"][col] == decl, col
    # values aside: task name, app version, creation time
    assert isinstance(info["created_at"], float) and info["task_name"] == "t"


def test_full_rig_data_columns_are_appendix_c(full_task):
    task, done = full_task
    ep = task.episode(done.index)
    names = set(ep.column_names)
    expected = {"episode_index", "frame_index", "timestamp", "task_index", "wall_time", "hardware_ns", "raw_hw_ns",
                "action", "imu_ts_ns", "observation.imu"}
    expected |= {c for c in APPENDIX_B["features"]}
    expected |= {f"status.{s}" for s in ("gripper_pose", "gripper_force_left", "gripper_force_right",
                                         "gripper_2_pose", "gripper_2_force_left", "gripper_2_force_right",
                                         "left_glove", "right_glove")}
    assert names == expected  # §5.6: no D435 forensic columns, no status.stereo_left / status.gripper_rgb
    assert sorted(ep.streams) == ["gripper_2_rgb", "gripper_rgb", "stereo_depth", "stereo_left", "stereo_right"]
    types = {f.name: str(f.type) for f in ep.schema}
    assert types["observation.imu"] == "list<element: list<element: float>>"
    assert types["observation.gripper_left_force_matrix"] == "list<element: int16>"
    assert types["observation.left_glove"] == "list<element: float>" and types["timestamp"] == "float"
    assert types["observation.gripper_2_slam_trajectory_ns"] == "list<element: int64>"


def test_full_rig_episode_row_declarations(full_task):
    task, done = full_task
    meta = task.episode(done.index).meta
    fm = meta["force_matrix_specs"]
    assert set(fm) == {c for c in APPENDIX_B["features"] if c.endswith("_force_matrix")}
    for col, spec in fm.items():
        assert spec == APPENDIX_B["features"][col]  # encoding + scale in features AND the row (§8.1.4)
    assert set(meta["slam_specs"]) == set(APPENDIX_B["slam_frames"])
    for col, spec in meta["slam_specs"].items():
        feat = APPENDIX_B["features"][col]
        assert spec == {k: feat[k] for k in ("frame", "frame_axes", "time", "owner", "source_slot")}
    assert meta["calibration"] == APPENDIX_B["calibration"]
    assert meta["length"] == 6 and meta["drop_stats"]["ticks_skipped"] == 0


def test_full_rig_signals_are_plausible(full_task):
    task, done = full_task
    ep = task.episode(done.index)
    t = ep.table
    gripper = ep.trajectory("observation.slam_trajectory")
    ego = ep.trajectory("observation.ego_slam_trajectory")
    assert np.all(np.diff(gripper.points[:, 3]) > 0)  # moving forward (+Z) in down_left_forward
    assert np.all(np.diff(ego.points[:, 3]) > 0)  # walking forward (+Z) in ego_cam_optical
    assert np.all(gripper.host_ns > 0) and np.all(np.diff(gripper.host_ns) > 0)
    q = gripper.points[:, 4:]
    assert np.linalg.norm(q, axis=1) == pytest.approx(1.0)
    from egopool.codecs.force_matrix import ForceMatrixCodec
    codec = ForceMatrixCodec("row_diff_quantized", 10)
    fm = codec.decode(np.asarray(t.column("observation.gripper_left_force_matrix").to_pylist()[-1], np.int16))[0]
    force = np.asarray(t.column("observation.gripper_left_force").to_pylist()[-1])
    assert fm[..., 2].sum() == pytest.approx(force[2], rel=0.01)  # Σ fz plane ≈ fz (file_format §7.2.1)
    pose = np.asarray(t.column("observation.right_hand_pose").to_pylist())
    assert pose.shape == (6, 63) and np.abs(pose).max() > 0.05  # a solved hand, not the zero placeholder
    press = np.asarray(t.column("observation.left_glove").to_pylist())
    assert press.shape == (6, 256) and press.max() > 100


def test_cameras_only_rgb_video_extensions_every_stream_and_fps_when_different(tmp_path):
    rig = Rig()
    rig.add(Device("d435", "d435:1", None, 32, 24))
    rig.add(Device("uvc", "uvc:a", "slow", 32, 24, fps=15.0))
    task, _ = _record(tmp_path, rig)
    info = task.info
    assert info["cameras"] == {"d435_rgb": {"height": 24, "width": 32},
                               "head_left_rgb": {"height": 24, "width": 32, "fps": 15.0}}
    assert info["video_extensions"] == {"d435_rgb": "mp4", "d435_depth": "mp4", "head_left_rgb": "mp4"}
    assert info["device_names"] == {"d435_rgb": "D435", "d435_depth": "D435", "head_left_rgb": "slow"}


def test_gripper_slam_frame_only_with_a_gripper_trajectory(tmp_path):
    ego_only = Rig()
    ego_only.add(Device("d405", "d435:1", "D405_head", 32, 24), role="ego")
    task, _ = _record(tmp_path, ego_only, task="ego")
    assert task.info["slam_frames"] == {"observation.ego_slam_trajectory": "ego_cam_optical"}
    assert "gripper_slam_frame" not in task.info  # §8.1.6: an ego-only task gets no gripper frame
    rig2 = Rig()
    rig2.add(Device("gripper", "gripper:68:EE:8F:C6:0D:BC", None, 32, 24))
    task2, _ = _record(tmp_path, rig2, task="grip")
    assert task2.info["gripper_slam_frame"] == "down_left_forward"
    assert task2.info["slam_frames"] == {"observation.slam_trajectory": "down_left_forward"}


def test_d435x2_calibration_in_info_and_every_episode_row(tmp_path):
    task, done = _record(tmp_path, build_rig("d435x2", scale=16), episodes=2)
    cal = task.info["calibration"]
    assert list(cal) == ["head_stereo", "d435_rgb_calibration"]
    for d in done:
        assert task.episode(d.index).meta["calibration"] == cal
    assert task.info["video_extensions"] == {"d435_rgb": "mp4", "d435_depth": "mp4", "d435_rgb_2": "mp4",
                                             "d435_depth_2": "mp4"}
    assert set(task.info["cameras"]) == {"d435_rgb", "d435_rgb_2"}


def test_uvc3_slots_and_status(tmp_path):
    task, done = _record(tmp_path, build_rig("uvc3", scale=16))
    ep = task.episode(done[0].index)
    assert sorted(ep.streams) == ["head_left_rgb", "head_right_rgb", "head_right_rgb_2"]
    assert sorted(n for n in ep.column_names if n.startswith("status.")) == [
        "status.head_left_rgb", "status.head_right_rgb", "status.head_right_rgb_2"]
    assert task.info["features"] == {"action": {"dtype": "float32", "shape": [1]},
                                     "observation.left_hand_pose": {"dtype": "float32", "shape": [21, 3]},
                                     "observation.right_hand_pose": {"dtype": "float32", "shape": [21, 3]}}
    assert task.info["sensors"] == [] and "slam_frames" not in task.info


def test_lite_gloves_devices_and_sensors(tmp_path):
    task, done = _record(tmp_path, build_rig("lite_gloves", scale=16))
    info = task.info
    assert [(d["kind"], d["slots"]) for d in info["devices"]] == [
        ("uvc", ["head_left_rgb"]), ("ble_glove", ["left_glove"]), ("usb_glove", ["right_glove"])]
    assert info["sensors"] == ["left_glove", "right_glove"] and info["sensor_dim"] == 256
    assert info["device_names"]["left_glove"] == "BLE 手套"
    names = task.episode(done[0].index).column_names
    assert "observation.right_glove_imu_quat" in names and "observation.left_glove_imu_quat" not in names
    stats = json.loads((tmp_path / "t" / "meta" / "stats.json").read_text())
    assert stats["observation.left_glove"]["count"] == 6 and len(stats["observation.left_glove"]["mean"]) == 256


def test_missing_stamps_are_zero_in_lockstep(tmp_path):
    rig = Rig()
    rig.add(Device("gripper", "gripper:CC:BA:97:25:B4:44", None, 32, 24))
    task, done = _record(tmp_path, rig, seconds=0.5, missing_stamp_every=4)
    traj = task.episode(done[0].index).trajectory("observation.slam_trajectory")
    assert traj.host_ns.shape[0] == traj.points.shape[0] == 15
    assert (traj.host_ns == 0).tolist() == [(i + 1) % 4 == 0 for i in range(15)]


def test_full_rig_task_validates(full_task):
    from egopool.validate import validate_task
    task, _ = full_task
    report = validate_task(task.path)
    assert report.ok, [f for f in report.findings if f.severity == "error"]
    assert not [f for f in report.findings if f.severity == "warning"]
