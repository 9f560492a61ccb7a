"""What one process of a :class:`~egopool.dataset.PooledDataset` keeps open: tasks, episode views, decoders, the
block cache and the thread pool a batch is read on (docs/decisions.md B9). Never pickled: each DataLoader worker
makes its own on its first item."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple, TypeVar

import numpy as np

from ..read.reader import Task, open_task
from .decode import DecoderCache
from .episode_view import EpisodeView
from .index import TaskEntry
from .object_cache import BlockCache
from .read_ahead import Position

__all__ = ["Ask", "Worker"]

_T = TypeVar("_T")
_R = TypeVar("_R")


class Ask(NamedTuple):
    """One item's window on one stream: item position ``k`` in the batch, its kind, rows and pad flags."""

    k: int
    kind: str
    rows: np.ndarray
    pad: np.ndarray | None
    view: EpisodeView


class Worker:
    """Per-process state: open tasks, episode views, decoders, a thread pool. Never pickled. Thread-safe: a
    batch's episodes and streams are read by the pool's threads at once (``PooledDataset._read``)."""

    def __init__(self, entries: Sequence[TaskEntry], *, max_open_streams: int, cache_bytes: int, block_size: int,
                 read_ahead: int, threads: int, max_episodes: int) -> None:
        """``entries``: the dataset's tasks (``FrameIndex.tasks``), opened on first use; the bounds are the
        :class:`~egopool.dataset.PooledDataset` arguments of the same names (``threads``: its ``threads()``)."""
        self.pid = os.getpid()
        self.entries = entries
        self.tasks: dict[int, Task] = {}
        self.views: OrderedDict[tuple[int, int], EpisodeView] = OrderedDict()
        self.decoders = DecoderCache(max_open_streams)
        self.blocks = BlockCache(cache_bytes, block_size, read_ahead)
        self.threads = threads
        self.pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None
        self.max_views = max_episodes
        self._lock = threading.Lock()
        #: The next batch's opening, running in the background (read_ahead.py), and where that batch starts.
        self.ahead: Future[None] | None = None
        self.position = Position()
        self._ahead_pool: ThreadPoolExecutor | None = None
        self._ahead_io: ThreadPoolExecutor | None = None  # the read-ahead's own I/O threads (never the batch's)

    def read_ahead(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` (opening the predicted next batch) in the background; :meth:`settle` waits for it."""
        if self._ahead_pool is None:
            self._ahead_pool = ThreadPoolExecutor(1)
        self.ahead = self._ahead_pool.submit(fn)

    def settle(self) -> None:
        """Wait for the read-ahead to end (before a batch uses the decoders it may have opened). Its errors are
        dropped: the batch that needs what failed reads it again and reports it."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            try:
                ahead.result()
            except Exception:  # noqa: BLE001 - reported by the read that needs it
                pass

    def map_ahead(self, fn: Callable[[_T], _R], todo: Sequence[_T]) -> list[_R]:
        """:meth:`map` for the read-ahead, on threads of its own (``threads`` of them): the batch being decoded
        meanwhile keeps the pool's threads, and the next batch's opens do not queue behind its decoding."""
        if len(todo) < 2:
            return [fn(x) for x in todo]
        if self._ahead_io is None:
            self._ahead_io = ThreadPoolExecutor(self.threads)
        return list(self._ahead_io.map(fn, todo))

    def map(self, fn: Callable[[_T], _R], todo: Sequence[_T]) -> list[_R]:
        """``[fn(x) for x in todo]``, on the pool's threads when there are several (the first error is raised)."""
        if self.pool is None or len(todo) < 2:
            return [fn(x) for x in todo]
        return list(self.pool.map(fn, todo))

    def task(self, t: int) -> Task:
        """Task ``t`` of the entries, opened once per process."""
        with self._lock:
            task = self.tasks.get(t)
        if task is None:
            task = open_task(self.entries[t].path, self.entries[t].info)  # info.json as indexed: no read
            with self._lock:
                task = self.tasks.setdefault(t, task)
        return task

    def view(self, t: int, n: int, length: int) -> EpisodeView:
        """Episode ``n`` of task ``t`` (``length`` rows), kept open for the next items (at most ``max_episodes``)."""
        with self._lock:
            v = self.views.get((t, n))
            if v is not None:
                self.views.move_to_end((t, n))
                return v
        v = EpisodeView(self.task(t).episode(n), length)
        with self._lock:
            v = self.views.setdefault((t, n), v)
            self.views.move_to_end((t, n))
            while len(self.views) > self.max_views:
                self.views.popitem(last=False)
        return v

    def close(self) -> None:
        self.settle()
        self.decoders.close()
        for pool in (self.pool, self._ahead_pool, self._ahead_io):
            if pool is not None:
                pool.shutdown(wait=False)

    def __del__(self) -> None:
        # A dataset dropped in the process that opened its containers closes them now. Left to the garbage
        # collector (a PyAV container and its streams form a cycle), they could still be uncollected garbage
        # when a DataLoader forks, and a worker's collector would then free FFmpeg decoders whose threads
        # do not exist after fork: a hang (docs/decisions.md, training loader T3, and O41). A fork's inherited
        # copy is never closed.
        if self.pid == os.getpid():
            self.close()
