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
``.egopool_backup/`` (:meth:`~egopool.write.episode_writer.EpisodeWriter.set_aside`). An episode
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

import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from ._threads import name_thread
from .capacity import CapacityReport, CostProbe, assess
from .episode_streams import REALTIME_PRESETS, resolve_depth, task_depth_codecs, with_presets
from .episode_run import EpisodeRun
from .errors import CodecError, EgopoolError, ValueChangedWarning
from .row_buffers import Frame, RowBuffers, RowLayout
from .write.checks import check_episode_seconds, max_episode_rows
from .write.task_writer import EpisodeResult, TaskWriter

if TYPE_CHECKING:
    from .devices.rig import Rig

__all__ = ["REALTIME_PRESETS", "CapacityReport", "Frame", "RecordedEpisode", "Recorder"]


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
        self._configure()
        self._active = False
        #: Why the last episode was discarded without rows (a stream silent past ``prime_timeout``), or None.
        self.discard_reason: str | None = None
        self._max_ticks: int | None = None
        self._ticks_done = threading.Event()
        self._stop = threading.Event()
        self._tick_thread: threading.Thread | None = None
        self._buf = RowBuffers(self._layout, self._video_cap, self._point_cap)
        self._run = self._new_run(realtime=False)  # idle until the first episode: live_stats reads zeros

    def _configure(self) -> None:
        """Take the rig's current devices (a device opened between episodes joins the next one)."""
        self._kwargs = self.rig.episode_kwargs(self.fps)
        self._layout = RowLayout.of(self._kwargs, self.rig.primary_slot, self.rig.forensic_slots)

    def _new_run(self, realtime: bool) -> EpisodeRun:
        return EpisodeRun(self.writer, self._kwargs, self._buf, period=self.period, queue_rows=self._wq_rows,
                          realtime=realtime)

    # -- source side (any thread; :class:`~egopool.row_buffers.RowBuffers`) -------------------------------
    def push_frame(self, slot: str, frame: Frame) -> None:
        """Queue a frame of ``slot`` (RGB or depth); a full queue drops its oldest frame.

        Never raises for what a source captured (:meth:`RowBuffers.push_frame
        <egopool.row_buffers.RowBuffers.push_frame>`: a bad frame is counted as
        ``<slot>_rejected_count`` and the tick repeats the slot's previous one).

        Raises
        ------
        SchemaError
            ``slot`` is not a recorded stream of the rig.
        """
        self._buf.push_frame(slot, frame)

    def push_sample(self, column: str, value: Any, ns: int = 0) -> None:
        """Offer the latest sample of a latest-wins column (sensor, force, force matrix, state, hand pose)
        at host monotonic ``ns`` (:meth:`RowBuffers.push_sample <egopool.row_buffers.RowBuffers.push_sample>`).

        Raises
        ------
        SchemaError
            Not a latest-wins ``observation.*`` column of the rig.
        """
        self._buf.push_sample(column, value, ns)

    def push_points(self, column: str, points: np.ndarray, ns: np.ndarray | None = None) -> None:
        """Append trajectory points ``(K, 8)`` float64 with host ns ``(K,)`` int64, or IMU samples ``(K, 6)``
        float32 with device ns (:meth:`RowBuffers.push_points <egopool.row_buffers.RowBuffers.push_points>`).

        Raises
        ------
        SchemaError
            Unknown column.
        """
        self._buf.push_points(column, points, ns)

    def count(self, key: str, n: int = 1, reason: str | None = None) -> None:
        """Add ``n`` to the running episode's ``drop_stats[key]`` (any thread): what a source lost or
        could not pair before pushing (e.g. a RealSense colour frame without its depth frame). The
        first ``reason`` of a key is kept for the episode's notes."""
        self._buf.count(key, n, reason)

    def set_status(self, sid: str, state: str, reason: str | None = None) -> None:
        """Set ``status.<sid>`` (``connected`` / ``disconnected``) from the next row on; rows built while it
        reads ``disconnected`` are counted as ``<sid>_disconnected_count`` with ``reason``
        (:meth:`RowBuffers.set_status <egopool.row_buffers.RowBuffers.set_status>`).

        Raises
        ------
        SchemaError
            The rig has no ``status.<sid>`` column.
        """
        self._buf.set_status(sid, state, reason)

    def mark_disconnected(self, sids: Iterable[str], reason: str) -> None:
        """A device stopped (its source raised): each of its ``status.<sid>`` columns this rig records reads
        ``disconnected`` from the next row on, counted per row with ``reason`` (:meth:`set_status`).
        Ids the rig has no status column for are skipped. Never raises (any thread)."""
        self._buf.mark_disconnected(sids, reason)

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
        slots = self._buf.slot_stats()
        run = self._run
        ep = run.episode
        sizes = ep.bytes_written() if ep is not None else {}
        return {"index": ep.index if ep is not None else None, "rows": run.rows_written, "ticks": run.ticks,
                "ticks_skipped": run.skipped, "write_queue": run.queue.qsize(), "slots": slots,
                "streams": {k: v for k, v in sizes.items() if k != "data"}, "data_bytes": sizes.get("data", 0),
                "first_skip": self._skip_dict(run.skip_first), "last_skip": self._skip_dict(run.skip_last),
                "capacity": self.capacity.to_dict() if self.capacity is not None else None}

    def _skip_dict(self, skip: tuple[int, float] | None) -> dict[str, float] | None:
        if skip is None:
            return None
        return {"tick": skip[0], "seconds": round(skip[0] / self.fps, 3), "monotonic": skip[1]}

    # -- episode control ---------------------------------------------------------------------------
    def _begin(self, realtime: bool, disconnected: Mapping[str, str] | None = None) -> None:
        if self._active:
            raise EgopoolError("an episode is already being recorded", hint="call stop_episode() first")
        self.rig.check_task(self.writer.info)
        self._configure()
        if realtime:
            self._kwargs["streams"] = with_presets(self._kwargs["streams"], self.realtime_presets)
        self._kwargs["streams"] = resolve_depth(self._kwargs["streams"], task_depth_codecs(self.writer.info),
                                                self.capacity, realtime)
        self._buf = RowBuffers(self._layout, self._video_cap, self._point_cap)
        for sid, reason in (disconnected or {}).items():  # a device already dead: disconnected from the first row
            if sid in self._layout.status_ids:
                self.set_status(sid, "disconnected", reason=reason)
        self.discard_reason = None
        self._stop = threading.Event()
        self._tick_thread = None
        self._run = self._new_run(realtime)
        self._active = True
        self._run.start()

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
        streams = with_presets(self._kwargs["streams"], self.realtime_presets)
        key = (self.fps, tuple((s.image_key, s.kind, s.width, s.height, s.fps, s.codec, s.preset, s.source is None)
                               for s in streams), tuple(c.name for c in self._kwargs["columns"]))
        if self.capacity is not None and key == self._capacity_key and not refresh:
            return self.capacity
        auto = {s.image_key for s in streams if s.kind == "depth" and s.codec is None}
        self.capacity = assess(streams, self._kwargs["columns"], self.fps, probe=self._probe, auto=auto,
                               task_codecs=task_depth_codecs(self.writer.info), cores=self._cores)
        self._capacity_key = key
        return self.capacity

    def _end(self, abort: bool, discard_empty: bool = False) -> RecordedEpisode | None:
        run = self._run
        run.end(abort)
        self._active = False
        for line in run.notes:  # from this (the caller's) thread, so callers can catch them
            warnings.warn(line, ValueChangedWarning, stacklevel=3)
        if run.unfinished is not None:  # the episode is safe; one line says what is still to do
            warnings.warn(run.unfinished, RuntimeWarning, stacklevel=3)
        if run.unprimed is not None and run.error is run.unprimed and run.episode is None and \
                (abort or discard_empty):  # a stream never delivered: nothing was written, no N taken
            self.discard_reason = run.unprimed.one_line()
            return None
        if run.error is not None:
            err = run.error
            kept = [n for n in run.notes if "are kept in" in n]
            if isinstance(err, EgopoolError):
                if kept:  # say where the rows went, in the one line the CLI prints
                    err.hint = kept[0] + (f"; {err.hint}" if err.hint else "")
                    err.args = (err.one_line(),)
                raise err
            raise EgopoolError(f"recording failed: {type(err).__name__}: {err}",
                               hint=kept[0] if kept else None) from err
        if abort:
            return None
        if run.result is None and discard_empty and run.episode is None:
            return None  # no row reached the writer: no N was taken, nothing is on disk
        if run.result is None:
            raise CodecError("the episode has no rows: no tick had a frame of every stream "
                             f"(silent: {self._buf.silent_streams()})")
        return RecordedEpisode(run.result, run.final_stats, run.ticks, tuple(run.notes), run.unfinished)

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
        run = self._run
        start = time.monotonic()
        t0: float | None = None
        tick = 0
        next_due = start
        while not self._stop.is_set() and run.error is None:
            now = time.monotonic()
            if now < next_due:
                self._stop.wait(next_due - now)
                continue
            if t0 is None:
                if not self._buf.primed():
                    if now - start > self._prime_timeout:
                        run.error = run.unprimed = CodecError(
                            f"no frame from {self._buf.silent_streams()} within {self._prime_timeout} s; cannot start "
                            "the episode")
                        self._ticks_done.set()
                        return
                    next_due += self.period
                    continue
                t0 = next_due
                run.created_at = time.time() - (now - t0)
            due_tick = int((now - t0) / self.period)
            if self._max_ticks is not None:
                due_tick = min(due_tick, self._max_ticks - 1)
            if due_tick - tick > self._catch_up:  # slept through more ticks than can be caught up: not built
                run.note_skip(tick, due_tick - tick - self._catch_up)
                tick = due_tick - self._catch_up
            stop = False
            while tick <= due_tick:  # a late wake-up builds the ticks it slept through (their frames are queued)
                if tick >= self.max_rows:  # float32 timestamp would repeat (file_format.md §7.1)
                    run.notes.append(f"recording stopped at {self.max_rows / self.fps:.0f} s: float32 timestamps "
                                       f"cannot tell rows {1 / self.fps:.3g} s apart beyond that (file_format.md §7.1); "
                                       "start a new episode")
                    stop = True
                    break
                due = t0 + tick * self.period
                run.late_max = max(run.late_max, now - due)
                if run.queue.full():
                    run.note_skip(tick, 1)
                else:
                    row = self._buf.safe_build_row(tick, due)
                    if row is not None:
                        run.queue.put_nowait(row)
                tick += 1
                run.ticks = tick
            if stop:
                break
            next_due = t0 + tick * self.period
            if self._max_ticks is not None and tick >= self._max_ticks:
                break
        self._ticks_done.set()

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
        run = self._run
        period_ns = int(round(1e9 / self.fps))
        t = int(time.monotonic_ns() if host0_ns is None else host0_ns)
        try:
            waited = 0
            while True:
                feed(t - period_ns, t, self)
                if self._buf.primed():
                    break
                waited += 1
                if waited * self.period > self._prime_timeout:
                    raise CodecError(f"no frame from {self._buf.silent_streams()} within {self._prime_timeout} s "
                                     "(virtual); cannot start the episode")
                t += period_ns
            for tick in range(rows):
                if tick:
                    if until is not None and until() and not self._buf.frames_queued():
                        break
                    feed(t + (tick - 1) * period_ns, t + tick * period_ns, self)
                if run.error is not None:
                    break
                row = self._buf.safe_build_row(tick, time.monotonic())
                if row is not None:
                    run.queue.put(row)
                run.ticks = tick + 1
        except BaseException:
            self._end(abort=True)
            raise
        out = self._end(abort=False)
        assert out is not None
        return out

