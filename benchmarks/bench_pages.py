"""Page load time of the curation pages of a task with 10,000 episodes (issue 19), against ``/healthz``.

Run from the repository root (needs the server extra)::

    python benchmarks/bench_pages.py [--episodes 10000] [--repeat 15]

A store with one task is made (one real episode written by the writer, so the task exists on
disk), and its ``server.db`` is filled through the catalog's own calls with ``--episodes``
pooled episodes as the server records them: the episode rows (``ServerDB.add_episodes``),
their quality facts (``set_quality``), built previews (``set_preview``) and a verdict on every
third episode (``add_reviews``, 1000 a transaction). A real ``egopool serve`` (uvicorn, loopback, no tokens) is
timed with one keep-alive client; each figure is the median wall time of ``--repeat``
requests, interleaved round by round:

* baseline ``GET /healthz`` (routing, no work) and ``GET /static/egopool.css`` (a file);
* ``GET /`` (the index: every task with its totals);
* ``GET /tasks/<task>`` (page 1: 50 rows, filter form, totals), the same page at a cursor
  near the end (keyset paging: should cost what page 1 does), a filtered search page
  (``review=rejected&min_duration=...&max_idle_fraction=...``);
* ``GET /api/v1/episodes`` (JSON, 50 rows) first page and deep page;
* ``GET /tasks/<task>/dashboard`` (per host and day, histograms: one scan of the task) and
  ``GET /api/v1/tasks/<task>/selection`` (bulk review's "select all matching": 10,000 pairs a page).

Printed: ms per request, the ratio to ``/healthz``, and the load average.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _fill(store: Path, task: str, n: int) -> None:
    import numpy as np

    from egopool import StreamSpec, TaskWriter, vector_column
    from egopool.server.db import EpisodeRow
    from egopool.server import store as store_module

    Store = getattr(store_module, "ServerStore", None) or store_module.Store  # issue 24 renamed it

    tw = TaskWriter(store, task, fps=30.0, registry=False)
    ep = tw.begin_episode([vector_column("observation.glove", [4])], [StreamSpec("ego", "rgb", 32, 24)],
                          sensors=["glove"])
    for i in range(3):
        ep.add_frame({"observation.glove": np.full(4, i, np.float32)}, images={"ego": np.full((24, 32, 3), i, np.uint8)})
    ep.finish()
    db = Store(store).db
    rng = np.random.default_rng(0)
    t0 = time.time() - n * 60.0
    rows = [EpisodeRow(task, k, f"{k % 8:032x}", f"lab-pc-{k % 8}", k, f"{k:064x}", k, "lab-pc", t0 + 60.0 * k,
                       int(300 + rng.integers(0, 1500)), ["ego", "wrist"],
                       {"ok": k % 37 != 0, "errors": int(k % 37 == 0), "warnings": 0}) for k in range(1, n + 1)]
    db.add_episodes(rows)
    for r in rows:
        k = r.episode_index
        db.set_quality(task, k, {"rows": r.length, "fps": 30.0, "duration_s": r.length / 30.0, "size_bytes": 40_000 * r.length,
                                 "gap_total": int(k % 13 == 0), "drop_total": 0, "idle_fraction": float(rng.random() * 0.5),
                                 "idle_frames": 0, "idle_ranges": [], "blur_outliers": int(k % 17 == 0),
                                 "exposure_outliers": 0, "validation_errors": r.validation["errors"],
                                 "validation_warnings": 0})
        db.set_preview(task, k, "ready", manifest={
            "streams": [{"key": s, "kind": "rgb", "video": f"{s}.mp4", "thumbnail": f"{s}.jpg", "width": 320,
                         "height": 240, "fps": 30.0, "frames": r.length} for s in ("ego", "wrist")],
            "signals": "signals.json", "files": []})
    for i, verdict in enumerate(("accept", "reject", "flag")):  # a verdict on every third, 1000 per transaction
        judged = [(k, 0) for k in range(3, n + 1, 3) if k // 3 % 3 == i]
        for j in range(0, len(judged), 1000):
            db.add_reviews(task, judged[j:j + 1000], verdict, "" if verdict == "accept" else "blur", "anna")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()

    import httpx

    from egopool.server.search import encode_cursor

    task = "pick_cup"
    with tempfile.TemporaryDirectory() as tmp_:
        store = Path(tmp_) / "store"
        t = time.perf_counter()
        _fill(store, task, args.episodes)
        print(f"filled server.db with {args.episodes} episodes in {time.perf_counter() - t:.1f} s")
        port = _port()
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        srv = subprocess.Popen([sys.executable, "-m", "egopool", "serve", "--store", str(store), "--port", str(port),
                                "--log-level", "warning", "--no-previews"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        deep = encode_cursor((task, args.episodes - 60))
        targets = {
            "GET /healthz (baseline)": "/healthz",
            "GET /static/egopool.css": "/static/egopool.css",
            "index page": "/",
            "task page, page 1": f"/tasks/{task}",
            "task page, deep cursor": f"/tasks/{task}?cursor={deep}",
            "task page, filtered": f"/tasks/{task}?review=rejected&min_duration=20&max_idle_fraction=0.3",
            "search API, page 1": f"/api/v1/episodes?task={task}",
            "search API, deep cursor": f"/api/v1/episodes?cursor={deep}",
            "search API, filtered": "/api/v1/episodes?review=rejected&min_duration=20&max_idle_fraction=0.3",
            "dashboard page": f"/tasks/{task}/dashboard",
            "selection API (10,000 [N, version])": f"/api/v1/tasks/{task}/selection",
        }
        try:
            with httpx.Client(base_url=url, timeout=60.0) as c:
                for _ in range(300):
                    try:
                        if c.get("/healthz").status_code == 200:
                            break
                    except httpx.TransportError:
                        time.sleep(0.1)
                times: dict[str, list[float]] = {k: [] for k in targets}
                sizes: dict[str, int] = {}
                for path in targets.values():  # warm up (and check)
                    r = c.get(path)
                    assert r.status_code == 200, (path, r.status_code, r.text[:300])
                for _ in range(args.repeat):
                    for name, path in targets.items():
                        t = time.perf_counter()
                        r = c.get(path)
                        times[name].append(time.perf_counter() - t)
                        sizes[name] = len(r.content)
        finally:
            srv.terminate()
            srv.wait(30)
    base = statistics.median(times["GET /healthz (baseline)"])
    load = os.getloadavg()
    print(f"\n{args.episodes} episodes, median of {args.repeat}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"({os.cpu_count()} CPUs)\n")
    print("| request | ms | × /healthz | bytes |\n|---|---:|---:|---:|")
    for name in targets:
        m = statistics.median(times[name])
        print(f"| {name} | {m * 1000:.1f} | {m / base:.1f} | {sizes[name]} |")


if __name__ == "__main__":
    main()
