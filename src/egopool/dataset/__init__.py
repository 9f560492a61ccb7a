"""Training loaders over pooled tasks, read in place from a directory or a bucket (issues 18, 25):
:class:`PooledDataset`, :class:`EpisodeSampler`, :class:`BucketSampler` (shuffled by episode runs then within
a buffer, sharded by rank, resumable); windows with LeRobot's ``delta_timestamps`` meaning."""

from .pooled import PooledDataset, find_tasks
from .sampler import EpisodeSampler
from .shuffle import BucketSampler
from .windows import delta_indices

__all__ = ["BucketSampler", "EpisodeSampler", "PooledDataset", "delta_indices", "find_tasks"]
