"""Builders for the keypoints tests: real writer-made tasks and mirrors holding the real reference joints.

The 3-D values come from ``human_joint_right.npy`` (dex-retargeting, MediaPipe world landmarks of a
real hand video, shipped in ``egopool/samples``), so the back-fill moves real numbers, not a pattern.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from egopool import StreamSpec, TaskWriter, hand_pose_column, imu_columns, vector_column
from egopool.demo import samples_dir
from egopool.keypoints.mirror import SIDES, HandPose2D, HandPose3D, episode_mirror_dir, write_episode_keypoints

GLOVE = "observation.right_glove"
REF_JOINTS = samples_dir() / "dexretarget_hand_video" / "human_joint_right.npy"


def reference_joints() -> np.ndarray:
    """``(621, 21, 3)`` float32 m: the real right-hand joints."""
    return np.load(REF_JOINTS).astype(np.float32)


def write_hand_task(root: Path, name: str = "hands", episodes: int = 3, rows: int = 40, *,
                    hand_columns: bool = True, video: bool = True, registry: bool = True) -> Path:
    """A bare-hand style task: glove sensor, IMU, zero hand-pose placeholders (§7.2), a tiny RGB stream."""
    tw = TaskWriter(root, name, fps=30.0, registry=registry)
    rng = np.random.default_rng(7)
    for k in range(episodes):
        imu, imu_ts = imu_columns()
        cols = [vector_column(GLOVE, [4]), imu, imu_ts]
        if hand_columns:
            cols += [hand_pose_column("right"), hand_pose_column("left")]
        streams = [StreamSpec("head_left_rgb", "rgb", 32, 24)] if video else []
        ep = tw.begin_episode(columns=cols, streams=streams, sensors=["right_glove"], sensor_dim=4,
                              created_at=1_700_000_000.0 + 10 * k)
        for i in range(rows):
            vals = {GLOVE: rng.random(4, dtype=np.float32), "observation.imu": rng.normal(size=(3, 6)).astype(np.float32),
                    "imu_ts_ns": np.arange(3, dtype=np.int64) + 3 * i + 1000 * k}
            if hand_columns:
                vals["observation.right_hand_pose"] = np.zeros(63, np.float32)
                vals["observation.left_hand_pose"] = np.zeros(63, np.float32)
            images = {"head_left_rgb": np.full((24, 32, 3), (5 * i) % 255, np.uint8)} if video else None
            ep.add_frame(vals, images=images)
        ep.finish()
    return root / name


def reference_mirror(rows: int, offset: int = 0, *, right_absent_every: int = 7,
                     left_rows: tuple[int, ...] = (3, 4)) -> tuple[HandPose2D, HandPose3D]:
    """Mirror content for one episode: the real right-hand joints (absent on every ``right_absent_every``-th
    row), a left hand on ``left_rows`` only (the same joints mirrored in x), pixel keypoints projected."""
    j = reference_joints()[offset:offset + rows]
    fi = np.arange(rows, dtype=np.int64)
    right = np.ones(rows, bool)
    right[::right_absent_every] = False
    left = np.zeros(rows, bool)
    left[list(left_rows)] = True
    world = {"right": np.where(right[:, None, None], j, 0).astype(np.float32),
             "left": np.where(left[:, None, None], j * np.array([-1, 1, 1], np.float32), 0).astype(np.float32)}
    present = {"right": right, "left": left}
    pixels = {s: np.where(present[s][:, None, None], 320 + 2000 * world[s][:, :, :2], 0).astype(np.float32)
              for s in SIDES}
    z_rel = {s: world[s][:, :, 2].copy() for s in SIDES}
    score = {s: np.where(present[s], 0.97, 0).astype(np.float32) for s in SIDES}
    return HandPose2D(fi, present, pixels, z_rel, score), HandPose3D(fi, present, world)


def write_reference_mirror(task: Path, index: int, rows: int, offset: int = 0, mirror_root: Path | None = None,
                           **kw: object) -> Path:
    p2, p3 = reference_mirror(rows, offset, **kw)  # type: ignore[arg-type]
    d = episode_mirror_dir(task, index, mirror_root)
    write_episode_keypoints(d, p2, p3, {"stream": "head_left_rgb", "episode_index": index, "source": "reference"})
    return d


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (dotfiles included) -> sha256."""
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out
