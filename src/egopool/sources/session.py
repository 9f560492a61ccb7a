"""A recording session over real (and simulated) sources: the library behind ``egopool record``.

::

    session = RecordingSession(TaskWriter("recordings", "pick_cup"), parse_device_specs(specs))
    session.open()                 # §5.1 conflicts are refused before any device opens
    session.start_episode()
    ...                            # session.status() for a live display
    done = session.finish_episode()   # or session.abort_episode() -> the recycled N (§7.5)
    session.close()

``writer`` may also be a callable that makes the TaskWriter: it is called once every device
opened, so a device that cannot be opened (or a refused combination) leaves nothing on disk.

The rig is planned twice: once from the devices as requested, to refuse forbidden
combinations (multi_device_storage.md §5.1) before anything opens, and once from the devices
as opened (the mode a camera really delivers is what ``cameras`` declares), in the same
order, so the slots and column names are the same (§2.3).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..devices.rig import Rig, check_depth_choice
from ..errors import CodecError, ConflictError, DeviceError, EgopoolError
from ..meta import markers
from ..recorder import RecordedEpisode, Recorder
from ..write.task_writer import TaskWriter
from .base import Source

__all__ = ["DeviceLine", "RecordingSession"]


@runtime_checkable
class _Replay(Protocol):
    """A source playing a recording on a virtual clock (``Source.replayable``: a RealSense ``.bag`` with
    ``realtime=0``), as :meth:`RecordingSession.record_fast` drives it."""

    def feed(self, t0: int, t1: int, rec: Recorder) -> None:
        """Push every frame whose place on the host clock is in ``(t0, t1]`` (ns)."""

    def restart_clock(self) -> None:
        """The next :meth:`feed` starts a new virtual clock (the next episode)."""

    @property
    def exhausted(self) -> bool:
        """The recording delivered its last frame."""


@dataclass(frozen=True)
class DeviceLine:
    """One device's line of the live status (rates in frames/s, sizes in bytes).

    ``fps_out`` counts fresh frames the ticks took from its first slot, ``repeats`` /
    ``drops`` the rows that repeated a frame and the frames a full queue discarded,
    ``queued`` frames waiting in its slot queues, ``bytes`` its video files so far.
    """

    label: str
    slots: tuple[str, ...]
    state: str
    fps_in: float
    fps_out: float
    queued: int
    repeats: int
    drops: int
    bytes: int
    error: str | None


class RecordingSession:
    """Open a rig of sources once; record episodes from it one after another.

    Parameters
    ----------
    writer:
        The task to record into, or a callable returning it; the callable is called by
        :meth:`open` once every device opened (nothing is created on disk before).
    sources:
        Unopened sources in opening order (§2.3: the order decides ``gripper_2_``, ``_2``...).
    program:
        ``"main"`` or ``"lite"`` (glove declarations, §6.4).
    recorder_kwargs:
        Passed to :class:`~egopool.recorder.Recorder` (queue sizes, prime timeout).
    depth_codec:
        Depth streams of devices without their own ``depth=``: ``"auto"`` (default: 12-bit HEVC
        unless the capacity measurement says this machine cannot hold it in real time, then
        lossless FFV1 for the whole task, docs/decisions.md R24), ``"hevc12"`` or ``"ffv1"``.

    Raises
    ------
    ConflictError
        (from :meth:`open`) The combination is forbidden (§5.1), or two ``--device`` specs
        are the same device (one key, §5.2 rule 3); nothing was opened (or it was closed again).
    DeviceError
        (from :meth:`open`) A device could not be opened; those already opened are closed again.
    """

    def __init__(self, writer: TaskWriter | Callable[[], TaskWriter], sources: list[Source], *,
                 program: str = "main", recorder_kwargs: dict[str, Any] | None = None,
                 depth_codec: str = "auto") -> None:
        if not sources:
            raise DeviceError("no device to record", hint="add --device KIND:TARGET (see egopool record --help)")
        self._make_writer = None if isinstance(writer, TaskWriter) else writer
        self._writer = writer if isinstance(writer, TaskWriter) else None
        self.sources, self.program = list(sources), program
        self.recorder_kwargs = dict(recorder_kwargs or {})
        self.depth_codec = check_depth_choice(depth_codec)
        self.rig: Rig | None = None
        self.recorder: Recorder | None = None
        self._started = 0.0
        self._last: dict[str, tuple[float, int, int]] = {}

    @property
    def writer(self) -> TaskWriter:
        """The task being recorded into (made by :meth:`open` when a callable was given).

        Raises
        ------
        DeviceError
            The session was given a callable and is not open yet.
        """
        if self._writer is None:
            raise DeviceError("the session is not open", hint="call open() first")
        return self._writer

    @property
    def has_writer(self) -> bool:
        """True once the task writer exists (given, or made by :meth:`open`)."""
        return self._writer is not None

    def check_conflicts(self) -> Rig:
        """Plan the rig from the devices as requested; raises ConflictError / SchemaError (§5.1, §2.4)
        without opening anything."""
        self._check_unique_keys()
        plan = Rig(self.program)
        for src in self.sources:
            plan.add(src.device, role=src.role)
        return plan

    def _check_unique_keys(self) -> None:
        """Two specs naming one device (the same key) are refused with both specs named (§5.2 rule 3:
        the key says which device wrote what)."""
        seen: dict[str, Source] = {}
        for src in self.sources:
            other = seen.setdefault(src.device.key, src)
            if other is src:
                continue
            if other.label == src.label:
                raise ConflictError(f"--device {src.label!r} is given twice", hint="a device is recorded once; "
                                    "drop the repeated --device")
            raise ConflictError(f"--device {other.label!r} and --device {src.label!r} are the same device "
                                f"{src.device.key} (§5.2 rule 3: a device key names one device)",
                                hint=_same_key_hint(src))

    def open(self) -> Rig:
        """Refuse conflicts, open every device in order, register them as opened, build the recorder."""
        self.check_conflicts()
        opened: list[Source] = []
        try:
            for src in self.sources:
                src.open()
                opened.append(src)
            self._check_unique_keys()  # as opened: two recordings of one camera carry its one serial
            rig = Rig(self.program, depth_codec=self.depth_codec)
            for src in self.sources:
                src.bind(rig.add(src.device, role=src.role), rig)
            if self._writer is None:  # only now: a device that failed to open or bind left nothing on disk
                assert self._make_writer is not None
                self._writer = self._make_writer()
            rig.check_task(self.writer.info)
            self.recorder = Recorder(self.writer, rig, **self.recorder_kwargs)
        except BaseException:
            for src in opened:
                src.close()
            raise
        self.rig = rig
        return rig

    @property
    def replayable(self) -> bool:
        """Every source can run on a virtual clock (recordings played as fast as possible, simulated devices)."""
        from .simulated import SimSource

        return all(s.replayable or isinstance(s, SimSource) for s in self.sources) and \
            any(s.replayable for s in self.sources)

    def start_episode(self, max_ticks: int | None = None) -> None:
        """Start ticking and let every source push (real time); ``max_ticks`` as
        :meth:`Recorder.start_episode`."""
        rec = self._recorder()
        rec.start_episode(max_ticks, disconnected=self._dead())
        self._started = time.monotonic()
        self._last = {}
        for src in self.sources:
            src.start(rec)

    def finish_episode(self) -> RecordedEpisode:
        """Stop the sources, drain the recorder, publish the episode.

        Raises
        ------
        EgopoolError
            The episode could not be written (see :meth:`Recorder.stop_episode`), or it has
            no row (see :meth:`finish_or_discard`).
        """
        done = self._finish(discard_empty=False)
        assert done is not None
        return done

    def finish_or_discard(self) -> RecordedEpisode | None:
        """As :meth:`finish_episode`, but an episode stopped before its first row (a stream had not
        delivered its first frame yet) is discarded: returns None, nothing was written, no N taken.

        Raises
        ------
        EgopoolError
            The episode could not be written (see :meth:`Recorder.stop_episode`).
        """
        return self._finish(discard_empty=True)

    def _finish(self, discard_empty: bool) -> RecordedEpisode | None:
        rec = self._recorder()
        for src in self.sources:
            src.stop()
        return rec.stop_episode(discard_empty=discard_empty)

    def record_seconds(self, seconds: float) -> RecordedEpisode:
        """Record one episode of ``round(seconds × fps)`` ticks in real time; Ctrl-C aborts it.

        Raises
        ------
        EgopoolError
            As :meth:`finish_episode`.
        """
        rec = self._recorder()
        self.start_episode(max_ticks=max(1, int(round(seconds * rec.fps))))
        try:
            rec.wait_ticks()
        except BaseException:
            self.abort_episode()
            raise
        return self.finish_episode()

    def abort_episode(self) -> int | None:
        """Stop and discard the running episode; returns the N that is recycled for the next one (§7.5),
        or None when no row had been written yet (no N was taken)."""
        rec = self._recorder()
        for src in self.sources:
            src.stop()
        index = rec.live_stats()["index"]
        rec.abort_episode()
        return index if index is not None and markers.read_recycled(self.writer.task_dir) == index else None

    def record_fast(self, seconds: float | None = None) -> RecordedEpisode | None:
        """Record one episode on a virtual clock, as fast as the writer allows (recordings with
        ``realtime=0`` and simulated devices only): ``seconds`` long, or (None) until every
        recording played to its end. An episode ends early when the recordings end.

        Returns
        -------
        RecordedEpisode or None
            None when the recordings had already played to their end (nothing was written).

        Raises
        ------
        DeviceError
            A source is a live device.
        """
        if not self.replayable:
            raise DeviceError("only recordings played with realtime=0 and simulated devices can be recorded "
                              "as fast as possible", hint="drop --fast, or use realsense-bag:FILE?realtime=0")
        from .simulated import SimSource

        rec = self._recorder()
        sims = [s for s in self.sources if isinstance(s, SimSource)]
        host0 = time.monotonic_ns()
        for s in sims:
            assert s._sim is not None
            s._sim.reset(host0 - int(round(1e9 / rec.fps)))

        def feed(t0: int, t1: int, r: Recorder) -> None:
            for src in self.sources:
                if src.status().state == "error":
                    continue  # stopped earlier: its status columns read disconnected
                try:
                    if isinstance(src, SimSource):
                        assert src._sim is not None
                        src._sim.feed(t0, t1, r)
                    elif isinstance(src, _Replay):
                        src.feed(t0, t1, r)
                    else:  # self.replayable let in recordings and simulated devices only
                        raise DeviceError(f"{src.label} cannot be played on a virtual clock")
                except Exception as exc:  # noqa: BLE001 - as on the real-time path: the others go on
                    src._rec = r
                    src.fail(exc)

        recordings = [s for s in self.sources if s.replayable and isinstance(s, _Replay)]
        for r in recordings:
            r.restart_clock()

        def ended() -> bool:
            return all(s.exhausted for s in recordings)

        if ended():
            return None
        try:
            return rec.record_virtual(seconds if seconds is not None else 86400.0, feed, host0_ns=host0, until=ended,
                                      disconnected=self._dead())
        except CodecError:
            if ended():  # nothing was left to play: no row, no N taken
                return None
            raise

    def _dead(self) -> dict[str, str]:
        """``status`` id -> reason of every source that stopped with an error in an earlier episode."""
        return {sid: f"{src.label}: {src.error}" for src in self.sources if src.status().state == "error"
                for sid in (src.reg.status_ids if src.reg is not None else ())}

    def status(self) -> tuple[dict[str, Any], list[DeviceLine]]:
        """``(episode counters, one line per device)`` for the live display (any thread)."""
        rec = self._recorder()
        live = rec.live_stats()
        now = time.monotonic()
        lines = []
        for src in self.sources:
            reg = src.reg
            slots = tuple((*reg.rgb_slots, *reg.depth_slots)) if reg is not None else ()
            st = src.status()
            per = [live["slots"].get(s, {}) for s in slots]
            taken = per[0].get("taken", 0) if per else 0
            t_prev, taken_prev, _ = self._last.get(src.label, (self._started, 0, 0))
            fps_out = (taken - taken_prev) / (now - t_prev) if now > t_prev else 0.0
            if now - t_prev >= 1.0 or src.label not in self._last:
                self._last[src.label] = (now, taken, 0)
            lines.append(DeviceLine(src.label, slots, st.state, st.fps_in, max(0.0, fps_out),
                                    sum(p.get("queued", 0) for p in per), sum(p.get("repeated", 0) for p in per),
                                    sum(p.get("dropped", 0) for p in per),
                                    sum(live["streams"].get(s, 0) for s in slots), st.error))
        live["elapsed"] = now - self._started if self._started else 0.0
        return live, lines

    def close(self) -> None:
        """Close every device (an episode still running is aborted first)."""
        rec = self.recorder
        if rec is not None and rec._active:
            try:
                self.abort_episode()
            except EgopoolError:
                pass
        for src in self.sources:
            src.close()

    def _recorder(self) -> Recorder:
        if self.recorder is None:
            raise DeviceError("the session is not open", hint="call open() first")
        return self.recorder


def _same_key_hint(src: Source) -> str:
    if src.device.kind in ("d435", "d405") and getattr(src, "file", None) is not None:
        return "two recordings of one camera cannot be two devices of a rig; record them into separate episodes"
    if src.device.kind == "uvc":
        return "give each camera its own key: ?key=uvc:NAME"
    return "drop the repeated --device"
