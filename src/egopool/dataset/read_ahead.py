"""Read-ahead across batches from the sampler's order (issue 25; docs/decisions.md B12).

A :class:`~egopool.dataset.BucketSampler` made over a :class:`~egopool.dataset.PooledDataset` tells the dataset
its order (``PooledDataset.follow_order``); a DataLoader worker holds a copy of both. After a worker has read a
batch, :func:`next_batch` predicts the worker's next one: the DataLoader hands batch ``b`` to worker
``b mod W``, so this worker's next batch is ``W`` batches after the one it just read, at a position of the
sampler's order it can compute alone (:meth:`BucketSampler.epoch_order`). The worker then opens that batch's
episodes and streams in the background while the batch it returned is collated, sent and consumed (over a bucket:
the GETs that open objects, the latency-bound part). A prediction is checked against what the worker is really
given (the batch read must be found at the predicted position); a wrong one (a sampler in another epoch, a
persistent worker, another sampler) turns read-ahead off until a batch is found where predicted again. It never
changes what an item holds: it only opens what would be opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Position", "next_batch"]


@dataclass
class Position:
    """Where the worker believes its next batch starts in the epoch's order (None: not known)."""

    next: int | None = None


def _worker_slot() -> tuple[int, int]:
    """``(worker id, number of workers)`` of this DataLoader worker; ``(0, 1)`` in the main process."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:  # pragma: no cover - without the extra `train`
        return 0, 1
    info = get_worker_info()
    return (int(info.id), int(info.num_workers)) if info is not None else (0, 1)


def next_batch(sampler: Any, indices: list[int], pos: Position) -> list[int] | None:
    """The indices of this worker's next batch after reading ``indices``, or None when they cannot be predicted.

    ``sampler`` is a :class:`~egopool.dataset.BucketSampler`; ``pos`` this worker's running guess (updated)."""
    if not indices:
        return None
    wid, workers = _worker_slot()
    size = len(indices)
    first, stop = sampler._bounds()
    start = first + sampler.position
    for guess in dict.fromkeys(p for p in (pos.next, start + wid * size) if p is not None):
        if list(sampler.epoch_order(sampler.epoch, guess, guess + size)) == indices:
            nxt = guess + workers * size
            pos.next = nxt
            if nxt >= stop:
                return None
            return list(sampler.epoch_order(sampler.epoch, nxt, min(nxt + size, stop)))
    pos.next = None
    return None
