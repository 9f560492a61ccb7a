"""``egopool demo``: the bundled real recordings -> one valid multi-device task.

Expected counts and values are computed here from the sample files themselves.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from egopool import EgopoolError, open_task
from egopool.cli.app import main
from egopool.demo import DEMO_TASK, run_demo, samples_dir

SECONDS = 4.0  # a 120-frame run keeps the test fast; the README demo uses all 20.7 s
EPISODES = 3


def _video_frame_count(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(c.streams.video[0]))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    summary = run_demo(out, episodes=EPISODES, max_seconds=SECONDS)
    return summary, open_task(summary.task_dir)


@pytest.fixture(scope="module")
def inputs():
    s = samples_dir()
    joints = np.load(s / "dexretarget_hand_video" / "human_joint_right.npy")
    video_frames = _video_frame_count(s / "dexretarget_hand_video" / "human_hand_video.mp4")
    tum_lines = [ln.split() for ln in (s / "evo_trajectories" / "freiburg1_xyz-groundtruth.txt").read_text()
                 .splitlines() if ln.strip() and not ln.startswith("#")]
    imu_lines = [ln.split(",") for ln in (s / "xio_fusion_imu" / "sensor_data.csv").read_text().splitlines()[1:]
                 if ln.strip()]
    return {"joints": joints, "video_frames": video_frames, "tum": tum_lines, "imu": imu_lines, "dir": s}


def test_full_demo_sources_agree(inputs):
    """The full demo covers 621 frames: video and joints have the same count (checked, not assumed)."""
    assert inputs["video_frames"] == inputs["joints"].shape[0] == 621


def test_episodes_and_rows(demo, inputs):
    summary, task = demo
    n = min(inputs["video_frames"], inputs["joints"].shape[0], int(SECONDS * 30))
    assert summary.frames == n == 120
    eps = task.episodes()
    assert [e.index for e in eps] == [1, 2, 3]
    lengths = [e.length for e in eps]
    assert sum(lengths) == n and max(lengths) - min(lengths) <= 1 and len(eps) == EPISODES
    assert [e["length"] for e in summary.episodes] == lengths
    for e in eps:
        assert e.meta["length"] == e.length
        for key in ("head_left_rgb", "d435_rgb", "d435_depth"):
            assert key in e.streams
        assert sum(1 for _ in e.video("head_left_rgb")) == e.length
        assert e.meta["drop_stats"] == {"d435_rgb_repeated_count": e.length - 1,
                                        "d435_depth_repeated_count": e.length - 1}
    assert set(summary.stream_bytes) == {"head_left_rgb", "d435_rgb", "d435_depth"}
    assert summary.stream_bytes["head_left_rgb"] == sum(e.streams["head_left_rgb"].stat().st_size for e in eps)
    assert summary.data_bytes == sum(e.files.data.stat().st_size for e in eps)


def test_hand_pose_and_imu_values(demo, inputs):
    _, task = demo
    eps = task.episodes()
    pose = np.concatenate([np.stack(e.table.column("observation.right_hand_pose").to_numpy(zero_copy_only=False))
                           for e in eps])
    n = pose.shape[0]
    assert np.array_equal(pose, inputs["joints"][:n].reshape(n, 63).astype(np.float32))
    left = np.stack(eps[0].table.column("observation.left_hand_pose").to_numpy(zero_copy_only=False))
    assert not left.any()
    # IMU: every CSV sample whose time is within the rows' span [0, n/30) s, in order, converted
    t = [Fraction(r[0]) for r in inputs["imu"]]
    inside = [r for r, tt in zip(inputs["imu"], t, strict=True) if tt - t[0] < Fraction(n, 30)]
    samples = np.concatenate([e.imu()[1] for e in eps])
    stamps = np.concatenate([e.imu()[0] for e in eps])
    assert samples.shape == (len(inside), 6)
    gyro = np.deg2rad(np.array([[float(v) for v in r[1:4]] for r in inside])).astype(np.float32)
    accel = (np.array([[float(v) for v in r[4:7]] for r in inside]) * 9.80665).astype(np.float32)
    assert np.array_equal(samples[:, :3], gyro) and np.array_equal(samples[:, 3:], accel)
    assert np.all(np.diff(stamps) > 0)
    # IMU stamps keep the CSV's spacing exactly (ns)
    spacing = [round((t[i + 1] - t[i]) * 10**9) for i in range(len(inside) - 1)]
    assert np.diff(stamps).tolist() == spacing


def test_trajectory_values_and_frame(demo, inputs):
    _, task = demo
    eps = task.episodes()
    lines = inputs["tum"]
    t0 = Fraction(lines[0][0])
    n = sum(e.length for e in eps)
    inside = [ln for ln in lines if Fraction(ln[0]) - t0 < Fraction(n, 30)]
    pts = np.concatenate([e.trajectory("observation.ego_slam_trajectory").points for e in eps])
    ns = np.concatenate([e.trajectory("observation.ego_slam_trajectory").host_ns for e in eps])
    assert pts.shape == (len(inside), 8)
    assert np.array_equal(pts, np.array([[float(v) for v in ln] for ln in inside]))
    assert ns.tolist() == [round(Fraction(ln[0]) * 10**9) for ln in inside]
    tr = eps[0].trajectory("observation.ego_slam_trajectory")
    assert tr.frame == "tum_fr1_world" and tr.frame_axes == {"+X": "backward", "+Y": "right", "+Z": "up"}
    # pairing by _ns <-> hardware_ns: every point lies within its own row's 1/30 s window
    for e in eps:
        tr = e.trajectory("observation.ego_slam_trajectory")
        hw = e.table.column("hardware_ns").to_numpy()
        start = hw[tr.rows]
        assert np.all(tr.host_ns >= start) and np.all(tr.host_ns < start + 33_333_334)
    info = task.info
    assert info["slam_frames"] == {"observation.ego_slam_trajectory": "tum_fr1_world"}
    assert "gripper_slam_frame" not in info


def test_depth_is_the_real_frame_held(demo, inputs):
    _, task = demo
    raw = np.asarray(Image.open(inputs["dir"] / "open3d_tum_frame" / "TUM_depth.png")).astype(np.int64)
    mm = np.rint(raw / 5.0)
    ep = task.episodes()[-1]
    frames = list(ep.depth("d435_depth"))
    assert len(frames) == ep.length
    for d in (frames[0], frames[-1]):
        assert np.array_equal(d == 0, mm == 0)
        v = mm > 0
        rel = np.abs(d[v] - mm[v]) / mm[v]
        assert np.median(rel) < 0.005 and np.percentile(rel, 99) < 0.03


def test_declarations(demo):
    _, task = demo
    info = task.info
    assert {d["key"]: d["kind"] for d in info["devices"]} == {
        "uvc:dexretarget-hand-video": "uvc", "d435:tum-rgbd-kinect-sample": "d435", "imu:xio-fusion-sample": "imu"}
    assert set(info["device_names"]) == {"head_left_rgb", "d435_rgb", "d435_depth"}
    assert set(info["cameras"]) == {"head_left_rgb", "d435_rgb"}
    assert set(info["video_extensions"]) == {"head_left_rgb", "d435_rgb", "d435_depth"}
    assert info["cameras"]["head_left_rgb"] == {"height": 360, "width": 640}
    assert info["calibration"]["head_stereo"]["left_camera"]["intrinsic"] == [525.0, 525.0, 319.5, 239.5]
    assert "status.head_left_rgb" in task.episode(1).column_names
    assert set(task.episode(1).table.column("status.head_left_rgb").to_pylist()) == {"connected"}


def test_validates(demo):
    validate = pytest.importorskip("egopool.validate")
    summary, task = demo
    report = validate.validate_task(task.path)
    assert report.ok, report.to_dict()
    assert summary.ok and summary.validation is not None and summary.validation["ok"] is True
    # the held TUM frame is a frozen camera, and validate says so with its rows (never a working camera)
    frozen = sorted(f["message"] for f in report.to_dict()["findings"] if "is frozen" in f["message"])
    want = sorted(f"drop_stats {k}_repeated_count = {e.length - 1}: stream {k} is frozen: rows 1-{e.length - 1} "
                  "repeat row 0's frame; it shows no motion and should not be taken for a working camera"
                  for e in task.episodes() for k in ("d435_depth", "d435_rgb"))
    assert frozen == want
    assert all(f["severity"] == "warning" for f in report.to_dict()["findings"] if "is frozen" in f["message"])
    assert any(n.startswith("d435_rgb/d435_depth: FROZEN, not a working camera") for n in summary.notes)


def test_existing_task_refused_unless_overwrite(tmp_path):
    run_demo(tmp_path, episodes=1, max_seconds=0.2)
    with pytest.raises(EgopoolError, match="already exists.*--overwrite"):
        run_demo(tmp_path, episodes=1, max_seconds=0.2)
    s = run_demo(tmp_path, episodes=2, max_seconds=0.4, overwrite=True)
    assert [e.length for e in open_task(s.task_dir).episodes()] == [6, 6]
    assert sorted(p.name for p in tmp_path.iterdir()) == [DEMO_TASK]  # no staging leftovers


def test_overwrite_never_deletes_a_foreign_directory(tmp_path):
    foreign = tmp_path / DEMO_TASK
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(EgopoolError, match="not an egopool demo task"):
        run_demo(tmp_path, episodes=1, max_seconds=0.2, overwrite=True)
    assert (foreign / "keep.txt").read_text() == "mine"
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(EgopoolError, match="not a directory"):
        run_demo(not_a_dir, episodes=1, max_seconds=0.2)


def test_cli_demo_json_and_dry_run(tmp_path, capsys):
    assert main(["demo", str(tmp_path), "--dry-run", "--max-seconds", "1", "--episodes", "2"]) == 0
    assert "would create" in capsys.readouterr().out and not any(tmp_path.iterdir())
    assert main(["demo", str(tmp_path), "--max-seconds", "1", "--episodes", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["frames"] == 30 and [e["length"] for e in out["episodes"]] == [15, 15]
    assert out["task_dir"] == str(tmp_path / DEMO_TASK)
    assert any("i/30" in s for s in out["synthesised"]) and any("downscaled" in s for s in out["notes"])
    assert main(["demo", str(tmp_path), "--max-seconds", "1"]) == 1
    assert "already exists" in capsys.readouterr().err
