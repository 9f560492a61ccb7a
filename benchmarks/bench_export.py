"""LeRobot export of a 60 s full-rig episode: ``egopool export lerobot`` vs lerobot's own writer, one run.

Run from the repository root, in a venv with the interop extra (lerobot, torch, ...)::

    EGOPOOL_EXTRAS=interop ./run --version          # builds .venv with the extra
    .venv/bin/python benchmarks/bench_export.py [--seconds 60] [--scale 4] [--vcodec h264]

lerobot 0.4.4's writer cannot write a shape-(1,) feature under numpy >= 2.4 (``datasets`` calls
``float()`` on a 1-element array); the script says so and stops there. Run it in a copy of the
venv with ``pip install 'numpy<2.4'`` (benchmarks/README.md).

* setup (not timed): ``egopool simulate --rig full --episodes 1 --seconds S --scale K``;
* egopool: ``export_lerobot(task, out)`` from the task on disk: frames parquet, videos stream-copied,
  depth decoded into ``observation.depth.<key>``, statistics (image stats from decoded samples);
* baseline: ``LeRobotDataset.create`` + ``add_frame`` per row + ``save_episode`` + ``finalize`` with
  the same features (the egopool export's feature list) and the same values; every frame is
  decoded from the task *before* the clock starts, so the baseline is the writer alone.

Both outputs are then loaded with ``LeRobotDataset`` and their frame counts compared.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "interop"))

from egopool import open_task  # noqa: E402
from egopool.arrowutil import list_column_to_numpy  # noqa: E402
from egopool.cli.app import main as egopool_main  # noqa: E402
from egopool.interop import export_lerobot  # noqa: E402


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _baseline_frames(task, plan):
    """Every row's values for lerobot's add_frame, decoded before timing (numbers, strings, images, depth)."""
    ep = task.episode(plan.jobs[0].index)
    table = ep.table
    n = ep.length
    cols: dict[str, np.ndarray | list] = {}
    for c in plan.columns:
        if c.kind == "depth":
            cols[c.name] = np.stack(list(ep.depth(c.sources[0].removeprefix("videos/"))))
            continue
        if c.feature["dtype"] == "string":
            cols[c.name] = table.column(c.sources[0]).to_pylist()
            continue
        parts = []
        for s in c.sources:
            col = table.column(s)
            v = list_column_to_numpy(col) if str(col.type).startswith("list") else col.to_numpy().reshape(n, 1)
            parts.append(v.astype(np.dtype(c.feature["dtype"])))
        cols[c.name] = np.concatenate(parts, axis=1).reshape((n, *c.feature["shape"]))
    for s in plan.streams:
        cols[s.name] = np.stack(list(ep.video(s.key)))
    feats = {k: dict(v) for k, v in plan.features.items()
             if k not in ("timestamp", "frame_index", "episode_index", "index", "task_index")}
    for v in feats.values():
        v["shape"] = tuple(v["shape"])
        v.pop("info", None)
    rows = []
    for i in range(n):
        row = {k: (v[i] if not isinstance(v, list) else v[i]) for k, v in cols.items()}
        row["task"] = plan.task_text
        rows.append(row)
    return feats, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--scale", type=int, default=4, help="simulate --scale (4: 320x200 stereo, 320x240 grippers)")
    ap.add_argument("--vcodec", default="h264", help="lerobot's encoder (its default is libsvtav1)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    if tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 4):
        print(f"numpy {np.__version__}: lerobot 0.4.4's writer fails on shape-(1,) features with numpy >= 2.4; "
              "run this in a venv with numpy<2.4 (benchmarks/README.md)")
        return 2
    from lerobot_env import lerobot_dataset_class

    LeRobotDataset = lerobot_dataset_class()
    tmp = Path(tempfile.mkdtemp(prefix="bench_export_"))
    try:
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            assert egopool_main(["simulate", "--rig", "full", "--episodes", "1", "--seconds", str(args.seconds),
                                 "--scale", str(args.scale), "--out", str(tmp / "rec")]) == 0
        setup = time.perf_counter() - t0
        task = open_task(tmp / "rec" / "sim_full")
        ep = task.episode(1)

        t0 = time.perf_counter()
        result = export_lerobot(task.path, tmp / "egopool_lr")
        ours = time.perf_counter() - t0

        t0 = time.perf_counter()
        feats, rows = _baseline_frames(task, result.plan)
        decode = time.perf_counter() - t0
        t0 = time.perf_counter()
        ds = LeRobotDataset.create("bench/lerobot", fps=result.plan.fps, features=feats, root=tmp / "lerobot_lr",
                                   vcodec=args.vcodec, video_backend="pyav")
        for row in rows:
            ds.add_frame(row)
        ds.save_episode()
        ds.finalize()
        theirs = time.perf_counter() - t0
        del rows

        a = LeRobotDataset("x/a", root=tmp / "egopool_lr", video_backend="pyav")
        b = LeRobotDataset("x/b", root=tmp / "lerobot_lr", video_backend="pyav")
        assert len(a) == len(b) == ep.length, (len(a), len(b), ep.length)
        assert set(a.features) == set(b.features)
        copied = sum(len(p.copied) for p in result.parts)
        print(f"episode: {ep.length} rows ({args.seconds:g} s, full rig, scale {args.scale}), "
              f"{len(result.plan.streams)} RGB streams + {sum(c.kind == 'depth' for c in result.plan.columns)} "
              f"depth, {len(result.plan.features)} LeRobot features; setup (simulate) {setup:.1f} s")
        print(f"{'':34}{'seconds':>10}{'frames/s':>12}{'MB out':>10}")
        print(f"{'egopool export lerobot':34}{ours:10.2f}{ep.length / ours:12.1f}"
              f"{_du(tmp / 'egopool_lr') / 1e6:10.1f}   ({copied} videos copied)")
        print(f"{'lerobot writer (' + args.vcodec + ')':34}{theirs:10.2f}{ep.length / theirs:12.1f}"
              f"{_du(tmp / 'lerobot_lr') / 1e6:10.1f}")
        print(f"{'  (+ decoding its input frames)':34}{decode:10.2f}")
        print(f"ratio lerobot writer / egopool export: {theirs / ours:.2f}x "
              f"({(theirs + decode) / ours:.2f}x counting the baseline's decode)")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
