"""Builders for small tasks used by the ops tests (real writer output, tiny frames)."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from egopool import StreamSpec, TaskWriter, vector_column
from egopool.layout import TaskLayout
from egopool.meta.digests import file_digests_of
from egopool.meta.episodes import read_episode_row, write_episode_row
from egopool.meta.info import read_info, write_info

SENSOR = "observation.right_glove"


def write_task(root: Path, name: str = "pick", episodes: int = 1, *, rows: int = 3, video: bool = True,
               registry: bool = True, first_value: float = 0.0) -> Path:
    """Write ``episodes`` real episodes (a 4-value glove sensor, optionally a 32x24 RGB stream)."""
    tw = TaskWriter(root, name, fps=30.0, registry=registry)
    for k in range(episodes):
        streams = [StreamSpec("cam", "rgb", 32, 24)] if video else []
        ep = tw.begin_episode(columns=[vector_column(SENSOR, [4])], streams=streams, sensors=["right_glove"],
                              sensor_dim=4, created_at=1_700_000_000.0 + k)
        for i in range(rows):
            images = {"cam": np.full((24, 32, 3), 10 * i, np.uint8)} if video else None
            ep.add_frame({SENSOR: np.arange(4, dtype=np.float32) + first_value + k + i}, images=images)
        ep.finish()
    return root / name


def _set_episode_index(table: pa.Table, index: int) -> pa.Table:
    i = table.column_names.index("episode_index")
    return table.set_column(i, "episode_index", pa.array(np.full(table.num_rows, index, np.int64)))


def clone_episode(task_dir: Path, src: int, dst: int) -> None:
    """Copy N=src's files to N=dst's paths with ``episode_index`` rewritten (data column and meta row).

    Used to build a chunk-001 episode (N=1001) without recording 1000 episodes; info's
    ``total_episodes`` is raised like the writer would.
    """
    info = read_info(task_dir)
    layout = TaskLayout.from_info(task_dir, info)
    table = pq.read_table(layout.data_file(src))
    out = layout.data_file(dst)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(_set_episode_index(table, dst), out, compression="zstd")
    copied = [out]
    for key, ext in info.get("video_extensions", {}).items():
        vsrc = layout.video_file(src, key, ext)
        if vsrc.exists():
            vdst = layout.video_file(dst, key, ext)
            vdst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(vsrc, vdst)
            copied.append(vdst)
    row = read_episode_row(layout.episodes_file(src), src)
    row["episode_index"] = dst
    if row.get("file_digests"):  # the clone's own files, as a writer would have recorded them
        row["file_digests"] = file_digests_of(task_dir, copied)
    write_episode_row(layout.episodes_file(dst), row)
    info["total_episodes"] = max(int(info["total_episodes"]), dst)
    write_info(task_dir, info)


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (dotfiles included) -> sha256 of its bytes; directories -> "dir"."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "dir"
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


def files_of(root: Path) -> set[str]:
    """Relative paths of every file under ``root``."""
    return {k for k, v in snapshot(root).items() if v != "dir"}


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()
