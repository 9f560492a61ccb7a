"""Write and read throughput of one episode: egopool vs plain pyarrow on the same table.

Run from the repository root::

    python benchmarks/bench_write_read.py [--rows 3000] [--repeat 3]

The episode has the parquet columns of a typical rig (issue 2, "How it is checked"):
``observation.imu`` with 7 samples per row + ``imu_ts_ns``, an ego SLAM trajectory with
1-4 points per row + ``_ns``, both hand poses (63 float32) and a status string, plus the
key columns. No video (this measures the parquet path).

* egopool write = ``TaskWriter.begin_episode`` + ``add_frame`` per row + ``finish``
  (row groups streamed to a dot-temp, column-drop pass, atomic publish, meta merge).
* egopool read = ``open_task(...).episode(1).table``.
* baseline = ``pyarrow.parquet.write_table`` / ``read_table`` of the very table egopool
  wrote (same columns and types, zstd), measured in the same run.

Each figure is the median of ``--repeat`` runs. MB/s use the in-memory Arrow size of
the table (uncompressed), so both sides are divided by the same number.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from egopool import (TaskWriter, hand_pose_column, imu_columns, open_task,  # noqa: E402
                     slam_trajectory_columns, status_column)


def make_rows(n: int, seed: int = 0) -> list[dict]:
    """Row values as a recorder would pass them (numpy arrays, built before timing)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        k = int(rng.integers(1, 5))
        rows.append({
            "observation.imu": rng.normal(size=(7, 6)).astype(np.float32),
            "imu_ts_ns": np.arange(7, dtype=np.int64) * 4_761_905 + i * 33_333_333,
            "observation.ego_slam_trajectory": rng.normal(size=(k, 8)),
            "observation.ego_slam_trajectory_ns": np.arange(1, k + 1, dtype=np.int64) * 1000 + i * 33_333_333,
            "observation.left_hand_pose": rng.normal(size=63).astype(np.float32),
            "observation.right_hand_pose": rng.normal(size=63).astype(np.float32),
            "status.head_left_rgb": "connected",
        })
    return rows


def egopool_write(root: Path, rows: list[dict]) -> Path:
    tw = TaskWriter(root, "bench", fps=30.0)
    imu, imu_ts = imu_columns()
    traj, traj_ns = slam_trajectory_columns("ego_", frame="ego_cam_optical")
    ep = tw.begin_episode(columns=[imu, imu_ts, traj, traj_ns, hand_pose_column("left"),
                                   hand_pose_column("right"), status_column("head_left_rgb")],
                          created_at=1.76e9)
    for i, values in enumerate(rows):
        ep.add_frame(values, hardware_ns=i * 33_333_333)
    res = ep.finish()
    return res.paths[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    rows = make_rows(args.rows)
    tmp = Path(tempfile.mkdtemp(prefix="egopool-bench-"))
    try:
        w_ego, r_ego, w_pa, r_pa = [], [], [], []
        for rep in range(args.repeat):
            root = tmp / f"ego{rep}"
            t0 = time.perf_counter()
            data = egopool_write(root, rows)
            w_ego.append(time.perf_counter() - t0)

            task = open_task(root / "bench")
            t0 = time.perf_counter()
            table = task.episode(1).table
            r_ego.append(time.perf_counter() - t0)

            base = tmp / f"plain{rep}.parquet"
            t0 = time.perf_counter()
            pq.write_table(table, base, compression="zstd")
            w_pa.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            again = pq.read_table(base)
            r_pa.append(time.perf_counter() - t0)
            assert again.equals(table)

        n, mb = table.num_rows, table.nbytes / 1e6
        print(f"episode: {n} rows, {table.num_columns} columns, {mb:.2f} MB in Arrow memory; "
              f"parquet {data.stat().st_size / 1e6:.2f} MB (egopool) vs {base.stat().st_size / 1e6:.2f} MB (plain)")
        print(f"IMU samples {7 * n}, trajectory points {sum(len(r['observation.ego_slam_trajectory']) for r in rows)}")
        print(f"median of {args.repeat} runs")
        print(f"{'':26}{'seconds':>10}{'rows/s':>12}{'MB/s':>10}")
        figures = {}
        for label, times in (("write egopool", w_ego), ("write pyarrow.write_table", w_pa),
                             ("read  egopool .table", r_ego), ("read  pyarrow.read_table", r_pa)):
            t = statistics.median(times)
            figures[label] = t
            print(f"{label:26}{t:10.4f}{n / t:12,.0f}{mb / t:10.1f}")
        print(f"ratio write egopool / pyarrow: {figures['write egopool'] / figures['write pyarrow.write_table']:.1f}x")
        print(f"ratio read  egopool / pyarrow: {figures['read  egopool .table'] / figures['read  pyarrow.read_table']:.2f}x")
        print("(the write baseline starts from a finished Arrow table; egopool also converts "
              f"{n} per-row dicts, checks them and publishes atomically)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
