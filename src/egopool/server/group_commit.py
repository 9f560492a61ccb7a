"""Group commit: the publishes waiting for one task's import guard are done together (docs/decisions.md U18).

The first thread to publish into a task becomes its *leader*; threads that arrive while it works append
their item to the task's queue and wait. A leader takes up to ``limit`` items from the head of the queue
(its own first) and runs the batch function on them once; each item gets its own outcome (a value, or the
exception raised for it in its own thread). Then the leader hands the lead to the item now at the head of
the queue, if any, and returns its own outcome: no thread publishes more than one batch, so an answer never
waits for uploads that arrived after it was taken.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["GroupQueue"]

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    item: T
    outcome: Any = None
    done: bool = False
    lead: bool = False


class GroupQueue(Generic[T]):
    """Per-key queues of items waiting to be published together.

    Parameters
    ----------
    limit:
        Items in one batch at most (the rest wait for the next leader).
    leaders:
        Batches run at the same time, over every key (the bound of docs/decisions.md U9: a batch holds at
        most one row group of a renumbered parquet at a time, like one publish).
    """

    def __init__(self, limit: int = 16, leaders: int = 2) -> None:
        self.limit = max(1, limit)
        self._cv = threading.Condition()
        self._queues: dict[str, list[_Entry[T]]] = {}
        self._slots = threading.BoundedSemaphore(max(1, leaders))

    def waiting(self, key: str) -> int:
        """Items queued under ``key`` and not taken by a leader yet (a leader waiting for the guard counts its own)."""
        with self._cv:
            return len(self._queues.get(key) or [])

    def run(self, key: str, item: T, guard: Callable[[str], AbstractContextManager[Any]],
            batch: Callable[[list[T]], Sequence[Any]]) -> Any:
        """Publish ``item`` with whatever else waits under ``key``; returns its outcome.

        The leader holds ``guard(key)`` while it takes the waiting items and runs ``batch(items)``, which
        returns one outcome per item, in order: a value, or an exception instance (raised here, in that
        item's thread). An exception of ``guard`` or ``batch`` is the outcome of every item of the batch.
        """
        entry: _Entry[T] = _Entry(item)
        with self._cv:
            queue = self._queues.get(key)
            if queue is None:  # nobody leads this key: this thread does
                self._queues[key] = queue = [entry]
                entry.lead = True
            else:
                queue.append(entry)
            while not (entry.done or entry.lead):
                self._cv.wait()
        if not entry.done:
            self._lead(key, queue, entry, guard, batch)
        if isinstance(entry.outcome, BaseException):
            raise entry.outcome
        return entry.outcome

    def _lead(self, key: str, queue: list[_Entry[T]], own: _Entry[T],
              guard: Callable[[str], AbstractContextManager[Any]], batch: Callable[[list[T]], Sequence[Any]]) -> None:
        taken: list[_Entry[T]] = []
        outcomes: list[Any] = []
        try:
            with self._slots, guard(key):
                with self._cv:  # everything that queued while this thread waited for a slot and the guard
                    taken = queue[:self.limit]
                    del queue[:self.limit]
                outcomes = list(batch([e.item for e in taken]))
                if len(outcomes) != len(taken):
                    raise RuntimeError(f"group commit: {len(outcomes)} outcomes for {len(taken)} items")
        except BaseException as exc:
            with self._cv:
                if not taken:  # the guard failed: this thread's own item only
                    queue.remove(own)
                    taken = [own]
            outcomes = [exc] * len(taken)
        finally:
            with self._cv:
                for e, out in zip(taken, outcomes, strict=True):
                    e.outcome, e.done = out, True
                if queue:
                    queue[0].lead = True
                else:
                    del self._queues[key]
                self._cv.notify_all()
