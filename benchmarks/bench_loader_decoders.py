"""PooledDataset's RGB decoders side by side (issue 25, docs/decisions.md B10): ``decoder="pyav"`` vs
``"torchcodec"``, ``decode_threads`` 1 and 4, in one process, interleaved, on a local task: 8-frame windows on
every RGB camera, 3 batches of 32 in BucketSampler's order, a fresh dataset each time (decoders opened cold).

    python benchmarks/bench_loader_decoders.py [--scale 4] [--seconds 3] [--repeat 3]

Prints samples/s per repeat and the best, with the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="4")
    ap.add_argument("--seconds", default="3")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from egopool import open_task
    from egopool.cli.app import main as egopool_main
    from egopool.dataset import BucketSampler, PooledDataset

    tmp = Path(tempfile.mkdtemp(prefix="bench_decoders_"))
    with contextlib.redirect_stdout(io.StringIO()):
        assert egopool_main(["simulate", "--rig", "full", "--episodes", "1", "--seconds", args.seconds, "--scale",
                             args.scale, "--out", str(tmp / "rec")]) == 0
    task = next((tmp / "rec").iterdir())
    t = open_task(task)
    ep = t.episode(t.episodes()[0].index)
    cams = sorted(k for k in ep.streams if ep.stream_kind(k) == "rgb")
    delta = {c: [k / 30 for k in range(-7, 1)] for c in cams}
    print(f"{len(cams)} RGB cameras {next(iter(ep.video(cams[0]))).shape}, {ep.length} rows; nproc {os.cpu_count()}")
    res: dict[tuple[str, int], list[float]] = {}
    for rep in range(args.repeat):
        for dec in ("pyav", "torchcodec"):
            for threads in (1, 4):
                ds = PooledDataset(task, keys=cams, delta_timestamps=delta, output="numpy", decoder=dec,
                                   decode_threads=threads, cache_dir=tmp / "cache")
                order = list(BucketSampler(ds, seed=rep))[:96]
                t0 = time.perf_counter()
                for b in range(0, len(order), 32):
                    ds.__getitems__(order[b:b + 32])
                res.setdefault((dec, threads), []).append(len(order) / (time.perf_counter() - t0))
                ds.close()
    for (dec, threads), v in res.items():
        print(f"{dec:>10} threads {threads}: samples/s {' '.join(f'{x:.1f}' for x in v)}  best {max(v):.1f}  "
              f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
