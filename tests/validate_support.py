"""Shared helpers for the validator tests: a small spec-exact task and ways to corrupt it.

The task is written by :class:`egopool.TaskWriter` (32x24 frames, 12 rows per episode)
with one column of every kind the validator checks: an RGB and a depth stream, IMU,
an ego SLAM trajectory with ``_ns``, a 16x16 glove, a status column, hand pose, a
force matrix and a force ``_ns`` scalar.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from egopool import (StreamSpec, TaskWriter, hand_pose_column, imu_columns, scalar_ns_column,
                     slam_trajectory_columns, status_column, vector_column)
from egopool.layout import list_task_episodes
from egopool.meta.digests import DIGEST_COLUMN, episode_digests
from egopool.meta.episodes import restamp_table, row_bytes
from egopool.schema import force_matrix_column

ROWS = 12
CREATED_AT = 1_790_000_000.0
TASK = "demo"
DATA = "data/chunk-000/episode-000.parquet"
META = "meta/episodes/chunk-000/episode-000.parquet"
RGB = "videos/chunk-000/head_left_rgb/episode-000.mp4"
TRAJ = "observation.ego_slam_trajectory"
FM = "observation.gripper_left_force_matrix"


def build_task(root: Path, episodes: int = 1) -> Path:
    """Write the reference task under ``root / TASK`` and return its directory."""
    tw = TaskWriter(root, TASK, fps=30.0)
    for e in range(episodes):
        cols = [*imu_columns(), *slam_trajectory_columns("ego_", frame="ego_cam_optical",
                                                         owner={"role": "ego"}, source_slot="head_left_rgb"),
                hand_pose_column("right"), vector_column("observation.left_glove", [16, 16]),
                status_column("left_glove"), scalar_ns_column("observation.gripper_left_force_ns"),
                force_matrix_column(FM, "row_diff_quantized", 10)]
        ep = tw.begin_episode(columns=cols, sensors=["left_glove"], created_at=CREATED_AT + 100 * e,
                              streams=[StreamSpec("head_left_rgb", "rgb", 32, 24),
                                       StreamSpec("d435_depth", "depth", 32, 24, codec="ffv1")])
        rng = np.random.default_rng(e)
        for i in range(ROWS):
            k = i % 3
            ep.add_frame({
                "observation.imu": rng.normal(size=(2, 6)).astype(np.float32),
                "imu_ts_ns": np.arange(2, dtype=np.int64) + 1000 * i,
                TRAJ: rng.normal(size=(k, 8)), TRAJ + "_ns": np.arange(k, dtype=np.int64) + 10 * i + 1,
                "observation.left_glove": np.full(256, i, np.float32), "status.left_glove": "connected",
                "observation.gripper_left_force_ns": 5 + i,
                FM: np.full((250, 250, 3), 1.5, np.float32),
            }, hardware_ns=1000 + i, images={"head_left_rgb": np.full((24, 32, 3), 10 * i, np.uint8),
                                             "d435_depth": np.full((24, 32), 1000 + i, np.uint16)})
        ep.finish()
    return root / TASK


def copy_task(src: Path, dst_root: Path) -> Path:
    """A private copy of a built task (each test corrupts its own)."""
    dst = dst_root / src.name
    shutil.copytree(src, dst)
    return dst


def edit_json(path: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    """Load a JSON file, let ``fn`` change it in place, write it back."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    fn(doc)
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=2), encoding="utf-8")


def rewrite_parquet(path: Path, fn: Callable[[pa.Table], pa.Table]) -> None:
    """Replace a parquet file by ``fn(table)`` as a writer would have written it: the task's recorded checksums
    are taken again (:func:`reseal`), so only the rule under test is broken."""
    table = fn(pq.read_table(path))
    pq.write_table(table, path)
    reseal(next(p for p in path.parents if (p / "meta" / "info.json").is_file()))


def reseal(task: Path) -> None:
    """Record every episode's checksums again from the files as they are now (rows that record them only):
    a test's edit then stands for what a writer wrote, not for damage."""
    for g in list_task_episodes(task):
        if g.meta is None or g.meta_is_shard:
            continue
        table = pq.read_table(g.meta)
        if DIGEST_COLUMN in table.column_names and table.num_rows == 1:
            files = episode_digests(task, [p for p in g.paths() if p != g.meta])
            g.meta.write_bytes(row_bytes(restamp_table(table, files)))


def set_column(table: pa.Table, name: str, values: Any, type: pa.DataType | None = None) -> pa.Table:
    """Replace (or append) column ``name``."""
    arr = pa.array(values, type=type or (table.schema.field(name).type if name in table.column_names else None))
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, arr)
    return table.append_column(name, arr)


def rename_column(table: pa.Table, old: str, new: str) -> pa.Table:
    """Rename one column."""
    return table.rename_columns([new if c == old else c for c in table.column_names])


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file (dotfiles included) and every directory under ``root``."""
    out: dict[str, str] = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        out[rel + "/"] = "dir"
        for name in filenames:
            p = Path(dirpath) / name
            out[os.path.join(rel, name)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out
