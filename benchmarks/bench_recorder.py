"""Real-time factor and peak memory of the recorder's non-video path, full rig (issue 3).

Run from the repository root::

    python benchmarks/bench_recorder.py            # 60 s and 600 s episodes (several minutes)
    python benchmarks/bench_recorder.py --quick    # 10 s and 60 s episodes

The ``--rig full`` combination of multi_device_storage.md Appendix B (ego S80C + 2 UMI
grippers + 2 USB gloves) with every parquet column: 400 Hz IMU, three SLAM
trajectories, four 250×250×3 force matrices per row (``row_diff_quantized``, int16),
forces, states, glove pressure / IMU quaternions / hand poses, status strings. No
video streams (this measures the parquet path; video encoding is the codecs' job).

* **recorder** = :class:`egopool.recorder.Recorder` on a virtual clock (as fast as the
  write thread allows): simulated sources -> tick -> bounded queue -> write thread ->
  ``EpisodeWriter.add_frame`` -> finish (sparsity pass, atomic publish, meta merge).
* **baseline** = the very same rows (same sources, same tick, same queue and thread),
  handed to a plain ``pyarrow.parquet.ParquetWriter`` (zstd, 256-row batches built from
  offsets + flat values, force matrices encoded with the same codec) instead of
  ``EpisodeWriter``; **baseline_nodict** = the same with ``use_dictionary=False`` (the
  setting egopool uses for force matrices), to separate tuning from overhead.

Real-time factor = recorded seconds per wall second (> 1: faster than real time).
Peak RSS (``ru_maxrss``) is measured in a fresh subprocess per run, so the 60 s and
600 s figures are comparable: the recorder streams, so RSS must not grow with length.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from egopool.devices import SimulatedRig, build_rig  # noqa: E402
from egopool.recorder import Recorder  # noqa: E402
from egopool.write.task_writer import EpisodeResult, TaskWriter  # noqa: E402


class _NoVideo:
    """The full rig without its video streams (the non-video path only)."""

    def __init__(self, rig: Any) -> None:
        self._rig = rig

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rig, name)

    def episode_kwargs(self, fps: float) -> dict[str, Any]:
        # no streams, and no raw_hw_ns: without frames it would stay empty and be dropped
        kw = self._rig.episode_kwargs(fps)
        return dict(kw, streams=[], columns=[c for c in kw["columns"] if c.name != "raw_hw_ns"])

    @property
    def primary_slot(self) -> None:
        return None


class _PlainEpisode:
    """Writes the recorder's rows with nothing but pyarrow (the baseline)."""

    def __init__(self, path: Path, columns: list[Any], use_dictionary: bool) -> None:
        self.path = path
        self.cols = [("episode_index", pa.int64()), ("frame_index", pa.int64()), ("timestamp", pa.float32()),
                     ("task_index", pa.int64()), ("wall_time", pa.float64()), ("hardware_ns", pa.int64())]
        self.cols += [(c.name, c.arrow_type) for c in columns]
        self.encode = {c.name: c.encode for c in columns if c.encode is not None}
        self.zero = {c.name: c.empty_value() for c in columns}
        self.schema = pa.schema(self.cols)
        self.writer = pq.ParquetWriter(str(path), self.schema, compression="zstd", use_dictionary=use_dictionary)
        self.buf: dict[str, list[Any]] = {n: [] for n, _ in self.cols}
        self.rows = 0
        self.drop_stats: dict[str, Any] = {}
        self.broken = False  # the recorder's write thread asks (decisions.md #22)
        self.warn_changes = False
        self.length = 0

    def add_frame(self, values: dict[str, Any], *, timestamp: float, hardware_ns: int, images: Any,
                  reject_bad: bool = False) -> None:
        row = {"episode_index": 1, "frame_index": self.rows, "timestamp": timestamp, "task_index": 0,
               "wall_time": 1.79e9 + timestamp, "hardware_ns": hardware_ns}
        for name, _ in self.cols[6:]:
            v = values.get(name)
            if v is None:
                v = self.zero[name]
            elif name in self.encode:
                v = self.encode[name](v)[0]  # (stored value, cells saturated)
            row[name] = v
        for name, v in row.items():
            self.buf[name].append(v)
        self.rows += 1
        if len(self.buf["frame_index"]) >= 256:
            self._flush()

    def _array(self, typ: pa.DataType, vals: list[Any]) -> pa.Array:
        if not pa.types.is_list(typ):
            return pa.array(vals, type=typ)
        inner = typ.value_type
        if pa.types.is_list(inner):  # IMU: list<list<float32>> of 6
            flat = [np.asarray(v, np.float32).reshape(-1, 6) for v in vals]
            outer = np.concatenate([[0], np.cumsum([len(v) for v in flat])]).astype(np.int32)
            data = np.concatenate(flat).reshape(-1) if flat else np.zeros(0, np.float32)
            inner_arr = pa.ListArray.from_arrays(pa.array(np.arange(0, data.size + 1, 6, dtype=np.int32)),
                                                 pa.array(data, inner.value_type))
            return pa.ListArray.from_arrays(pa.array(outer), inner_arr)
        npt = inner.to_pandas_dtype()
        flat = [np.asarray(v, npt).reshape(-1) for v in vals]
        offs = np.concatenate([[0], np.cumsum([v.size for v in flat])]).astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(offs), pa.array(np.concatenate(flat), inner))

    def _flush(self) -> None:
        arrays = [self._array(typ, self.buf[name]) for name, typ in self.cols]
        self.writer.write_batch(pa.record_batch(arrays, schema=self.schema))
        self.buf = {n: [] for n, _ in self.cols}

    def finish(self) -> EpisodeResult:
        if self.buf["frame_index"]:
            self._flush()
        self.writer.close()
        return EpisodeResult(1, 0, 0, self.rows, (self.path,))

    def abort(self) -> None:
        self.writer.close()


class _PlainTask:
    fps = 30.0
    info: dict[str, Any] = {}

    def __init__(self, root: Path, use_dictionary: bool) -> None:
        self.root, self.use_dictionary = root, use_dictionary

    def begin_episode(self, columns: list[Any], streams: list[Any], **_: Any) -> _PlainEpisode:
        return _PlainEpisode(self.root / "plain.parquet", columns, self.use_dictionary)


def _child(mode: str, seconds: float, root: Path) -> dict[str, Any]:
    rig = _NoVideo(build_rig("full", scale=16))
    sim = SimulatedRig(rig._rig, seed=1)
    for src in sim.sources:  # sources keep their signals, frames are not produced
        src.rgb, src.depth = {}, {}
    writer = TaskWriter(root, "bench") if mode == "recorder" else _PlainTask(root, mode == "baseline")
    rec = Recorder(writer, rig)  # type: ignore[arg-type]
    t = time.perf_counter()
    done = sim.record(rec, seconds)
    wall = time.perf_counter() - t
    size = sum(p.stat().st_size for p in done.result.paths if p.suffix == ".parquet" and "data" in str(p)) \
        if mode == "recorder" else (root / "plain.parquet").stat().st_size
    return {"mode": mode, "seconds": seconds, "rows": done.result.length, "wall_s": wall,
            "rtf": seconds / wall, "file_mb": size / 1e6,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


def _run(mode: str, seconds: float) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="bench_rec_"))
    try:
        out = subprocess.run([sys.executable, __file__, "--child", mode, str(seconds), str(root)],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 s and 60 s episodes instead of 60 s and 600 s")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "SECONDS", "ROOT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, seconds, root = args.child
        print(json.dumps(_child(mode, float(seconds), Path(root))))
        return
    lengths = (10.0, 60.0) if args.quick else (60.0, 600.0)
    modes = ("recorder", "baseline", "baseline_nodict")
    results = {(m, s): _run(m, s) for s in lengths for m in modes}
    print(f"{'episode':>8} {'writer':>15} {'rows':>6} {'wall s':>8} {'RTF':>6} {'file MB':>8} {'peak RSS MB':>12}")
    for (m, s), r in results.items():
        print(f"{s:>7.0f}s {m:>15} {r['rows']:>6} {r['wall_s']:>8.1f} {r['rtf']:>6.2f} {r['file_mb']:>8.1f} "
              f"{r['peak_rss_mb']:>12.0f}")
    for s in lengths:
        for base in ("baseline", "baseline_nodict"):
            ratio = results[("recorder", s)]["rtf"] / results[(base, s)]["rtf"]
            print(f"{s:.0f} s: recorder real-time factor = {ratio:.2f} x {base}'s")
    short, long_ = lengths
    for m in modes:
        growth = results[(m, long_)]["peak_rss_mb"] / results[(m, short)]["peak_rss_mb"]
        print(f"{m}: peak RSS {long_:.0f} s / {short:.0f} s = {growth:.2f}")


if __name__ == "__main__":
    main()
