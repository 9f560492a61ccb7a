"""Real-time factor and peak memory of the recorder, full rig (issue 3: non-video path; issue 11: --video full).

Run from the repository root::

    python benchmarks/bench_recorder.py            # 60 s and 600 s episodes (several minutes)
    python benchmarks/bench_recorder.py --quick    # 10 s and 60 s episodes
    python benchmarks/bench_recorder.py --video full [--seconds 60]   # every stream at full resolution
    python benchmarks/bench_recorder.py --video full --depth-choice   # --depth-codec auto vs HEVC forced

``--video full``: the Appendix B rig with every stream at its declared resolution (two 1280×800
stereo, 12-bit depth 1280×800, two 1280×960 gripper cameras, 400 Hz IMU, four force matrices
per row), sources replaying pre-rendered frames (they cost what a camera costs: a hand-over).
Runs, each in a fresh subprocess: real time for ``--seconds`` (skipped ticks, kept fraction),
and on the virtual clock (as fast as the recorder goes; real-time factor = recorded s / wall s)
with the streams encoded on their own threads and, as the baseline, on the write thread; then
the CPU cost of each x264 preset. CPU seconds are counted per thread from
``/proc/self/task/*/stat`` and grouped by thread name (``enc-<slot>``, ``egopool-write``,
``egopool-tick``, ``egopool-sim``; encoder worker pools inherit their stream's name): they do
not depend on what else the machine runs, unlike wall-clock figures.

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
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from egopool import open_task  # noqa: E402
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


def _run(mode: str, seconds: float, *extra: str) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="bench_rec_"))
    try:
        out = subprocess.run([sys.executable, __file__, "--child", mode, str(seconds), str(root), *extra],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- --video full -----------------------------------------------------------------------------------------------
class _ThreadCpu:
    """Samples CPU seconds of every thread of this process (``/proc/self/task``) every 0.2 s; the last
    value seen per thread counts (threads that end keep what they had at the last sample)."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK")
        self._t = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    raw = f.read()
            except OSError:
                continue
            comm = raw[raw.index("(") + 1:raw.rindex(")")]
            fields = raw[raw.rindex(")") + 2:].split()
            self.seen[int(tid)] = (comm, (int(fields[11]) + int(fields[12])) / self._tick)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self.sample()

    def start(self) -> None:
        self._t.start()

    def stop(self) -> dict[str, float]:
        self.sample()
        self._stop.set()
        self._t.join()
        stages: dict[str, float] = {}
        for comm, cpu in self.seen.values():
            name = "sampler+main" if comm.startswith("python") else comm
            stages[name] = stages.get(name, 0.0) + cpu
        return stages


class _Presets:
    """The rig with every stream's x264/x265 preset set (what the presets sweep measures)."""

    def __init__(self, rig: Any, rgb: str | None, depth: str | None) -> None:
        self._rig, self.rgb, self.depth = rig, rgb, depth

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rig, name)

    def episode_kwargs(self, fps: float) -> dict[str, Any]:
        import dataclasses

        kw = self._rig.episode_kwargs(fps)
        streams = [dataclasses.replace(s, codec="ffv1", preset=None) if s.kind == "depth" and self.depth == "ffv1"
                   else dataclasses.replace(s, preset=(self.rgb if s.kind == "rgb" else self.depth))
                   for s in kw["streams"]]
        return dict(kw, streams=streams)


def _presets_used(root: Path, index: int) -> dict[str, Any]:
    vc = open_task(root / "bench").episode(index).meta["video_codec"]
    vc = json.loads(vc) if isinstance(vc, str) else vc
    return {k: {kk: v.get(kk) for kk in ("encoder", "preset", "crf", "qp")} for k, v in vc.items()}


def _child_video(mode: str, seconds: float, root: Path, rgb: str, depth: str) -> dict[str, Any]:
    threads = mode != "fast_write_thread"
    load0 = os.getloadavg()
    writer = TaskWriter(root, "bench")
    writer.encoder_threads = threads  # type: ignore[attr-defined]
    if depth == "auto":  # what `egopool record` / `simulate --realtime` do by default (issue 20)
        rig = build_rig("full", scale=1, depth_codec="auto")
        rec = Recorder(writer, rig)
    else:
        rig = build_rig("full", scale=1)
        rec = Recorder(writer, _Presets(rig, rgb or None, depth or None))  # type: ignore[arg-type]
    sim = SimulatedRig(rig, seed=1)
    capacity = None
    if mode == "realtime":  # measured before the first tick, outside the episode's figures
        c0, t0 = time.process_time(), time.perf_counter()
        report = rec.check_capacity()
        capacity = dict(report.to_dict(), probe_cpu_s=time.process_time() - c0, probe_wall_s=time.perf_counter() - t0)
    cpu = _ThreadCpu()
    cpu.start()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter()
    done = sim.record(rec, seconds, realtime=mode == "realtime")
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    stages = cpu.stop()
    total = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    recorded = done.result.length / rec.fps
    sizes = {p.parent.name if "videos" in str(p) else p.parent.parent.name: p.stat().st_size for p in done.result.paths}
    return {"mode": mode, "seconds": seconds, "rows": done.result.length, "ticks": done.ticks,
            "ticks_skipped": int(done.drop_stats.get("ticks_skipped", 0)), "wall_s": wall,
            "rtf": recorded / wall, "cpu_s": total, "cores_needed": total / recorded, "stages": stages,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "mb_per_s": {k: v / 1e6 / recorded for k, v in sizes.items()}, "drop_stats": done.drop_stats,
            "video_codec": _presets_used(root, done.index), "capacity": capacity,
            "load": [load0[0], os.getloadavg()[0]]}


def _print_video(r: dict[str, Any], label: str) -> None:
    realtime = r["mode"] == "realtime"
    per = r["wall_s"] if realtime else r["rows"] / 30.0  # real time: cores used; virtual: cores per recorded s
    unit = "cores used" if realtime else "cores per recorded second"
    print(f"\n{label}: {r['rows']} rows of {r['ticks']} ticks ({r['ticks_skipped']} skipped), wall {r['wall_s']:.1f} s, "
          f"real-time factor {r['rtf']:.2f}, CPU {r['cpu_s']:.1f} s = {r['cpu_s'] / per:.2f} {unit}, "
          f"peak RSS {r['peak_rss_mb']:.0f} MB"
          + (f"; {r['cores_needed']:.2f} CPU s per recorded second" if realtime else ""))
    total = sum(r["stages"].values())
    for name, cpu in sorted(r["stages"].items(), key=lambda kv: -kv[1]):
        if cpu >= 0.005 * total:
            print(f"    {name:<18} {cpu:8.1f} s  {100 * cpu / total:5.1f} %  {cpu / per:5.2f} {unit.split(' ')[0]}")


def main_video(seconds: float, presets: bool) -> None:
    load0 = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} at start")
    fast = _run("fast", min(seconds, 10.0), "", "")
    _print_video(fast, "virtual clock, streams on their own threads (default presets)")
    base = _run("fast_write_thread", min(seconds, 10.0), "", "")
    _print_video(base, "virtual clock, baseline: every stream encoded on the write thread")
    print(f"real-time factor threads / write thread: {fast['rtf'] / base['rtf']:.2f}x; "
          f"CPU per recorded s: {fast['cores_needed']:.2f} vs {base['cores_needed']:.2f} cores")
    if presets:
        for rgb in ("veryfast", "ultrafast"):
            for depth in ("veryfast", "superfast", "ultrafast", "ffv1"):
                r = _run("fast", 5.0, rgb, depth)
                enc = {k: v for k, v in r["stages"].items() if k.startswith("enc-")}
                rgb_cpu = sum(v for k, v in enc.items() if "dep" not in k) / (r["rows"] / 30.0)
                dep_cpu = sum(v for k, v in enc.items() if "dep" in k) / (r["rows"] / 30.0)
                size = sum(v for k, v in r["mb_per_s"].items() if k not in ("data", "episodes"))
                print(f"presets rgb={rgb:<9} depth={depth:<9}: {r['cores_needed']:.2f} cores in all, RGB encoders "
                      f"{rgb_cpu:.2f}, depth {dep_cpu:.2f}; video {size:.2f} MB/s")
    rt = _run("realtime", seconds, "", "")
    _print_video(rt, f"real time, {seconds:.0f} s")
    load1 = os.getloadavg()
    print(f"load average {load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f} at the end")


def main_depth_choice(seconds: float) -> None:
    """Issue 20: real time with ``--depth-codec auto`` vs 12-bit HEVC forced, and the same work on the
    virtual clock (CPU seconds per recorded second, which do not depend on the load)."""
    load0 = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} at start")
    runs = {}
    for label, depth in (("FFV1 depth", "ffv1"), ("12-bit HEVC depth (superfast)", "superfast")):
        r = runs[depth] = _run("fast", 10.0, "ultrafast", depth)
        _print_video(r, f"virtual clock, real-time presets (x264 ultrafast), {label}")
    for label, depth in (("--depth-codec auto", "auto"), ("12-bit HEVC forced", "")):
        r = _run("realtime", seconds, "", depth)
        cap = r["capacity"]
        print(f"\n{cap['summary']}")
        print(f"    measured in {cap['probe_wall_s']:.1f} s wall, {cap['probe_cpu_s']:.1f} CPU s, before the first "
              f"tick; predicted {cap['needed_cores']:.2f} cores per recorded second")
        codec = {k: v.get("encoder") for k, v in r["video_codec"].items()}
        _print_video(r, f"real time, {seconds:.0f} s, {label} (depth: {codec.get('stereo_depth')}; load average "
                        f"{r['load'][0]:.2f} at start, {r['load'][1]:.2f} at the end)")
    load1 = os.getloadavg()
    print(f"\nload average {load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f} at the end")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 s and 60 s episodes instead of 60 s and 600 s")
    ap.add_argument("--video", choices=["full"], help="every stream at full resolution (issue 11)")
    ap.add_argument("--seconds", type=float, default=60.0, help="--video: length of the real-time run")
    ap.add_argument("--presets", action="store_true", help="--video: also sweep the x264/x265 presets (5 s runs)")
    ap.add_argument("--depth-choice", action="store_true", help="--video: real time with --depth-codec auto vs "
                    "12-bit HEVC forced, and their virtual-clock CPU per recorded second (issue 20)")
    ap.add_argument("--child", nargs="+", metavar="ARG", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, seconds, root = args.child[:3]
        if mode in ("realtime", "fast", "fast_write_thread"):
            rgb, depth = (args.child[3:5] + ["", ""])[:2]
            print(json.dumps(_child_video(mode, float(seconds), Path(root), rgb, depth)))
        else:
            print(json.dumps(_child(mode, float(seconds), Path(root))))
        return
    if args.video and args.depth_choice:
        main_depth_choice(args.seconds)
        return
    if args.video:
        main_video(args.seconds, args.presets)
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
