"""One episode of a task: its data parquet, meta row, trajectories, IMU, streams and force matrices
(file_format.md §1–§8, multi_device_storage.md §8.2).

Get an :class:`Episode` from :meth:`egopool.read.reader.Task.episode` or ``Task.episodes``. Every
file is opened afresh on access (meta rows may be replaced atomically at any time, §6.1); errors
from pyarrow / PyAV become :class:`~egopool.errors.EgopoolError` subclasses naming the file.

Imports run one way: ``reader`` (the task) -> ``episode`` -> ``forces``, ``trajectory``; the
episode sees its task through :class:`TaskView`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa

from .._safe_read import open_parquet, read_parquet, read_parquet_schema
from ..arrowutil import (IMU, NS_LIST, NS_SCALAR, TRAJECTORY, Physical, int_values_to_numpy, list_column_to_numpy,
                         list_offsets)
from . import forces as episode_forces
from ..codecs.force_matrix import ResolvedForceMatrixSpec
from ..codecs.timebase import (PAIRED_BY_ROW, PAIRED_BY_STAMPS, SAME_CLOCK_NS, ImuSamples, TrajectoryPairing,
                               expand_imu, frame_drop_total, lift_to_reference, looks_truncated32,
                               own_row_offset, unwrap_ns)
from ..errors import CodecError, FormatError, SchemaError
from ..frames import FRAMES, LEGACY_FRAME
from ..layout import EpisodeFiles, TaskLayout
from ..meta.episodes import read_episode_row
from ..storage import ObjectPath, TaskPath
from .trajectory import Trajectory

if TYPE_CHECKING:
    from ..keypoints.mirror import EpisodeKeypoints

__all__ = ["Episode", "TaskView"]


class TaskView(Protocol):
    """What an :class:`Episode` reads of its task (:class:`egopool.read.reader.Task` is one)."""

    @property
    def path(self) -> TaskPath: ...

    @property
    def name(self) -> str: ...

    @property
    def info(self) -> dict[str, Any]: ...

    @property
    def layout(self) -> TaskLayout: ...


def _read_table(path: TaskPath, columns: list[str] | None = None) -> pa.Table:
    return read_parquet(path, columns, what="data parquet",
                        hint="the file is truncated or corrupt; run `egopool validate TASK`")


@contextlib.contextmanager
def _decoding(column: str, path: TaskPath | None) -> Iterator[None]:
    """Values that do not decode as the column's kind (ragged rows, nulls where numbers belong)
    become a SchemaError naming the column and file, never a numpy/pyarrow error."""
    try:
        yield
    except (ValueError, TypeError, AttributeError, IndexError, pa.ArrowException) as exc:
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SchemaError(f"values cannot be decoded ({text})", column=column, path=path,
                          hint="run `egopool validate TASK` for the full check") from exc



class Episode:
    """One episode of a task. Get it from :meth:`~egopool.read.reader.Task.episode` or ``Task.episodes``."""

    def __init__(self, task: TaskView, files: EpisodeFiles[TaskPath]) -> None:
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

    def _data_path(self) -> TaskPath:
        if self.files.data is None:
            raise FormatError(f"episode {self.index} has no data parquet", path=self.task.layout.data_file(self.index))
        return self.files.data

    @property
    def schema(self) -> pa.Schema:
        """The data parquet's schema: which columns this episode really has (§6.7)."""
        return read_parquet_schema(self._data_path(), what="data parquet", hint="the file is truncated or corrupt")

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

    def typed_columns(self, expected: Mapping[str, Physical]) -> pa.Table:
        """Only the named columns, after checking each is stored as the physical type its kind needs.

        Parameters
        ----------
        expected:
            Column name -> :class:`~egopool.arrowutil.Physical` (e.g. ``NS_SCALAR`` for
            ``hardware_ns``, ``TRAJECTORY`` for a trajectory).

        Raises
        ------
        SchemaError
            A column is absent, or stored as another type (``hardware_ns`` as ``list<float>``
            or null type, a ``_ns`` column as int32, a trajectory as ``list<list<float64>>``);
            names the column and the file.
        """
        schema = self.schema
        for name, want in expected.items():
            if name not in schema.names:
                raise SchemaError(f"not in episode {self.index}'s data parquet", column=name, path=self.files.data)
            typ = schema.field(name).type
            if not want.matches(typ):
                raise SchemaError(f"is stored as {typ}, egopool reads it as {want.text}", column=name,
                                  path=self.files.data, hint="run `egopool validate TASK` for the full check")
        return _read_table(self._data_path(), list(expected))

    @property
    def length(self) -> int:
        """Data rows (from parquet metadata, no data read)."""
        pf = open_parquet(self._data_path(), what="data parquet")
        try:
            return int(pf.metadata.num_rows)
        finally:
            pf.close()

    @property
    def streams(self) -> dict[str, TaskPath]:
        """image_key -> video path, enumerated on disk for this episode (slot renames work, §8)."""
        return dict(self.files.videos)

    def _spec(self, column: str) -> tuple[dict[str, Any], TaskPath]:
        """A trajectory column's declaration and the file it came from: the episode row's
        ``slam_specs`` entry over ``info.features`` (multi_device_storage.md §7.3). An entry that
        names a ``frame`` without ``frame_axes`` takes the axes of that frame, never the
        task-level axes of another frame."""
        info_path = self.task.path / "meta" / "info.json"
        features = self.task.info.get("features")
        feat = features.get(column) if isinstance(features, Mapping) else None
        spec: dict[str, Any] = dict(feat) if isinstance(feat, Mapping) else {}
        source = info_path
        if self.files.meta is not None:
            per_ep = self.meta.get("slam_specs") or {}
            if isinstance(per_ep, Mapping) and column in per_ep:
                entry = per_ep[column]
                if not isinstance(entry, Mapping):
                    raise SchemaError(f"slam_specs entry is {type(entry).__name__} {entry!r}, not an object",
                                      column=column, path=self.files.meta,
                                      hint='write {"frame": ..., "frame_axes": {...}} for it in the episode row')
                if "frame" in entry and "frame_axes" not in entry:
                    spec.pop("frame_axes", None)
                spec.update(entry)
                source = self.files.meta
        return spec, source

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
        if column not in self.trajectories():
            raise SchemaError(f"is not a trajectory column (observation.*slam_trajectory, list<float64>); "
                              f"episode {self.index} has {self.trajectories()}", column=column, path=self.files.data)
        ns_col = column + "_ns"
        has_ns = ns_col in names
        spec, source = self._spec(column)
        t = self.typed_columns({column: TRAJECTORY, ns_col: NS_LIST} if has_ns else {column: TRAJECTORY})
        col = t.column(column)
        with _decoding(column, self.files.data):
            offs = list_offsets(col)
            flat = np.asarray(pa.chunked_array(col.chunks, type=col.type).combine_chunks().flatten()
                              .to_numpy(zero_copy_only=False), dtype=np.float64) if len(col) else np.zeros(0)
        if flat.size % 8 or np.any(offs % 8):
            raise SchemaError("row lengths are not multiples of 8 ([t,x,y,z,qx,qy,qz,qw] per point)", column=column,
                              path=self.files.data)
        points = flat.reshape(-1, 8)
        counts = np.diff(offs) // 8
        rows = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        if has_ns:
            nc = t.column(ns_col)
            with _decoding(ns_col, self.files.data):
                host = int_values_to_numpy(nc, flatten=True)
                ns_counts = np.diff(list_offsets(nc))
            if not np.array_equal(ns_counts, counts):
                raise SchemaError(f"not in lockstep with {column!r}", column=ns_col, path=self.files.data)
        else:
            host = np.zeros(points.shape[0], dtype=np.int64)
        frame = str(spec.get("frame", LEGACY_FRAME))
        declared = spec.get("frame_axes")
        if declared is not None and not isinstance(declared, Mapping):
            raise SchemaError(f"frame_axes is {declared!r}, not an object of direction words"
                              + (" (slam_specs)" if source == self.files.meta else " (info.json features)"),
                              column=column, path=source, hint='e.g. {"+X": "down", "+Y": "left", "+Z": "forward"}')
        axes = dict(declared or FRAMES.get(frame, {}))
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
        t = self.typed_columns({"observation.imu": IMU, "imu_ts_ns": NS_LIST})
        with _decoding("observation.imu", self.files.data):
            imu = t.column("observation.imu")
            samples = (list_column_to_numpy(imu, depth=2) if len(imu) else np.zeros((0, 6))).astype(np.float32,
                                                                                                  copy=False)
        if samples.size and samples.shape[1] != 6:
            raise SchemaError(f"samples have {samples.shape[1]} values, not 6 (gyro xyz, accel xyz)",
                              column="observation.imu", path=self.files.data)
        with _decoding("imu_ts_ns", self.files.data):
            ts = int_values_to_numpy(t.column("imu_ts_ns"), flatten=True)
        if ts.shape[0] != samples.shape[0]:
            raise SchemaError(f"{ts.shape[0]} stamps for {samples.shape[0]} samples", column="imu_ts_ns",
                              path=self.files.data)
        return ts, samples.reshape(-1, 6) if samples.size else np.zeros((0, 6), np.float32)

    def imu_samples(self) -> ImuSamples:
        """Every IMU sample flattened and aligned by ``imu_ts_ns``, with its data row (checklist §12.9).

        Returns
        -------
        ImuSamples
            ``ts_ns`` (K,) int64 device ns, ``values`` (K, 6) float32, ``rows`` (K,) int64,
            in stored order (``.sorted()`` orders by stamp).

        Raises
        ------
        SchemaError
            No IMU in this episode, or a row whose stamp count differs from its sample count.
        """
        t = self.typed_columns({"observation.imu": IMU, "imu_ts_ns": NS_LIST})
        imu, ts = t.column("observation.imu"), t.column("imu_ts_ns")
        with _decoding("observation.imu", self.files.data):
            samples = list_column_to_numpy(imu, depth=2) if len(imu) else np.zeros((0, 6), np.float32)
            imu_counts = np.diff(list_offsets(imu))
        if samples.size and samples.shape[1] != 6:
            raise SchemaError(f"samples have {samples.shape[1]} values, not 6 (gyro xyz, accel xyz)",
                              column="observation.imu", path=self.files.data)
        with _decoding("imu_ts_ns", self.files.data):
            flat_ts = int_values_to_numpy(ts, flatten=True)
            ts_counts = np.diff(list_offsets(ts))
        try:
            return expand_imu(imu_counts, ts_counts, flat_ts,
                              samples.reshape(-1, 6) if samples.size else np.zeros((0, 6), np.float32))
        except CodecError as exc:
            raise SchemaError(exc.message, column="imu_ts_ns", path=self.files.data) from exc

    def hardware_ns(self, unwrap: bool = True) -> np.ndarray:
        """``(R,)`` int64 ``hardware_ns`` per row; 0 (or null) = unknown.

        With ``unwrap`` (default), a series truncated to signed 32 bits (early gripper RGB,
        §7.3) is unwrapped with period 2^32 ns; other series are returned as stored.

        Raises
        ------
        SchemaError
            No ``hardware_ns`` column, or it is not stored as int64 (names column and file).
        """
        col = self.typed_columns({"hardware_ns": NS_SCALAR}).column("hardware_ns")
        with _decoding("hardware_ns", self.files.data):
            hw = int_values_to_numpy(col)
        return unwrap_ns(hw) if unwrap and looks_truncated32(hw) else hw

    def pair_trajectory(self, column: str = "observation.slam_trajectory",
                        max_dt_ns: int | None = None) -> TrajectoryPairing:
        """Data row of each point of ``column``, and how it was paired (§8.2.4, docs/decisions.md C9).

        On one host clock (``_ns`` and ``hardware_ns`` both host-monotonic, §5.4), each point
        pairs with the nearest ``hardware_ns`` (``paired_by = "hardware_ns"``). A truncated
        32-bit ``hardware_ns`` is unwrapped and lifted by whole 2^32 laps to the trajectory's
        full-width stamps (an integer lap count, not a fitted offset). A point stamped more
        than one frame interval (``1 / fps``) before the first or after the last stamped row
        has no frame to pair with and stays unpaired.

        When there is no common clock, every point gets the row it was attached to
        (``paired_by = "row"``, the row of the tick whose window it arrived in, §5.3): when
        the row clock is a device clock (the master slot of an S80 or D435 rig, §3.1: its
        points sit seconds or more from their own rows, beyond
        :data:`~egopool.codecs.timebase.SAME_CLOCK_NS`), when the trajectory has no ``_ns``
        stamps (§5.5 "只能退回行号粗对齐") or when no row has a ``hardware_ns``. ``reason``
        says which. So the result is never "all unpaired" without saying why.

        Parameters
        ----------
        column:
            A trajectory column of this episode.
        max_dt_ns:
            With ``"hardware_ns"`` pairing, leave points farther than this (ns) from every row
            unpaired.

        Returns
        -------
        TrajectoryPairing
            ``rows`` ``(K,)`` int64 (-1 = unpaired), ``paired_by``, ``reason``, ``offset_ns``.

        Raises
        ------
        SchemaError
            The column is not a trajectory of this episode (see :meth:`trajectory`).
        """
        traj = self.trajectory(column)
        stamped = traj.host_ns != 0
        if not stamped.any():
            why = "the trajectory has no _ns column" if not traj.has_host_ns else "no point has a _ns stamp"
            return TrajectoryPairing(traj.rows.copy(), PAIRED_BY_ROW,
                                     f"{why}: each point keeps the row it was attached to (multi_device_storage.md "
                                     "§5.5, row-level alignment only)")
        hw = self.hardware_ns(unwrap=False)
        nz = hw[hw != 0]
        narrow = bool(nz.size) and int(nz.min()) >= -(1 << 31) and int(nz.max()) < (1 << 31)
        if looks_truncated32(hw):
            hw = unwrap_ns(hw)
        if narrow and int(np.abs(traj.host_ns[stamped]).max()) >= (1 << 31):
            ref = np.zeros_like(hw)
            ref[traj.rows[stamped]] = traj.host_ns[stamped]
            if np.any((ref != 0) & (hw != 0)):
                hw = lift_to_reference(hw, ref)
        offset = own_row_offset(traj.host_ns, traj.rows, hw)
        if offset is None:
            return TrajectoryPairing(traj.rows.copy(), PAIRED_BY_ROW,
                                     "no stamped point's own row has a hardware_ns: each point keeps the row it was "
                                     "attached to")
        if abs(offset) > SAME_CLOCK_NS:
            return TrajectoryPairing(traj.rows.copy(), PAIRED_BY_ROW,
                                     f"hardware_ns is not on the trajectory's host clock (its points are "
                                     f"{offset / 1e9:+.3f} s from their own rows; a device-clock master slot such as "
                                     "an S80 or D435, multi_device_storage.md §3.1/§5.4): each point keeps the row "
                                     "it was attached to", offset)
        rows = traj.pair_rows(hw, max_dt_ns)
        nz = hw[hw != 0]
        margin = self._frame_interval_ns(nz)
        if nz.size and margin is not None:
            outside = stamped & ((traj.host_ns < nz.min() - margin) | (traj.host_ns > nz.max() + margin))
            rows[outside] = -1
        return TrajectoryPairing(rows, PAIRED_BY_STAMPS, "nearest hardware_ns to each point's _ns stamp, one host "
                                                         "clock (multi_device_storage.md §5.4)", offset)

    def _frame_interval_ns(self, stamps: np.ndarray) -> float | None:
        """Nominal frame interval: ``1e9 / info.fps``, else the median step of ``stamps``."""
        fps = self.task.info.get("fps")
        if isinstance(fps, (int, float)) and not isinstance(fps, bool) and np.isfinite(float(fps)) and fps > 0:
            return 1e9 / float(fps)
        steps = np.diff(np.sort(stamps))
        steps = steps[steps > 0]
        return float(np.median(steps)) if steps.size else None

    def force_matrix_spec(self, column: str) -> ResolvedForceMatrixSpec:
        """Codec of a force-matrix column and which source decided its scale (§7.2.1):
        ``"force_matrix_specs"`` → ``"info.features"`` → ``"default"`` (1)."""
        return episode_forces.force_matrix_spec(self, column)

    def force_matrix(self, column: str, row: int) -> np.ndarray:
        """One row's ``(250, 250, 3)`` float32 mN frame (file_format.md §7.2.1); all zero when the
        row has no sample. Reads only the parquet row group holding ``row``."""
        return episode_forces.force_matrix(self, column, row)

    def force_matrices(self, column: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows ``[start, stop)`` (default all) as ``(R, 250, 250, 3)`` float32 mN, vectorised.
        Rows without a sample are all zero (see :meth:`force_matrix_sampled`)."""
        return episode_forces.force_matrices(self, column, start, stop)

    def force_matrix_sampled(self, column: str) -> np.ndarray:
        """``(R,)`` bool: rows holding a real matrix sample (non-zero frame, ``_ns != 0``)."""
        return episode_forces.force_matrix_sampled(self, column)

    def force_matrix_fz_ratio(self, column: str, force_column: str | None = None) -> np.ndarray:
        """``(R,)`` float64 ``Σ(fz plane) / force fz`` per row (§7.2.1 self-check); NaN without samples."""
        return episode_forces.force_matrix_fz_ratio(self, column, force_column)

    def frame_drops(self) -> int:
        """Sum of the frame-drop counters in ``drop_stats`` (``*_ms``/``*_count`` keys excluded, §6.2)."""
        stats = self.meta.get("drop_stats") or {}
        return frame_drop_total(stats if isinstance(stats, Mapping) else {})

    def stream_path(self, key: str) -> TaskPath:
        """File (or PNG16 directory) of stream ``key``; ``info.video_extensions`` picks among
        same-named files with different extensions (file_format.md §3, §8)."""
        path = self._stream_path(key)
        ext = self._declared_ext(key)
        if ext:
            preferred = self.task.layout.video_file(self.index, key, ext)
            if preferred != path and preferred.exists():  # (the found file itself needs no check)
                return preferred
        return path

    def _declared_ext(self, key: str) -> str | None:
        """``info.video_extensions[key]`` when it is a usable string (a malformed declaration is
        left to ``egopool validate``; the file is probed either way, §8)."""
        exts = self.task.info.get("video_extensions")
        ext = exts.get(key) if isinstance(exts, Mapping) else None
        return ext if isinstance(ext, str) and ext and "/" not in ext else None

    def _stream_path(self, key: str) -> TaskPath:
        try:
            return self.files.videos[key]
        except KeyError:
            raise SchemaError(f"episode {self.index} has no stream {key!r} (it has {sorted(self.files.videos)})",
                              column=key) from None

    def video(self, key: str) -> Iterator[np.ndarray]:
        """Decode an RGB stream: iterator of uint8 ``(H, W, 3)`` frames.

        Raises
        ------
        SchemaError
            No such stream, or ``key`` is a depth stream (gray pixels, a PNG16 directory or
            the legacy dual-stream MKV): decode it with :meth:`depth`, which returns mm.
        """
        path = self.stream_path(key)
        if self.stream_kind(key) == "depth":
            if path.is_dir():
                what = "a PNG16 depth directory"
            else:
                from ..codecs.video import video_info  # PyAV: loaded by the readers of frames only

                probe = video_info(path)
                what = f"a depth stream ({probe.get('codec')} {probe.get('pix_fmt')})"
            raise SchemaError(f"stream {key!r} is {what}, not an RGB video", path=path,
                              hint=f"use ep.depth({key!r}) for uint16 mm frames")
        from ..codecs.video import read_rgb_frames  # PyAV: loaded by the readers of frames only

        return read_rgb_frames(path)

    def stream_kind(self, key: str) -> str:
        """``"rgb"`` (decode with :meth:`video`) or ``"depth"`` (:meth:`depth`): a PNG16 directory,
        gray pixels or the legacy dual-stream MKV are depth (§8), by probing the file.

        Raises
        ------
        SchemaError
            No such stream.
        CodecError
            The file cannot be probed.
        """
        path = self.stream_path(key)
        if path.is_dir():
            return "depth"
        from ..codecs.video import video_info  # PyAV: loaded by the readers of frames only

        probe = video_info(path)
        gray = str(probe.get("pix_fmt") or "").startswith("gray")
        return "depth" if gray or probe.get("video_streams", 1) > 1 else "rgb"

    def depth_params(self, key: str) -> Mapping[str, Any] | None:
        """The episode's ``video_codec`` entry of depth stream ``key`` (log-code parameters the
        container's own comment may override, §8), or None."""
        if self.files.meta is None:
            return None
        vc = self.meta.get("video_codec") or {}
        params = vc.get(key) if isinstance(vc, Mapping) else None
        return params if isinstance(params, Mapping) else None

    def declared_ext(self, key: str) -> str | None:
        """``info.video_extensions[key]`` when it is a usable string, else None."""
        return self._declared_ext(key)

    def keypoints(self, root: str | os.PathLike[str] | None = None) -> EpisodeKeypoints:
        """What the keypoints mirror ``<root>/<task>/episode_{N:06d}/`` holds (file_format.md §10).

        Members (2-D pixels, 3-D world landmarks in m, labels) are None when their file does not
        exist; rows are keyed by ``frame_index``. ``root`` defaults to ``keypoints_output`` beside
        the recordings root (:mod:`egopool.keypoints.mirror`). Raises FormatError for a broken file.
        """
        from ..keypoints.mirror import episode_mirror_dir, read_episode_keypoints

        task = self.task.path  # the mirror is named after the task, in a bucket too (by its URI)
        mirror_root = None if root is None else Path(root)
        return read_episode_keypoints(episode_mirror_dir(task.uri if isinstance(task, ObjectPath) else task, self.index,
                                                         mirror_root))

    def depth(self, key: str) -> Iterator[np.ndarray]:
        """Decode a depth stream: iterator of uint16 mm ``(H, W)`` frames, holes = 0 (§8).

        The decoder is chosen by ``video_extensions`` and probing the file (12-bit HEVC
        log code, FFV1 gray16le, the legacy v1.0.14 dual-stream MKV, a legacy PNG16
        directory), never by the extension alone; log-code parameters from the file
        itself or the episode's ``video_codec`` entry.
        """
        from ..codecs.depth import read_depth_frames  # PyAV: loaded by the readers of frames only

        return read_depth_frames(self.stream_path(key), self.depth_params(key), ext=self._declared_ext(key))

