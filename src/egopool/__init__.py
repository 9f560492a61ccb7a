"""egopool: read, write, validate and maintain ``pooled_episodes_v1`` recordings.

The public surface is re-exported here; implementation modules are internal.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import (CodecError, ConflictError, EgopoolError, EpisodeNotFoundError, FormatError, LayoutError,
                     LegacyLayoutError, LockError, MetaUpdateError, SchemaError, StorageError, ValueChangedWarning)
from .codecs.timebase import TrajectoryPairing
from .layout import (EpisodeFiles, TaskLayout, display_suffix, episode_chunk_file, episode_index_from,
                     find_episode_files, list_task_episodes)
from .read.reader import Episode, Task, Trajectory, open_task
from .schema import (ColumnSpec, hand_pose_column, imu_columns, key_column, scalar_ns_column, slam_trajectory_columns,
                     status_column, vector_column)
from .write.task_writer import EpisodeResult, EpisodeWriter, StreamSpec, TaskWriter

__all__ = sorted([
    "CodecError", "ColumnSpec", "ConflictError", "EgopoolError", "Episode", "EpisodeFiles", "EpisodeNotFoundError",
    "EpisodeResult", "EpisodeWriter", "FormatError", "LayoutError", "LegacyLayoutError", "LockError", "MetaUpdateError",
    "SchemaError", "StorageError", "StreamSpec", "Task", "TaskLayout", "TaskWriter", "Trajectory", "TrajectoryPairing",
    "__version__", "display_suffix", "episode_chunk_file", "episode_index_from", "find_episode_files", "hand_pose_column", "imu_columns", "key_column",
    "list_task_episodes", "open_task", "scalar_ns_column", "slam_trajectory_columns", "status_column",
    "ValueChangedWarning", "vector_column",
])
