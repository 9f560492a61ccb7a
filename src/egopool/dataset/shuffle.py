"""A shuffled, sharded, resumable order of a dataset's items that keeps reads near each other (issue 25).

Shuffling every frame uniformly makes each item a random read: over a bucket a GET and a seek to a keyframe
per item. :class:`BucketSampler` shuffles in two stages instead:

1. the dataset's *units* (runs of at most ``run`` consecutive items of one episode; whole episodes by
   default) are put in a uniformly random order, new each epoch;
2. the units are taken ``buffer`` at a time, in that order, and the items of those ``buffer`` units are put
   in a uniformly random order among themselves.

The randomness this gives: every unit order is equally likely, and within a buffer every order of its items is
equally likely; items of units more than ``buffer`` units apart in the unit order are never interleaved, so at
any moment a consumer reads at most ``buffer`` units (streams), and a batch of ``B`` items holds items of at most
``buffer`` units. With ``buffer=1`` a batch is one unit's frames, shuffled; a ``buffer`` of the number of units
is a uniform shuffle. Seeds: the unit order of epoch ``e`` comes from ``(seed, e)``, buffer ``k``'s item order
from ``(seed, e, k)``, so every process computes the same order without talking to the others.

Sharding: the epoch's order (all items) is cut into ``world_size`` contiguous parts, part ``rank`` for this
process (sizes differ by at most one; nothing is repeated or dropped, so every item is seen exactly once per
epoch over all ranks; ``torch.distributed``'s rank and world size by default). Inside a process, a
``DataLoader``'s workers each fetch whole batches of this sampler's indices, each index once.

Resuming: :meth:`BucketSampler.state_dict` saves ``(epoch, position)``; a sampler given it by
:meth:`~BucketSampler.load_state_dict` yields the same epoch's order from ``position`` on. A ``DataLoader`` with
workers asks its sampler ahead of what the training loop received (``prefetch_factor × num_workers`` batches), so
pass ``consumed`` = the samples the loop received in this epoch (batches × batch size).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from torch.utils.data import Sampler as _Base
else:
    try:
        from torch.utils.data import Sampler as _Base
    except ImportError:  # pragma: no cover - without the extra `train`: a plain iterable
        _Base = object

__all__ = ["BucketSampler"]


def _dist_rank_world() -> tuple[int, int]:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return 0, 1
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return 0, 1


class BucketSampler(_Base):
    """Item indices of ``dataset``, shuffled by units then within buffers, sharded by rank (module docstring).

    Parameters
    ----------
    dataset:
        A :class:`~egopool.dataset.PooledDataset` (anything with ``episode_ranges()``).
    shuffle:
        False: index order (units and items in order), still sharded and resumable.
    run:
        Items per unit at most (a unit never spans two episodes); None: whole episodes.
    buffer:
        Units whose items are shuffled together (>= 1).
    seed:
        Seed of every epoch's order.
    rank, world_size:
        This process's part; default ``torch.distributed``'s when it is initialised, else 0 and 1.

    Raises
    ------
    ValueError
        ``run`` or ``buffer`` < 1, or ``rank`` outside ``[0, world_size)``.
    """

    def __init__(self, dataset: Any, *, shuffle: bool = True, run: int | None = None, buffer: int = 8,
                 seed: int = 0, rank: int | None = None, world_size: int | None = None) -> None:
        if run is not None and int(run) < 1 or int(buffer) < 1:
            raise ValueError(f"run ({run}) and buffer ({buffer}) must be >= 1")
        r, w = _dist_rank_world()
        self.rank = int(rank) if rank is not None else r
        self.world_size = int(world_size) if world_size is not None else w
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside [0, world_size={self.world_size})")
        units: list[range] = []
        for rg in dataset.episode_ranges():
            step = int(run) if run is not None else max(1, len(rg))
            units += [range(s, min(s + step, rg.stop)) for s in range(rg.start, rg.stop, step)]
        self.units = units
        self.total = sum(len(u) for u in units)
        self.shuffle, self.buffer, self.seed = bool(shuffle), int(buffer), int(seed)
        self.epoch, self.position = 0, 0
        self._yielded = 0
        follow = getattr(dataset, "follow_order", None)
        if callable(follow):  # a PooledDataset reads ahead in this order (dataset/read_ahead.py)
            follow(self)

    # -- the order --------------------------------------------------------------------------------------
    def _bounds(self) -> tuple[int, int]:
        """This rank's part ``[start, stop)`` of the epoch's order."""
        n, w = self.total, self.world_size
        return self.rank * n // w, (self.rank + 1) * n // w

    def epoch_order(self, epoch: int, start: int = 0, stop: int | None = None) -> Iterator[int]:
        """Items at positions ``[start, stop)`` of epoch ``epoch``'s global order (all ranks), computed buffer by
        buffer (memory: one buffer's items)."""
        stop = self.total if stop is None else stop
        order = (np.random.default_rng([self.seed, epoch]).permutation(len(self.units)) if self.shuffle
                 else np.arange(len(self.units)))
        pos = 0
        for k in range(0, len(order), self.buffer):
            group = [self.units[int(u)] for u in order[k:k + self.buffer]]
            size = sum(len(u) for u in group)
            if pos + size <= start:
                pos += size
                continue
            if pos >= stop:
                return
            items = np.concatenate([np.arange(u.start, u.stop, dtype=np.int64) for u in group])
            if self.shuffle:
                items = items[np.random.default_rng([self.seed, epoch, k // self.buffer]).permutation(len(items))]
            lo, hi = max(0, start - pos), min(size, stop - pos)
            for i in items[lo:hi].tolist():
                yield int(i)
            pos += size

    def __iter__(self) -> Iterator[int]:
        a, b = self._bounds()
        start = self.position
        self._yielded = 0
        for i in self.epoch_order(self.epoch, a + start, b):
            self._yielded += 1
            yield i
        self.epoch, self.position, self._yielded = self.epoch + 1, 0, 0  # the epoch is done: the next one follows

    def __len__(self) -> int:
        a, b = self._bounds()
        return b - a - self.position

    # -- epochs and resuming --------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its beginning at the next ``iter()``."""
        self.epoch, self.position, self._yielded = int(epoch), 0, 0

    def state_dict(self, consumed: int | None = None) -> dict[str, int]:
        """``{"epoch", "position", "seed", "rank", "world_size", "total"}`` to resume from.

        ``consumed``: samples of this rank the training loop received since this epoch's ``iter()`` (default:
        what this sampler yielded, exact without DataLoader workers or when the epoch is done)."""
        done = self._yielded if consumed is None else int(consumed)
        return {"epoch": self.epoch, "position": self.position + done, "seed": self.seed, "rank": self.rank,
                "world_size": self.world_size, "total": self.total}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume: the next ``iter()`` yields epoch ``state["epoch"]`` from ``state["position"]`` on.

        Raises
        ------
        ValueError
            A state of another seed, world size or dataset size (its order would not be this one).
        """
        a, b = self._bounds()
        for k, mine in (("seed", self.seed), ("world_size", self.world_size), ("total", self.total)):
            if int(state[k]) != mine:
                raise ValueError(f"sampler state has {k}={state[k]}, this sampler {mine}: resume with the same "
                                 "dataset, seed and world size")
        if not 0 <= int(state["position"]) <= b - a:
            raise ValueError(f"sampler state position {state['position']} outside this rank's {b - a} items")
        self.epoch, self.position, self._yielded = int(state["epoch"]), int(state["position"]), 0
