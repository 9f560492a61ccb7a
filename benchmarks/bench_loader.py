"""Training loader: egopool.dataset.PooledDataset on a pooled task vs LeRobot 0.4.4's LeRobotDataset
on the same task exported with ``egopool export lerobot``, one run (issue 18).

Run from the repository root in a venv with the extras interop (lerobot) and train (torch)::

    EGOPOOL_EXTRAS=interop,train ./run --version
    .venv/bin/python benchmarks/bench_loader.py [--rig full] [--scale 4] [--seconds 4] [--episodes 2]
        [--task DIR] [--batches 12] [--workers 0 2]

* setup (not timed): ``egopool simulate --rig R`` (``full``: 4 RGB cameras + depth; ``--task`` takes
  an existing task, e.g. the demo's), then ``export_lerobot(task, out, depth=False)``;
* both loaders get the same ``delta_timestamps`` (every RGB camera ``[-1/fps, 0]``, ``action``
  8 rows ``[0, 7/fps]``), ``DataLoader(batch_size=32, shuffle=True, num_workers=W)``;
  LeRobot decodes with ``video_backend="pyav"`` (torchcodec is not installed here);
* each loader runs in its own process; samples/s over ``--batches`` batches after one warm-up
  batch, peak RSS = the largest sum over the process and its DataLoader workers (sampled every 20 ms).

LeRobot returns float32 CHW images in [0, 1]; egopool returns uint8 (here CHW), as stored.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "interop"))


def _child(args: argparse.Namespace) -> None:
    import torch
    from torch.utils.data import DataLoader

    spec = json.loads(args.child)
    if spec["loader"] == "lerobot":
        from lerobot_env import lerobot_dataset_class

        ds = lerobot_dataset_class()("bench/loader", root=spec["lerobot"], delta_timestamps=spec["lr_delta"],
                                     video_backend="pyav")
    else:
        from egopool.dataset import PooledDataset

        ds = PooledDataset(spec["task"], keys=spec["keys"], delta_timestamps=spec["delta"], channels_first=True,
                           cache_dir=spec["cache"])
    g = torch.Generator().manual_seed(0)
    loader = DataLoader(ds, batch_size=32, shuffle=True, generator=g, num_workers=spec["workers"],
                        persistent_workers=False)
    it = iter(loader)
    next(it)
    t0 = time.perf_counter()
    n = 0
    for _ in range(spec["batches"]):
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        n += len(batch["index"])
    dt = time.perf_counter() - t0
    print(json.dumps({"samples_per_s": n / dt, "samples": n}), flush=True)


def _tree_rss(pid: int) -> int:
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def _run(spec: dict) -> dict:
    proc = subprocess.Popen([sys.executable, "-W", "ignore", __file__, "--child", json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    peak = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            time.sleep(0.02)

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    out, _ = proc.communicate()
    done.set()
    th.join()
    if proc.returncode:
        raise SystemExit(f"{spec['loader']} workers={spec['workers']} failed (exit {proc.returncode})")
    res = json.loads(out.strip().splitlines()[-1])
    res["peak_rss_mb"] = peak[0] / 2**20
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--rig", default="full")
    ap.add_argument("--scale", default="4")
    ap.add_argument("--seconds", default="4")
    ap.add_argument("--episodes", default="2")
    ap.add_argument("--task", help="an existing task instead of a simulated one")
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    args = ap.parse_args()
    if args.child:
        return _child(args)

    from egopool import open_task
    from egopool.cli.app import main as egopool_main
    from egopool.interop import export_lerobot

    tmp = Path(tempfile.mkdtemp(prefix="bench_loader_"))
    if args.task:
        task_dir = Path(args.task)
    else:
        with contextlib.redirect_stdout(io.StringIO()):
            assert egopool_main(["simulate", "--rig", args.rig, "--episodes", args.episodes, "--seconds",
                                 args.seconds, "--scale", args.scale, "--out", str(tmp / "rec"), "--json"]) == 0
        task_dir = next((tmp / "rec").iterdir())
    task = open_task(task_dir)
    ep = task.episode(task.episodes()[0].index)
    fps = float(task.info["fps"])
    cams = sorted(k for k in ep.streams if ep.stream_kind(k) == "rgb")
    lr = tmp / "lerobot"
    with contextlib.redirect_stdout(io.StringIO()):
        export_lerobot(task_dir, lr, depth=False, action=["action"] if "action" in ep.column_names else ())
    features = json.loads((lr / "meta" / "info.json").read_text())["features"]
    window = [-1 / fps, 0.0]
    delta = {c: window for c in cams}
    lr_delta = {f"observation.images.{c}": window for c in cams}
    if "action" in features and "action" in ep.column_names:
        delta["action"] = lr_delta["action"] = [k / fps for k in range(8)]
    missing = [k for k in lr_delta if k not in features]
    if missing:
        raise SystemExit(f"the export has no {missing}: {sorted(features)}")
    rows = sum(e.length for e in task.episodes())
    print(f"task {task_dir.name}: {len(task.episodes())} episodes, {rows} rows, cameras {cams} "
          f"({next(iter(ep.video(cams[0]))).shape}), windows {len(window)} frames/camera"
          + (", action 8 rows" if "action" in delta else ""))
    base = {"task": str(task_dir), "lerobot": str(lr), "keys": list(delta), "delta": delta, "lr_delta": lr_delta,
            "batches": args.batches, "cache": str(tmp / "cache")}
    print(f"{'workers':>7} {'loader':>8} {'samples/s':>10} {'peak RSS MB':>12}")
    for w in args.workers:
        res = {}
        for loader in ("lerobot", "egopool"):
            res[loader] = _run({**base, "loader": loader, "workers": w})
            print(f"{w:>7} {loader:>8} {res[loader]['samples_per_s']:>10.1f} {res[loader]['peak_rss_mb']:>12.0f}",
                  flush=True)
        speed = res["egopool"]["samples_per_s"] / res["lerobot"]["samples_per_s"]
        mem = res["egopool"]["peak_rss_mb"] / res["lerobot"]["peak_rss_mb"]
        print(f"{w:>7} {'ratio':>8} {speed:>9.2f}x {mem:>11.2f}x   (egopool / lerobot)", flush=True)


if __name__ == "__main__":
    main()
