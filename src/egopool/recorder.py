"""The frame-row recorder: one data row per tick at the task fps (multi_device_storage.md §5.3, §5.5).

Sources push into bounded buffers from their own threads; a tick builds one row and
hands it to a dedicated write thread through a bounded queue::

    rec = Recorder(TaskWriter(root, "pick_cup"), rig)
    rec.start_episode()
    ...  # sources call rec.push_frame / push_sample / push_points / set_status
    done = rec.stop_episode()        # -> RecordedEpisode (N, rows, drop_stats)

What a tick takes (§5.3):

* every video slot: the **oldest** queued frame; a slot with nothing new repeats its
  last frame (the writer counts ``<slot>_repeated_count``), so every stream has exactly
  one frame per row; depth slots follow their master the same way;
* every sensor / force / state column: the **latest** sample since the previous tick,
  with its ``*_ns``; nothing new -> the column's zero value and ``_ns = 0`` (§5.5);
* every trajectory (and the IMU): **all** points that arrived in the row window,
  ``[]`` when none, ``_ns`` in lockstep (0 = no stamp; no ``_ns`` column when the whole
  episode had no stamp, §8.1.3);
* ``hardware_ns`` / ``raw_hw_ns`` from the frame of the rig's primary slot, and the
  D435 forensic columns (§4.3) from the first D435's chain.

The episode starts at the first tick where every video slot has a frame (each slot's
queue is trimmed to its newest frame then); ``timestamp`` = tick number / fps and
``wall_time = created_at + timestamp`` (file_format.md §7.3). Ticks the write thread
could not keep up with are not built: they count as ``ticks_skipped`` in ``drop_stats``
(a frame-drop key), their frames stay queued, their trajectory points go to the next row.

One bad sample never costs the recording (docs/decisions.md #22): a value the format
cannot hold (NaN/Infinity in a stats column, wrong length, type or range) is stored as
"no sample" (§5.5) and a bad frame as the slot's previous frame, each counted as
``<signal>_rejected_count``; a row the writer refuses as a whole is left out
(``rows_rejected``). Only a failure that leaves the files inconsistent (the data
parquet cannot be written) stops the episode; its rows so far are then set aside under
``.egopool_backup/`` (:meth:`~egopool.writer.EpisodeWriter.set_aside`). An episode
never runs past the rows float32 ``timestamp`` can tell apart
(:func:`~egopool.write.checks.max_episode_rows`).

A tick thread that wakes up late (scheduler stall, up to fps/4 ticks) builds the ticks it
slept through from the frames still queued (docs/decisions.md R13).

Before the first real-time tick, :meth:`Recorder.check_capacity` measures whether this machine
holds the rig (:mod:`egopool.capacity`, R23) and decides ``auto`` depth streams for the whole
task (R24); :meth:`Recorder.live_stats` shows the verdict and the ticks skipped so far with the
last one's time (R26).
"""

from __future__ import annotations

import collections
import dataclasses
import queue
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

import av
import numpy as np

from ._threads import name_thread
from .capacity import CapacityReport, CostProbe, assess
from .errors import CodecError, EgopoolError, MetaUpdateError, SchemaError, ValueChangedWarning
from .meta.drop_stats import disconnected_key, rejected_key
from .write.checks import check_episode_seconds, max_episode_rows
from .write.task_writer import EpisodeResult, EpisodeWriter, TaskWriter

if TYPE_CHECKING:
    from .devices.rig import Rig

__all__ = ["REALTIME_PRESETS", "CapacityReport", "Frame", "RecordedEpisode", "Recorder"]

_STOP = object()

#: Presets of real-time episodes, measured on the Appendix B rig at full resolution
#: (benchmarks/README.md, docs/decisions.md R12): x264 ``ultrafast`` costs 0.13 instead of 0.30
#: cores per 1280×800 stream; x265 12-bit depth ``superfast`` 1.15 instead of 1.69 cores, +4 % size,
#: non-edge p99 error 1.48 % instead of 1.21 % on the real 7-Scenes frames.
REALTIME_PRESETS: dict[str, str] = {"rgb": "ultrafast", "depth": "superfast"}


@dataclass(frozen=True)
class Frame:
    """One captured video frame.

    Attributes
    ----------
    image:
        RGB uint8 ``(H, W, 3)`` (or a decoded :class:`av.VideoFrame` of the slot's size, handed to
        the encoder without a copy) or depth uint16 mm ``(H, W)``.
    hardware_ns:
        Capture stamp, ns (device clock normalised to ``anchor + seq × T`` on the D435
        chain; host monotonic on host-clock chains). 0 = unknown.
    raw_hw_ns:
        Stamp before normalisation, ns (0 = none); on host-clock chains equal to
        ``hardware_ns`` (file_format.md §7.1).
    counter:
        Device frame counter (D435 chain; feeds ``*_dup`` / ``*_gap``), None elsewhere.
    ts_src:
        D435 timestamp source: 0 none, 1 per-frame metadata, 2 frameset device clock,
        3 frameset host clock.
    host_ns:
        Host monotonic ns, kept only when ``ts_src == 3``.
    """

    image: np.ndarray | av.VideoFrame
    hardware_ns: int = 0
    raw_hw_ns: int = 0
    counter: int | None = None
    ts_src: int = 0
    host_ns: int = 0


@dataclass(frozen=True)
class RecordedEpisode:
    """One finished recording.

    Attributes
    ----------
    result:
        What the writer published (N, rows, paths).
    drop_stats:
        The episode row's ``drop_stats``.
    ticks:
        Ticks elapsed from the first row to the last (rows + ``ticks_skipped``).
    notes:
        One line per kind of value stored otherwise than given, and why recording stopped
        early (the float32 timestamp limit); each was also warned (ValueChangedWarning).
    unfinished:
        The episode is saved, but ``info.json`` / ``stats.json`` (and maybe the registry) were not
        updated: the one line saying what is still to do (a :class:`~egopool.errors.MetaUpdateError`,
        also warned as a RuntimeWarning), else None.
    """

    result: EpisodeResult
    drop_stats: dict[str, int | float]
    ticks: int
    notes: tuple[str, ...] = ()
    unfinished: str | None = None

    @property
    def index(self) -> int:
        """Global N of the episode."""
        return self.result.index


@dataclass
class _Row:
    tick: int
    values: dict[str, Any]
    images: dict[str, np.ndarray | av.VideoFrame]
    hardware_ns: int
    due: float  # monotonic s the tick was due


@dataclass
class _Chain:
    """Last frames seen by the tick (repeats and the D435 forensic chain)."""

    last: dict[str, Frame] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)


class Recorder:
    """Record episodes of a :class:`~egopool.devices.rig.Rig` into a task, one row per tick.

    Parameters
    ----------
    writer:
        The task to record into; rows per second = ``writer.fps``.
    rig:
        The devices (slots, columns, declarations).
    queue_seconds:
        Capacity of each video slot queue, in seconds of frames; a full queue drops its
        oldest frame (``<slot>_dropped`` in ``drop_stats``).
    write_queue_rows:
        Rows the write thread may lag behind before ticks are skipped (default: fps / 2).
    point_capacity:
        Items a trajectory / IMU buffer holds between two ticks; overflow drops the oldest
        (``imu_overflow`` / ``<signal>_overflow_count``).
    prime_timeout:
        Seconds to wait for every video slot's first frame before failing.
    realtime_presets:
        x264 / x265 preset per stream kind (``rgb``, ``depth``) for real-time episodes
        (:meth:`start_episode`), where a stream without its own preset gets this one; recorded
        in ``video_codec``. Default :data:`REALTIME_PRESETS` (docs/decisions.md R12); ``{}``
        keeps the encoders' defaults. Virtual-clock episodes always keep the defaults.
    capacity_probe:
        Where :meth:`check_capacity` takes its costs from (default: measured on this machine,
        :class:`~egopool.capacity.MeasuredProbe`); tests inject fixed numbers.
    cores:
        CPUs to plan with (default: those this process may run on).

    Depth streams of the rig without a codec (``Rig(depth_codec="auto")``, docs/decisions.md R24)
    get one per task: the codec the task already stores, else for real-time episodes what
    :meth:`check_capacity` decided (12-bit HEVC when the rig holds with it, else lossless FFV1), and
    12-bit HEVC on the virtual clock.
    """

    def __init__(self, writer: TaskWriter, rig: Rig, *, queue_seconds: float = 2.0,
                 write_queue_rows: int | None = None, point_capacity: int = 20000, prime_timeout: float = 5.0,
                 realtime_presets: Mapping[str, str] | None = None, capacity_probe: CostProbe | None = None,
                 cores: int | None = None) -> None:
        self.writer, self.rig = writer, rig
        self._probe, self._cores = capacity_probe, cores
        #: The last :meth:`check_capacity` report (None before the first real-time episode).
        self.capacity: CapacityReport | None = None
        self._capacity_key: Any = None
        self.realtime_presets = dict(REALTIME_PRESETS if realtime_presets is None else realtime_presets)
        self.fps = writer.fps
        self.period = 1.0 / self.fps
        # ticks a late wake-up of the tick thread still builds (a scheduler stall up to 1/4 s)
        self._catch_up = max(1, int(self.fps // 4))
        self._video_cap = max(2, int(round(queue_seconds * self.fps)))
        self._wq_rows = write_queue_rows or max(2, int(self.fps // 2))
        self._point_cap = int(point_capacity)
        self._prime_timeout = float(prime_timeout)
        #: Rows an episode may hold before float32 ``timestamp`` repeats (write.checks.max_episode_rows).
        self.max_rows = max_episode_rows(self.fps)
        self._lock = threading.Lock()
        self._configure()
        self._active = False
        # per-episode state, reset by _begin()
        self._error: BaseException | None = None
        self._unprimed: CodecError | None = None
        #: Why the last episode was discarded without rows (a stream silent past ``prime_timeout``), or None.
        self.discard_reason: str | None = None
        self._result: EpisodeResult | None = None
        self._unfinished: str | None = None  # saved, but info/stats/registry still to do (MetaUpdateError)
        self._final_stats: dict[str, int | float] = {}
        self._notes: list[str] = []
        self._aborting = self._realtime = False
        self._skipped = self._ticks = self._rows_written = 0
        self._skip_first: tuple[int, float] | None = None  # (tick, monotonic s) of the first / last skip
        self._skip_last: tuple[int, float] | None = None
        self._max_ticks: int | None = None
        self._ticks_done = threading.Event()
        self._episode: EpisodeWriter | None = None
        self._late_max = 0.0
        self._created_at = 0.0
        self._chain = _Chain()
        self._wq: queue.Queue[Any] = queue.Queue(maxsize=self._wq_rows)
        self._stop = threading.Event()
        self._tick_thread: threading.Thread | None = None
        self._writer_thread: threading.Thread | None = None
        self._reset_buffers()

    def _configure(self) -> None:
        """Take the rig's current devices (a device opened between episodes joins the next one)."""
        rig = self.rig
        self._kwargs = rig.episode_kwargs(self.fps)
        self._columns = {c.name: c for c in self._kwargs["columns"]}
        self._streams = [s.image_key for s in self._kwargs["streams"]]
        self._shapes = {s.image_key: ((s.height, s.width), np.uint8 if s.kind == "rgb" else np.uint16)
                        for s in self._kwargs["streams"]}
        self._lockstep = {c.lockstep[0]: n for n, c in self._columns.items() if c.lockstep}
        # Latest-wins (§5.3): observation vectors/matrices. Not the accumulating columns and their
        # lockstep partners, not a sample's own ``_ns`` (push_sample(ns=...) fills it), not key or
        # status columns (the tick and set_status() own them).
        companions = {n + "_ns" for n in self._columns}
        self._latest_wins = {n for n, c in self._columns.items()
                             if n.startswith("observation.") and c.storage == "list" and c.length is not None
                             and n not in self._lockstep and not c.lockstep and n not in companions}
        self._primary = rig.primary_slot
        self._forensic = rig.forensic_slots
        self._status_ids = [n.split(".", 1)[1] for n in self._columns if n.startswith("status.")]

    # -- source side (any thread) ------------------------------------------------------------------
    def _reset_buffers(self) -> None:
        with self._lock:
            self._video: dict[str, collections.deque[Frame]] = {s: collections.deque() for s in self._streams}
            self._latest: dict[str, tuple[Any, int]] = {}
            self._points: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
            self._npoints: dict[str, int] = {}
            self._status = {sid: "connected" for sid in self._status_ids}
            self._status_reason: dict[str, str] = {}  # status id -> why it went disconnected
            self._counts: dict[str, int] = {}
            self._reasons: dict[str, str] = {}  # count key -> first reason (for the episode's notes)
            self._taken: dict[str, int] = {s: 0 for s in self._streams}
            self._repeats: dict[str, int] = {s: 0 for s in self._streams}

    def _count(self, key: str, n: int = 1) -> None:
        self._counts[key] = self._counts.get(key, 0) + n

    def push_frame(self, slot: str, frame: Frame) -> None:
        """Queue a frame of ``slot`` (RGB or depth). A full queue drops its oldest frame.

        Never raises for what a source captured: a stamp that is not an int64 ns becomes 0
        (unknown, §7.1), a counter that is not an int None; something that is not a
        :class:`Frame`, or an image of the wrong size or dtype (RGB uint8 ``(H, W[, 3|1])``,
        depth uint16 ``(H, W)``), is left out, so the tick repeats the slot's previous frame
        and its stamps. Each counts as ``<slot>_rejected_count``.

        Raises
        ------
        SchemaError
            ``slot`` is not a recorded stream of the rig.
        """
        dq = self._video.get(slot)
        if dq is None:
            raise SchemaError(f"no recorded stream {slot!r} in this rig", hint=f"streams: {self._streams}")
        clean, bad = _clean_frame(frame)
        if clean is not None and not _fits(clean.image, self._shapes[slot]):
            clean = None  # left out here, so the tick repeats the previous frame with its stamps (R3)
        with self._lock:
            if bad or clean is None:
                self._count(rejected_key(slot))
                self._reasons.setdefault(rejected_key(slot), "not a Frame, or an image of the wrong size/dtype"
                                         if clean is None else "a stamp that is not int64 ns (stored as 0)")
                if clean is None:
                    return
            if len(dq) >= self._video_cap:
                dq.popleft()
                self._count(f"{slot}_dropped")
            dq.append(clean)

    def push_sample(self, column: str, value: Any, ns: int = 0) -> None:
        """Offer the latest sample of a latest-wins column (sensor, force, force matrix, state, hand pose).

        Parameters
        ----------
        column:
            ``observation.*`` column; its ``<column>_ns`` (when the rig has one) gets ``ns``.
        value:
            The element (e.g. ``(3,)`` float32 mN force, ``(250, 250, 3)`` mN force matrix,
            ``(16, 16)`` pressure).
        ns:
            Host monotonic ns of the sample.

        The value is checked by the write thread: one the column cannot hold is stored
        as "no sample" (§5.5) and counted (``<signal>_rejected_count``); a sample whose
        ``ns`` is not an int64 is left out and counted the same way.

        Raises
        ------
        SchemaError
            Not a latest-wins ``observation.*`` column of the rig (unknown, a trajectory /
            IMU, a ``*_ns`` column, a key or status column).
        """
        if column not in self._latest_wins:
            raise SchemaError("not a latest-wins column of this rig (trajectories and IMU go to push_points, "
                              "a sample's time to ns=, status to set_status)", column=column)
        stamp = _ns_or_none(ns)
        with self._lock:
            if stamp is None:  # a sample without a usable time cannot be paired: left out
                self._count(rejected_key(column))
                self._reasons.setdefault(rejected_key(column), f"ns={ns!r:.40} is not an int64 stamp")
                return
            self._latest[column] = (value, stamp)

    def push_points(self, column: str, points: np.ndarray, ns: np.ndarray | None = None) -> None:
        """Append items of an accumulating column: trajectory points ``(K, 8)`` float64 with host ns
        ``(K,)`` int64 (0 = no stamp), or IMU samples ``(K, 6)`` float32 to ``observation.imu`` with
        device ns ``imu_ts_ns``. A full buffer drops its oldest items.

        Never raises for what a source captured: points that do not form ``(K, width)``
        numbers or whose ``ns`` are not one int64 per item are left out and counted as
        ``<signal>_rejected_count`` (IMU samples holding NaN/Infinity are left out one by
        one by the writer, same key).

        Raises
        ------
        SchemaError
            Unknown column.
        """
        spec = self._columns.get(column)
        if spec is None or column not in self._lockstep:
            raise SchemaError("not an accumulating (trajectory / IMU) column of this rig", column=column)
        width = 8 if spec.storage == "list" else (spec.length or 1)
        try:
            pts = spec.normalise(points).reshape(-1, width)
            stamps = (np.zeros(len(pts), np.int64) if ns is None
                      else self._columns[self._lockstep[column]].normalise(ns).reshape(-1))
            if stamps.shape[0] != pts.shape[0]:
                raise SchemaError(f"{stamps.shape[0]} stamps for {pts.shape[0]} items", column=column)
        except Exception as exc:  # noqa: BLE001 - any value a source can push is counted, never raised
            with self._lock:
                self._count(rejected_key(column), max(1, int(np.size(points)) // width if _sized(points) else 1))
                self._reasons.setdefault(rejected_key(column), _reason(exc))
            return
        if not len(pts):
            return
        with self._lock:
            buf = self._points.setdefault(column, [])
            buf.append((pts, stamps))
            n = self._npoints.get(column, 0) + len(pts)
            while n > self._point_cap and buf:
                over = n - self._point_cap
                head_pts, head_ns = buf[0]
                if len(head_pts) <= over:
                    buf.pop(0)
                    dropped = len(head_pts)
                else:
                    buf[0] = (head_pts[over:], head_ns[over:])
                    dropped = over
                n -= dropped
                self._count("imu_overflow" if column == "observation.imu"
                            else f"{column.split('.', 1)[1]}_overflow_count", dropped)
            self._npoints[column] = n

    def count(self, key: str, n: int = 1, reason: str | None = None) -> None:
        """Add ``n`` to the running episode's ``drop_stats[key]`` (any thread): what a source lost or
        could not pair before pushing (e.g. a RealSense colour frame without its depth frame). The
        first ``reason`` of a key is kept for the episode's notes."""
        with self._lock:
            self._count(key, int(n))
            if reason:
                self._reasons.setdefault(key, reason)

    def set_status(self, sid: str, state: str, reason: str | None = None) -> None:
        """Set ``status.<sid>`` (``connected`` / ``disconnected``) from the next row on.

        Every row built while it reads ``disconnected`` is counted as ``<sid>_disconnected_count`` in
        ``drop_stats`` (those rows hold no sample of the device, multi_device_storage.md §5.5);
        ``reason`` (e.g. the error that stopped the device's source) goes into the episode's note.

        Raises
        ------
        SchemaError
            The rig has no ``status.<sid>`` column (only UVC slots, gloves and gripper
            non-video slots have one, §3).
        """
        if sid not in self._status:
            raise SchemaError(f"no status column for {sid!r}", hint=f"status ids: {self._status_ids}")
        with self._lock:
            self._status[sid] = str(state)
            if reason and state == "disconnected":
                self._status_reason.setdefault(sid, str(reason))

    def mark_disconnected(self, sids: Iterable[str], reason: str) -> None:
        """A device stopped (its source raised): each of its ``status.<sid>`` columns this rig records reads
        ``disconnected`` from the next row on, counted per row with ``reason`` (:meth:`set_status`).
        Ids the rig has no status column for are skipped. Never raises (any thread)."""
        for sid in sids:
            if sid in self._status:
                self.set_status(sid, "disconnected", reason=reason)

    def live_stats(self) -> dict[str, Any]:
        """Counters of the running episode for a status display (any thread).

        Returns
        -------
        dict
            ``index`` (N being recorded, None before its first row), ``rows`` written, ``ticks``,
            ``ticks_skipped``, ``write_queue`` (rows waiting for the write thread), ``bytes``
            written so far per stream (``streams``, image_key -> bytes) and ``data_bytes``, and
            per slot ``slots[slot] = {queued, taken, repeated, dropped}`` (frames). ``first_skip`` /
            ``last_skip``: ``{"tick", "seconds" (into the episode), "monotonic"}`` of the first / last
            skipped tick, None while none was. ``capacity``: :attr:`capacity` as a dict, or None.
        """
        with self._lock:
            slots = {s: {"queued": len(self._video[s]), "taken": self._taken.get(s, 0),
                         "repeated": self._repeats.get(s, 0), "dropped": self._counts.get(f"{s}_dropped", 0)}
                     for s in self._streams}
        ep = self._episode
        sizes = ep.bytes_written() if ep is not None else {}
        return {"index": ep.index if ep is not None else None, "rows": self._rows_written, "ticks": self._ticks,
                "ticks_skipped": self._skipped, "write_queue": self._wq.qsize(), "slots": slots,
                "streams": {k: v for k, v in sizes.items() if k != "data"}, "data_bytes": sizes.get("data", 0),
                "first_skip": self._skip_dict(self._skip_first), "last_skip": self._skip_dict(self._skip_last),
                "capacity": self.capacity.to_dict() if self.capacity is not None else None}

    def _skip_dict(self, skip: tuple[int, float] | None) -> dict[str, float] | None:
        if skip is None:
            return None
        return {"tick": skip[0], "seconds": round(skip[0] / self.fps, 3), "monotonic": skip[1]}

    # -- ticks -------------------------------------------------------------------------------------
    def _primed(self) -> bool:
        with self._lock:
            if all(self._video[s] for s in self._streams):
                for dq in self._video.values():
                    while len(dq) > 1:  # start aligned: each slot begins at its newest frame
                        dq.popleft()
                return True
        return False

    def _silent_streams(self) -> list[str]:
        with self._lock:
            return [s for s in self._streams if not self._video[s]]

    def _build_row(self, tick: int, due: float) -> _Row:
        with self._lock:
            frames = {s: (dq.popleft() if dq else None) for s, dq in self._video.items()}
            for s, fr in frames.items():
                if fr is None:
                    self._repeats[s] += 1
                else:
                    self._taken[s] += 1
            latest, self._latest = self._latest, {}
            points, self._points, self._npoints = self._points, {}, {}
            status = dict(self._status)
            for sid, st in status.items():  # rows without the device's samples (§5.5 "设备中途断连")
                if st == "disconnected":
                    key = disconnected_key(sid)
                    if key not in self._counts:
                        why = self._status_reason.get(sid)
                        self._reasons.setdefault(key, f"from tick {tick}" + (f": {why}" if why else ""))
                    self._count(key)
        chain = self._chain
        values: dict[str, Any] = {}
        images: dict[str, np.ndarray | av.VideoFrame] = {}
        for slot, fr in frames.items():
            if fr is not None:
                images[slot] = fr.image
        hw = 0
        if self._primary is not None:
            pf = frames.get(self._primary) or chain.last.get(self._primary)
            if pf is not None:
                hw = int(pf.hardware_ns)
                if pf.raw_hw_ns:
                    values["raw_hw_ns"] = int(pf.raw_hw_ns)
        if self._forensic is not None:
            self._forensic_values(frames, values)
        for slot, fr in frames.items():
            if fr is not None:
                chain.last[slot] = fr
        for col, (v, ns) in latest.items():
            values[col] = v
            if col + "_ns" in self._columns:
                values[col + "_ns"] = ns
        for col, chunks in points.items():
            pts = np.concatenate([c[0] for c in chunks])
            stamps = np.concatenate([c[1] for c in chunks])
            values[col] = pts
            values[self._lockstep[col]] = stamps  # 0 = no stamp; an all-zero _ns is dropped (§8.1.3)
        for sid, st in status.items():
            values[f"status.{sid}"] = st
        return _Row(tick, values, images, hw, due)

    def _safe_build_row(self, tick: int, due: float) -> _Row | None:
        """:meth:`_build_row`, or None (counted as ``rows_rejected``, reason noted) when it fails: a tick
        never stops the recording."""
        try:
            return self._build_row(tick, due)
        except Exception as exc:  # noqa: BLE001 - whatever a source left in the buffers
            with self._lock:
                self._count("rows_rejected")
                self._reasons.setdefault("rows_rejected", f"tick {tick}: {_reason(exc)}")
            return None

    def _forensic_values(self, frames: Mapping[str, Frame | None], values: dict[str, Any]) -> None:
        assert self._forensic is not None
        chain = self._chain
        rgb_slot, depth_slot = self._forensic
        f = frames.get(rgb_slot) or chain.last.get(rgb_slot)
        if f is None or f.counter is None:
            return  # the chain carries no extra: the columns are not written (§4.3)
        for name, slot in (("rgb", rgb_slot), ("depth", depth_slot)):
            fr = frames.get(slot)
            if fr is not None and fr.counter is not None:
                prev = chain.counters.get(slot)
                values[f"{name}_dup"] = 0
                values[f"{name}_gap"] = max(0, fr.counter - prev - 1) if prev is not None else 0
                chain.counters[slot] = fr.counter
            else:
                values[f"{name}_dup"], values[f"{name}_gap"] = 1, 0
        g = frames.get(depth_slot) or chain.last.get(depth_slot)
        values["depth_ns"] = int((g.raw_hw_ns or g.hardware_ns) if g is not None else 0)
        values["ts_src"] = int(f.ts_src)
        values["host_ns"] = int(f.host_ns) if f.ts_src == 3 else 0

    # -- write thread ------------------------------------------------------------------------------
    def _write_loop(self) -> None:
        name_thread("egopool-write")
        ep: EpisodeWriter | None = None
        lag_max = 0.0
        try:
            while True:
                row = self._wq.get()
                if row is _STOP:
                    break
                if self._error is not None:
                    continue  # drain so the tick never blocks on a dead writer
                try:
                    if ep is None:
                        ep = self.writer.begin_episode(**self._kwargs, created_at=self._created_at)
                        ep.warn_changes = False  # warned from the caller's thread (_end)
                        self._episode = ep
                    ep.add_frame(row.values, timestamp=row.tick * self.period, hardware_ns=row.hardware_ns,
                                 images=row.images, reject_bad=True)
                    self._rows_written += 1
                    lag_max = max(lag_max, time.monotonic() - row.due)
                except Exception as exc:
                    if ep is None or ep.broken:  # no episode, or its files are no longer consistent
                        self._error = exc
                    else:  # the writer refused this row as a whole and stored nothing of it
                        ep.count("rows_rejected", 1, f"tick {row.tick}: {_reason(exc)}")
                except BaseException as exc:  # KeyboardInterrupt and the like: stop, discard below
                    self._error = exc
            if ep is None:
                return
            if self._aborting:
                ep.abort()
                return
            if self._error is not None:
                self._set_aside(ep)
                return
            for key, n in self._drop_stats(lag_max).items():  # the writer may count the same key (rejects)
                if key.endswith(("_rejected_count", "_disconnected_count")) or key == "rows_rejected":
                    ep.count(key, int(n), self._reasons.get(key))
                else:
                    ep.drop_stats[key] = n
            try:
                self._result = ep.finish()
            except MetaUpdateError as exc:  # saved (committed): returned, with what is still to do
                self._result, self._unfinished = exc.result, exc.one_line()
                if self._result is None:
                    raise
            self._final_stats = dict(ep.drop_stats)
            self._notes[:0] = self._result.notes
        except BaseException as exc:
            self._error = self._error or exc
            if ep is not None:
                ep.abort()

    def _set_aside(self, ep: EpisodeWriter) -> None:
        """The episode cannot be published: keep its rows so far beside the task, log why (decisions.md #22)."""
        assert self._error is not None
        if not ep.length or not isinstance(self._error, Exception):
            ep.abort()
            return
        kept = ep.set_aside(_reason(self._error))
        if kept is not None:
            self._notes.append(f"episode {ep.index} stopped after {ep.length} rows ({_reason(self._error)}); "
                               f"its files so far are kept in {kept}")

    def _drop_stats(self, lag_max: float) -> dict[str, int | float]:
        with self._lock:
            counts = dict(self._counts)
        stats: dict[str, int | float] = {"ticks_skipped": int(self._skipped)}
        stats.update(counts)
        if self._realtime:  # durations mean nothing on a virtual clock
            stats["write_lag_max_ms"] = round(lag_max * 1000.0, 3)
            stats["tick_late_max_ms"] = round(self._late_max * 1000.0, 3)
        return stats

    # -- episode control ---------------------------------------------------------------------------
    def _begin(self, realtime: bool, disconnected: Mapping[str, str] | None = None) -> None:
        if self._active:
            raise EgopoolError("an episode is already being recorded", hint="call stop_episode() first")
        self.rig.check_task(self.writer.info)
        self._configure()
        if realtime:
            self._kwargs["streams"] = self._with_presets(self._kwargs["streams"])
        self._kwargs["streams"] = self._resolve_depth(self._kwargs["streams"], realtime)
        self._reset_buffers()
        for sid, reason in (disconnected or {}).items():  # a device already dead: disconnected from the first row
            if sid in self._status:
                self.set_status(sid, "disconnected", reason=reason)
        self._chain = _Chain()
        self._wq = queue.Queue(maxsize=self._wq_rows)
        self._error = None
        self._unprimed = None
        self.discard_reason = None
        self._result = None
        self._unfinished = None
        self._final_stats = {}
        self._notes = []
        self._aborting = False
        self._stop = threading.Event()
        self._tick_thread = None
        self._realtime = realtime
        self._skipped = 0
        self._skip_first = self._skip_last = None
        self._late_max = 0.0
        self._ticks = 0
        self._rows_written = 0
        self._episode = None
        self._created_at = time.time()
        self._active = True
        self._writer_thread = threading.Thread(target=self._write_loop, name="egopool-write", daemon=True)
        self._writer_thread.start()

    def _with_presets(self, streams: list[Any]) -> list[Any]:
        """Streams with the real-time presets (keeping up beats the last few % of size, decisions R12)."""
        if not self.realtime_presets:
            return list(streams)
        return [dataclasses.replace(st, preset=self.realtime_presets.get(st.kind)) if st.preset is None else st
                for st in streams]

    def _task_depth_codecs(self) -> dict[str, str]:
        """Depth codec the task already stores per depth slot (``video_extensions``: mkv = FFV1, mp4 =
        12-bit HEVC; file_format.md §8)."""
        info = self.writer.info
        exts, cams = info.get("video_extensions"), info.get("cameras")
        if not isinstance(exts, Mapping):
            return {}
        cams = cams if isinstance(cams, Mapping) else {}
        codec = {"mkv": "ffv1", "mp4": "hevc12"}
        return {k: codec[v] for k, v in exts.items() if k not in cams and v in codec}

    def _resolve_depth(self, streams: list[Any], realtime: bool) -> list[Any]:
        """Give automatic depth streams (codec None) their codec for the whole task (decisions R24)."""
        auto = [st.image_key for st in streams if st.kind == "depth" and st.codec is None]
        if not auto:
            return streams
        task = self._task_depth_codecs()
        choice = "hevc12"
        if task:  # a task that has episodes keeps its codec: all episodes or none (§3, §8)
            choice = next(iter(task.values()))
        elif realtime and self.capacity is not None and self.capacity.depth_codec:
            choice = self.capacity.depth_codec
        return [dataclasses.replace(st, codec=task.get(st.image_key, choice)) if st.image_key in auto else st
                for st in streams]

    def check_capacity(self, *, refresh: bool = False) -> CapacityReport:
        """Measure whether this machine holds the rig in real time at the real-time presets, before a tick.

        Encodes a short burst of real frames per stream and writes a few rows (:func:`egopool.capacity.assess`,
        a few CPU-seconds for the full rig); decides ``auto`` depth streams (12-bit HEVC when the rig holds
        with it, else FFV1 for the whole task, docs/decisions.md R24). :meth:`start_episode` calls it when
        the rig's streams changed since the last report; call it earlier (e.g. while devices warm up) to
        show the answer before the first episode.

        Returns
        -------
        CapacityReport
            Also kept as :attr:`capacity`.

        Raises
        ------
        EgopoolError
            An episode is being recorded (its work would distort the measurement).
        CodecError, StorageError
            An encoder could not be opened at these settings.
        """
        if self._active:
            raise EgopoolError("cannot measure capacity while an episode is being recorded",
                               hint="call check_capacity() between episodes")
        self._configure()
        streams = self._with_presets(self._kwargs["streams"])
        key = (self.fps, tuple((s.image_key, s.kind, s.width, s.height, s.fps, s.codec, s.preset, s.source is None)
                               for s in streams), tuple(c.name for c in self._kwargs["columns"]))
        if self.capacity is not None and key == self._capacity_key and not refresh:
            return self.capacity
        auto = {s.image_key for s in streams if s.kind == "depth" and s.codec is None}
        self.capacity = assess(streams, self._kwargs["columns"], self.fps, probe=self._probe, auto=auto,
                               task_codecs=self._task_depth_codecs(), cores=self._cores)
        self._capacity_key = key
        return self.capacity

    def _end(self, abort: bool, discard_empty: bool = False) -> RecordedEpisode | None:
        self._aborting = abort
        self._wq.put(_STOP)
        assert self._writer_thread is not None
        self._writer_thread.join()
        self._active = False
        for line in self._notes:  # from this (the caller's) thread, so callers can catch them
            warnings.warn(line, ValueChangedWarning, stacklevel=3)
        if self._unfinished is not None:  # the episode is safe; one line says what is still to do
            warnings.warn(self._unfinished, RuntimeWarning, stacklevel=3)
        if self._error is not None and self._error is self._unprimed and self._episode is None and \
                (abort or discard_empty):  # a stream never delivered: nothing was written, no N taken
            self.discard_reason = self._unprimed.one_line()
            return None
        if self._error is not None:
            err = self._error
            kept = [n for n in self._notes if "are kept in" in n]
            if isinstance(err, EgopoolError):
                if kept:  # say where the rows went, in the one line the CLI prints
                    err.hint = kept[0] + (f"; {err.hint}" if err.hint else "")
                    err.args = (err.one_line(),)
                raise err
            raise EgopoolError(f"recording failed: {type(err).__name__}: {err}",
                               hint=kept[0] if kept else None) from err
        if abort:
            return None
        if self._result is None and discard_empty and self._episode is None:
            return None  # no row reached the writer: no N was taken, nothing is on disk
        if self._result is None:
            raise CodecError("the episode has no rows: no tick had a frame of every stream "
                             f"(silent: {self._silent_streams()})")
        return RecordedEpisode(self._result, self._final_stats, self._ticks, tuple(self._notes), self._unfinished)

    def start_episode(self, max_ticks: int | None = None, *, disconnected: Mapping[str, str] | None = None) -> None:
        """Start recording in real time: a tick thread at the task fps and the write thread.

        Parameters
        ----------
        max_ticks:
            Stop ticking after this many ticks (an episode of ``max_ticks / fps`` seconds);
            :meth:`wait_ticks` returns once they are done. None = until :meth:`stop_episode`.
        disconnected:
            ``status`` id -> reason of devices that are already dead: ``disconnected`` from the first row.

        Raises
        ------
        SchemaError
            The rig would rename columns of this task (:meth:`Rig.check_task`), or ``max_ticks``
            rows are more than float32 ``timestamp`` can time at this fps
            (:func:`~egopool.write.checks.check_episode_seconds`); nothing is started.
        EgopoolError
            An episode is already running.
        """
        if max_ticks is not None:  # refused before recording, as record_virtual does (issue 12 A)
            check_episode_seconds(max_ticks / self.fps, self.fps, "max_ticks / fps")
        if not self._active:
            self.check_capacity()  # before the first tick: never learn too late (issue 20)
        self._begin(realtime=True, disconnected=disconnected)
        self._max_ticks = max_ticks
        self._ticks_done = threading.Event()
        self._tick_thread = threading.Thread(target=self._tick_loop, name="egopool-tick", daemon=True)
        self._tick_thread.start()

    def _tick_loop(self) -> None:
        name_thread("egopool-tick")
        start = time.monotonic()
        t0: float | None = None
        tick = 0
        next_due = start
        while not self._stop.is_set() and self._error is None:
            now = time.monotonic()
            if now < next_due:
                self._stop.wait(next_due - now)
                continue
            if t0 is None:
                if not self._primed():
                    if now - start > self._prime_timeout:
                        self._error = self._unprimed = CodecError(
                            f"no frame from {self._silent_streams()} within {self._prime_timeout} s; cannot start "
                            "the episode")
                        self._ticks_done.set()
                        return
                    next_due += self.period
                    continue
                t0 = next_due
                self._created_at = time.time() - (now - t0)
            due_tick = int((now - t0) / self.period)
            if self._max_ticks is not None:
                due_tick = min(due_tick, self._max_ticks - 1)
            if due_tick - tick > self._catch_up:  # slept through more ticks than can be caught up: not built
                self._note_skip(tick, due_tick - tick - self._catch_up)
                tick = due_tick - self._catch_up
            stop = False
            while tick <= due_tick:  # a late wake-up builds the ticks it slept through (their frames are queued)
                if tick >= self.max_rows:  # float32 timestamp would repeat (file_format.md §7.1)
                    self._notes.append(f"recording stopped at {self.max_rows / self.fps:.0f} s: float32 timestamps "
                                       f"cannot tell rows {1 / self.fps:.3g} s apart beyond that (file_format.md §7.1); "
                                       "start a new episode")
                    stop = True
                    break
                due = t0 + tick * self.period
                self._late_max = max(self._late_max, now - due)
                if self._wq.full():
                    self._note_skip(tick, 1)
                else:
                    row = self._safe_build_row(tick, due)
                    if row is not None:
                        self._wq.put_nowait(row)
                tick += 1
                self._ticks = tick
            if stop:
                break
            next_due = t0 + tick * self.period
            if self._max_ticks is not None and tick >= self._max_ticks:
                break
        self._ticks_done.set()

    def _note_skip(self, tick: int, n: int) -> None:
        now = time.monotonic()
        if self._skip_first is None:
            self._skip_first = (tick, now)
        self._skip_last = (tick + n - 1, now)
        self._skipped += n

    def wait_ticks(self, timeout: float | None = None) -> bool:
        """Wait until the tick thread of :meth:`start_episode` stopped (``max_ticks`` reached, or an
        error); True when it did within ``timeout`` seconds."""
        return self._ticks_done.wait(timeout)

    @overload
    def stop_episode(self, *, discard_empty: Literal[False] = False) -> RecordedEpisode: ...

    @overload
    def stop_episode(self, *, discard_empty: bool) -> RecordedEpisode | None: ...

    def stop_episode(self, *, discard_empty: bool = False) -> RecordedEpisode | None:
        """Stop ticking, let the write thread drain, publish the episode.

        Parameters
        ----------
        discard_empty:
            When no row was written yet (stopped before every stream delivered its first
            frame, or a stream delivered none within ``prime_timeout``), return None instead of
            raising: nothing was written and no N was taken; :attr:`discard_reason` then names
            the silent streams when the prime timeout ended the episode (else None).

        Raises
        ------
        CodecError
            No row was ever built (a stream never delivered a frame) and ``discard_empty`` is False.
        EgopoolError
            Writing failed (the episode was aborted and its N freed), or no episode is
            being recorded.
        """
        if not self._active:
            raise EgopoolError("no episode is being recorded", hint="call start_episode() first")
        self._stop.set()
        if self._tick_thread is not None:
            self._tick_thread.join()
        out = self._end(abort=False, discard_empty=discard_empty)
        assert out is not None or discard_empty
        return out

    def abort_episode(self) -> None:
        """Stop and discard the episode; its N is reused by the next recording (file_format.md §7.5)."""
        if not self._active:
            return
        self._stop.set()
        if self._tick_thread is not None:
            self._tick_thread.join()
        self._end(abort=True)

    def record_virtual(self, seconds: float, feed: Callable[[int, int, Recorder], None], *,
                       host0_ns: int | None = None, until: Callable[[], bool] | None = None,
                       disconnected: Mapping[str, str] | None = None) -> RecordedEpisode:
        """Record ``seconds`` of rows on a virtual clock, as fast as the write thread allows.

        Before each tick, ``feed(t0_ns, t1_ns, recorder)`` pushes what the sources captured in
        the host-monotonic window ``(t0_ns, t1_ns]``. Rows are handed to the write thread
        through the same bounded queue as in real time; a full queue blocks instead of
        skipping, so no tick is skipped.

        Parameters
        ----------
        seconds:
            Episode length; rows = ``round(seconds * fps)`` (at least 1).
        feed:
            Source callback, see above.
        host0_ns:
            Virtual host-monotonic ns of the first tick (default: now).
        until:
            Ends the episode early, before a tick, once it returns True and every frame pushed
            so far has been taken by a row (e.g. a recording played to its end).
        disconnected:
            As :meth:`start_episode`.

        Raises
        ------
        SchemaError
            ``seconds`` is not a finite number > 0, or longer than float32 ``timestamp``
            can time at this fps (:func:`~egopool.write.checks.check_episode_seconds`);
            nothing is started.
        CodecError
            A stream delivered no frame within ``prime_timeout`` virtual seconds.
        EgopoolError
            Writing failed (the episode was aborted).
        """
        rows = check_episode_seconds(seconds, self.fps)
        self._begin(realtime=False, disconnected=disconnected)
        period_ns = int(round(1e9 / self.fps))
        t = int(time.monotonic_ns() if host0_ns is None else host0_ns)
        try:
            waited = 0
            while True:
                feed(t - period_ns, t, self)
                if self._primed():
                    break
                waited += 1
                if waited * self.period > self._prime_timeout:
                    raise CodecError(f"no frame from {self._silent_streams()} within {self._prime_timeout} s "
                                     "(virtual); cannot start the episode")
                t += period_ns
            for tick in range(rows):
                if tick:
                    if until is not None and until() and not any(self._video.values()):
                        break
                    feed(t + (tick - 1) * period_ns, t + tick * period_ns, self)
                if self._error is not None:
                    break
                row = self._safe_build_row(tick, time.monotonic())
                if row is not None:
                    self._wq.put(row)
                self._ticks = tick + 1
        except BaseException:
            self._end(abort=True)
            raise
        out = self._end(abort=False)
        assert out is not None
        return out


def _reason(exc: BaseException) -> str:
    return exc.one_line() if isinstance(exc, EgopoolError) else f"{type(exc).__name__}: {exc}"


def _ns_or_none(value: Any) -> int | None:
    """An int64 ns stamp as int, or None when the value is not one (never raises)."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        v = int(value)
    elif isinstance(value, (float, np.floating)) and np.isfinite(value) and float(value).is_integer():
        v = int(value)
    else:
        return None
    return v if -(2 ** 63) <= v < 2 ** 63 else None


def _sized(value: Any) -> bool:
    try:
        np.size(value)
    except Exception:  # noqa: BLE001
        return False
    return True


def _clean_frame(frame: Any) -> tuple[Frame | None, bool]:
    """``(frame with usable stamps, whether anything was replaced)``; None when it is not a Frame at all."""
    if not isinstance(frame, Frame) or frame.image is None:
        return None, True
    fixes: dict[str, Any] = {}
    for name in ("hardware_ns", "raw_hw_ns", "host_ns"):
        if _ns_or_none(getattr(frame, name)) is None:
            fixes[name] = 0  # 0 = unknown (§7.1)
    ts_src = _ns_or_none(frame.ts_src)
    if ts_src is None or not 0 <= ts_src <= 3:
        fixes["ts_src"] = 0
    if frame.counter is not None and _ns_or_none(frame.counter) is None:
        fixes["counter"] = None
    if not fixes:
        return frame, False
    return dataclasses.replace(frame, **fixes), True


def _fits(image: Any, shape: tuple[tuple[int, int], type]) -> bool:
    """Whether ``image`` is a frame the slot's encoder takes (checked without copying it): an array,
    or for an RGB slot a decoded :class:`av.VideoFrame` of the slot's size in any pixel format."""
    (h, w), dtype = shape
    if isinstance(image, av.VideoFrame):
        return dtype is np.uint8 and (image.height, image.width) == (h, w)
    try:
        img = np.asarray(image)
    except Exception:  # noqa: BLE001 - whatever a source passed
        return False
    if img.dtype != dtype or img.shape[:2] != (h, w):
        return False
    if dtype is np.uint16:
        return img.ndim == 2
    return img.ndim == 2 or (img.ndim == 3 and img.shape[2] in (1, 3))
