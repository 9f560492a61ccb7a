"""Training loader, one run (issues 18, 25): egopool.dataset.PooledDataset on a pooled task read from its
directory, from a real SeaweedFS bucket, and from that bucket behind a loopback relay adding 50 ms to every
request; LeRobot 0.6.1 (torchcodec) on the same task exported with ``egopool export lerobot`` when its venv
``/work/venvs/lerobot06`` exists (``--lerobot-python``), LeRobot 0.4.4 (pyav) when ``lerobot`` imports here.

Run from the repository root (extras train and s3; SeaweedFS's ``weed`` from the s3 extra)::

    .venv/bin/python benchmarks/bench_loader.py [--rig full] [--scale 4] [--seconds 4] [--episodes 2]
        [--batches 12] [--workers 0 2] [--step-ms 50] [--delay-ms 50] [--repeat 3]

* egopool decodes RGB with PyAV (the default), ``egopool-local-torchcodec`` with ``decoder="torchcodec"``;
* setup (not timed): ``egopool simulate --rig R`` (``full``: 4 RGB cameras), ``export_lerobot(task, out,
  depth=False)``, a ``weed server`` on loopback and the task uploaded to ``s3://bench/pool/TASK``;
* every loader: 8-frame windows ``[-7/fps .. 0]`` on every RGB camera, batch 32, shuffled (egopool:
  :class:`~egopool.dataset.BucketSampler`, whole episodes shuffled then items within a buffer of 8; LeRobot:
  ``DataLoader(shuffle=True)``), ``num_workers`` W (forked);
* a training-style consumer: each step waits for its batch, then a fixed compute of ``--step-ms`` (a sleep:
  an accelerator's step, leaving the CPU to the loader); "wait" = the share of the run spent in ``next(it)``,
  as LeRobot's anchors report "the share of each training step waiting on data";
* each worker count starts with an untimed run of the first loader (the first child of a series was 1.5x slower
  than the same loader later in every run: cold caches), then each loader in its own process, timed from ``iter(loader)`` (worker start-up counts) over 1 + ``--batches``
  batches; peak RSS = the largest sum of RSS over the process and its workers (``/proc``, every 20 ms);
  GETs/sample = GET and HEAD requests the S3 server (weed's metrics) answered during the run / samples.
* ``--repeat R``: the loaders run R rounds, interleaved, and each one's median run is its figure (2 shared cores:
  one run of a loader moved by 2x with the load).

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
from typing import Any
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEROBOT06 = Path("/work/venvs/lerobot06/bin/python")


def _child(spec: dict) -> None:
    import torch
    from torch.utils.data import DataLoader

    if spec["loader"].startswith("lerobot"):
        if spec["loader"] == "lerobot-0.4.4":
            sys.path.insert(0, str(ROOT / "tests" / "interop"))
            from lerobot_env import lerobot_dataset_class

            cls, backend = lerobot_dataset_class(), "pyav"
        else:
            from lerobot.datasets.lerobot_dataset import LeRobotDataset as cls

            backend = spec.get("backend", "torchcodec")
        ds = cls("bench/loader", root=spec["lerobot"], delta_timestamps=spec["lr_delta"], video_backend=backend)
        loader = DataLoader(ds, batch_size=spec.get("batch", 32), shuffle=True,
                            generator=torch.Generator().manual_seed(0), num_workers=spec["workers"])
    else:
        from egopool.dataset import BucketSampler, PooledDataset

        ds = PooledDataset(spec["task"], keys=spec["keys"], delta_timestamps=spec["delta"], channels_first=True,
                           cache_dir=spec["cache"], decode_threads=1 if spec["workers"] else 4,
                           decoder="torchcodec" if spec["loader"].endswith("-torchcodec") else "pyav")
        loader = DataLoader(ds, batch_size=32, sampler=BucketSampler(ds, buffer=8, seed=0),
                            num_workers=spec["workers"])
    step = spec["step_ms"] / 1000
    t0 = time.perf_counter()
    it = iter(loader)
    n, waited = 0, 0.0
    for _ in range(1 + spec["batches"]):
        w0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        waited += time.perf_counter() - w0
        n += len(batch["index"])
        time.sleep(step)  # the training step
    dt = time.perf_counter() - t0
    print(json.dumps({"samples_per_s": n / dt, "samples": n, "wait_share": waited / dt}), flush=True)


def _tree_rss(pid: int) -> int:
    """RSS bytes of ``pid`` and its descendants (/proc)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")) * 1024
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration, ValueError):
            continue
    return total


def _run(spec: dict, python: str, env: dict[str, str], count) -> dict:
    before = count()
    proc = subprocess.Popen([python, "-W", "ignore", __file__, "--child", json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            time.sleep(0.02)

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    out, err = proc.communicate()
    done.set()
    th.join()
    if proc.returncode:
        raise SystemExit(f"{spec['loader']} workers={spec['workers']} failed (exit {proc.returncode}): {err[-2000:]}")
    res = json.loads(out.strip().splitlines()[-1])
    res["peak_rss_mb"] = peak[0] / 2**20
    res["gets"] = count() - before
    return res


def _simulated(args: argparse.Namespace, prefix: str) -> tuple[Path, Path, Any, Any, float]:
    """``simulate --rig/--episodes/--seconds/--scale`` into a fresh temp directory named ``prefix...``: that
    directory, the task, its opened Task, its first episode and its fps (egopool on sys.path already)."""
    from egopool import open_task
    from egopool.cli.app import main as egopool_main

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    with contextlib.redirect_stdout(io.StringIO()):
        assert egopool_main(["simulate", "--rig", args.rig, "--episodes", args.episodes, "--seconds",
                             args.seconds, "--scale", args.scale, "--out", str(tmp / "rec"), "--json"]) == 0
    task_dir = next((tmp / "rec").iterdir())
    task = open_task(task_dir)
    return tmp, task_dir, task, task.episode(task.episodes()[0].index), float(task.info["fps"])


def _depth_main(args: argparse.Namespace) -> None:
    """``--depth``: lerobot 0.6.1 on exports of one simulated task, each loader in its own process (issues 27, 31).

    torchcodec, 8-frame windows on every RGB camera and (where exported) every depth stream: no depth; depth as
    ``--lerobot 0.4`` writes it (uint16 ``[H, W]`` arrays in the data parquet); depth as 0.6 depth videos (the
    default). Then pyav, single random items of every RGB camera (no window): the stream-copied recording
    (one key frame per video) vs ``--gop 10``.
    """
    sys.path.insert(0, str(ROOT / "src"))
    from egopool.interop import export_lerobot

    tmp, task_dir, task, ep, fps = _simulated(args, "bench_loader_depth_")
    cams = [f"observation.images.{k}" for k in sorted(k for k in ep.streams if ep.stream_kind(k) == "rgb")]
    window = [k / fps for k in range(-7, 1)]
    runs = {"none": ("torchcodec windows, no depth", "none", "torchcodec", True),
            "0.4": ("torchcodec windows, depth arrays (--lerobot 0.4)", "0.4", "torchcodec", True),
            "0.6": ("torchcodec windows, depth videos (0.6)", "0.6", "torchcodec", True),
            "copy": ("pyav random items, stream copy", "none", "pyav", False),
            "gop": ("pyav random items, --gop 10", "gop", "pyav", False)}
    chosen = [runs[k] for k in args.loaders or runs]
    exports = {"none": {"depth": False}, "0.4": {"lerobot": "0.4"}, "0.6": {}, "gop": {"depth": False, "gop": 10}}
    depth_keys: dict[str, list[str]] = {}
    for name, kw in exports.items():
        if name not in {c[1] for c in chosen}:
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            export_lerobot(task_dir, tmp / name, **kw)
        feats = json.loads((tmp / name / "meta" / "info.json").read_text())["features"]
        depth_keys[name] = [k for k, f in feats.items()
                            if k.startswith("observation.depth.") or (f.get("info") or {}).get("is_depth_map")]
    shape = next(iter(ep.video(cams[0].rsplit(".", 1)[1]))).shape
    depth = sorted({k for v in depth_keys.values() for k in v})
    print(f"task {task_dir.name}: {len(task.episodes())} episodes, {sum(e.length for e in task.episodes())} rows, "
          f"RGB {cams} ({shape}), depth {depth}; lerobot 0.6.1, batch {args.batch}, shuffled, "
          f"step {args.step_ms:g} ms; nproc {os.cpu_count()}")
    print(f"{'workers':>7} {'loader':>50} {'samples/s':>10} {'wait %':>7} {'peak RSS MB':>12} {'load avg':>9}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for w in args.workers:
        for label, name, backend, windows in chosen:
            keys = cams + depth_keys[name] if windows else []
            spec = {"loader": "lerobot-0.6.1", "lerobot": str(tmp / name), "backend": backend, "batch": args.batch,
                    "lr_delta": {k: window for k in keys} or None, "batches": args.batches, "workers": w,
                    "step_ms": args.step_ms}
            r = _run(spec, args.lerobot_python, env, lambda: 0)
            print(f"{w:>7} {label:>50} {r['samples_per_s']:>10.2f} {100 * r['wait_share']:>6.1f}% "
                  f"{r['peak_rss_mb']:>12.0f} {os.getloadavg()[0]:>9.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--rig", default="full")
    ap.add_argument("--scale", default="4", help="simulate --scale (1 = full size)")
    ap.add_argument("--seconds", default="4")
    ap.add_argument("--episodes", default="2")
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    ap.add_argument("--step-ms", type=float, default=50.0, help="the consumer's fixed compute per step")
    ap.add_argument("--delay-ms", type=float, default=50.0, help="latency the relay adds per request")
    ap.add_argument("--loaders", nargs="+", help="run only some of: egopool-local egopool-local-torchcodec egopool-s3 "
                                                 "egopool-s3-50ms lerobot-0.6.1 lerobot-0.4.4 (--depth: none 0.4 0.6 copy gop)")
    ap.add_argument("--lerobot-python", default=str(LEROBOT06), help="python of the LeRobot 0.6.1 venv")
    ap.add_argument("--depth", action="store_true", help="LeRobot 0.6.1 alone: the export with depth (--lerobot 0.4 "
                    "raw arrays vs 0.6 depth videos vs no depth) and pyav random items (stream copy vs --gop 10)")
    ap.add_argument("--batch", type=int, default=32, help="batch size (--depth)")
    ap.add_argument("--repeat", type=int, default=1, help="run the loaders this many times, interleaved (rounds), and "
                    "report each one's median samples/s (the machine's load moves between runs)")
    ap.add_argument("--no-warmup", dest="warmup", action="store_false",
                    help="skip the untimed first run of each worker count (its figure is printed, not kept)")
    ap.add_argument("--lerobot044-python", default=sys.executable,
                    help="python of a venv with LeRobot 0.4.4 (the interop extra; default: this one, if it imports)")
    args = ap.parse_args()
    if args.child:
        return _child(json.loads(args.child))
    if args.depth:
        return _depth_main(args)

    sys.path.insert(0, str(ROOT / "src"))
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "storage")]
    from relay import LatencyRelay
    from s3_support import WeedServer

    from egopool.interop import export_lerobot

    tmp, task_dir, task, ep, fps = _simulated(args, "bench_loader_")
    cams = sorted(k for k in ep.streams if ep.stream_kind(k) == "rgb")
    window = [k / fps for k in range(-7, 1)]
    delta = {c: window for c in cams}
    lr_delta = {f"observation.images.{c}": window for c in cams}
    rows = sum(e.length for e in task.episodes())
    have_lr06 = Path(args.lerobot_python).exists()
    have_lr04 = subprocess.run([args.lerobot044_python, "-c", "import lerobot"], capture_output=True).returncode == 0
    loaders = args.loaders or ["egopool-local", "egopool-local-torchcodec", "egopool-s3", "egopool-s3-50ms",
                               *(["lerobot-0.6.1"] if have_lr06 else []), *(["lerobot-0.4.4"] if have_lr04 else [])]
    lr = tmp / "lerobot"
    if any(x.startswith("lerobot") for x in loaders):
        with contextlib.redirect_stdout(io.StringIO()):
            export_lerobot(task_dir, lr, depth=False, action=["action"] if "action" in ep.column_names else ())
    print(f"task {task_dir.name}: {len(task.episodes())} episodes, {rows} rows, cameras {cams} "
          f"({next(iter(ep.video(cams[0]))).shape}), 8-frame windows per camera, batch 32, shuffled, "
          f"step {args.step_ms:g} ms; relay +{args.delay_ms:g} ms/request; nproc {os.cpu_count()}")
    base = {"task": str(task_dir), "lerobot": str(lr), "keys": list(delta), "delta": delta, "lr_delta": lr_delta,
            "batches": args.batches, "cache": str(tmp / "cache"), "step_ms": args.step_ms}
    env0 = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env0["PYTHONPATH"] = str(ROOT / "src")
    with WeedServer(tmp / "weed") as weed:
        uri = weed.upload_dir(task_dir, "bench", f"pool/{task_dir.name}")
        port = int(weed.endpoint.rsplit(":", 1)[1])

        def gets() -> int:
            c = weed.request_counts()  # weed's metrics name a request by method (a HEAD counts as a GET)
            return c.get("GET", 0) + c.get("HEAD", 0)

        print(f"{'workers':>7} {'loader':>18} {'samples/s':>10} {'wait %':>7} {'peak RSS MB':>12} "
              f"{'GETs/sample':>12} {'load avg':>9}")
        with LatencyRelay(port, args.delay_ms / 1000) as relay:
            for w in args.workers:
                res: dict[str, dict] = {}
                runs: dict[str, list[dict]] = {}
                order = [*([loaders[0]] if args.warmup else []), *loaders * max(1, args.repeat)]
                for k, name in enumerate(order):
                    spec = {**base, "loader": name, "workers": w}
                    env, python = dict(env0), sys.executable
                    if name.startswith("egopool-s3"):
                        env.update(weed.env())
                        spec["task"] = uri
                        spec["cache"] = str(tmp / f"cache-{name}")
                        if name.endswith("50ms"):
                            env["AWS_ENDPOINT_URL"] = relay.endpoint
                    elif name == "lerobot-0.6.1":
                        python = args.lerobot_python
                        env.pop("PYTHONPATH")
                    elif name == "lerobot-0.4.4":
                        python = args.lerobot044_python
                    r = _run(spec, python, env, gets)
                    if args.warmup and k == 0:  # the first child of a series ran slower in every run (cold caches)
                        print(f"{w:>7} {'(warm-up) ' + name:>18} {r['samples_per_s']:>10.1f}", flush=True)
                        continue
                    runs.setdefault(name, []).append(r)
                    per = f"{r['gets'] / r['samples']:.2f}" if name.startswith("egopool-s3") else "-"
                    print(f"{w:>7} {name:>18} {r['samples_per_s']:>10.1f} {100 * r['wait_share']:>6.1f}% "
                          f"{r['peak_rss_mb']:>12.0f} {per:>12} {os.getloadavg()[0]:>9.1f}", flush=True)
                for name, rs in runs.items():  # the median run of each loader (by samples/s)
                    res[name] = sorted(rs, key=lambda r: r["samples_per_s"])[len(rs) // 2]
                    if len(rs) > 1:
                        r = res[name]
                        print(f"{w:>7} {'median ' + name:>18} {r['samples_per_s']:>10.1f} {100 * r['wait_share']:>6.1f}% "
                              f"{max(x['peak_rss_mb'] for x in rs):>12.0f}   (of {len(rs)}: "
                              f"{' '.join('%.1f' % x['samples_per_s'] for x in rs)})", flush=True)
                local = res.get("egopool-local")
                for name, r in res.items():
                    if local and name != "egopool-local":
                        # the targets read "X >= k x local" (bucket >= 0.8x, local >= 2x LeRobot): X / local
                        print(f"{w:>7} {name + '/local':>18} {r['samples_per_s'] / local['samples_per_s']:>9.2f}x",
                              flush=True)


if __name__ == "__main__":
    main()
