"""A task of many valid episodes built fast: one episode written by TaskWriter, copied N times (issue 24).

Each copy gets its own ``episode_index`` in its data parquet and ``meta/episodes`` row (the files are
rewritten, not just renamed), so every episode N is valid where the template puts it and ``validate``
is clean; ``info.json``'s ``total_episodes`` is N. Used by the request-count tests of a bucket task
(tests/storage/test_enumeration_requests.py) and by benchmarks/bench_store.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

__all__ = ["ROWS", "STREAM", "build_copies_task"]

#: rows of every episode
ROWS = 12
#: the one video stream (32x24 H.264) of every episode
STREAM = "head_left_rgb"


def build_copies_task(root: Path, name: str, episodes: int) -> Path:
    """``root/name``: ``episodes`` valid episodes (3 files each: data parquet, meta row, one video).

    A complete earlier build (marked by the dot file ``.complete``, which readers ignore, §11) is reused.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from egopool import StreamSpec, TaskWriter, imu_columns, vector_column

    task = root / name
    if (task / ".complete").is_file():
        return task
    shutil.rmtree(task, ignore_errors=True)
    tw = TaskWriter(root, name, fps=30.0, registry=False)  # no pipeline.db: a rebuild starts again at N=1
    ep = tw.begin_episode(columns=[*imu_columns(), vector_column("observation.left_glove", [16, 16])],
                          sensors=["left_glove"], created_at=1_790_000_000.0,
                          streams=[StreamSpec(STREAM, "rgb", 32, 24)])
    rng = np.random.default_rng(0)
    for i in range(ROWS):
        ep.add_frame({"observation.imu": rng.normal(size=(2, 6)).astype(np.float32),
                      "imu_ts_ns": np.arange(2, dtype=np.int64) + 1000 * i,
                      "observation.left_glove": np.full(256, i, np.float32)},
                     hardware_ns=1000 + i, images={STREAM: np.full((24, 32, 3), 10 * i, np.uint8)})
    ep.finish()
    info = json.loads((task / "meta" / "info.json").read_text())
    cs = int(info["chunks_size"])
    tables = {k: pq.read_table(task / info[k].format(c=0, f=0)) for k in ("data_path", "episodes_path")}
    # the copies are a task written before checksums (docs/decisions.md X1): the template row's file_digests
    # name episode 1's files and its own content, which every copy changes
    rows = tables["episodes_path"]
    if "file_digests" in rows.column_names:
        tables["episodes_path"] = rows.drop_columns(["file_digests"])
        pq.write_table(tables["episodes_path"], task / info["episodes_path"].format(c=0, f=0), compression="zstd")
    video = task / info["video_path"].format(c=0, f=0, image_key=STREAM, ext="mp4")
    for n in range(2, episodes + 1):
        c, f = divmod(n - 1, cs)
        for k, t in tables.items():
            out = task / info[k].format(c=c, f=f)
            out.parent.mkdir(parents=True, exist_ok=True)
            col = pa.array(np.full(t.num_rows, n, np.int64))
            pq.write_table(t.set_column(t.column_names.index("episode_index"), "episode_index", col), out,
                           compression="zstd")
        dst = task / info["video_path"].format(c=c, f=f, image_key=STREAM, ext="mp4")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(video, dst)
    info["total_episodes"] = episodes
    (task / "meta" / "info.json").write_text(json.dumps(info, ensure_ascii=False, indent=2))
    (task / ".complete").write_text("")
    return task
