"""The cost of verifying recorded checksums (issue 28, docs/decisions.md X1-X5), measured in one run.

Builds a task of ``--episodes`` episodes (an RGB and an FFV1 depth stream of ``--width`` x ``--height``, a 4-value
sensor; every row records its files' sha256), or takes ``--task``, then times (medians of ``--repeat``):

* ``hash``: sha256 of every file of every episode (the verification alone), and its MB/s;
* ``decode``: every video decoded (``egopool.codecs.decode_scan``) and every parquet read: what any full
  validation must do anyway;
* ``validate``: ``validate_task`` (decode + checks + digests);
* ``validate, no digests``: the same task with the ``file_digests`` column dropped from every row;
* ``validate --fast``: frames counted, no hashing.

Prints the table and the ratios hash/decode and (validate - validate without digests)/validate.

    python benchmarks/bench_validate_digests.py --episodes 6 --rows 300
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ops import median_time  # noqa: E402

from egopool import StreamSpec, TaskWriter, list_task_episodes, vector_column  # noqa: E402
from egopool.codecs.decode_scan import scan_stream  # noqa: E402
from egopool.meta.digests import episode_digests  # noqa: E402
from egopool.validate import validate_task  # noqa: E402


def build(root: Path, episodes: int, rows: int, w: int, h: int) -> Path:
    tw = TaskWriter(root, "bench", fps=30.0, registry=False)
    rng = np.random.default_rng(0)
    for k in range(episodes):
        ep = tw.begin_episode(columns=[vector_column("observation.right_glove", [4])],
                              streams=[StreamSpec("cam", "rgb", w, h), StreamSpec("depth", "depth", w, h, codec="ffv1")],
                              sensors=["right_glove"], sensor_dim=4, created_at=1_790_000_000.0 + k)
        for i in range(rows):
            img = rng.integers(0, 255, (h, w, 3), np.uint8)
            depth = (rng.integers(300, 4000, (h, w))).astype(np.uint16)
            ep.add_frame({"observation.right_glove": np.full(4, i, np.float32)}, images={"cam": img, "depth": depth})
        ep.finish()
    return root / "bench"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", type=Path)
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--rows", type=int, default=150)
    ap.add_argument("--width", type=int, default=320)
    ap.add_argument("--height", type=int, default=240)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        task = a.task or build(Path(d), a.episodes, a.rows, a.width, a.height)
        groups = list_task_episodes(task)
        size = sum(p.stat().st_size for g in groups for p in g.paths() if p.is_file())

        def hash_all() -> None:
            for g in groups:
                episode_digests(task, [p for p in g.paths() if p != g.meta])

        def decode_all() -> None:
            for g in groups:
                for p in g.paths():
                    if p.suffix == ".parquet":
                        pq.read_table(p)
                for p in g.videos.values():
                    scan_stream(p, stream_index=0)

        plain = Path(d) / "plain" / task.name
        shutil.copytree(task, plain)
        for g in list_task_episodes(plain):
            t = pq.read_table(g.meta)
            if "file_digests" in t.column_names:
                pq.write_table(t.drop_columns(["file_digests"]), g.meta, compression="zstd")
        t_hash = median_time(hash_all, a.repeat)
        t_decode = median_time(decode_all, a.repeat)
        t_val = median_time(lambda: validate_task(task), a.repeat)
        t_plain = median_time(lambda: validate_task(plain), a.repeat)
        t_fast = median_time(lambda: validate_task(task, fast=True), a.repeat)
        mb = size / 1e6
        print(f"task: {len(groups)} episodes, {mb:.1f} MB")
        for name, t in (("hash (sha256)", t_hash), ("decode (baseline)", t_decode), ("validate", t_val),
                        ("validate, no digests", t_plain), ("validate --fast", t_fast)):
            print(f"{name:22s} {t * 1e3:9.1f} ms  {mb / t:8.1f} MB/s")
        print(f"hash / decode: {t_hash / t_decode:.3f}; digest share of validate: "
              f"{(t_val - t_plain) / t_val:+.3f}")


if __name__ == "__main__":
    main()
