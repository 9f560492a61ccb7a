"""Collection-wide jobs in-process vs on Ray (docs/scale.md), and keypoint extraction speed.

Builds a task of ``--episodes`` episodes with ``TaskWriter`` (``--rows`` rows each: a 16x16
glove sensor, ~200 Hz IMU, hand poses; a 64x48 RGB stream on every 10th episode), then
times, as wall-clock medians of ``--repeat`` runs:

* ``validate_task`` and ``compute_stats`` (the ``stats recalc`` work) in-process — the
  baseline — and, interleaved run by run with it (the load of a shared machine drifts),
  with :class:`egopool.jobs.RayExecutor` on a Ray instance started on this machine with
  ``--cpus`` CPUs (one Ray task per episode, results merged on the driver);
* the Ray instance's start-up (``ray.init``) once, and the round trip of an empty unit
  (submit, schedule, run, fetch: the floor of Ray's cost per episode), reported apart;
* speed-up = in-process / Ray, and the Ray overhead per episode = Ray wall time minus the
  in-process time divided by the CPUs Ray used (what perfect scaling would take), per episode.

With ``--export E`` (needs the ``interop`` extra's PyAV only, not lerobot): ``egopool simulate --rig
full --episodes E --seconds S --scale 4`` (not timed), then ``export_lerobot`` of the task
in-process — the baseline — and with one Ray task per episode (``executor=RayExecutor``),
interleaved, medians of ``--repeat``; both datasets are asserted byte-identical file by file.

With ``--client N``: what ``--ray ray://HOST:PORT`` (Ray Client) costs against ``--ray HOST:PORT``
(a driver joining the cluster) on one command, ``validate`` of N episodes: a local cluster
(``ray.cluster_utils.Cluster``, one node of ``--cpus`` CPUs on 127.0.0.2 with a Ray Client
server) and, interleaved, a fresh driver process per run for each address (``RayExecutor``
then ``validate_task``; connect, validate and disconnect timed apart), medians of ``--repeat``;
the findings are asserted equal to the in-process ones.

With ``--keypoints`` (run it with the keypoints venv: ``.venv-keypoints/bin/python``; needs
mediapipe), MediaPipe Hands runs on the bundled real hand video (621 frames, scaled to
640x360 like the demo, decoded beforehand so only the detector is timed): frames/s and
frames per CPU-second in one process (≈ per core), for model_complexity 1 (default) and 0.

    python benchmarks/bench_scale.py                    # --episodes 2000 --rows 30 --repeat 3 --cpus 2
    python benchmarks/bench_scale.py --episodes 0 --export 6 --export-seconds 5
    python benchmarks/bench_scale.py --episodes 0 --client 500     # needs ray[client] (the ray extra)
    .venv-keypoints/bin/python benchmarks/bench_scale.py --keypoints --episodes 0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from egopool import StreamSpec, TaskWriter, hand_pose_column, imu_columns, vector_column  # noqa: E402
from egopool.ops import compute_stats  # noqa: E402
from egopool.validate import validate_task  # noqa: E402


def build(root: Path, episodes: int, rows: int) -> Path:
    tw = TaskWriter(root, "scale", fps=30.0, registry=False)
    rng = np.random.default_rng(0)
    for k in range(episodes):
        imu, imu_ts = imu_columns()
        video = k % 10 == 0
        ep = tw.begin_episode(columns=[vector_column("observation.left_glove", [16, 16]), imu, imu_ts,
                                       hand_pose_column("right"), hand_pose_column("left")],
                              sensors=["left_glove"], streams=[StreamSpec("cam", "rgb", 64, 48)] if video else [])
        for i in range(rows):
            ep.add_frame({"observation.left_glove": rng.random(256, dtype=np.float32),
                          "observation.imu": rng.normal(size=(7, 6)).astype(np.float32),
                          "imu_ts_ns": np.arange(7, dtype=np.int64) + 7 * i,
                          "observation.right_hand_pose": rng.random(63, dtype=np.float32),
                          "observation.left_hand_pose": np.zeros(63, np.float32)},
                         images={"cam": rng.integers(0, 255, (48, 64, 3), np.uint8)} if video else None)
        ep.finish()
    return root / "scale"


def _noop(shared: object, unit: int) -> int:
    return unit


def median_time(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def bench_jobs(args: argparse.Namespace) -> None:
    import ray

    from egopool.jobs import RayExecutor

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        task = build(Path(tmp), args.episodes, args.rows)
        print(f"built {args.episodes} episodes x {args.rows} rows in {time.perf_counter() - t0:.1f} s")
        validate_task(task)  # warm the page cache for both contenders
        t0 = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1",
                 object_store_memory=200 * 1024 ** 2)
        t_init = time.perf_counter() - t0
        times: dict[str, list[float]] = {k: [] for k in ("val", "st", "r_val", "r_st", "noop")}
        try:
            with RayExecutor() as ex:
                validate_task(task, executor=ex)  # workers started and warm
                # interleaved: on a shared machine the load drifts; alternating keeps both sides under the same
                for _ in range(args.repeat):
                    jobs: list[tuple[str, Callable[[], object]]] = [
                        ("val", lambda: validate_task(task)), ("r_val", lambda: validate_task(task, executor=ex)),
                        ("st", lambda: compute_stats(task)), ("r_st", lambda: compute_stats(task, executor=ex)),
                        ("noop", lambda: ex.map(_noop, None, list(range(args.episodes))))]
                    for key, fn in jobs:
                        t, out = median_time(fn, 1)
                        times[key].append(t)
                        if key == "val":
                            rep = out
                        elif key == "r_val":
                            rep_r = out
                        elif key == "st":
                            doc = out[0]  # type: ignore[index]
                        elif key == "r_st":
                            doc_r = out[0]  # type: ignore[index]
        finally:
            ray.shutdown()
        t_val, t_st, r_val, r_st, r_noop = (statistics.median(times[k]) for k in ("val", "st", "r_val", "r_st", "noop"))
        assert rep_r.findings == rep.findings and doc_r == doc, "Ray and in-process results differ"
        n = args.episodes
        print(f"\nbench_scale.py ({n} episodes, Ray with {args.cpus} CPUs on this machine; results equal)")
        print(f"{'job':<28}{'in-process s':>14}{'Ray s':>10}{'speed-up':>10}{'ms/ep in':>10}{'ms/ep Ray':>11}"
              f"{'overhead ms/ep':>16}")
        for name, a, b in (("validate", t_val, r_val), ("stats (recalc work)", t_st, r_st),
                           ("validate + stats", t_val + t_st, r_val + r_st)):
            over = (b - a / args.cpus) / n * 1000
            print(f"{name:<28}{a:>14.2f}{b:>10.2f}{a / b:>9.2f}x{a / n * 1000:>10.2f}{b / n * 1000:>11.2f}"
                  f"{over:>16.2f}")
        print(f"Ray round trip of an empty unit (submit, schedule, run, fetch): {r_noop / n * 1000:.2f} ms per unit "
              f"({r_noop:.2f} s for {n})")
        print(f"ray.init (local instance, once): {t_init:.2f} s")


def _driver(address: str, task: str) -> None:
    """One command's driver in its own process (``--_driver``): prints connect / validate / close seconds."""
    from egopool.jobs import RayExecutor

    t0 = time.perf_counter()
    ex = RayExecutor(address)
    t1 = time.perf_counter()
    rep = validate_task(Path(task), executor=ex)
    t2 = time.perf_counter()
    ex.close()
    t3 = time.perf_counter()
    print(json.dumps({"connect": t1 - t0, "validate": t2 - t1, "close": t3 - t2,
                      "findings": [f.to_dict() for f in rep.findings]}))


def bench_client(args: argparse.Namespace) -> None:
    import socket

    from ray.cluster_utils import Cluster

    with tempfile.TemporaryDirectory() as tmp:
        task = build(Path(tmp), args.client, args.rows)
        ref = [f.to_dict() for f in validate_task(task).findings]
        with socket.socket() as sock:
            sock.bind(("127.0.0.2", 0))
            port = sock.getsockname()[1]
        os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"  # the head's client server (Ray issue 63202, README)
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": args.cpus, "node_ip_address": "127.0.0.2", "include_dashboard": False,
            "ray_client_server_port": port, "object_store_memory": 200 * 1024 ** 2})
        del os.environ["GRPC_ENABLE_FORK_SUPPORT"]
        addresses = {"GCS": cluster.address, "client": f"ray://127.0.0.2:{port}"}
        env = {**os.environ, "RAY_ADDRESS": ""}
        runs: dict[str, list[dict[str, float]]] = {k: [] for k in addresses}
        try:
            for i in range(args.repeat + 1):  # the first round starts the workers: not counted
                for key, addr in addresses.items():
                    t0 = time.perf_counter()
                    out = subprocess.run([sys.executable, __file__, "--_driver", addr, str(task)], env=env,
                                         capture_output=True, text=True)
                    if out.returncode:
                        raise SystemExit(f"the {key} driver failed:\n{out.stderr[-3000:]}")
                    got = json.loads(out.stdout.strip().splitlines()[-1])
                    assert got.pop("findings") == ref, f"{key}: findings differ from in-process"
                    got["process"] = time.perf_counter() - t0
                    if i:
                        runs[key].append(got)
        finally:
            cluster.shutdown()
        med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in runs.items()}
        n = args.client
        print(f"\nbench_scale.py --client {n} (validate, {n} episodes x {args.rows} rows; one node, {args.cpus} CPUs;"
              f" medians of {args.repeat}; findings equal)")
        print(f"{'--ray':<20}{'connect s':>10}{'validate s':>12}{'close s':>9}{'process s':>11}{'ms/ep':>8}")
        for key, label in (("GCS", "HOST:PORT"), ("client", "ray://HOST:PORT")):
            m = med[key]
            print(f"{label:<20}{m['connect']:>10.2f}{m['validate']:>12.2f}{m['close']:>9.2f}{m['process']:>11.2f}"
                  f"{m['validate'] / n * 1000:>8.2f}")
        g, c = med["GCS"], med["client"]
        print(f"Ray Client costs: connect +{c['connect'] - g['connect']:.2f} s, validate x{c['validate'] / g['validate']:.2f} "
              f"(+{(c['validate'] - g['validate']) / n * 1000:.2f} ms/episode), whole command "
              f"x{c['process'] / g['process']:.2f}")


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def bench_export(args: argparse.Namespace) -> None:
    import contextlib
    import io
    import shutil

    import ray

    from egopool.cli.app import main as egopool_main
    from egopool.interop import export_lerobot
    from egopool.jobs import RayExecutor

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            assert egopool_main(["simulate", "--rig", "full", "--episodes", str(args.export), "--seconds",
                                 str(args.export_seconds), "--scale", "4", "--out", f"{tmp}/rec"]) == 0
        task = Path(tmp) / "rec" / "sim_full"
        print(f"\nsimulated {args.export} full-rig episodes of {args.export_seconds} s in {time.perf_counter() - t0:.1f} s")
        out = Path(tmp) / "out"

        def run(executor: object = None) -> float:
            shutil.rmtree(out, ignore_errors=True)
            t = time.perf_counter()
            export_lerobot(task, out, executor=executor)  # type: ignore[arg-type]
            return time.perf_counter() - t

        run()  # page cache warm for both contenders
        local_files = _tree(out)
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1",
                 object_store_memory=200 * 1024 ** 2)
        t_local: list[float] = []
        t_ray: list[float] = []
        try:
            with RayExecutor() as ex:
                run(ex)  # workers started and warm
                for _ in range(args.repeat):
                    t_local.append(run())
                    t_ray.append(run(ex))
                assert _tree(out) == local_files, "the Ray export differs from the in-process one"
        finally:
            ray.shutdown()
        rows = sum(1 for _ in (task / "data").rglob("*.parquet"))
        a, b = statistics.median(t_local), statistics.median(t_ray)
        size = sum(len(v) for v in local_files.values()) / 1e6
        print(f"bench_scale.py --export ({rows} episodes x {args.export_seconds} s full rig, scale 4: 4 RGB streams "
              f"copied + depth decoded; {len(local_files)} files, {size:.1f} MB, byte-identical; Ray with "
              f"{args.cpus} CPUs on this machine)")
        print(f"{'export lerobot':<28}{'in-process s':>14}{'Ray s':>10}{'speed-up':>10}{'s/ep in':>10}{'s/ep Ray':>10}")
        print(f"{'':<28}{a:>14.2f}{b:>10.2f}{a / b:>9.2f}x{a / rows:>10.2f}{b / rows:>10.2f}")


def bench_keypoints(args: argparse.Namespace) -> None:
    import av

    from egopool.demo import samples_dir
    from egopool.keypoints.mediapipe_hands import MediaPipeHands

    video = samples_dir() / "dexretarget_hand_video" / "human_hand_video.mp4"
    with av.open(str(video)) as c:
        frames = [f.reformat(width=640, height=360, format="rgb24").to_ndarray() for f in c.decode(video=0)]
    for complexity in (1, 0):
        det = MediaPipeHands(model_complexity=complexity)
        det.process(frames[0])
        det.close()
        det = MediaPipeHands(model_complexity=complexity)
        t0, c0 = time.perf_counter(), time.process_time()
        found = sum(any(v is not None for v in det.process(f).values()) for f in frames)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        det.close()
        print(f"MediaPipe Hands model_complexity={complexity}, 640x360, {len(frames)} frames: {len(frames) / wall:.1f} "
              f"frames/s wall, {len(frames) / cpu:.1f} frames per CPU-second (≈ per core), hand in {found}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--rows", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--export", type=int, default=0, metavar="E",
                    help="also time export lerobot of E simulated full-rig episodes, in-process vs Ray")
    ap.add_argument("--export-seconds", type=float, default=5.0, help="seconds per simulated episode (--export)")
    ap.add_argument("--keypoints", action="store_true", help="also time MediaPipe Hands (keypoints venv)")
    ap.add_argument("--client", type=int, default=0, metavar="N",
                    help="also time validate of N episodes with --ray ray://HOST:PORT (Ray Client) vs --ray HOST:PORT")
    ap.add_argument("--_driver", nargs=2, metavar=("ADDRESS", "TASK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._driver:
        _driver(*args._driver)
        return
    if args.episodes:
        bench_jobs(args)
    if args.export:
        bench_export(args)
    if args.client:
        bench_client(args)
    if args.keypoints:
        bench_keypoints(args)


if __name__ == "__main__":
    main()
