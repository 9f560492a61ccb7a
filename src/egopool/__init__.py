"""egopool: read, write, validate and maintain ``pooled_episodes_v1`` recordings.

The public surface is re-exported here; implementation modules are internal. The names are
imported on first use (PEP 562), so ``import egopool`` and the ``egopool`` command start at once
(a Ctrl-C in the first half second is the CLI's "interrupted", not a traceback from an import).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at start-up

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "CodecError": ".errors",
    "ConflictError": ".errors",
    "EgopoolError": ".errors",
    "EpisodeNotFoundError": ".errors",
    "FormatError": ".errors",
    "LayoutError": ".errors",
    "LegacyLayoutError": ".errors",
    "LockError": ".errors",
    "MetaUpdateError": ".errors",
    "SchemaError": ".errors",
    "StorageError": ".errors",
    "ValueChangedWarning": ".errors",
    "TrajectoryPairing": ".codecs.timebase",
    "EpisodeFiles": ".layout",
    "TaskLayout": ".layout",
    "display_suffix": ".layout",
    "episode_chunk_file": ".layout",
    "episode_index_from": ".layout",
    "find_episode_files": ".layout",
    "list_task_episodes": ".layout",
    "Episode": ".read.reader",
    "Task": ".read.reader",
    "Trajectory": ".read.reader",
    "open_task": ".read.reader",
    "ColumnSpec": ".schema",
    "hand_pose_column": ".schema",
    "imu_columns": ".schema",
    "key_column": ".schema",
    "scalar_ns_column": ".schema",
    "slam_trajectory_columns": ".schema",
    "status_column": ".schema",
    "vector_column": ".schema",
    "EpisodeResult": ".write.task_writer",
    "EpisodeWriter": ".write.task_writer",
    "StreamSpec": ".write.task_writer",
    "TaskWriter": ".write.task_writer",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'egopool' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # for type checkers: "X as X" marks an explicit re-export
    from .errors import (
        CodecError as CodecError,
        ConflictError as ConflictError,
        EgopoolError as EgopoolError,
        EpisodeNotFoundError as EpisodeNotFoundError,
        FormatError as FormatError,
        LayoutError as LayoutError,
        LegacyLayoutError as LegacyLayoutError,
        LockError as LockError,
        MetaUpdateError as MetaUpdateError,
        SchemaError as SchemaError,
        StorageError as StorageError,
        ValueChangedWarning as ValueChangedWarning,
    )
    from .codecs.timebase import (
        TrajectoryPairing as TrajectoryPairing,
    )
    from .layout import (
        EpisodeFiles as EpisodeFiles,
        TaskLayout as TaskLayout,
        display_suffix as display_suffix,
        episode_chunk_file as episode_chunk_file,
        episode_index_from as episode_index_from,
        find_episode_files as find_episode_files,
        list_task_episodes as list_task_episodes,
    )
    from .read.reader import (
        Episode as Episode,
        Task as Task,
        Trajectory as Trajectory,
        open_task as open_task,
    )
    from .schema import (
        ColumnSpec as ColumnSpec,
        hand_pose_column as hand_pose_column,
        imu_columns as imu_columns,
        key_column as key_column,
        scalar_ns_column as scalar_ns_column,
        slam_trajectory_columns as slam_trajectory_columns,
        status_column as status_column,
        vector_column as vector_column,
    )
    from .write.task_writer import (
        EpisodeResult as EpisodeResult,
        EpisodeWriter as EpisodeWriter,
        StreamSpec as StreamSpec,
        TaskWriter as TaskWriter,
    )

__all__ = sorted([*_EXPORTS, "__version__"])
