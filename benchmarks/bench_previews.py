"""Import throughput of `egopool serve` with previews on vs off (issue 19), in one run.

``--episodes`` episodes of the simulated ``gripper_d405`` rig (``--seconds`` each, ``--scale``:
at scale 2 a 640x480 gripper RGB stream, a 320x240 ego RGB stream and its depth stream, two
250x250x3 force matrices per row, a glove, trajectories) are recorded once, then uploaded by one
client (``upload_episodes``, one episode after the other) to:

1. a server started with ``--no-previews`` (the baseline);
2. a server with previews (one builder thread, the default): the upload's own time (what a
   client sees: the answer does not wait for the previews), then the time until every preview
   is ``ready`` (the background work, end to end).

Figures: episodes/s of the uploads in both runs and their ratio (previews on / off), the
end-to-end episodes/s with previews, the mean build time per episode, load average before and after.

    python benchmarks/bench_previews.py                 # 8 episodes of 3 s (~2 min on 2 cores)
    python benchmarks/bench_previews.py --episodes 20
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "transfer"))

from transfer_helpers import ServerProc, cli  # noqa: E402

from egopool.transfer import upload_episodes  # noqa: E402


def _states(store: Path) -> dict[str, int]:
    con = sqlite3.connect(store / ".egopool-server" / "server.db", timeout=30)
    try:
        return dict(con.execute("SELECT state, COUNT(*) FROM previews GROUP BY state").fetchall())
    finally:
        con.close()


def _build_seconds(store: Path) -> list[float]:
    """Per episode: from its import (``episodes.imported_at``) to its preview row's last update."""
    con = sqlite3.connect(store / ".egopool-server" / "server.db", timeout=30)
    try:
        rows = con.execute("SELECT p.updated_at - e.imported_at FROM previews p JOIN episodes e "
                           "ON p.task = e.task AND p.episode_index = e.episode_index").fetchall()
    finally:
        con.close()
    return [float(r[0]) for r in rows]


def run(work: Path, episodes: int, seconds: float, scale: int) -> dict[str, float]:
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli(["simulate", "--rig", "gripper_d405", "--episodes", str(episodes), "--seconds", str(seconds),
                    "--scale", str(scale), "--out", str(work / "pc"), "--task", "bench", "--seed", "1", "--json"]) == 0
    task = work / "pc" / "bench"
    size = sum(p.stat().st_size for p in task.rglob("*") if p.is_file() and "meta" not in p.parts)
    out: dict[str, float] = {"episodes": episodes, "mb": size / 1e6, "load_before": os.getloadavg()[0]}
    for label, args in (("off", ["--no-previews"]), ("on", [])):
        store = work / f"store-{label}"
        with ServerProc(store, *args) as srv:
            t0 = time.perf_counter()
            report = upload_episodes(task, server=srv.url, registry=False)
            out[f"upload_s_{label}"] = time.perf_counter() - t0
            assert report.ok
            if label == "on":
                while _states(store).get("pending"):
                    time.sleep(0.1)
                out["total_s_on"] = time.perf_counter() - t0
                states = _states(store)
                assert states == {"ready": episodes}, states
                builds = _build_seconds(store)
                out["build_s_mean"] = sum(builds) / len(builds)
    out["load_after"] = os.getloadavg()[0]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--scale", type=int, default=2)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="egopool-bench-previews-"))
    try:
        r = run(work, a.episodes, a.seconds, a.scale)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n = r["episodes"]
    print(f"{int(n)} episodes, {r['mb']:.1f} MB of episode files (gripper_d405, {a.seconds} s, scale {a.scale})")
    print(f"uploads, previews off : {n / r['upload_s_off']:.2f} episodes/s ({r['upload_s_off']:.1f} s)")
    print(f"uploads, previews on  : {n / r['upload_s_on']:.2f} episodes/s ({r['upload_s_on']:.1f} s)"
          f"  -> ratio on/off {r['upload_s_off'] / r['upload_s_on']:.2f}")
    print(f"previews all ready    : {n / r['total_s_on']:.2f} episodes/s end to end ({r['total_s_on']:.1f} s); "
          f"import to ready {r['build_s_mean']:.1f} s per episode on average")
    print(f"load average (1 min)  : {r['load_before']:.2f} before, {r['load_after']:.2f} after")


if __name__ == "__main__":
    main()
