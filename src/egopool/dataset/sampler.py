"""A sampler that keeps the items of one episode together (issue 18).

Episodes (or runs of ``run`` consecutive items inside them) are visited in a shuffled order,
each one's items in ascending ``frame_index``. Consecutive items then share most of their
window's frames and the decoder continues forward instead of seeking, which a uniformly
shuffled sampler cannot give. With a ``DataLoader`` batch of B, a batch holds B neighbouring
rows of one episode (or two, at a run's end).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # checked as the torch Sampler it is with the extra `train` installed
    from torch.utils.data import Sampler as _Base
else:
    try:
        from torch.utils.data import Sampler as _Base
    except ImportError:  # pragma: no cover - without the extra `train`: a plain iterable
        _Base = object

__all__ = ["EpisodeSampler"]


class EpisodeSampler(_Base):
    """Item indices of ``dataset`` episode by episode.

    Parameters
    ----------
    dataset:
        A :class:`~egopool.dataset.PooledDataset` (anything with ``episode_ranges()``).
    shuffle:
        Visit episodes (runs) in a random order, new each epoch (:meth:`set_epoch`, or each
        ``iter()``); False keeps index order.
    run:
        Split episodes into runs of at most ``run`` items, shuffled as units (None: whole episodes).
    seed:
        Seed of the order; epoch ``e`` uses ``seed + e``.
    """

    def __init__(self, dataset: Any, *, shuffle: bool = True, run: int | None = None, seed: int = 0) -> None:
        if run is not None and int(run) < 1:
            raise ValueError(f"run must be >= 1 items, got {run}")
        self.ranges = list(dataset.episode_ranges())
        self.shuffle, self.run, self.seed, self.epoch = bool(shuffle), run, int(seed), 0
        self._iterated = False

    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch`` for the next ``iter()``."""
        self.epoch, self._iterated = int(epoch), False

    def _units(self) -> list[range]:
        if self.run is None:
            return self.ranges
        r = int(self.run)
        return [range(s, min(s + r, rg.stop)) for rg in self.ranges for s in range(rg.start, rg.stop, r)]

    def __iter__(self) -> Iterator[int]:
        units = self._units()
        if self.shuffle:
            if self._iterated:
                self.epoch += 1
            self._iterated = True
            order = np.random.default_rng(self.seed + self.epoch).permutation(len(units))
            units = [units[i] for i in order]
        for u in units:
            yield from u

    def __len__(self) -> int:
        return sum(len(r) for r in self.ranges)


