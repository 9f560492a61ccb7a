"""Training loaders over pooled tasks, read in place (issue 18): :class:`PooledDataset`,
:class:`EpisodeSampler`; windows with LeRobot's ``delta_timestamps`` meaning."""

from .pooled import PooledDataset, find_tasks
from .sampler import EpisodeSampler
from .windows import delta_indices

__all__ = ["EpisodeSampler", "PooledDataset", "delta_indices", "find_tasks"]
