"""Can this machine hold the rig in real time? Measured before the first tick (issue 20, docs/decisions.md R23).

Before a real-time episode the recorder encodes a short burst of real frames per stream
(:mod:`egopool.sample_frames`: the bundled hand video, the bundled TUM depth frame) at the
stream's real size, codec and preset, and writes a few rows of the rig's columns (force
matrices with a real contact patch) through a real :class:`~egopool.write.episode_writer.EpisodeWriter`
into a temporary task. It counts the CPU seconds each burst costs (the process's CPU minus what
its other threads spent meanwhile, so a camera already capturing is not charged to an encoder)
and compares the sum per recorded second with the cores this process may run on::

    report = assess(streams, columns, fps=30.0)          # measured with MeasuredProbe
    report.holds, report.needed_cores, report.budget_cores, report.advice

``--depth-codec auto`` (:func:`assess` with ``auto``) is decided here: 12-bit log HEVC when the rig
holds with it, else lossless FFV1 for the whole task (file_format.md §3, §8: ``video_extensions`` is
task-level), to be brought to HEVC afterwards by ``egopool compress TASK``.

A probe is anything with ``stream_ms(spec, fps)`` and ``write_ms(columns, fps)`` (CPU ms per frame /
per row); tests inject fixed numbers instead of the clock.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ._threads import name_thread
from .codecs.depth import hevc12_available
from .codecs.video import RgbEncoder
from .sample_frames import POOL_FRAMES, depth_pool, force_matrix_pool, video_pool
from .schema import ColumnSpec
from .write.episode_writer import StreamSpec

__all__ = ["HEADROOM", "OTHER_CORES", "CapacityReport", "CostProbe", "MeasuredProbe", "StreamCost", "assess",
           "cores_available"]

#: Fraction of the cores a recording may plan to use: the rest is for the operating system, camera
#: drivers and bursts (docs/decisions.md R23).
HEADROOM = 0.85
#: Tick thread + sources, cores per recorded second, not measured (benchmarks/README.md: 0.11-0.15 on
#: the full rig with frames handed over; a camera decoding MJPEG costs more, see ``others``).
OTHER_CORES = 0.15
_PROBE_THREAD = "egopool-cap"

_F = TypeVar("_F", contravariant=True)


class _Encoder(Protocol[_F]):
    """An encoder taking frames of type ``_F`` (:class:`RgbEncoder`: RGB arrays or YUV frames;
    :class:`~egopool.codecs.depth.DepthEncoder`: uint16 mm arrays)."""

    def encode(self, frame: _F) -> None: ...


class CostProbe(Protocol):
    """What :func:`assess` asks: CPU milliseconds per frame of a stream and per row of the columns."""

    def stream_ms(self, spec: StreamSpec, fps: float) -> float:
        """CPU ms one frame of ``spec`` costs to encode (all the encoder's threads)."""

    def write_ms(self, columns: Sequence[ColumnSpec], fps: float) -> float:
        """CPU ms one data row of ``columns`` costs the write thread (checks, codecs, parquet)."""


@dataclass(frozen=True)
class StreamCost:
    """Measured cost of one stream at one setting.

    Attributes
    ----------
    image_key, kind:
        The stream (``rgb`` / ``depth``).
    codec, preset:
        ``h264`` / ``hevc`` / ``hevc12`` / ``ffv1`` and the x264/x265 preset (None: the encoder's default).
    width, height:
        Frame size, pixels.
    ms_per_frame:
        CPU milliseconds per frame, every thread of the encoder counted.
    cores:
        CPU seconds per recorded second at the task fps (``ms_per_frame × fps / 1000``).
    """

    image_key: str
    kind: str
    codec: str
    preset: str | None
    width: int
    height: int
    ms_per_frame: float
    cores: float

    def label(self) -> str:
        """``"stereo_depth hevc12 superfast"``."""
        return f"{self.image_key} {self.codec}" + (f" {self.preset}" if self.preset else "")


@dataclass(frozen=True)
class CapacityReport:
    """Whether the rig can be held in real time on this machine, and what would hold it.

    Attributes
    ----------
    fps:
        Rows (ticks) per second.
    cores:
        CPUs this process may run on (:func:`cores_available`).
    headroom:
        Fraction of ``cores`` a recording may plan to use (:data:`HEADROOM`).
    streams:
        Each stream at the settings the episodes will use.
    write_ms_per_row:
        CPU ms the write thread spends per row (one thread: must fit in a tick).
    other_cores:
        Tick thread and sources (:data:`OTHER_CORES`, an estimate).
    alternatives:
        Cheaper settings that were measured (FFV1 for an HEVC depth stream, x264 ``ultrafast``).
    depth_codec:
        What ``--depth-codec auto`` chose for this task's depth streams (``hevc12`` / ``ffv1``), None
        when no depth stream is automatic.
    depth_reason:
        Why: ``"measured"``, ``"task"`` (the task already stores its depth so: kept for all episodes,
        file_format.md §8) or ``"no-gray12"`` (this libx265 cannot encode 12-bit gray).
    hevc_needed_cores:
        The total with HEVC depth, when FFV1 was chosen over it (for the message), else None.
    load_average:
        1/5/15-minute load average when measured (other programs share the cores).
    measured_at:
        ``time.monotonic()`` when the report was made (orders it against skipped ticks).
    """

    fps: float
    cores: int
    headroom: float
    streams: tuple[StreamCost, ...]
    write_ms_per_row: float
    other_cores: float = OTHER_CORES
    alternatives: tuple[StreamCost, ...] = ()
    depth_codec: str | None = None
    depth_reason: str | None = None
    hevc_needed_cores: float | None = None
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)
    measured_at: float = field(default_factory=time.monotonic)

    @property
    def write_cores(self) -> float:
        """Write thread, CPU seconds per recorded second."""
        return self.write_ms_per_row * self.fps / 1000.0

    @property
    def needed_cores(self) -> float:
        """Everything, CPU seconds per recorded second."""
        return sum(s.cores for s in self.streams) + self.write_cores + self.other_cores

    @property
    def budget_cores(self) -> float:
        """``cores × headroom``."""
        return self.cores * self.headroom

    @property
    def tick_ms(self) -> float:
        """The time one tick allows, ms (``1000 / fps``)."""
        return 1000.0 / self.fps

    @property
    def holds(self) -> bool:
        """True when the work fits the budget and the write thread fits a tick (with headroom)."""
        return self.needed_cores <= self.budget_cores and self.write_ms_per_row <= self.tick_ms * self.headroom

    @property
    def max_fps(self) -> float:
        """The highest rate this rig holds at (the cost scales with fps), rounded down to 0.1."""
        per_fps = (self.needed_cores - self.other_cores) / self.fps
        by_cores = (self.budget_cores - self.other_cores) / per_fps if per_fps > 0 else math.inf
        by_write = self.headroom * 1000.0 / self.write_ms_per_row if self.write_ms_per_row > 0 else math.inf
        return max(0.0, math.floor(min(by_cores, by_write, self.fps) * 10) / 10)

    @property
    def advice(self) -> tuple[str, ...]:
        """What would hold the rig (empty when it holds)."""
        if self.holds:
            return ()
        out: list[str] = []
        used = {s.image_key: s for s in self.streams}
        rest = self.needed_cores
        for alt in self.alternatives:
            cur = used.get(alt.image_key)
            if cur is None or alt.cores >= cur.cores or (alt.codec, alt.preset) == (cur.codec, cur.preset):
                continue
            rest -= cur.cores - alt.cores
            how = "--depth-codec ffv1, then `egopool compress TASK`" if alt.codec == "ffv1" else \
                f"preset {alt.preset}"
            out.append(f"{alt.label()} instead of {cur.codec}{' ' + cur.preset if cur.preset else ''} "
                       f"({how}): {alt.cores:.2f} instead of {cur.cores:.2f} cores")
        if out:
            verdict = "holds" if rest <= self.budget_cores else "still too much"
            out.append(f"with all of the above: {rest:.2f} cores ({verdict})")
        fps = self.max_fps
        if fps >= 1:
            out.append(f"a lower rate: --fps {fps:g} holds at these settings")
        big = max(self.streams, key=lambda s: s.cores, default=None)
        if big is not None:
            out.append(f"smaller frames: {big.image_key} ({big.width}x{big.height}) costs {big.cores:.2f} cores; "
                       "half the width and height cost about a quarter")
        if self.write_ms_per_row > self.tick_ms * self.headroom:
            out.append(f"the write thread needs {self.write_ms_per_row:.1f} ms of the {self.tick_ms:.1f} ms a tick "
                       "allows: fewer force-matrix columns or a lower --fps")
        return tuple(out)

    def summary(self) -> str:
        """One line for a status display."""
        verdict = "holds" if self.holds else "CANNOT be held: ticks will be skipped"
        line = (f"capacity: the rig needs {self.needed_cores:.2f} cores per recorded second of {self.cores} "
                f"(budget {self.budget_cores:.2f}, load average {self.load_average[0]:.1f}): {verdict}")
        if self.depth_codec == "ffv1" and self.depth_reason == "measured":
            line += (f"; depth is recorded losslessly in FFV1 for the whole task (12-bit HEVC would need "
                     f"{self.hevc_needed_cores or 0:.2f} cores): run `egopool compress TASK` afterwards")
        return line

    def lines(self) -> list[str]:
        """The summary, then one line per stream, the write thread, and the advice."""
        out = [self.summary()]
        for s in self.streams:
            out.append(f"  {s.label():<32} {s.width}x{s.height}  {s.ms_per_frame:7.1f} ms/frame  {s.cores:5.2f} cores")
        out.append(f"  {'write thread (rows, parquet)':<32} {'':9}  {self.write_ms_per_row:7.1f} ms/row    "
                   f"{self.write_cores:5.2f} cores (a tick allows {self.tick_ms:.1f} ms)")
        out.append(f"  {'tick + sources (estimate)':<32} {'':9}  {'':7}             {self.other_cores:5.2f} cores")
        out += [f"  would hold it: {a}" for a in self.advice]
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``--json``)."""
        return {"holds": self.holds, "needed_cores": round(self.needed_cores, 3), "cores": self.cores,
                "budget_cores": round(self.budget_cores, 3), "headroom": self.headroom, "fps": self.fps,
                "streams": [_cost_dict(s) for s in self.streams],
                "write_ms_per_row": round(self.write_ms_per_row, 3), "write_cores": round(self.write_cores, 3),
                "tick_ms": round(self.tick_ms, 3), "other_cores": self.other_cores,
                "alternatives": [_cost_dict(s) for s in self.alternatives], "depth_codec": self.depth_codec,
                "depth_reason": self.depth_reason,
                "hevc_needed_cores": None if self.hevc_needed_cores is None else round(self.hevc_needed_cores, 3),
                "max_fps": self.max_fps, "advice": list(self.advice), "load_average": list(self.load_average),
                "summary": self.summary()}


def _cost_dict(s: StreamCost) -> dict[str, Any]:
    d = dataclasses.asdict(s)
    d["ms_per_frame"], d["cores"] = round(s.ms_per_frame, 3), round(s.cores, 3)
    return d


def cores_available() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# -- measuring ------------------------------------------------------------------------------------------------
def _thread_cpu_ns() -> dict[int, tuple[str, int]]:
    """tid -> (name, CPU ns) of every thread of this process (Linux ``/proc/self/task``); {} elsewhere."""
    out: dict[int, tuple[str, int]] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        out[int(tid)] = (name, ns)
    return out


def _burst_cpu_s(work: Any) -> float:
    """CPU seconds ``work()`` costs, counted on a thread named ``egopool-cap`` (the encoder's worker
    threads it starts inherit the name): the process's CPU time minus what its other threads spent
    meanwhile (a thread that ended meanwhile is charged to the burst: the figure errs high)."""
    box: dict[str, Any] = {}

    def run() -> None:
        name_thread(_PROBE_THREAD)
        try:
            before = _thread_cpu_ns()
            p0 = time.process_time()
            work()
            p1 = time.process_time()
            after = _thread_cpu_ns()
            others = sum(after[t][1] - ns for t, (name, ns) in before.items()
                         if t in after and name != _PROBE_THREAD and after[t][0] != _PROBE_THREAD)
            box["cpu"] = max(0.0, (p1 - p0) - others / 1e9)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=run, name=_PROBE_THREAD, daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return float(box["cpu"])


class MeasuredProbe:
    """Measure on this machine: encode ``frames`` real frames per stream, write ``rows`` rows.

    Parameters
    ----------
    frames:
        Frames per stream burst (the bundled pools cycled); the first is a key frame, so a short
        burst errs high, never low.
    rows:
        Rows of the write-path burst (one row group, force matrices with a real contact patch; other
        columns hold their "no sample" value, which the 0.15-core estimate of the rest covers).
    """

    def __init__(self, frames: int = 24, rows: int = 24) -> None:
        self.frames, self.rows = max(2, int(frames)), max(2, int(rows))

    def stream_ms(self, spec: StreamSpec, fps: float) -> float:
        """CPU ms per frame of ``spec`` at its size, codec and preset (all encoder threads); 0 for a stream
        copied from a source video (nothing is encoded)."""
        if spec.source is not None:
            return 0.0
        tmp = Path(tempfile.mkdtemp(prefix="egopool-capacity-"))
        try:
            _, ext = spec.codec_ext()
            path = tmp / f"probe.{ext}"
            enc = spec.encoder(path, fps)
            if isinstance(enc, RgbEncoder):
                import av

                rgb = [av.VideoFrame.from_numpy_buffer(a, format="yuv420p") if a.ndim == 2 else a
                       for a in video_pool(spec.width, spec.height)]
                encode = functools.partial(_encode_pool, enc, rgb)
            else:
                encode = functools.partial(_encode_pool, enc, list(depth_pool(spec.width, spec.height)))
            n = self.frames

            def work() -> None:
                try:
                    encode(n)
                    enc.close()
                except BaseException:
                    enc.abort()
                    raise

            return 1000.0 * _burst_cpu_s(work) / n
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def write_ms(self, columns: Sequence[ColumnSpec], fps: float) -> float:
        """CPU ms per row of ``columns`` through a real EpisodeWriter (checks, force-matrix codec,
        parquet with zstd), in a temporary task that is removed afterwards."""
        from .write.task_writer import TaskWriter

        tmp = Path(tempfile.mkdtemp(prefix="egopool-capacity-"))
        try:
            ep = TaskWriter(tmp, "probe", fps=fps, registry=False).begin_episode(columns=columns)
            mats, _ = force_matrix_pool(0)
            rows = [{c.name: mats[i % len(mats)] for c in columns if c.kind == "force_matrix"}
                    for i in range(self.rows)]

            def work() -> None:
                for i, values in enumerate(rows):
                    ep.add_frame(values, timestamp=i / fps)
                ep.flush()

            try:
                return 1000.0 * _burst_cpu_s(work) / self.rows
            finally:
                ep.abort()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _encode_pool(enc: _Encoder[_F], pool: Sequence[_F], n: int) -> None:
    """Encode ``n`` frames cycling through ``pool`` (:data:`POOL_FRAMES` frames) with ``enc``."""
    for k in range(n):
        enc.encode(pool[k % POOL_FRAMES])


def _cost(probe: CostProbe, spec: StreamSpec, fps: float) -> StreamCost:
    rate = spec.fps or fps
    ms = float(probe.stream_ms(spec, rate))
    codec = spec.codec_ext()[0]
    preset = None if codec == "ffv1" else spec.preset  # FFV1 has no speed preset (the recorder's is ignored)
    return StreamCost(spec.image_key, spec.kind, codec, preset, spec.width, spec.height, ms, ms * rate / 1000.0)


def assess(streams: Sequence[StreamSpec], columns: Sequence[ColumnSpec], fps: float, *,
           probe: CostProbe | None = None, auto: Collection[str] = (), task_codecs: Mapping[str, str] | None = None,
           cores: int | None = None, headroom: float = HEADROOM,
           cheaper_rgb_preset: str = "ultrafast") -> CapacityReport:
    """Measure the rig's streams and write path and decide ``--depth-codec auto`` (issue 20, R23, R24).

    Parameters
    ----------
    streams:
        The episode's streams with the presets real-time episodes use; a depth stream listed in
        ``auto`` is measured as ``hevc12`` first.
    columns:
        The episode's data columns.
    fps:
        Task rows per second.
    probe:
        Where costs come from (default :class:`MeasuredProbe`: this machine, now).
    auto:
        image_keys of depth streams whose codec the measurement decides: ``hevc12`` when the rig holds
        with it, else ``ffv1`` (lossless; ``egopool compress TASK`` brings the task to HEVC afterwards).
    task_codecs:
        Depth codec the task already stores (image_key -> ``hevc12`` / ``ffv1``, from
        ``video_extensions``): an automatic stream keeps it, for all episodes of the task (file_format.md §8).
    cores:
        CPUs to plan with (default :func:`cores_available`).
    headroom:
        Fraction of ``cores`` the recording may use.
    cheaper_rgb_preset:
        x264 preset measured as the alternative for RGB streams using a slower one.

    Returns
    -------
    CapacityReport
        The chosen settings' costs, whether they hold, the alternatives measured.

    Raises
    ------
    CodecError, StorageError
        An encoder could not be opened (the same settings would fail the episode too).
    """
    probe = probe or MeasuredProbe()
    task_codecs = dict(task_codecs or {})
    auto = set(auto)
    kept = {k: task_codecs[k] for k in auto if k in task_codecs}
    if auto - set(kept) and task_codecs:  # a new depth slot of a task follows the task's other depth slots
        first = next(iter(task_codecs.values()))
        kept.update({k: first for k in auto - set(kept)})
    reason: str | None = None
    choice: str | None = None
    if auto:
        if kept:
            reason, choice = "task", next(iter(kept.values()))
        elif not hevc12_available():
            reason, choice = "no-gray12", "ffv1"
        else:
            reason, choice = "measured", "hevc12"
    resolved = [dataclasses.replace(s, codec=kept.get(s.image_key, choice)) if s.image_key in auto else s
                for s in streams]
    write_ms = float(probe.write_ms(columns, fps))
    costs = {s.image_key: _cost(probe, s, fps) for s in resolved}
    alts: list[StreamCost] = []
    for s in resolved:
        c = costs[s.image_key]
        if s.kind == "depth" and c.codec == "hevc12" and s.image_key not in kept:  # the task fixes a kept one
            alts.append(_cost(probe, dataclasses.replace(s, codec="ffv1", preset=None), fps))
        elif s.kind == "rgb" and s.source is None and s.preset != cheaper_rgb_preset:
            alts.append(_cost(probe, dataclasses.replace(s, preset=cheaper_rgb_preset), fps))
    report = CapacityReport(float(fps), int(cores or cores_available()), float(headroom), tuple(costs.values()),
                            write_ms, OTHER_CORES, tuple(alts), choice, reason, None, _load())
    if reason == "measured" and not report.holds:  # FFV1 for every automatic stream, the whole task
        alt = {a.image_key: a for a in alts if a.codec == "ffv1"}
        chosen = tuple(alt.get(s.image_key, s) if s.image_key in auto else s for s in report.streams)
        report = dataclasses.replace(report, streams=chosen, depth_codec="ffv1", hevc_needed_cores=report.needed_cores,
                                     alternatives=tuple(a for a in alts if a.codec != "ffv1")
                                     + tuple(s for s in report.streams if s.image_key in auto))
    return report


def _load() -> tuple[float, float, float]:
    try:
        a, b, c = os.getloadavg()
        return (round(a, 2), round(b, 2), round(c, 2))
    except (AttributeError, OSError):
        return (0.0, 0.0, 0.0)
