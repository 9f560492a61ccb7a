"""What every device source shares: opening, a capture thread, and live counters.

A source stands for one device of a rig (multi_device_storage.md §4). Its life:

1. built from a ``--device`` spec (:mod:`.spec`), holding the :class:`~egopool.devices.Device`
   it will register; nothing is opened yet, so the rig can refuse conflicts first (§5.1);
2. :meth:`Source.open` opens the device and returns the device with its real geometry;
3. :meth:`Source.bind` receives the slots and columns the rig allocated;
4. :meth:`Source.start` / :meth:`Source.stop` push into a recorder from the source's own
   thread, once per episode; :meth:`Source.close` releases the device.
"""

from __future__ import annotations

import abc
import collections
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._threads import name_thread
from ..errors import DeviceError, EgopoolError

if TYPE_CHECKING:
    from ..devices.kinds import Device
    from ..devices.rig import RegisteredDevice, Rig
    from ..recorder import Frame, Recorder

__all__ = ["RateMeter", "Source", "SourceStatus"]


class RateMeter:
    """Events per second over the last ``window`` seconds (monotonic clock)."""

    def __init__(self, window: float = 1.0) -> None:
        self.window = float(window)
        self._t: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()

    def tick(self, now: float | None = None) -> None:
        """Count one event (at ``now``, monotonic s)."""
        t = time.monotonic() if now is None else now
        with self._lock:
            self._t.append(t)
            while self._t and self._t[0] < t - self.window:
                self._t.popleft()

    def rate(self, now: float | None = None) -> float:
        """Events per second in the window ending ``now``."""
        t = time.monotonic() if now is None else now
        with self._lock:
            while self._t and self._t[0] < t - self.window:
                self._t.popleft()
            return len(self._t) / self.window


@dataclass(frozen=True)
class SourceStatus:
    """A source's live state for the operator's status display.

    Attributes
    ----------
    state:
        ``"closed"``, ``"open"``, ``"running"``, ``"ended"`` (a recording played to its end)
        or ``"error"``.
    frames:
        Frames (or samples) delivered since the source was opened.
    fps_in:
        Frames per second delivered over the last second.
    error:
        Why the source stopped, or None.
    """

    state: str
    frames: int
    fps_in: float
    error: str | None = None


class Source(abc.ABC):
    """Base of every device source; subclasses implement :meth:`_open`, :meth:`_run` and :meth:`_close`.

    Parameters
    ----------
    device:
        The device to register (kind, key, name, geometry as requested).
    role:
        ``"ego"`` when the device is the ego camera (§4.7), else None.
    label:
        How the operator named it (the ``--device`` spec), for messages and the status display.
    """

    #: Whether the source can be replayed on a virtual clock (``feed``), e.g. a recording file.
    replayable = False
    #: Seconds :meth:`close` waits for the capture thread (a stalled device can block it in a read).
    close_timeout = 10.0

    def __init__(self, device: Device, role: str | None = None, label: str | None = None) -> None:
        self.device, self.role = device, role
        self.label = label or device.key
        self.reg: RegisteredDevice | None = None
        self.frames = 0
        self.meter = RateMeter()
        self.error: str | None = None
        self._state = "closed"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rec: Recorder | None = None
        self._close_lock = threading.Lock()
        self._in_run = False  # the capture thread may be inside a read of the device
        self._orphaned = False  # close() gave up waiting: the capture thread releases the device

    # -- lifecycle ---------------------------------------------------------------------------------
    def open(self) -> Device:
        """Open the device; returns it with its actual geometry (what the rig must declare).

        Raises
        ------
        DeviceError
            The device is missing, busy, or cannot deliver the requested mode.
        """
        dev = self._open()
        self.device = dev
        self._state = "open"
        return dev

    def bind(self, reg: RegisteredDevice, rig: Rig | None = None) -> None:
        """Take the slots and columns ``rig`` allocated to this device."""
        self.reg = reg

    def start(self, rec: Recorder) -> None:
        """Push into ``rec`` from now on (one call per episode).

        The capture thread starts with the first call and runs until :meth:`close`, so a
        device keeps being drained between episodes (no stale frames at the next start).

        Raises
        ------
        DeviceError
            The source was not bound to a rig.
        """
        if self.reg is None:
            raise DeviceError(f"{self.label}: not bound to a rig", hint="register the device before starting it")
        self._rec = rec
        if self._thread is None:
            self._stop = threading.Event()
            if self._state in ("open", "closed"):
                self._state = "running"
            self._in_run, self._orphaned = True, False
            self._thread = threading.Thread(target=self._guarded_run, name=f"src-{self.device.kind}", daemon=True)
            self._thread.start()

    def _guarded_run(self) -> None:
        name_thread(f"src-{self.device.kind}"[:15])
        try:
            self._run(self._stop)
            if self._state == "running" and not self._stop.is_set():
                self._state = "ended"
        except Exception as exc:  # noqa: BLE001 - reported in the status; the recording goes on
            self.fail(exc)
        finally:
            with self._close_lock:
                self._in_run = False
                if self._orphaned:
                    self._close()

    def fail(self, exc: BaseException) -> None:
        """The source stopped with ``exc``: state ``error``, and every ``status.<id>`` of the device reads
        ``disconnected`` from the next row on, its rows counted (``<id>_disconnected_count``, issue 15 G)."""
        self.error = exc.one_line() if isinstance(exc, EgopoolError) else f"{type(exc).__name__}: {exc}"
        self._state = "error"
        rec = self._rec
        if rec is not None:
            self.report_failure(rec)

    def report_failure(self, rec: Recorder) -> None:
        """Mark this device's status columns ``disconnected`` in ``rec``, with :attr:`error` as the reason."""
        rec.mark_disconnected(self.reg.status_ids if self.reg is not None else (), f"{self.label}: {self.error}")

    def stop(self) -> None:
        """Stop pushing into the recorder (the device keeps running for the next episode)."""
        self._rec = None

    def close(self) -> None:
        """Stop the capture thread and release the device.

        A device that stopped delivering can hold the capture thread in a blocking read: after
        :attr:`close_timeout` seconds close() returns, and the thread releases the device itself
        when its read returns (releasing it under the read would free memory FFmpeg still uses).
        """
        self._rec = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.close_timeout)
            self._thread = None
        with self._close_lock:
            if self._in_run:
                self._orphaned = True
            elif self._state != "closed":
                self._close()
        self._state = "closed"

    @property
    def ended(self) -> bool:
        """True once a finite input (a recording, a file) has delivered its last frame."""
        return self._state == "ended"

    def status(self) -> SourceStatus:
        """The live counters (any thread)."""
        return SourceStatus(self._state, self.frames, self.meter.rate(), self.error)

    def push_frame(self, slot: str, frame: Frame) -> bool:
        """Hand one frame to the recorder of the running episode; False between episodes."""
        rec = self._rec
        if rec is None:
            return False
        rec.push_frame(slot, frame)
        return True

    def delivered(self, n: int = 1) -> None:
        """Count ``n`` frames the device delivered (called by the capture thread)."""
        self.frames += n
        for _ in range(n):
            self.meter.tick()

    # -- subclass hooks ----------------------------------------------------------------------------
    def _open(self) -> Device:
        return self.device

    @abc.abstractmethod
    def _run(self, stop: threading.Event) -> None:
        """The capture loop, on the source's own thread: deliver frames/samples until ``stop`` is set."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Release what :meth:`_open` acquired (once; on the capture thread when :meth:`close` timed out)."""
