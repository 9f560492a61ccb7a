"""The publish step alone: verified uploads published by several threads into one server task.

``bench_upload.py`` measures the whole intake over HTTP, where the client's packing, the receive and
the verification (in worker processes, docs/decisions.md U14) mix with the publish. This script
isolates the part that runs serialised behind a task's import guard (U5): ``--uploads`` PCs' episode
N=1 (25 rows, a 4-value glove sensor, one 32x24 stream) of one task name are verified first
(``Importer.verify``, in this process), then published by ``--threads`` threads at once
(``Importer.publish``): all but the first are renumbered, as in bench_upload. Figures per round:
wall seconds of the publish phase and this process's CPU seconds in it (every thread), per publish, and the
fsyncs Python made in it (``os.fsync``; SQLite's own are not counted), per publish.
After each round it checks that the task holds N 1..uploads.

``--base-src DIR`` runs the same measurement alternately with another source tree (e.g. an older
commit extracted with ``git archive <rev> | tar -x -C DIR``) in a subprocess, so both codes meet the
same machine load; compare the ratios, not the absolute numbers (the wall time is mostly fsyncs on
a shared disk).

    python benchmarks/bench_publish.py                                  # 32 uploads, 4 threads, 6 rounds
    python benchmarks/bench_publish.py --base-src /tmp/base --pairs 4   # this tree vs /tmp/base
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def measure(uploads: int, threads: int, rounds: int, ops_helpers: Path) -> dict[str, list[float]]:
    """Wall and CPU seconds of each round's publish phase (see the module docstring)."""
    sys.path.insert(0, str(ops_helpers))
    from ops_helpers import write_task

    from egopool.server import store as store_module
    from egopool.server.importer import Importer

    Store = getattr(store_module, "ServerStore", None) or store_module.Store  # issue 24 renamed it
    from egopool.transfer import pack_episodes

    tmp = Path(tempfile.mkdtemp(prefix="bench_publish_"))
    try:
        return _rounds(tmp, uploads, threads, rounds, write_task, Importer, Store, pack_episodes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _rounds(tmp, uploads, threads, rounds, write_task, Importer, Store, pack_episodes):  # type: ignore[no-untyped-def]
    zips = [pack_episodes(write_task(tmp / f"pc{k}", "pick", 1, rows=25, registry=False, first_value=k), [1],
                          tmp / f"zips{k}", registry=False)[0].path for k in range(uploads)]
    walls, cpus, fsyncs = [], [], []
    for r in range(rounds):
        store = Store(tmp / f"store{r}")
        imp = Importer(store)
        verified = []
        for z in zips:
            upload_id = store.db.start_upload(None, "127.0.0.1")
            verified.append((imp.verify(z, task="pick", form_index=None, upload_id=upload_id),
                             hashlib.sha256(z.read_bytes()).hexdigest()))
        synced: list[int] = []
        real_fsync = os.fsync

        def counted(fd: int) -> None:
            synced.append(fd)
            real_fsync(fd)

        os.fsync = counted  # Python's fsyncs (SQLite's own are not counted)
        try:
            t, c = time.perf_counter(), time.process_time()
            with ThreadPoolExecutor(threads) as pool:
                results = list(pool.map(lambda a: imp.publish(a[0], zip_sha256=a[1]), verified))
            walls.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
        finally:
            os.fsync = real_fsync
        fsyncs.append(len(synced))
        if sorted(x.episode_index for x in results) != list(range(1, uploads + 1)):
            raise SystemExit(f"check FAILED: the task holds {sorted(x.episode_index for x in results)}")
    return {"wall": walls, "cpu": cpus, "fsync": fsyncs}


def line(name: str, doc: dict[str, list[float]], uploads: int) -> str:
    wall, cpu = statistics.median(doc["wall"]), statistics.median(doc["cpu"])
    return (f"{name:10} wall {wall / uploads * 1e3:6.1f} ms/publish (min {min(doc['wall']) / uploads * 1e3:5.1f})"
            f"   CPU {cpu / uploads * 1e3:5.1f} ms/publish   fsyncs {statistics.median(doc['fsync']) / uploads:4.1f}"
            f"/publish   load {os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--uploads", type=int, default=32)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--base-src", type=Path, help="another source tree, measured alternately")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    repo = Path(__file__).resolve().parent.parent
    if args.json:
        print(json.dumps(measure(args.uploads, args.threads, args.rounds, repo / "tests" / "ops")))
        return
    trees = [("this tree", repo)] + ([("base", args.base_src)] if args.base_src else [])
    print(f"{args.uploads} verified uploads (all but one renumbered), {args.threads} threads, "
          f"{args.rounds} rounds; medians per publish")
    for _ in range(args.pairs if args.base_src else 1):
        for name, tree in trees:
            env = {**os.environ, "PYTHONPATH": str(tree / "src")}
            out = subprocess.run([sys.executable, __file__, "--json", "--uploads", str(args.uploads), "--threads",
                                  str(args.threads), "--rounds", str(args.rounds)], env=env, check=True,
                                 capture_output=True, text=True, cwd=tree).stdout
            print(line(name, json.loads(out.strip().splitlines()[-1]), args.uploads))


if __name__ == "__main__":
    main()
