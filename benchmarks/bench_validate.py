"""Validator throughput: ``validate_task`` vs the bare reads it cannot avoid.

Builds a task of ``--episodes`` episodes x ``--rows`` rows (one 64x48 RGB stream, IMU at
~200 Hz, an ego SLAM trajectory with ``_ns``, a 16x16 glove, hand pose and, with
``--force-matrix``, one 250x250x3 force matrix per row), then times

* ``validate_task`` (every check, read-only), and
* ``validate_task(fast=True)`` (``--fast``: video frames counted, not decoded), and
* the baselines: ``pyarrow.parquet.read_table`` of every data and meta parquet plus every
  video decoded (``egopool.codecs.decode_scan``) or only demuxed and counted — the I/O any
  validator must do in each mode.

Prints milliseconds per episode and the ratios (medians of ``--repeat`` runs).

    python benchmarks/bench_validate.py --episodes 20 --rows 300
    python benchmarks/bench_validate.py --task demo_out/real_recordings_demo
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ops import median_time  # noqa: E402

from egopool import (StreamSpec, TaskWriter, hand_pose_column, imu_columns, list_task_episodes,  # noqa: E402
                     slam_trajectory_columns, vector_column)
from egopool.codecs.decode_scan import scan_stream  # noqa: E402
from egopool.codecs.video import count_video_frames  # noqa: E402
from egopool.schema import force_matrix_column  # noqa: E402
from egopool.validate import validate_task  # noqa: E402


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


def baseline(task: Path, decode: bool = False) -> None:
    for g in list_task_episodes(task):
        for p in (g.data, g.meta):
            if p is not None:
                pq.read_table(p)
        for v in g.videos.values():
            scan_stream(v) if decode else count_video_frames(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--force-matrix", action="store_true")
    ap.add_argument("--task", type=Path, help="time this existing task (e.g. the demo's) instead of building one")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        task = args.task or build(Path(tmp), args.episodes, args.rows, args.force_matrix)
        baseline(task)  # warm the page cache for every contender
        report = validate_task(task)
        assert report.ok, [f.one_line() for f in report.findings]
        n = report.episodes
        figures = [
            ("validate_task (decodes every frame)", median_time(lambda: validate_task(task), args.repeat)),
            ("validate_task(fast=True) (counts)", median_time(lambda: validate_task(task, fast=True), args.repeat)),
            ("baseline: read + decode", median_time(lambda: baseline(task, decode=True), args.repeat)),
            ("baseline: read + demux count", median_time(lambda: baseline(task), args.repeat)),
        ]
        what = str(task) if args.task else f"{n} episodes x {args.rows} rows, force matrix: {args.force_matrix}"
        print(f"task: {what}")
        for name, t in figures:
            print(f"{name:38}: {t:.3f} s  ({1000 * t / n:.1f} ms/episode)")
        (_, full), (_, fast), (_, dec), (_, dmx) = figures
        print(f"ratio validate / read+decode          : {full / dec:.2f}x")
        print(f"ratio validate --fast / read+demux    : {fast / dmx:.2f}x")
        print(f"ratio validate / validate --fast      : {full / fast:.2f}x")


if __name__ == "__main__":
    main()
