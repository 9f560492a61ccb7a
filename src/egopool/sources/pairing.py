"""Which colour and depth frames of a RealSense camera are one capture (multi_device_storage.md §4.3, §5.3).

Depth frame i must belong to RGB frame i (§4.3). The SDK's own syncer pairs frames stamped within
half a period; a camera whose colour stamps sit a constant offset beyond that after its depth (the
librealsense #10850 family: colour exposure or readout timed differently) is then paired with the
*next* capture, silently, and a lost frame moves the repeats to the wrong rows. So the offset is
measured first and the pairing keeps to it:

1. **Lock-in** (the first ``lock_frames`` frames of each stream): when frames with the same frame
   number are stamped less than one period apart at a steady offset, the device numbers both streams
   by capture (one counter): equal numbers pair, whatever the offset. Unless the streams' stamps say
   otherwise: frames stamped within a quarter period of each other under *different* numbers are one
   capture (two counters that happen to differ by one). Otherwise the offset is the median stamp
   offset of the time-nearest frames (within half a period), as the SDK's syncer would pair.
2. **Pairing**: a colour frame takes the depth frame numbered ``number - counter_offset`` if it is
   stamped within half a period of ``colour stamp - offset``, else the depth frame nearest to that
   stamp within half a period (and the counter offset follows it: a counter reset re-locks). A colour
   frame whose depth cannot come any more (a later depth frame arrived, or more than ``max_pending``
   colour frames wait) goes without depth; a depth frame no colour frame took is given up. Both are
   counted (:attr:`CapturePairer.unpaired_color`, :attr:`CapturePairer.unpaired_depth`).

Frames are anything with ``stream`` (``"color"`` / ``"depth"``), ``number`` (the device's frame
counter) and ``ts_ms`` (the device stamp, ms).
"""

from __future__ import annotations

import collections
import statistics
from typing import Generic, Protocol, TypeVar

__all__ = ["CapturePairer"]


class _Frame(Protocol):
    @property
    def stream(self) -> str: ...

    @property
    def number(self) -> int: ...

    @property
    def ts_ms(self) -> float: ...


F = TypeVar("F", bound=_Frame)


class CapturePairer(Generic[F]):
    """Pairs each colour frame with the depth frame of its capture; see the module docstring.

    Parameters
    ----------
    period_ms:
        The streams' frame period (ms), 1000 / fps.
    lock_frames:
        Frames of each stream buffered before the offset is decided (3× this of one stream alone
        decides too: a stream that never delivers does not hold the other back for long).
    max_pending:
        Colour frames that may wait for their depth before the oldest goes without.

    Attributes
    ----------
    rule:
        ``"frame numbers"`` or ``"stamps"`` once decided, else None.
    offset_ms:
        Colour stamp minus depth stamp of one capture (ms), once decided.
    counter_offset:
        Colour frame number minus depth frame number of one capture, or None (not known yet).
    unpaired_color, unpaired_depth:
        Colour frames returned without depth; depth frames no colour frame took.
    """

    def __init__(self, period_ms: float, *, lock_frames: int = 4, max_pending: int = 2) -> None:
        self.period = float(period_ms)
        self.lock_frames = int(lock_frames)
        self.max_pending = int(max_pending)
        self.rule: str | None = None
        self.offset_ms = 0.0
        self.counter_offset: int | None = None
        self.unpaired_color = 0
        self.unpaired_depth = 0
        self._buffer: list[F] = []
        self._pending: collections.deque[F] = collections.deque()
        self._depths: collections.deque[F] = collections.deque()

    def push(self, frame: F) -> list[tuple[F, F | None]]:
        """Feed one frame (arrival order); returns the ``(colour, depth or None)`` pairs now complete,
        in colour order."""
        if self.rule is None:
            self._buffer.append(frame)
            colours = sum(1 for f in self._buffer if f.stream == "color")
            depths = len(self._buffer) - colours
            if not ((colours >= self.lock_frames and depths >= self.lock_frames)
                    or max(colours, depths) >= 3 * self.lock_frames):
                return []
            return self._lock_and_replay()
        self._feed(frame)
        return self._drain(final=False)

    def finish(self) -> list[tuple[F, F | None]]:
        """The input ended: every colour frame still waiting goes out (without depth if none came)."""
        out = self._lock_and_replay() if self.rule is None else []
        out += self._drain(final=True)
        self.unpaired_depth += len(self._depths)
        self._depths.clear()
        return out

    # -- lock-in -----------------------------------------------------------------------------------
    def _lock_and_replay(self) -> list[tuple[F, F | None]]:
        frames, self._buffer = self._buffer, []
        self._decide([f for f in frames if f.stream == "color"], [f for f in frames if f.stream == "depth"])
        out: list[tuple[F, F | None]] = []
        for f in frames:
            self._feed(f)
            out += self._drain(final=False)
        return out

    def _decide(self, colours: list[F], depths: list[F]) -> None:
        T = self.period
        by_number = {d.number: d for d in depths}
        same = [c.ts_ms - by_number[c.number].ts_ms for c in colours if c.number in by_number]
        nearest = []
        for c in colours:
            if depths:
                d = min(depths, key=lambda d: abs(c.ts_ms - d.ts_ms))
                nearest.append((c.ts_ms - d.ts_ms, c.number - d.number))
        # two counters one apart, stamped together: the stamps say which frames are one capture
        contradicted = any(abs(dt) <= T / 4 and dk != 0 for dt, dk in nearest)
        if same and max(abs(x) for x in same) < T and max(same) - min(same) <= T / 4 and not contradicted:
            self.rule, self.offset_ms, self.counter_offset = "frame numbers", statistics.median(same), 0
            return
        close = [(dt, dk) for dt, dk in nearest if abs(dt) <= T / 2]
        self.rule = "stamps"
        if close:
            self.offset_ms = statistics.median(dt for dt, _ in close)
            self.counter_offset = statistics.mode(dk for _, dk in close)

    # -- pairing -----------------------------------------------------------------------------------
    def _feed(self, f: F) -> None:
        if f.stream == "depth":
            self._depths.append(f)
            while len(self._depths) > 4 * self.lock_frames:  # nothing waits this long for its colour frame
                self._depths.popleft()
                self.unpaired_depth += 1
        else:
            self._pending.append(f)

    def _match(self, c: F) -> F | None:
        want = c.ts_ms - self.offset_ms
        near = [d for d in self._depths if abs(d.ts_ms - want) <= self.period / 2]
        if self.counter_offset is not None:
            for d in near:
                if c.number - d.number == self.counter_offset:
                    return d
        return min(near, key=lambda d: abs(d.ts_ms - want), default=None)

    def _gone(self, c: F) -> bool:
        """A depth frame stamped after ``c``'s partner would be has arrived: the partner was lost."""
        latest = c.ts_ms - self.offset_ms + self.period / 2
        return any(d.ts_ms > latest for d in self._depths)

    def _drain(self, final: bool) -> list[tuple[F, F | None]]:
        out: list[tuple[F, F | None]] = []
        while self._pending:
            c = self._pending[0]
            d = self._match(c)
            if d is not None:
                self._pending.popleft()
                while self._depths[0] is not d:  # earlier depth frames: their colour frames are gone
                    self._depths.popleft()
                    self.unpaired_depth += 1
                self._depths.popleft()
                self.counter_offset = c.number - d.number
                out.append((c, d))
            elif final or self._gone(c) or len(self._pending) > self.max_pending:
                self._pending.popleft()
                self.unpaired_color += 1
                out.append((c, None))
            else:
                break
        return out
