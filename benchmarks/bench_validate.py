"""Validator throughput: ``validate_task`` vs the bare reads it cannot avoid.

Builds a task of ``--episodes`` episodes x ``--rows`` rows (one 64x48 RGB stream, IMU at
~200 Hz, an ego SLAM trajectory with ``_ns``, a 16x16 glove, hand pose and, with
``--force-matrix``, one 250x250x3 force matrix per row), then times

* ``validate_task`` (every check, read-only), and
* the baseline: ``pyarrow.parquet.read_table`` of every data and meta parquet plus a
  PyAV demux count of every video — the I/O any validator must do.

Prints seconds per episode for both and their ratio (from one run).

    python benchmarks/bench_validate.py --episodes 20 --rows 300
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from egopool import (StreamSpec, TaskWriter, hand_pose_column, imu_columns, list_task_episodes,
                     slam_trajectory_columns, vector_column)
from egopool.codecs.video import count_video_frames
from egopool.schema import force_matrix_column
from egopool.validate import validate_task


def build(root: Path, episodes: int, rows: int, force_matrix: bool) -> Path:
    tw = TaskWriter(root, "bench", fps=30.0)
    rng = np.random.default_rng(0)
    for _ in range(episodes):
        cols = [*imu_columns(), *slam_trajectory_columns("ego_", frame="ego_cam_optical"), hand_pose_column("right"),
                vector_column("observation.left_glove", [16, 16])]
        if force_matrix:
            cols.append(force_matrix_column("observation.gripper_left_force_matrix"))
        ep = tw.begin_episode(columns=cols, sensors=["left_glove"],
                              streams=[StreamSpec("head_left_rgb", "rgb", 64, 48)])
        for i in range(rows):
            k = i % 2
            vals = {"observation.imu": rng.normal(size=(7, 6)).astype(np.float32),
                    "imu_ts_ns": np.arange(7, dtype=np.int64) + 7 * i,
                    "observation.ego_slam_trajectory": rng.normal(size=(k, 8)),
                    "observation.ego_slam_trajectory_ns": np.arange(k, dtype=np.int64) + i,
                    "observation.left_glove": rng.random(256, dtype=np.float32),
                    "observation.right_hand_pose": rng.random(63, dtype=np.float32)}
            if force_matrix:
                vals["observation.gripper_left_force_matrix"] = rng.random((250, 250, 3), dtype=np.float32) * 100
            ep.add_frame(vals, images={"head_left_rgb": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)})
        ep.finish()
    return root / "bench"


def baseline(task: Path) -> None:
    for g in list_task_episodes(task):
        for p in (g.data, g.meta):
            if p is not None:
                pq.read_table(p)
        for v in g.videos.values():
            count_video_frames(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--force-matrix", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        task = build(Path(tmp), args.episodes, args.rows, args.force_matrix)
        baseline(task)  # warm the page cache for both contenders
        t0 = time.perf_counter()
        baseline(task)
        t_base = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = validate_task(task)
        t_val = time.perf_counter() - t0
        assert report.ok, [f.one_line() for f in report.findings]
        n = args.episodes
        print(f"task: {n} episodes x {args.rows} rows, force matrix: {args.force_matrix}")
        print(f"validate_task           : {t_val:.3f} s  ({1000 * t_val / n:.1f} ms/episode)")
        print(f"baseline (read + demux) : {t_base:.3f} s  ({1000 * t_base / n:.1f} ms/episode)")
        print(f"ratio validate/baseline : {t_val / t_base:.2f}x")


if __name__ == "__main__":
    main()
