"""Maintenance at scale: enumeration, validation and next-N allocation on a task of 5,000 episodes.

Builds a task of ``--episodes`` tiny episodes fast: one real episode is recorded with
``TaskWriter`` (3 rows, a 4-value glove sensor, one 32x24 H.264 stream), then its
files are copied to N = 2..E with the ``episode_index`` column of the data parquet and
of the meta row rewritten (the video bytes are copied as they are). ``total_episodes``
is set to E and the registry ``pipeline.db`` gets one row per episode in one
transaction, as an importer would. Chunk roll-over is included (E > 1000).

Figures (wall-clock medians of ``--repeat`` runs, one process):

* ``list_task_episodes`` on E episodes, per episode; baseline: ``os.walk`` of the task
  (the bare directory listing any enumerator needs);
* ``validate_task`` on E episodes, per episode; baseline: ``pyarrow.parquet.read_table``
  of every data and meta parquet (the bare reads any validator needs);
* next-N allocation (``TaskWriter.next_episode_index``: task lock, reservations,
  recycled marker, ``info.json``, registry watermark, path probe) for episode 1 (empty
  task) vs episode E+1 — it must not grow with the task; baseline: a full rescan
  (``list_task_episodes``) of the E-episode task, which is what allocation would cost if
  it rescanned;
* ``TaskWriter(...)`` construction (the one scan per writer, decisions.md #4) and a
  whole one-row episode write through an existing writer (begin + add_frame + finish,
  incl. the registry record) for episode 1 vs episode E+1.

    python benchmarks/bench_ops.py                      # --episodes 5000 --repeat 5
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from egopool import StreamSpec, TaskWriter, list_task_episodes, vector_column  # noqa: E402
from egopool.layout import TaskLayout  # noqa: E402
from egopool.meta.info import read_info, write_info  # noqa: E402
from egopool.registry import Registry, file_record  # noqa: E402
from egopool.validate import validate_task  # noqa: E402

SENSOR = "observation.right_glove"


def begin_tiny(tw: TaskWriter, rows: int = 3) -> int:
    ep = tw.begin_episode(columns=[vector_column(SENSOR, [4])], streams=[StreamSpec("cam", "rgb", 32, 24)],
                          sensors=["right_glove"], sensor_dim=4)
    for i in range(rows):
        ep.add_frame({SENSOR: np.arange(4, dtype=np.float32) + i}, images={"cam": np.full((24, 32, 3), i, np.uint8)})
    return ep.finish().index


def record_one(root: Path, name: str, rows: int = 3) -> int:
    return begin_tiny(TaskWriter(root, name), rows)


def _with_index(table: pa.Table, n: int) -> bytes:
    i = table.column_names.index("episode_index")
    t = table.set_column(i, "episode_index", pa.array(np.full(table.num_rows, n, np.int64)))
    buf = io.BytesIO()
    pq.write_table(t, buf, compression="zstd")
    return buf.getvalue()


def build(root: Path, episodes: int) -> Path:
    """One recorded episode, copied to N = 2..episodes with episode_index rewritten."""
    record_one(root, "big")
    task = root / "big"
    info = read_info(task)
    layout = TaskLayout.from_info(task, info)
    data = pq.read_table(layout.data_file(1))
    meta = pq.read_table(layout.episodes_file(1))
    video = layout.video_file(1, "cam", "mp4")
    recs = [(1, [file_record(task, p) for p in (layout.data_file(1), layout.episodes_file(1), video)])]
    made_dirs: set[Path] = set()
    for n in range(2, episodes + 1):
        paths = (layout.data_file(n), layout.episodes_file(n), layout.video_file(n, "cam", "mp4"))
        for p in paths:
            if p.parent not in made_dirs:
                p.parent.mkdir(parents=True, exist_ok=True)
                made_dirs.add(p.parent)
        paths[0].write_bytes(_with_index(data, n))
        paths[1].write_bytes(_with_index(meta, n))
        shutil.copyfile(video, paths[2])
        recs.append((n, [file_record(task, p) for p in paths]))
    info["total_episodes"] = episodes
    write_info(task, info)
    Registry.for_task(task).record_many("big", recs)
    return task


def median_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def walk(task: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(task))


def bare_reads(task: Path) -> None:
    for g in list_task_episodes(task):
        for p in (g.data, g.meta):
            if p is not None:
                pq.read_table(p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--alloc-repeat", type=int, default=200)
    ap.add_argument("--validate-repeat", type=int, default=1)
    args = ap.parse_args()
    E = args.episodes
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        task = build(root / "big_root", E)
        print(f"built a task of {E} episodes in {time.perf_counter() - t0:.1f} s "
              f"({walk(task)} files; not part of the figures)")
        assert [g.index for g in list_task_episodes(task)][-1] == E

        t_list = median_time(lambda: list_task_episodes(task), args.repeat)
        t_walk = median_time(lambda: walk(task), args.repeat)
        report = validate_task(task)
        t_val = median_time(lambda: validate_task(task), args.validate_repeat)
        t_reads = median_time(lambda: bare_reads(task), args.validate_repeat)

        # next-N allocation: episode 1 (empty task) vs episode E+1
        (root / "small_root").mkdir()
        tw_small = TaskWriter(root / "small_root", "small")
        assert tw_small.next_episode_index() == 1
        t_new_small = median_time(lambda: TaskWriter(root / "small_root", "small"), args.repeat)
        t_new_big = median_time(lambda: TaskWriter(root / "big_root", "big"), args.repeat)
        tw_big = TaskWriter(root / "big_root", "big")
        assert tw_big.next_episode_index() == E + 1
        t_alloc1 = median_time(tw_small.next_episode_index, args.alloc_repeat)
        t_alloc_big = median_time(tw_big.next_episode_index, args.alloc_repeat)
        t_wm = median_time(lambda: Registry.for_task(task).watermark("big"), args.alloc_repeat)
        # the path probe inside allocation lists the image_key directories of N's chunk, so its
        # cost is bounded by chunks_size, not by the task: worst case = a free N beside 999 others
        probe_new_chunk = median_time(lambda: tw_big._occupied(E + 1), args.alloc_repeat)
        hole = (E - 1000) if E > 1000 else E  # an N whose chunk holds 999 other episodes
        layout = tw_big.layout
        moved = [(p, p.with_name("." + p.name)) for p in (layout.data_file(hole), layout.episodes_file(hole),
                                                         layout.video_file(hole, "cam", "mp4"))]
        for a, b in moved:
            a.rename(b)
        assert not tw_big._occupied(hole)
        probe_full_chunk = median_time(lambda: tw_big._occupied(hole), args.alloc_repeat)
        for a, b in moved:
            b.rename(a)

        # one whole 1-row episode through an existing writer (codec warmed up in a throwaway task)
        record_one(root / "warm_root", "warm", rows=1)
        tw_w = TaskWriter(root / "w_root", "w")
        t_w1 = median_time(lambda: begin_tiny(tw_w, rows=1), 1)  # episode 1 of a fresh task
        t_w_big = median_time(lambda: begin_tiny(tw_big, rows=1), args.repeat)
        assert list_task_episodes(task)[-1].index == E + args.repeat

    per = 1e6 / E
    print(f"\nvalidate_task findings on the {E}-episode task: {len(report.findings)} (ok={report.ok})")
    print(f"\n{'figure':<52}{'seconds':>11}{'µs/episode':>13}")
    rows = [("list_task_episodes", t_list), ("  baseline os.walk of the task", t_walk),
            ("validate_task", t_val), ("  baseline pq.read_table of every data+meta file", t_reads)]
    for name, t in rows:
        print(f"{name:<52}{t:>11.4f}{t * per:>13.1f}")
    print(f"ratio list_task_episodes / os.walk:      {t_list / t_walk:.2f}x")
    print(f"ratio validate_task / bare reads:        {t_val / t_reads:.2f}x")
    print(f"\n{'next-N allocation':<52}{'ms':>11}")
    for name, t in (("next_episode_index -> 1 (empty task)", t_alloc1),
                    (f"next_episode_index -> {E + 1} ({E} episodes)", t_alloc_big),
                    ("  of which registry watermark query", t_wm),
                    (f"  of which path probe of N={E + 1} (empty chunk)", probe_new_chunk),
                    ("path probe of a free N beside 999 in its chunk", probe_full_chunk),
                    (f"  baseline full rescan list_task_episodes ({E})", t_list),
                    ("TaskWriter() on the empty task (one scan)", t_new_small),
                    (f"TaskWriter() on {E} episodes (one scan)", t_new_big),
                    ("write a 1-row episode (existing writer): episode 1", t_w1),
                    (f"write a 1-row episode (existing writer): {E + 1}..", t_w_big)):
        print(f"{name:<52}{t * 1e3:>11.3f}")
    print(f"ratio allocation N={E + 1} / N=1:            {t_alloc_big / t_alloc1:.2f}x   (flat = no rescan)")
    print(f"ratio allocation N={E + 1} / full rescan:     {t_alloc_big / t_list:.4f}x")
    print(f"ratio 1-row episode write N={E + 1} / N=1:     {t_w_big / t_w1:.2f}x")


if __name__ == "__main__":
    main()
