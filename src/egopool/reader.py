"""Read a ``pooled_episodes_v1`` task (file_format.md §1–§8, multi_device_storage.md §8.2).

::

    task = egopool.open_task("data/recordings/pick_cup")
    for ep in task.episodes():
        table = ep.table                       # the episode's own schema decides the columns (§6.7)
        traj = ep.trajectory("observation.ego_slam_trajectory")
        traj.points, traj.host_ns, traj.frame  # (K, 8) float64, (K,) int64, frame id

Every file is opened afresh on access (meta rows may be replaced atomically at any
time, §6.1). Errors from pyarrow / PyAV are translated to :class:`EgopoolError`
subclasses naming the file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .arrowutil import list_column_to_numpy, list_offsets
from .codecs.depth import read_depth_frames
from .codecs.video import read_rgb_frames
from .errors import EpisodeNotFoundError, FormatError, SchemaError
from .frames import FRAMES, LEGACY_FRAME
from .layout import EpisodeFiles, TaskLayout, list_task_episodes
from .meta.episodes import read_episode_row
from .meta.info import read_info

__all__ = ["Episode", "Task", "Trajectory", "open_task"]


@dataclass(frozen=True)
class Trajectory:
    """One SLAM trajectory column of one episode (multi_device_storage.md §4.6, §6.6, §8.3).

    Attributes
    ----------
    column:
        ``observation.*slam_trajectory``.
    points:
        ``(K, 8)`` float64 ``[t, x, y, z, qx, qy, qz, qw]``; ``t`` in s of the SLAM sensor
        clock (NOT host time), xyz in m, quaternion xyzw.
    host_ns:
        ``(K,)`` int64 host-monotonic ns of each point from the ``_ns`` column; 0 = no
        stamp; all zeros when the episode has no ``_ns`` column.
    rows:
        ``(K,)`` int64 data row (``frame_index``) each point was attached to.
    frame, frame_axes:
        Coordinate frame; a missing ``frame`` means ``right_forward_up`` (§3.1 rule 1).
    spec:
        The full declaration used (episode ``slam_specs`` first, then ``info.features``).
    """

    column: str
    points: np.ndarray
    host_ns: np.ndarray
    rows: np.ndarray
    frame: str
    frame_axes: dict[str, str]
    spec: dict[str, Any]

    @property
    def has_host_ns(self) -> bool:
        """True when the episode stored a ``_ns`` column for this trajectory."""
        return bool(self.spec.get("_has_ns", False))


def _read_table(path: Path, columns: list[str] | None = None) -> pa.Table:
    try:
        return pq.read_table(path, columns=columns)
    except Exception as exc:  # ArrowInvalid, OSError, ... -> one boundary
        raise FormatError(f"cannot read parquet: {exc}", path=path,
                          hint="the file is truncated or corrupt; run `egopool validate`") from exc


class Episode:
    """One episode of a task. Get it from :meth:`Task.episode` or :meth:`Task.episodes`."""

    def __init__(self, task: Task, files: EpisodeFiles) -> None:
        self.task = task
        self.files = files

    def __repr__(self) -> str:
        return f"Episode(index={self.index}, chunk={self.chunk}, file={self.file})"

    @property
    def index(self) -> int:
        """Global 1-based N."""
        return self.files.index

    @property
    def chunk(self) -> int:
        """Chunk number of N."""
        return self.files.chunk

    @property
    def file(self) -> int:
        """0-based file number of N inside its chunk."""
        return self.files.file

    @property
    def meta(self) -> dict[str, Any]:
        """The ``meta/episodes`` row as a dict, JSON columns decoded, missing columns defaulted (§6.2).

        Raises
        ------
        FormatError
            No meta row for this episode, or it cannot be read.
        """
        if self.files.meta is None:
            raise FormatError(f"episode {self.index} has no meta/episodes row",
                              path=self.task.layout.episodes_file(self.index))
        return read_episode_row(self.files.meta, self.index)

    def _data_path(self) -> Path:
        if self.files.data is None:
            raise FormatError(f"episode {self.index} has no data parquet", path=self.task.layout.data_file(self.index))
        return self.files.data

    @property
    def schema(self) -> pa.Schema:
        """The data parquet's schema: which columns this episode really has (§6.7)."""
        path = self._data_path()
        try:
            return pq.read_schema(path)
        except Exception as exc:
            raise FormatError(f"cannot read parquet schema: {exc}", path=path,
                              hint="the file is truncated or corrupt") from exc

    @property
    def column_names(self) -> list[str]:
        """Column names of this episode's data parquet."""
        return list(self.schema.names)

    @property
    def table(self) -> pa.Table:
        """The whole data parquet as a pyarrow Table (read afresh each time)."""
        return _read_table(self._data_path())

    def columns(self, names: list[str]) -> pa.Table:
        """Only the named columns. Raises SchemaError when one is absent from this episode."""
        have = set(self.column_names)
        missing = [n for n in names if n not in have]
        if missing:
            raise SchemaError(f"not in episode {self.index}'s data parquet", column=missing[0],
                              path=self.files.data)
        return _read_table(self._data_path(), names)

    @property
    def length(self) -> int:
        """Data rows (from parquet metadata, no data read)."""
        path = self._data_path()
        try:
            return int(pq.ParquetFile(path).metadata.num_rows)
        except Exception as exc:
            raise FormatError(f"cannot read parquet footer: {exc}", path=path) from exc

    @property
    def streams(self) -> dict[str, Path]:
        """image_key -> video path, enumerated on disk for this episode (slot renames work, §8)."""
        return dict(self.files.videos)

    def _spec(self, column: str) -> dict[str, Any]:
        spec: dict[str, Any] = dict(self.task.info.get("features", {}).get(column, {}))
        if self.files.meta is not None:
            per_ep = self.meta.get("slam_specs") or {}
            if isinstance(per_ep, Mapping) and column in per_ep:
                spec.update(per_ep[column])
        return spec

    def trajectories(self) -> list[str]:
        """Trajectory columns of this episode (``observation.*slam_trajectory``, §8.2.3)."""
        return sorted(n for n in self.column_names if n.startswith("observation.") and n.endswith("slam_trajectory"))

    def trajectory(self, column: str = "observation.slam_trajectory") -> Trajectory:
        """Decode one trajectory column into points, host stamps and frame.

        Raises
        ------
        SchemaError
            The column is not in this episode, or a row's length is not a multiple of 8,
            or ``_ns`` is not in lockstep with the points.
        """
        names = self.column_names
        if column not in names:
            raise SchemaError(f"not in episode {self.index} (it has {self.trajectories()})", column=column,
                              path=self.files.data)
        ns_col = column + "_ns"
        has_ns = ns_col in names
        t = self.columns([column, ns_col] if has_ns else [column])
        col = t.column(column)
        offs = list_offsets(col)
        flat = np.asarray(pa.chunked_array(col.chunks).combine_chunks().flatten().to_numpy(zero_copy_only=False),
                          dtype=np.float64) if len(col) else np.zeros(0)
        if flat.size % 8 or np.any(offs % 8):
            raise SchemaError("row lengths are not multiples of 8 ([t,x,y,z,qx,qy,qz,qw] per point)", column=column,
                              path=self.files.data)
        points = flat.reshape(-1, 8)
        counts = np.diff(offs) // 8
        rows = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        if has_ns:
            nc = t.column(ns_col)
            host = np.asarray(pa.chunked_array(nc.chunks).combine_chunks().flatten().to_numpy(zero_copy_only=False),
                              dtype=np.int64)
            if not np.array_equal(np.diff(list_offsets(nc)), counts):
                raise SchemaError(f"not in lockstep with {column!r}", column=ns_col, path=self.files.data)
        else:
            host = np.zeros(points.shape[0], dtype=np.int64)
        spec = self._spec(column)
        frame = str(spec.get("frame", LEGACY_FRAME))
        axes = dict(spec.get("frame_axes") or FRAMES.get(frame, {}))
        spec["_has_ns"] = has_ns
        return Trajectory(column, points, host, rows, frame, axes, spec)

    def imu(self) -> tuple[np.ndarray, np.ndarray]:
        """All IMU samples of the episode, flattened across rows (checklist §12.9).

        Returns
        -------
        (ts_ns, samples):
            ``(K,)`` int64 device-clock ns from ``imu_ts_ns`` and ``(K, 6)`` float32
            (gyro xyz rad/s, accel xyz m/s²), in stored order.

        Raises
        ------
        SchemaError
            The episode has no IMU, or ``imu_ts_ns`` is not one-to-one with the samples.
        """
        t = self.columns(["observation.imu", "imu_ts_ns"])
        samples = list_column_to_numpy(t.column("observation.imu"), depth=2).astype(np.float32, copy=False)
        ts_col = t.column("imu_ts_ns")
        ts = np.asarray(pa.chunked_array(ts_col.chunks).combine_chunks().flatten().to_numpy(zero_copy_only=False),
                        dtype=np.int64)
        if ts.shape[0] != samples.shape[0]:
            raise SchemaError(f"{ts.shape[0]} stamps for {samples.shape[0]} samples", column="imu_ts_ns",
                              path=self.files.data)
        return ts, samples.reshape(-1, 6) if samples.size else np.zeros((0, 6), np.float32)

    def _stream_path(self, key: str) -> Path:
        try:
            return self.files.videos[key]
        except KeyError:
            raise SchemaError(f"episode {self.index} has no stream {key!r} (it has {sorted(self.files.videos)})",
                              column=key) from None

    def video(self, key: str) -> Iterator[np.ndarray]:
        """Decode an RGB stream: iterator of uint8 ``(H, W, 3)`` frames."""
        return read_rgb_frames(self._stream_path(key))

    def depth(self, key: str) -> Iterator[np.ndarray]:
        """Decode a depth stream: iterator of uint16 mm ``(H, W)`` frames, holes = 0 (§8).

        The decoder is chosen by probing the file (12-bit HEVC log code or FFV1
        gray16le, dual-stream legacy MKV included), parameters from the file itself
        or the episode's ``video_codec`` entry.
        """
        path = self._stream_path(key)
        params: Mapping[str, Any] | None = None
        if self.files.meta is not None:
            vc = self.meta.get("video_codec") or {}
            params = vc.get(key) if isinstance(vc, Mapping) else None
        return read_depth_frames(path, params)


class Task:
    """A ``pooled_episodes_v1`` task directory. Get one from :func:`open_task`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._info = read_info(self.path)
        self.layout = TaskLayout.from_info(self.path, self._info)

    def __repr__(self) -> str:
        return f"Task({str(self.path)!r})"

    @property
    def info(self) -> dict[str, Any]:
        """``meta/info.json`` as loaded when the task was opened."""
        return self._info

    @property
    def name(self) -> str:
        """``task_name`` from info.json (falls back to the directory name)."""
        return str(self._info.get("task_name") or self.path.name)

    def episode_files(self) -> list[EpisodeFiles]:
        """Every episode file group, ascending N (:func:`list_task_episodes`)."""
        return list_task_episodes(self.path, self.layout)

    def episodes(self) -> list[Episode]:
        """Every episode, ascending N."""
        return [Episode(self, g) for g in self.episode_files()]

    def episode(self, index: int) -> Episode:
        """Episode with global N = ``index``.

        Raises
        ------
        EpisodeNotFoundError
            No file of episode N exists.
        """
        for g in self.episode_files():
            if g.index == index:
                return Episode(self, g)
        raise EpisodeNotFoundError(self.path, index)

    @cached_property
    def tasks(self) -> list[dict[str, Any]]:
        """``tasks.jsonl`` lines."""
        from .meta.tasks import read_tasks

        return read_tasks(self.path)


def open_task(path: str | Path) -> Task:
    """Open a task directory.

    Raises
    ------
    FormatError
        ``meta/info.json`` missing or unreadable, or ``format`` missing/unknown.
    LegacyLayoutError
        The v1.0 per-session layout (named as such).
    """
    return Task(path)
