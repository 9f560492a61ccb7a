"""What one worker keeps of one episode: its columns as numpy, IMU and trajectory offsets.

Everything comes from :class:`egopool.Episode` (the reader): parquet columns through
``Episode.columns``, IMU through ``Episode.imu_samples``, trajectories through
``Episode.trajectory``, force matrices through ``Episode.force_matrices`` (the episode's own
scale, file_format.md §7.2.1), stream kinds through ``Episode.stream_kind``. Columns are read on
first use and kept while the episode stays in the worker's cache.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..arrowutil import int_values_to_numpy, list_column_to_numpy, list_offsets
from ..errors import SchemaError
from ..keypoints.mirror import EpisodeKeypoints
from ..read.reader import Episode, open_task
from ..storage import ObjectPath, TaskPath
from .index import TaskEntry
from .keypoint_keys import is_keypoint_key, keypoint_rows, missing_mirror_error

__all__ = ["EpisodeView", "check_keys", "key_kind_by_name"]

IMU_KEYS = ("observation.imu", "imu_ts_ns")


def key_kind_by_name(key: str) -> str | None:
    """``"imu"``/``"trajectory"`` for the keys whose rows hold a variable number of samples, else None."""
    if key in IMU_KEYS:
        return "imu"
    if key.startswith("observation.") and (key.endswith("slam_trajectory") or key.endswith("slam_trajectory_ns")):
        return "trajectory"
    return None


#: Columns a data parquet has without ``info.features`` declaring them (file_format.md §6): taken as known.
_PLAIN_COLUMNS = ("index", "episode_index", "frame_index", "timestamp", "task_index", "wall_time", "hardware_ns",
                  "raw_hw_ns")


def check_keys(keys: Sequence[str], tasks: Sequence[TaskEntry], first: Mapping[int, int]) -> None:
    """Refuse, when a dataset is made, a key that no task has: a key is known when a task's ``info.json`` declares
    it (``features``, ``video_extensions``), it is a plain column, an IMU / trajectory / ``keypoints.*`` key, or
    else a column or stream of the first indexed episode of some task (``first``: task -> its N; read only then).
    A key some episodes lack is still named by the item that needs it (episodes may differ, §6.7).

    Raises
    ------
    ValueError
        One line naming the keys no task has and the keys that exist.
    """
    known = set(_PLAIN_COLUMNS)
    for e in tasks:
        for field in ("features", "video_extensions"):
            declared = e.info.get(field)
            known |= set(declared) if isinstance(declared, Mapping) else set()
    unknown = [k for k in keys if k not in known and not key_kind_by_name(k) and not is_keypoint_key(k)]
    if not unknown or not first:
        return
    for t, n in first.items():
        ep = open_task(tasks[t].path, tasks[t].info).episode(n)
        known |= set(ep.column_names) | set(ep.streams)
    missing = [k for k in unknown if k not in known]
    if missing:
        raise ValueError(f"keys {missing}: no stream or column of that name in {', '.join(str(e.path) for e in tasks)}"
                         f"; the keys that exist: {', '.join(sorted(known))}")


def _column_to_numpy(col: Any, key: str, ep: Episode) -> np.ndarray:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    typ = arr.type
    try:
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):
            return np.asarray(arr.to_pylist(), dtype=object)
        if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
            if arr.null_count:
                raise ValueError(f"{arr.null_count} null rows")
            inner = typ.value_type
            if pa.types.is_list(inner) or pa.types.is_fixed_size_list(inner):
                per_row = np.diff(list_offsets(arr))
                if per_row.size and np.any(per_row != per_row[0]):
                    raise ValueError("ragged list column")
                flat = list_column_to_numpy(arr, depth=2)
                return flat.reshape(len(arr), -1, flat.shape[1]) if len(arr) else flat.reshape(0, 0, 0)
            return list_column_to_numpy(arr, depth=1)
        if pa.types.is_integer(typ):
            if arr.null_count:
                return int_values_to_numpy(arr)
            return np.asarray(arr.to_numpy(zero_copy_only=False))
        return np.asarray(arr.to_numpy(zero_copy_only=False))
    except (ValueError, TypeError, pa.ArrowException) as exc:
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SchemaError(f"cannot be read as one array per row ({text})", column=key, path=ep.files.data,
                          hint="choose another key, or fix the episode (`egopool validate TASK`)") from exc


def _declared_shape(arr: np.ndarray, feature: Any) -> np.ndarray:
    """``arr`` ``(R, D)`` as ``(R, *shape)`` when ``info.json`` declares ``shape`` with several axes whose product is
    ``D`` (multi_device_storage.md: a vector column is stored flat, its feature keeps the shape); else as it is."""
    shape = feature.get("shape") if isinstance(feature, dict) else None
    if (arr.ndim != 2 or not isinstance(shape, list) or len(shape) < 2
            or not all(isinstance(d, int) and d > 0 for d in shape) or int(np.prod(shape)) != arr.shape[1]):
        return arr
    return arr.reshape(arr.shape[0], *shape)


class EpisodeView:
    """One episode as a worker's dataset reads it (see the module docstring).

    Parameters
    ----------
    episode:
        From :meth:`egopool.Task.episode`.
    length:
        Its rows (from the dataset's index).
    """

    def __init__(self, episode: Episode, length: int) -> None:
        self.ep = episode
        self.length = int(length)
        self._names_read: set[str] | None = None  # the data parquet's columns, read when a key is not a stream
        self._streams = episode.streams
        self._kinds: dict[str, str] = {}
        self._cols: dict[str, np.ndarray] = {}
        self._imu: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._traj: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._mirror: EpisodeKeypoints | None = None
        self._params: dict[str, Mapping[str, Any] | None] = {}
        self._params_lock = threading.Lock()

    @property
    def _names(self) -> set[str]:
        if self._names_read is None:
            self._names_read = set(self.ep.column_names)
        return self._names_read

    def kind(self, key: str) -> str:
        """``rgb``, ``depth``, ``force_matrix``, ``imu``, ``trajectory`` or ``column``; ``stream`` for an RGB or
        depth stream in a bucket (its decoder probes which, ``StreamDecoder(kind="auto")``).

        Raises
        ------
        SchemaError
            ``key`` is neither a stream nor a column of this episode.
        """
        k = self._kinds.get(key)
        if k is None:
            if key in self._streams and isinstance(self.ep.task.path, ObjectPath):
                k = "stream"  # probed by its decoder on its own container (Episode.stream_kind would open it again)
            elif key in self._streams:
                k = self.ep.stream_kind(key)
            elif key not in self._names and key in (self.ep.task.info.get("video_extensions") or {}):
                raise SchemaError(f"episode {self.ep.index} has no file for stream {key!r}, which the task declares "
                                  "(meta/info.json video_extensions): the video is missing", column=key,
                                  path=self.ep.files.data,
                                  hint="run `egopool validate TASK` to see what is missing, or filter this episode out")
            elif key not in self._names:
                raise SchemaError(f"is neither a stream nor a column of episode {self.ep.index} (streams "
                                  f"{sorted(self._streams)})", column=key, path=self.ep.files.data,
                                  hint="choose keys every episode has, or filter episodes")
            elif key.endswith("_force_matrix"):
                k = "force_matrix"
            else:
                k = key_kind_by_name(key) or "column"
            self._kinds[key] = k
        return k

    def depth_params(self, key: str) -> Mapping[str, Any] | None:
        """:meth:`Episode.depth_params` of ``key``, read once per view (the threads opening its streams share one
        read of the row)."""
        with self._params_lock:
            if key not in self._params:
                self._params[key] = self.ep.depth_params(key)
            return self._params[key]

    def stream_path(self, key: str) -> TaskPath:
        """File (or PNG16 directory) of stream ``key``."""
        return self.ep.stream_path(key)

    def column(self, key: str) -> np.ndarray:
        """``(R, ...)`` one value per row: numbers as stored (``list<float32>`` -> ``(R, D)`` float32,
        ``list<list<T>>`` of fixed shape -> ``(R, A, B)``; a flat list whose ``info.json`` feature declares a
        shape of several axes, e.g. a hand pose ``[21, 3]`` stored as 63 values, -> ``(R, 21, 3)``), strings as an
        object array."""
        arr = self._cols.get(key)
        if arr is None:
            arr = _declared_shape(_column_to_numpy(self.ep.columns([key]).column(key), key, self.ep),
                                  (self.ep.task.info.get("features") or {}).get(key))
            self._cols[key] = arr
        return arr

    def imu(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ts_ns (K,), values (K, 6), offsets (R + 1,))``: samples by row, by ``imu_ts_ns`` in a row."""
        if self._imu is None:
            s = self.ep.imu_samples()
            order = np.lexsort((s.ts_ns, s.rows))
            rows = s.rows[order]
            offs = np.searchsorted(rows, np.arange(self.length + 1), side="left").astype(np.int64)
            self._imu = (s.ts_ns[order], s.values[order], offs)
        return self._imu

    def trajectory(self, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(points (K, 8) float64, host_ns (K,) int64, offsets (R + 1,))`` of a trajectory column
        (``key`` or its ``_ns`` column), in stored order."""
        col = key[:-3] if key.endswith("_ns") else key
        t = self._traj.get(col)
        if t is None:
            tr = self.ep.trajectory(col)
            offs = np.searchsorted(tr.rows, np.arange(self.length + 1), side="left").astype(np.int64)
            t = self._traj[col] = (tr.points, tr.host_ns, offs)
        return t

    def force_matrices(self, key: str, rows: np.ndarray) -> np.ndarray:
        """``(T, 250, 250, 3)`` float32 mN of ``rows``, decoded with the episode's own scale."""
        lo, hi = int(rows.min()), int(rows.max()) + 1
        return self.ep.force_matrices(key, lo, hi)[rows - lo]

    def keypoints(self, key: str, root: Path | None) -> np.ndarray:
        """``(R, ...)`` a ``keypoints.*`` key's values for every row (:mod:`egopool.dataset.keypoint_keys`),
        from the mirror under ``root`` (None: the CLI's default); read once per episode.

        Raises
        ------
        SchemaError
            The episode has no mirror (hint: ``egopool keypoints extract TASK``).
        FormatError
            A mirror file is broken or lacks a data row's ``frame_index``.
        """
        arr = self._cols.get(key)
        if arr is None:
            if self._mirror is None:
                self._mirror = self.ep.keypoints(root)
            if not self._mirror.exists:
                raise missing_mirror_error(key, self.ep.task.path, self._mirror.directory)
            fi = np.asarray(self.column("frame_index"), dtype=np.int64)
            arr = self._cols[key] = keypoint_rows(self._mirror, key, fi, self.ep.task.path)
        return arr
