"""Trajectories and clocks through the reader (file_format.md §3.1, §6.2, §7.3; multi_device_storage.md §3.1, §5.3–5.5)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from egopool import SchemaError, TaskWriter, Trajectory, imu_columns, open_task, slam_trajectory_columns
from egopool.codecs.slam import quat_conjugate, quat_multiply, rotation_angle

TUM = Path(__file__).resolve().parent / "data" / "evo_trajectories" / "freiburg1_xyz-groundtruth.txt"
T0 = 5_000_000_000_000  # host monotonic ns of the first row
DT = 33_333_333


def _tum_points(n: int) -> np.ndarray:
    rows = [ln.split() for ln in TUM.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    pts = np.array(rows[:n], dtype=np.float64)
    pts[:, 0] -= pts[0, 0]  # sensor seconds since ENTER
    return pts


@pytest.fixture()
def episode(tmp_path):
    """160 rows (5.3 s: the 32-bit hardware_ns wraps once), 2/1/0 points per row, some points unstamped."""
    rows = 160
    host = T0 + np.arange(rows, dtype=np.int64) * DT
    hw_trunc = host.astype(np.int32).astype(np.int64)  # the ≤078 gripper truncation
    assert np.any(np.diff(hw_trunc) < 0)
    pts = _tum_points(400)
    tw = TaskWriter(tmp_path, "slam", fps=30.0)
    ep = tw.begin_episode(columns=[*slam_trajectory_columns(frame="down_left_forward"),
                                   *slam_trajectory_columns("ego_", frame=None), *imu_columns()])
    k = 0
    stamps, point_rows = [], []
    for r in range(rows):
        n = (2, 1, 0)[r % 3]
        p = pts[k:k + n]
        # points are stamped ~5 ms after their frame; every 7th point lost its stamp
        ns = [0 if (k + i) % 7 == 3 else int(host[r] + 5_000_000 + i * 11_000_000) for i in range(n)]
        stamps += ns
        point_rows += [r] * n
        k += n
        imu = np.full((r % 4, 6), r, np.float32)
        ep.add_frame({"observation.slam_trajectory": p, "observation.slam_trajectory_ns": ns,
                      "observation.ego_slam_trajectory": p[:1], "observation.ego_slam_trajectory_ns": ns[:1],
                      "observation.imu": imu, "imu_ts_ns": np.arange(r % 4) + r * 1000},
                     hardware_ns=int(hw_trunc[r]))
    ep.drop_stats.update({"gripper_rgb": 4, "gripper_rgb_hole_ms": 133.0, "gripper_rgb_repeated_count": 2})
    ep.finish()
    return open_task(tmp_path / "slam").episode(1), host, pts[:k], np.array(stamps), np.array(point_rows)


def test_hardware_ns_unwrap(episode):
    ep, host, *_ = episode
    raw = ep.hardware_ns(unwrap=False)
    assert raw.min() >= -(2**31) and int(np.sum(np.diff(raw) < 0)) == 1
    assert np.array_equal(np.diff(ep.hardware_ns()), np.diff(host))


def test_pairing_by_host_stamps(episode):
    ep, host, pts, stamps, point_rows = episode
    pairing = ep.pair_trajectory("observation.slam_trajectory")
    assert pairing.paired_by == "hardware_ns"
    rows = pairing.rows
    assert rows.shape == (len(pts),)
    assert np.all(rows[stamps == 0] == -1)
    stamped = stamps != 0
    brute = np.argmin(np.abs(stamps[stamped, None] - host[None, :]), axis=1)
    assert np.array_equal(rows[stamped], brute)
    # a point stamped 5 ms after its frame pairs with that frame; the 16 ms one too, but not within 6 ms
    first_of_row = stamped & (np.concatenate([[True], point_rows[1:] != point_rows[:-1]]))
    assert np.array_equal(rows[first_of_row], point_rows[first_of_row])
    assert np.all(ep.pair_trajectory("observation.slam_trajectory", max_dt_ns=6_000_000).rows[~first_of_row] == -1)


def test_trajectory_frames(episode):
    ep, _, pts, stamps, point_rows = episode
    tr = ep.trajectory("observation.slam_trajectory")
    assert tr.frame == "down_left_forward" and np.array_equal(tr.points, pts)
    assert np.array_equal(tr.sensor_t, pts[:, 0]) and np.array_equal(tr.rows, point_rows)
    old = tr.to_frame("right_forward_up")
    assert old.frame == "right_forward_up" and old.frame_axes == {"+X": "right", "+Y": "forward", "+Z": "up"}
    # down_left_forward (x, y, z) is x·down + y·left + z·forward = (right −y, forward z, up −x)
    assert np.array_equal(old.positions, np.stack([-pts[:, 2], pts[:, 3], -pts[:, 1]], axis=1))
    assert np.array_equal(old.host_ns, tr.host_ns) and np.array_equal(old.sensor_t, tr.sensor_t)
    assert np.array_equal(old.to_frame("down_left_forward").points, tr.points)
    a0 = rotation_angle(quat_multiply(quat_conjugate(tr.quaternions[:-1]), tr.quaternions[1:]))
    a1 = rotation_angle(quat_multiply(quat_conjugate(old.quaternions[:-1]), old.quaternions[1:]))
    assert np.max(np.abs(a0 - a1)) < 1e-12
    explicit = tr.to_frame({"+X": "right", "+Y": "down", "+Z": "forward"})
    assert explicit.frame == "ego_cam_optical"
    with pytest.raises(SchemaError, match="unknown SLAM frame"):
        tr.to_frame("gripper_1_frame")
    unknown = Trajectory(tr.column, tr.points, tr.host_ns, tr.rows, "vendor_frame", {}, {})
    with pytest.raises(SchemaError, match="'vendor_frame' is not registered and the column declares no frame_axes"):
        unknown.to_frame("down_left_forward")


def test_missing_frame_key_means_right_forward_up(episode):
    ep, _, pts, *_ = episode
    ego = ep.trajectory("observation.ego_slam_trajectory")
    assert ego.frame == "right_forward_up" and "frame" not in ep.task.info["features"]["observation.ego_slam_trajectory"]
    new = ego.to_frame("down_left_forward")
    # §3.1: old +X right -> new −Y, old +Y forward -> new +Z, old +Z up -> new −X
    assert np.array_equal(new.positions, np.stack([-ego.positions[:, 2], -ego.positions[:, 0], ego.positions[:, 1]], 1))


def test_relative_convention_switch_keeps_positions(episode):
    ep, *_ = episode
    tr = ep.trajectory("observation.slam_trajectory")
    anchor = np.array([0.2, -0.1, 0.3, 0.9])
    right = tr.switch_relative_convention(anchor, "left", "right")
    assert np.array_equal(right.positions, tr.positions)
    assert np.allclose(rotation_angle(right.quaternions), rotation_angle(tr.quaternions / np.linalg.norm(
        tr.quaternions, axis=1, keepdims=True)), atol=1e-9)
    assert np.allclose(right.switch_relative_convention(anchor, "right", "left").quaternions, tr.quaternions,
                       atol=1e-12)


def test_imu_samples_and_frame_drops(episode):
    ep, *_ = episode
    s = ep.imu_samples()
    counts = np.array([r % 4 for r in range(160)])
    assert len(s) == counts.sum()
    assert np.array_equal(s.rows, np.repeat(np.arange(160), counts))
    assert np.array_equal(s.values[:, 0], s.rows.astype(np.float32))
    assert np.array_equal(s.ts_ns, s.rows * 1000 + np.concatenate([np.arange(c) for c in counts]))
    assert ep.frame_drops() == 4  # the _ms and _count keys are not frames
