"""One episode of a :class:`~egopool.recorder.Recorder`: its state and its write thread.

The tick (real-time thread, or the virtual-clock loop) puts each :class:`~egopool.row_buffers.Row`
into a bounded queue; the write thread opens the episode at its first row, adds every row
(``reject_bad``: one bad value never costs the recording) and at the end publishes it with its
``drop_stats``, or sets its rows aside when its files stopped being consistent (docs/decisions.md
#22), or discards it (abort).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from ._threads import name_thread
from .errors import CodecError, MetaUpdateError
from .row_buffers import Row, RowBuffers, exception_line
from .write.task_writer import EpisodeResult, EpisodeWriter, TaskWriter

__all__ = ["EpisodeRun"]

_STOP = object()


class EpisodeRun:
    """The state of one episode, shared by its tick and its write thread.

    Parameters
    ----------
    writer, kwargs:
        The task and the :meth:`TaskWriter.begin_episode` arguments (columns, streams, declarations).
    buf:
        The episode's buffers (their counts become ``drop_stats``).
    period:
        Seconds per row (``timestamp = tick * period``).
    queue_rows:
        Rows the write thread may lag behind (a real-time tick skips beyond that, a virtual one waits).
    realtime:
        Whether the ticks run on the wall clock (lag and lateness are then recorded in ``drop_stats``).

    Attributes
    ----------
    queue:
        Rows for the write thread.
    error:
        What stopped the episode (a write failure, a stream silent past the prime timeout), or None.
    unprimed:
        The prime-timeout error, when that is what stopped it.
    result, unfinished, final_stats:
        After the write thread ended: what was published, the one line still to do
        (:class:`~egopool.errors.MetaUpdateError`), the row's ``drop_stats``.
    notes:
        Lines warned at the end (values stored otherwise than given, why recording stopped early).
    episode:
        The writer of the episode once its first row arrived.
    created_at:
        Unix s of tick 0 (``wall_time = created_at + timestamp``).
    """

    def __init__(self, writer: TaskWriter, kwargs: dict[str, Any], buf: RowBuffers, *, period: float,
                 queue_rows: int, realtime: bool) -> None:
        self.writer, self.kwargs, self.buf = writer, kwargs, buf
        self.period, self.realtime = period, realtime
        self.queue: queue.Queue[Row | object] = queue.Queue(maxsize=queue_rows)
        self.error: BaseException | None = None
        self.unprimed: CodecError | None = None
        self.result: EpisodeResult | None = None
        self.unfinished: str | None = None  # saved, but info/stats/registry still to do (MetaUpdateError)
        self.final_stats: dict[str, int | float] = {}
        self.notes: list[str] = []
        self.aborting = False
        self.skipped = self.ticks = self.rows_written = 0
        self.skip_first: tuple[int, float] | None = None  # (tick, monotonic s) of the first / last skip
        self.skip_last: tuple[int, float] | None = None
        self.late_max = 0.0
        self.episode: EpisodeWriter | None = None
        self.created_at = time.time()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the write thread."""
        self._thread = threading.Thread(target=self._write_loop, name="egopool-write", daemon=True)
        self._thread.start()

    def end(self, abort: bool) -> None:
        """Let the write thread take the rows queued so far, then publish (or, ``abort``, discard) and stop."""
        self.aborting = abort
        self.queue.put(_STOP)
        assert self._thread is not None
        self._thread.join()

    def note_skip(self, tick: int, n: int) -> None:
        """``n`` ticks from ``tick`` on were not built (the write thread lagged, or the tick slept)."""
        now = time.monotonic()
        if self.skip_first is None:
            self.skip_first = (tick, now)
        self.skip_last = (tick + n - 1, now)
        self.skipped += n

    def _write_loop(self) -> None:
        name_thread("egopool-write")
        ep: EpisodeWriter | None = None
        lag_max = 0.0
        try:
            while True:
                row = self.queue.get()
                if not isinstance(row, Row):  # _STOP
                    break
                if self.error is not None:
                    continue  # drain so the tick never blocks on a dead writer
                try:
                    if ep is None:
                        ep = self.writer.begin_episode(**self.kwargs, created_at=self.created_at)
                        ep.warn_changes = False  # warned from the caller's thread (Recorder._end)
                        self.episode = ep
                    ep.add_frame(row.values, timestamp=row.tick * self.period, hardware_ns=row.hardware_ns,
                                 images=row.images, reject_bad=True)
                    self.rows_written += 1
                    lag_max = max(lag_max, time.monotonic() - row.due)
                except Exception as exc:
                    if ep is None or ep.broken:  # no episode, or its files are no longer consistent
                        self.error = exc
                    else:  # the writer refused this row as a whole and stored nothing of it
                        ep.count("rows_rejected", 1, f"tick {row.tick}: {exception_line(exc)}")
                except BaseException as exc:  # KeyboardInterrupt and the like: stop, discard below
                    self.error = exc
            if ep is None:
                return
            if self.aborting:
                ep.abort()
                return
            if self.error is not None:
                self._set_aside(ep)
                return
            for key, n in self.drop_stats(lag_max).items():  # the writer may count the same key (rejects)
                if key.endswith(("_rejected_count", "_disconnected_count")) or key == "rows_rejected":
                    ep.count(key, int(n), self.buf.reason(key))
                else:
                    ep.drop_stats[key] = n
            try:
                self.result = ep.finish()
            except MetaUpdateError as exc:  # saved (committed): returned, with what is still to do
                self.result, self.unfinished = exc.result, exc.one_line()
                if self.result is None:
                    raise
            self.final_stats = dict(ep.drop_stats)
            self.notes[:0] = self.result.notes
        except BaseException as exc:
            self.error = self.error or exc
            if ep is not None:
                ep.abort()

    def _set_aside(self, ep: EpisodeWriter) -> None:
        """The episode cannot be published: keep its rows so far beside the task, log why (decisions.md #22)."""
        assert self.error is not None
        if not ep.length or not isinstance(self.error, Exception):
            ep.abort()
            return
        kept = ep.set_aside(exception_line(self.error))
        if kept is not None:
            self.notes.append(f"episode {ep.index} stopped after {ep.length} rows ({exception_line(self.error)}); "
                               f"its files so far are kept in {kept}")

    def drop_stats(self, lag_max: float) -> dict[str, int | float]:
        """The episode's own ``drop_stats``: ticks skipped, what the buffers counted and, in real time, the
        worst write lag and tick lateness (``lag_max``: the write thread's, s)."""
        counts = self.buf.counts()
        stats: dict[str, int | float] = {"ticks_skipped": int(self.skipped)}
        stats.update(counts)
        if self.realtime:  # durations mean nothing on a virtual clock
            stats["write_lag_max_ms"] = round(lag_max * 1000.0, 3)
            stats["tick_late_max_ms"] = round(self.late_max * 1000.0, 3)
        return stats

