"""The verification of one small upload, in-process: CPU ms per ``verify_upload`` (issue 15 H; U14, U20).

``bench_upload.py`` measures the whole intake over HTTP; the verification (zip checks, extraction with
sha256, footer and frame-size bounds, the validator decoding every frame, the episode's stats blocks)
runs there in the server's worker processes (docs/decisions.md U14). This script isolates it:
``--episodes`` small episodes as bench_upload records them (30 rows at 30 fps, a 256-value glove
sensor, 7 IMU samples per row, one 96x72 H.264 stream) are packed with
:func:`egopool.transfer.pack_episodes`, then each zip is verified ``--repeat`` times with
:func:`egopool.server.importer.verify_upload` in one process (the first pass is a warm-up, not
counted). Figures: CPU ms (this process, every thread) and wall ms per verification, medians and
minimum over the calls. ``--profile`` prints a cProfile top list (cumulative) of the counted calls.

``--base-src DIR`` verifies the same zips alternately with another source tree (e.g. main extracted
with ``git archive HEAD | tar -x -C DIR``) in subprocesses, so both codes meet the same machine load;
compare the two, not the absolute numbers.

    python benchmarks/bench_verify.py                                   # 8 episodes x 5, this tree
    python benchmarks/bench_verify.py --profile                         # + where the time goes
    python benchmarks/bench_verify.py --base-src /tmp/base --pairs 4    # this tree vs /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def record_zips(out: Path, episodes: int) -> list[Path]:
    """``episodes`` of bench_upload's small episodes, one zip each (this tree's writer and packer)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_upload import record

    from egopool.transfer import pack_episodes

    record(out / "rec", "pick", episodes, seed=7)
    packed = pack_episodes(out / "rec" / "pick", list(range(1, episodes + 1)), out / "zips", registry=False)
    return [p.path for p in packed]


def measure(zips: list[Path], repeat: int, profile: bool) -> dict[str, object]:
    """CPU and wall seconds of each counted ``verify_upload`` call (module docstring)."""
    import cProfile
    import io
    import pstats

    from egopool.server.importer import verify_upload
    from egopool.server.zipcheck import Limits

    work = Path(tempfile.mkdtemp(prefix="bench_verify_"))
    cpus: list[float] = []
    walls: list[float] = []
    prof = cProfile.Profile() if profile else None
    try:
        for r in range(repeat + 1):
            for k, z in enumerate(zips):
                staging = work / f"s{r}-{k}" / "pick"
                staging.mkdir(parents=True)
                if prof is not None and r:
                    prof.enable()
                c, t = time.process_time(), time.perf_counter()
                v = verify_upload(z, staging, Limits(), form_index=None, client_key=None, token_id=None)
                c, t = time.process_time() - c, time.perf_counter() - t
                if prof is not None and r:
                    prof.disable()
                if not v.validation.get("ok") or v.length != 30:
                    raise SystemExit(f"check FAILED: {z.name} verified as {v.validation}, {v.length} rows")
                if r:  # the first pass warms imports and caches
                    cpus.append(c)
                    walls.append(t)
                shutil.rmtree(staging.parent)
        text = ""
        if prof is not None:
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(45)
            text = buf.getvalue()
        return {"cpu": cpus, "wall": walls, "profile": text}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def line(name: str, doc: dict[str, list[float]]) -> str:
    cpu, wall = doc["cpu"], doc["wall"]
    return (f"{name:10} CPU {statistics.median(cpu) * 1e3:6.2f} ms/verify (min {min(cpu) * 1e3:5.2f})   "
            f"wall {statistics.median(wall) * 1e3:6.2f} ms (min {min(wall) * 1e3:5.2f})   "
            f"{len(cpu)} calls   load {os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5, help="counted passes over the zips (after one warm-up)")
    ap.add_argument("--profile", action="store_true", help="print a cProfile top list of this tree's calls")
    ap.add_argument("--base-src", type=Path, help="another source tree, measured alternately")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--zips", type=Path, help=argparse.SUPPRESS)  # a subprocess's input
    args = ap.parse_args()
    if args.zips:
        doc = measure(sorted(args.zips.glob("*.zip")), args.repeat, args.profile)
        print(json.dumps(doc))
        return
    repo = Path(__file__).resolve().parent.parent
    tmp = Path(tempfile.mkdtemp(prefix="bench_verify_rec_"))
    try:
        sys.path.insert(0, str(repo / "src"))
        zips = record_zips(tmp, args.episodes)
        print(f"{len(zips)} episodes ({sum(z.stat().st_size for z in zips) / len(zips) / 1e3:.0f} kB zips), "
              f"{args.repeat} counted passes each; medians per verification")
        trees = [("this tree", repo)] + ([("base", args.base_src)] if args.base_src else [])
        medians: dict[str, list[float]] = {name: [] for name, _ in trees}
        for i in range(args.pairs if args.base_src else 1):
            for name, tree in trees:
                env = {**os.environ, "PYTHONPATH": str(tree / "src")}
                cmd = [sys.executable, __file__, "--zips", str(zips[0].parent), "--repeat", str(args.repeat)]
                out = subprocess.run(cmd + (["--profile"] if args.profile and i == 0 and tree is repo else []),
                                     env=env, check=True, capture_output=True, text=True, cwd=tree).stdout
                doc = json.loads(out.strip().splitlines()[-1])
                print(line(name, doc))
                medians[name].append(statistics.median(doc["cpu"]))
                if doc["profile"]:
                    print(doc["profile"])
        if args.base_src:
            ratios = [a / b for a, b in zip(medians["this tree"], medians["base"])]
            print(f"this tree / base, CPU per verification: median {statistics.median(ratios):.2f} over "
                  f"{len(ratios)} pairs ({', '.join(f'{r:.2f}' for r in ratios)}); this tree "
                  f"{statistics.median(medians['this tree']) * 1e3:.2f} ms, base "
                  f"{statistics.median(medians['base']) * 1e3:.2f} ms (medians of the pairs' medians); load "
                  f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
