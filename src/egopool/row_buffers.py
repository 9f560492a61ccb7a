"""What the sources pushed since the last tick, and the row a tick builds from it (multi_device_storage.md
§5.3, §5.5).

:class:`RowBuffers` is the source side of :class:`~egopool.recorder.Recorder`: sources push
frames, latest-wins samples and accumulating points into bounded buffers from their own threads
(any thread, under one lock); a tick takes one row out (:meth:`RowBuffers.build_row`). What a tick
takes per kind of column is described in :mod:`egopool.recorder`. Values a source pushes are
never raised about: what the format cannot hold is counted (``<signal>_rejected_count``) and
left out or stored as "no sample" (docs/decisions.md #22).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import av
import numpy as np

from .errors import EgopoolError, SchemaError
from .meta.drop_stats import disconnected_key, rejected_key
from .schema import ColumnSpec

__all__ = ["Frame", "Row", "RowBuffers", "RowLayout", "exception_line"]


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


@dataclass
class Row:
    """One tick's row for the write thread."""


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


@dataclass(frozen=True)
class RowLayout:
    """What a rig's rows hold, from :meth:`~egopool.devices.rig.Rig.episode_kwargs`.

    Attributes
    ----------
    columns:
        Column name -> spec of every declared column.
    streams:
        Video slots (image_keys), in the rig's order.
    shapes:
        Slot -> ``((height, width), numpy dtype)`` of its frames (uint8 RGB, uint16 mm depth).
    lockstep:
        Accumulating column (trajectory / IMU) -> its ``_ns`` partner.
    latest_wins:
        The ``observation.*`` vectors/matrices a tick takes the latest sample of (§5.3): not the
        accumulating columns and their partners, not a sample's own ``_ns`` (``push_sample(ns=...)``
        fills it), not key or status columns (the tick and ``set_status`` own them).
    primary:
        The RGB slot whose frame stamps ``hardware_ns`` (None without RGB).
    forensic:
        ``(rgb, depth)`` slots of the D435 chain filling the §4.3 forensic columns, or None.
    status_ids:
        The ids of the rig's ``status.<id>`` columns.
    """

    columns: dict[str, ColumnSpec]
    streams: list[str]
    shapes: dict[str, tuple[tuple[int, int], type]]
    lockstep: dict[str, str]
    latest_wins: set[str]
    primary: str | None
    forensic: tuple[str, str] | None
    status_ids: list[str]

    @classmethod
    def of(cls, kwargs: Mapping[str, Any], primary: str | None, forensic: tuple[str, str] | None) -> RowLayout:
        """From the ``columns`` and ``streams`` of ``Rig.episode_kwargs`` and the rig's primary / forensic slots."""
        columns = {c.name: c for c in kwargs["columns"]}
        streams = [s.image_key for s in kwargs["streams"]]
        shapes: dict[str, tuple[tuple[int, int], type]] = {
            s.image_key: ((s.height, s.width), np.uint8 if s.kind == "rgb" else np.uint16) for s in kwargs["streams"]}
        lockstep = {c.lockstep[0]: n for n, c in columns.items() if c.lockstep}
        companions = {n + "_ns" for n in columns}
        latest_wins = {n for n, c in columns.items()
                       if n.startswith("observation.") and c.storage == "list" and c.length is not None
                       and n not in lockstep and not c.lockstep and n not in companions}
        status_ids = [n.split(".", 1)[1] for n in columns if n.startswith("status.")]
        return cls(columns, streams, shapes, lockstep, latest_wins, primary, forensic, status_ids)


class RowBuffers:
    """The buffers of one episode between the sources and the ticks (any thread).

    Parameters
    ----------
    layout:
        What the rows hold.
    video_cap:
        Frames each slot queue holds; a full queue drops its oldest frame (``<slot>_dropped``).
    point_cap:
        Items a trajectory / IMU buffer holds between two ticks; overflow drops the oldest
        (``imu_overflow`` / ``<signal>_overflow_count``).
    """

    def __init__(self, layout: RowLayout, video_cap: int, point_cap: int) -> None:
        self.layout = layout
        self._video_cap, self._point_cap = video_cap, point_cap
        self._lock = threading.Lock()
        self._video: dict[str, collections.deque[Frame]] = {s: collections.deque() for s in layout.streams}
        self._latest: dict[str, tuple[Any, int]] = {}
        self._points: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._npoints: dict[str, int] = {}
        self._status = {sid: "connected" for sid in layout.status_ids}
        self._status_reason: dict[str, str] = {}  # status id -> why it went disconnected
        self._counts: dict[str, int] = {}
        self._reasons: dict[str, str] = {}  # count key -> first reason (for the episode's notes)
        self._taken: dict[str, int] = {s: 0 for s in layout.streams}
        self._repeats: dict[str, int] = {s: 0 for s in layout.streams}
        self._chain = _Chain()

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
            raise SchemaError(f"no recorded stream {slot!r} in this rig", hint=f"streams: {self.layout.streams}")
        clean, bad = _clean_frame(frame)
        if clean is not None and not _fits(clean.image, self.layout.shapes[slot]):
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
        if column not in self.layout.latest_wins:
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
        spec = self.layout.columns.get(column)
        if spec is None or column not in self.layout.lockstep:
            raise SchemaError("not an accumulating (trajectory / IMU) column of this rig", column=column)
        width = 8 if spec.storage == "list" else (spec.length or 1)
        try:
            pts = spec.normalise(points).reshape(-1, width)
            stamps = (np.zeros(len(pts), np.int64) if ns is None
                      else self.layout.columns[self.layout.lockstep[column]].normalise(ns).reshape(-1))
            if stamps.shape[0] != pts.shape[0]:
                raise SchemaError(f"{stamps.shape[0]} stamps for {pts.shape[0]} items", column=column)
        except Exception as exc:  # noqa: BLE001 - any value a source can push is counted, never raised
            with self._lock:
                self._count(rejected_key(column), max(1, int(np.size(points)) // width if _sized(points) else 1))
                self._reasons.setdefault(rejected_key(column), exception_line(exc))
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
            raise SchemaError(f"no status column for {sid!r}", hint=f"status ids: {self.layout.status_ids}")
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

    def counts(self) -> dict[str, int]:
        """The ``drop_stats`` counted so far (a copy)."""
        with self._lock:
            return dict(self._counts)

    def reason(self, key: str) -> str | None:
        """The first reason noted for count ``key``, or None."""
        return self._reasons.get(key)

    def slot_stats(self) -> dict[str, dict[str, int]]:
        """Per slot: frames ``queued``, ``taken`` by ticks, ticks that ``repeated`` the last one, ``dropped``."""
        with self._lock:
            return {s: {"queued": len(self._video[s]), "taken": self._taken.get(s, 0),
                        "repeated": self._repeats.get(s, 0), "dropped": self._counts.get(f"{s}_dropped", 0)}
                    for s in self.layout.streams}

    def frames_queued(self) -> bool:
        """Whether any slot still holds a frame no tick took."""
        return any(self._video.values())

    # -- ticks -------------------------------------------------------------------------------------
    def primed(self) -> bool:
        """Whether every slot has a frame (each slot's queue is then trimmed to its newest frame)."""
        with self._lock:
            if all(self._video[s] for s in self.layout.streams):
                for dq in self._video.values():
                    while len(dq) > 1:  # start aligned: each slot begins at its newest frame
                        dq.popleft()
                return True
        return False

    def silent_streams(self) -> list[str]:
        """The slots without a queued frame."""
        with self._lock:
            return [s for s in self.layout.streams if not self._video[s]]

    def build_row(self, tick: int, due: float) -> Row:
        """Take tick ``tick``'s row (``due``: monotonic s it was due) out of the buffers (§5.3)."""
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
        if self.layout.primary is not None:
            pf = frames.get(self.layout.primary) or chain.last.get(self.layout.primary)
            if pf is not None:
                hw = int(pf.hardware_ns)
                if pf.raw_hw_ns:
                    values["raw_hw_ns"] = int(pf.raw_hw_ns)
        if self.layout.forensic is not None:
            self._forensic_values(frames, values)
        for slot, fr in frames.items():
            if fr is not None:
                chain.last[slot] = fr
        for col, (v, ns) in latest.items():
            values[col] = v
            if col + "_ns" in self.layout.columns:
                values[col + "_ns"] = ns
        for col, chunks in points.items():
            pts = np.concatenate([c[0] for c in chunks])
            stamps = np.concatenate([c[1] for c in chunks])
            values[col] = pts
            values[self.layout.lockstep[col]] = stamps  # 0 = no stamp; an all-zero _ns is dropped (§8.1.3)
        for sid, st in status.items():
            values[f"status.{sid}"] = st
        return Row(tick, values, images, hw, due)

    def safe_build_row(self, tick: int, due: float) -> Row | None:
        """:meth:`build_row`, or None (counted as ``rows_rejected``, reason noted) when it fails: a tick
        never stops the recording."""
        try:
            return self.build_row(tick, due)
        except Exception as exc:  # noqa: BLE001 - whatever a source left in the buffers
            with self._lock:
                self._count("rows_rejected")
                self._reasons.setdefault("rows_rejected", f"tick {tick}: {exception_line(exc)}")
            return None

    def _forensic_values(self, frames: Mapping[str, Frame | None], values: dict[str, Any]) -> None:
        assert self.layout.forensic is not None
        chain = self._chain
        rgb_slot, depth_slot = self.layout.forensic
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


def exception_line(exc: BaseException) -> str:
    """``exc`` in one line: an egopool error as the CLI prints it, any other as ``Type: message``."""
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
