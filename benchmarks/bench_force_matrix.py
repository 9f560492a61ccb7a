"""Force-matrix decode of a whole episode vs a numpy memcpy of the same bytes (file_format.md §7.2.1).

Run from the repository root::

    python benchmarks/bench_force_matrix.py [--rows 300] [--scale 100] [--repeat 7]

An episode of ``--rows`` rows, each one ``(250, 250, 3)`` mN frame stored
``row_diff_quantized`` (``rows × 187500`` int16 row diffs; a contact patch with
shear, like a gripper pad), is decoded to float32 mN. Figures (minimum of
``--repeat`` runs, in one process):

* baseline: ``np.copy`` of the stored int16 bytes (``rows × 375 kB``), the floor of
  touching the data at all;
* ``ForceMatrixCodec.decode`` (fresh result array) and ``decode(out=...)`` into a
  reused buffer. The result is twice the bytes of the input (float32), so even a
  perfect decoder moves 3x the bytes of the baseline copy;
* the naive one-shot numpy decode (``cumsum`` of the whole episode in int32, then
  ``astype``), the form DESIGN §2 states, for the speed-up;
* the floor of any numpy decoder: the int32 row ``cumsum`` alone (numpy's accumulate
  is a scalar loop, ~1 cycle per value; the other steps are vectorised);
* through the reader: ``Episode.force_matrices`` on a written task (zstd parquet),
  against ``pyarrow.parquet.read_table`` of the same column (the I/O it cannot avoid).

Every decoded result is checked against the naive decode before timing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from egopool import TaskWriter, open_task, scalar_ns_column  # noqa: E402
from egopool.codecs.force_matrix import FRAME_SHAPE, ForceMatrixCodec  # noqa: E402
from egopool.schema import force_matrix_column  # noqa: E402

COL = "observation.gripper_left_force_matrix"


def frames(rows: int, scale: float, seed: int = 0) -> np.ndarray:
    """Moving contact patches: smooth fz bump plus noisy shear, on the ``1/scale`` grid (mN)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:250, 0:250]
    out = np.zeros((rows, *FRAME_SHAPE), np.float32)
    for i in range(rows):
        cy, cx = 125 + 60 * np.sin(i / 40), 125 + 60 * np.cos(i / 55)
        bump = 800.0 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * 30.0 ** 2))
        out[i, :, :, 2] = bump
        out[i, :, :, 0] = bump * 0.05 + rng.normal(0, 1.0, (250, 250))
        out[i, :, :, 1] = -bump * 0.03 + rng.normal(0, 1.0, (250, 250))
    return np.rint(out * scale) / np.float32(scale)


def best_of(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def naive_decode(stored: np.ndarray, scale: float) -> np.ndarray:
    q = np.cumsum(stored.reshape(-1, 750).astype(np.int32), axis=1).astype(np.int16)
    return (q.astype(np.float32) / np.float32(scale)).reshape((-1, *FRAME_SHAPE))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=300, help="rows (frames) in the episode (default 300 = 10 s)")
    ap.add_argument("--scale", type=float, default=100.0, help="quantisation scale (10, 100 or 1000)")
    ap.add_argument("--repeat", type=int, default=7, help="runs per figure; the minimum is reported")
    args = ap.parse_args()

    codec = ForceMatrixCodec("row_diff_quantized", args.scale)
    src = frames(args.rows, args.scale)
    stored = np.concatenate([codec.encode(f) for f in src])
    mb_in = stored.nbytes / 1e6
    print(f"episode: {args.rows} rows x 187500 int16 = {mb_in:.1f} MB stored, {2 * mb_in:.1f} MB decoded float32")

    want = naive_decode(stored, args.scale)
    assert np.array_equal(codec.decode(stored), want), "decode differs from the naive decode"
    out = np.empty_like(want)
    assert np.array_equal(codec.decode(stored, out=out), want)

    t_copy = best_of(lambda: np.copy(stored), args.repeat)
    t_dec = best_of(lambda: codec.decode(stored), args.repeat)
    t_out = best_of(lambda: codec.decode(stored, out=out), args.repeat)
    t_naive = best_of(lambda: naive_decode(stored, args.scale), args.repeat)
    wide = stored.reshape(-1, 750).astype(np.int32)
    t_scan = best_of(lambda: np.cumsum(wide, axis=1, out=wide), args.repeat)

    def line(name: str, t: float) -> None:
        print(f"  {name:<38} {t * 1e3:8.1f} ms  {mb_in / t:8.0f} MB/s (stored)  {t / t_copy:5.2f}x memcpy")

    print("decode (numpy arrays in memory):")
    line("baseline np.copy of the stored bytes", t_copy)
    line("ForceMatrixCodec.decode (fresh array)", t_dec)
    line("ForceMatrixCodec.decode(out=buffer)", t_out)
    line("naive cumsum(int32)+astype, one shot", t_naive)
    line("floor: the int32 row cumsum alone", t_scan)
    print(f"  ratio decode / memcpy: {t_dec / t_copy:.2f}x fresh, {t_out / t_copy:.2f}x into a buffer "
          f"(goal <= 3x); speed-up over naive: {t_naive / t_dec:.2f}x")

    with tempfile.TemporaryDirectory() as tmp:
        tw = TaskWriter(tmp, "bench_fm", fps=30.0)
        ep = tw.begin_episode(columns=[force_matrix_column(COL, "row_diff_quantized", args.scale),
                                       scalar_ns_column(COL + "_ns")])
        for i, f in enumerate(src):
            ep.add_frame({COL: f, COL + "_ns": 10**9 + i}, hardware_ns=10**9 + i)
        ep.finish()
        episode = open_task(Path(tmp) / "bench_fm").episode(1)
        data = episode.files.data
        assert np.array_equal(episode.force_matrices(COL), want)
        size = data.stat().st_size / 1e6
        t_pq = best_of(lambda: pq.read_table(data, columns=[COL]), args.repeat)
        t_ep = best_of(lambda: episode.force_matrices(COL), args.repeat)
        print(f"through the reader (parquet {size:.1f} MB on disk, zstd):")
        print(f"  {'baseline pyarrow read_table(column)':<38} {t_pq * 1e3:8.1f} ms")
        print(f"  {'Episode.force_matrices(column)':<38} {t_ep * 1e3:8.1f} ms  {t_ep / t_pq:5.2f}x read_table")


if __name__ == "__main__":
    main()
