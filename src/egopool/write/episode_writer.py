"""One episode being recorded: rows, streams, publish on finish (DESIGN §5, §6).

Data rows are written in zstd row groups to a dot-temp parquet, videos to dot-temp
files; ``finish`` publishes videos, then data, then the ``meta/episodes`` row, each
with fsync + ``os.replace``, then merges ``info.json`` and ``stats.json`` under the
task lock. A crash never leaves a partial file under a final name. Get an
:class:`EpisodeWriter` from :meth:`egopool.write.task_writer.TaskWriter.begin_episode`.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import checks
from .._atomic import atomic_write_json, publish, task_lock, temp_path_for
from ..codecs.depth import DepthEncoder, LogDepthCodec, check_depth_codec, hevc12_available
from ..codecs.video import RgbEncoder
from ..codecs.video_copy import VideoCopy, VideoSource, check_copy_frames
from ..errors import CodecError, EgopoolError, MetaUpdateError, SchemaError, StorageError, ValueChangedWarning
from ..meta import markers
from ..meta.drop_stats import (changed_value_notes, clipped_key, encode_failed_key, nonfinite_key, rejected_key,
                               saturated_key)
from ..meta.episodes import write_episode_row
from ..meta.stats import StatsBlock
from .recovery import clear_pending, write_pending
from .stream_encoder import EncoderThread
from ..schema import ALWAYS_KEY_COLUMNS, ColumnSpec, key_column, vector_column
from ..storage import ObjectPath
from .task_meta import merge_task_meta

if TYPE_CHECKING:
    from ..layout import TaskLayout


class EpisodeOwner(Protocol):
    """What an :class:`EpisodeWriter` needs of the task writer that opened it (imports run one way:
    ``task_writer`` -> ``episode_writer``). :class:`egopool.write.task_writer.TaskWriter` is the one
    implementation."""

    task_dir: Path
    layout: TaskLayout
    fps: float
    app_version: str

    def note_taken(self, index: int) -> None:
        """N is committed (its episodes row exists); called under the task lock."""

    def register(self, index: int, paths: Sequence[Path], *, warn: bool = True) -> str | None:
        """Record a published episode in the registry; the failure text (warned when ``warn``), or None
        (never raises)."""

__all__ = ["EpisodeResult", "EpisodeWriter", "StreamSpec"]

_ROW_GROUP_ROWS = 256
_ROW_GROUP_BYTES = 32 << 20


@dataclass(frozen=True)
class StreamSpec:
    """One video stream of an episode (file_format.md §8, multi_device_storage.md §4.8).

    Attributes
    ----------
    image_key:
        Slot name, the directory under ``videos/chunk-NNN/``.
    kind:
        ``"rgb"`` (uint8 ``(H, W, 3)`` or gray ``(H, W)``) or ``"depth"`` (uint16 mm ``(H, W)``).
    width, height:
        Frame size in pixels.
    fps:
        Stream rate when it differs from the task fps (written into ``cameras``, §6.3).
    codec:
        RGB: ``"h264"`` (default) or ``"hevc"``. Depth: ``"hevc12"`` (default; falls back
        to ``"ffv1"`` when libx265 lacks gray12le) or ``"ffv1"`` (lossless).
    master_slot:
        Depth only: the RGB slot it follows (informational; one frame per row either way).
    depth_params:
        Log-code range for ``hevc12`` (default 100..20000 mm).
    preset:
        x264 / x265 speed preset (None: the encoder's default, docs/decisions.md #11, R12);
        recorded in the episode's ``video_codec``.
    source:
        RGB only: copy this encoded H.264/HEVC video (or a time window of it) as the stream
        instead of encoding frames (stream copy, :mod:`egopool.codecs.video_copy`). Rows pass
        no image for it; at finish it must hold exactly one frame per row.
    """

    image_key: str
    kind: str
    width: int
    height: int
    fps: float | None = None
    codec: str | None = None
    master_slot: str | None = None
    depth_params: LogDepthCodec | None = None
    preset: str | None = None
    source: VideoSource | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("rgb", "depth"):
            raise SchemaError(f"stream {self.image_key!r}: kind must be 'rgb' or 'depth', got {self.kind!r}")
        if not self.image_key or "/" in self.image_key or self.image_key.startswith((".", "_")):
            raise SchemaError(f"invalid image_key {self.image_key!r}",
                              hint="slot names may not contain '/' or start with '.' or '_'")
        if self.width <= 0 or self.height <= 0:
            raise SchemaError(f"stream {self.image_key!r}: size must be positive, got {self.width}x{self.height}")
        if self.fps is not None:
            checks.check_positive_number(self.fps, f"stream {self.image_key!r}: fps")
        if self.kind == "depth" and self.codec is not None:
            check_depth_codec(self.codec)
        if self.source is not None and self.kind != "rgb":
            raise SchemaError(f"stream {self.image_key!r}: only RGB streams can be copied from a source video")

    def codec_ext(self) -> tuple[str, str]:
        """``(codec, file extension)`` this stream is written with (hevc12 depth falls back to ffv1/mkv
        when libx265 lacks gray12le)."""
        if self.kind == "rgb":
            return ("copy" if self.source is not None else self.codec or "h264"), "mp4"
        codec = self.codec or "hevc12"
        if codec == "hevc12" and not hevc12_available():
            codec = "ffv1"
        return codec, DepthEncoder.ext_for(codec)


@dataclass(frozen=True)
class EpisodeResult:
    """What :meth:`EpisodeWriter.finish` published.

    Attributes
    ----------
    index:
        Global 1-based N. ``chunk``/``file`` as in the paths.
    length:
        Data rows (= frames of every stream).
    paths:
        Every published file.
    registry_error:
        Why the episode could not be recorded in ``pipeline.db`` (its files are
        published all the same), or None.
    notes:
        One line per kind of value stored otherwise than given (rejected samples,
        saturated force cells, clipped depth; counted in ``drop_stats``,
        :func:`egopool.meta.drop_stats.changed_value_notes`), with the first reason.
    drop_stats:
        The episode row's ``drop_stats``.
    """

    index: int
    chunk: int
    file: int
    length: int
    paths: tuple[Path | ObjectPath, ...]
    registry_error: str | None = None
    notes: tuple[str, ...] = ()
    drop_stats: Mapping[str, int | float] = field(default_factory=dict)


def _fills(spec: ColumnSpec, value: Any) -> bool:
    """Whether a row's value makes a sparse column "appear" in the episode (decisions.md #2).

    A variable-length column appears with its first item (``[]`` = no new point/sample,
    multi_device_storage.md §4.6); a trajectory ``_ns`` column with its first non-zero
    stamp (0 = no stamp; "全段无戳不建 _ns 列", §8.1 rule 3). Any other value counts.
    """
    if spec.kind == "slam_trajectory_ns":
        return bool(np.any(value))
    if spec.storage == "list_list" or (spec.storage == "list" and spec.length is None):
        return bool(np.size(value))
    return True


def _leaf_paths(name: str, typ: pa.DataType) -> list[str]:
    """Parquet leaf column paths of an arrow field (lists nest as ``<name>.list.element``), the names
    pyarrow's per-column writer options match."""
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return _leaf_paths(f"{name}.list.element", typ.value_type)
    return [name]


def _strip_hint(line: str) -> str:
    """An error line without its trailing ``(hint)``, to quote it inside another message."""
    return re.sub(r" \([^()]*\)$", "", line)


def _int64(value: Any) -> int:
    """A device-clock stamp as a Python int in int64 (file_format.md §7.1), else SchemaError."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float, np.floating)):
        raise SchemaError(f"must be an integer ns stamp, got {type(value).__name__} {value!r:.40}",
                          column="hardware_ns")
    if isinstance(value, (float, np.floating)) and not (np.isfinite(value) and float(value).is_integer()):
        raise SchemaError(f"must be an integer ns stamp, got {value!r}", column="hardware_ns")
    v = int(value)
    if not -(2 ** 63) <= v < 2 ** 63:
        raise SchemaError(f"{v} is outside int64", column="hardware_ns")
    return v


@dataclass
class _Stream:
    spec: StreamSpec
    encoder: RgbEncoder | DepthEncoder | VideoCopy
    temp: Path
    final: Path
    last: Any = None
    repeated: int = 0
    worker: EncoderThread | None = None

    def encode(self, frame: Any) -> None:
        if self.worker is not None:
            self.worker.submit(frame)
        else:
            self.encoder.encode(frame)

    def close(self) -> dict[str, Any]:
        return self.worker.close() if self.worker is not None else self.encoder.close()

    def abort(self) -> None:
        if self.worker is not None:
            self.worker.abort()
        else:
            self.encoder.abort()


@dataclass
class _Buffers:
    values: dict[str, list[Any]] = field(default_factory=dict)
    rows: int = 0
    nbytes: int = 0


class EpisodeWriter:
    """One episode being recorded; get it from :meth:`TaskWriter.begin_episode`.

    Attributes
    ----------
    index, chunk, file:
        Global N and its ``(chunk, file)``.
    drop_stats:
        Counters written as the episode row's ``drop_stats`` JSON (§6.2). Frame-drop
        counts use plain keys; durations and event counts end in ``_ms`` / ``_count``.
        Values stored otherwise than given are counted here too (:mod:`egopool.meta.drop_stats`).
    warn_changes:
        :meth:`finish` warns (:class:`~egopool.errors.ValueChangedWarning`) once per kind of
        changed value (default True; the recorder warns from its caller's thread instead).
    """

    def __init__(self, task: EpisodeOwner, index: int, columns: Sequence[ColumnSpec], streams: Sequence[StreamSpec],
                 *, devices: Sequence[Mapping[str, Any]], device_names: Mapping[str, str] | None,
                 calibration: Mapping[str, Any] | None, sensors: Sequence[str] | None, sensor_dim: int | None,
                 info_extra: Mapping[str, Any] | None, created_at: float | None) -> None:
        self.task, self.index = task, index
        self.chunk, self.file = task.layout.chunk_file(index)
        self.fps = task.fps
        self.created_at = float(time.time() if created_at is None else created_at)
        self.drop_stats: dict[str, int | float] = {}
        self.warn_changes = True
        self._reasons: dict[str, str] = {}  # drop_stats key -> first reason (for the notes)
        self._decl = {"devices": [dict(d) for d in devices], "device_names": dict(device_names or {}),
                      "calibration": dict(calibration or {}), "sensors": list(sensors or []),
                      "sensor_dim": sensor_dim, "info_extra": dict(info_extra or {})}
        specs: dict[str, ColumnSpec] = {}
        for name in ALWAYS_KEY_COLUMNS:
            specs[name] = key_column(name)
        specs["action"] = vector_column("action", [1], sparse=False)
        for spec in columns:
            if spec.name in specs:
                raise SchemaError("declared twice (key columns and action are added for you)", column=spec.name)
            specs[spec.name] = spec
        for spec in specs.values():
            if spec.lockstep and spec.lockstep[0] not in specs:
                raise SchemaError(f"runs in lockstep with {spec.lockstep[0]!r}, which is not declared", column=spec.name)
        self._specs = specs
        self._seen: set[str] = set(ALWAYS_KEY_COLUMNS) | {n for n, s in specs.items() if not s.sparse}
        self._schema = pa.schema([pa.field(n, s.arrow_type) for n, s in specs.items()])
        self._buf = _Buffers({n: [] for n in specs})
        self._stats: dict[str, StatsBlock] = {}
        self._stats_cols = {f"observation.{s}" for s in self._decl["sensors"]} | {"observation.imu"}
        self._rows = 0
        self._last_ts: float | None = None
        self._first_ts = 0.0
        self._closed = False
        self._broken: str | None = None
        self._lenient = False  # some add_frame(reject_bad=True): finish() drops a failed stream too
        self._meta_error: MetaUpdateError | None = None
        self._data_final = task.layout.data_file(index)
        self._data_final.parent.mkdir(parents=True, exist_ok=True)
        self._data_temp = temp_path_for(self._data_final)
        # Force matrices (187500 int16 diffs a row) skip dictionary encoding: it never pays off
        # on them and halves the write rate (benchmarks/bench_recorder.py). pyarrow matches these
        # lists by leaf path ("<name>.list.element"), so list columns have never been dictionary-
        # encoded (decisions R8, R25): said here as it is. Force matrices skip min/max statistics
        # too (nobody filters on them; 10 % of their write cost, R25).
        self._dict_cols = [n for n, s in specs.items() if s.storage in ("scalar", "string")]
        self._stats_paths = {n: _leaf_paths(n, self._schema.field(n).type) for n, s in specs.items()
                             if s.kind != "force_matrix"}
        try:
            self._pq = pq.ParquetWriter(str(self._data_temp), self._schema, compression="zstd",
                                        use_dictionary=self._dict_cols,
                                        write_statistics=[p for ps in self._stats_paths.values() for p in ps])
        except BaseException:  # e.g. a full disk: the file was created, its header not written
            with contextlib.suppress(FileNotFoundError):
                self._data_temp.unlink()
            raise
        self._streams: dict[str, _Stream] = {}
        self.encoder_threads = bool(getattr(task, "encoder_threads", True))
        try:
            for st in streams:
                self._open_stream(st)
        except BaseException:
            self._discard()
            raise

    # -- streams -----------------------------------------------------------------------------------
    def _open_stream(self, st: StreamSpec) -> None:
        if st.image_key in self._streams:
            raise SchemaError(f"image_key {st.image_key!r} declared twice (§5.2 rule 1)")
        fps = st.fps or self.fps
        codec, ext = st.codec_ext()
        final = self.task.layout.video_file(self.index, st.image_key, ext)
        with StorageError.guard(final.parent, action="cannot create the video directory"):
            final.parent.mkdir(parents=True, exist_ok=True)
        temp = temp_path_for(final)
        if st.source is not None:
            enc: RgbEncoder | DepthEncoder | VideoCopy = VideoCopy(temp, st.source, fps)
        elif st.kind == "rgb":
            preset = {"preset": st.preset} if st.preset else {}
            enc = RgbEncoder(temp, st.width, st.height, fps, codec=codec, **preset)
        else:
            preset = {"preset": st.preset} if st.preset else {}
            enc = DepthEncoder(temp, st.width, st.height, fps, codec=codec, params=st.depth_params, **preset)
        copied = isinstance(enc, VideoCopy)  # nothing to encode: no thread
        worker = EncoderThread(enc, st.image_key, depth=max(2, int(fps // 4))) \
            if self.encoder_threads and not copied else None
        self._streams[st.image_key] = _Stream(st, enc, temp, final, worker=worker)

    # -- rows --------------------------------------------------------------------------------------
    def add_frame(self, values: Mapping[str, Any] | None = None, *, timestamp: float | None = None,
                  hardware_ns: int = 0, images: Mapping[str, np.ndarray] | None = None,
                  reject_bad: bool = False) -> int:
        """Append one frame row (file_format.md §7.3: one row = one frame of every stream).

        Parameters
        ----------
        values:
            Column name -> this row's value. Vectors: array of the declared element
            count; IMU: ``(K, 6)`` float32 with ``imu_ts_ns`` ``(K,)`` int64; trajectories:
            ``(K, 8)`` float64 ``[t,x,y,z,qx,qy,qz,qw]`` with ``<col>_ns`` ``(K,)`` int64
            (0 = no stamp); ``status.*``: str. A declared column missing here gets the
            "no new sample" value (§5.5). Optional key columns (``raw_hw_ns``...) go here too.
        timestamp:
            Seconds since episode start (float, strictly increasing in float32). Default
            ``frame_index / fps``.
        hardware_ns:
            Device-clock ns of this frame (0 = unknown).
        images:
            image_key -> frame (RGB uint8 or depth uint16 mm). A stream without a frame in
            this row repeats its previous frame (counted in ``drop_stats`` as
            ``<key>_repeated_count``); the first row must carry every stream.
        reject_bad:
            False (default): a value or frame that cannot be stored raises. True (what the
            recorder uses, so one bad sample never costs the recording): such a value is
            stored as "no sample" (§5.5: zeros / ``[]`` / 0, its ``*_ns`` 0; non-finite IMU
            samples are left out with their stamps), such a frame is replaced by the
            stream's previous frame, and each is counted in ``drop_stats`` as
            ``<signal>_rejected_count`` (docs/decisions.md #22). A stream whose encoder
            fails is left out of the episode (``<key>_encode_failed_count``). The row is
            still refused when it cannot exist (timestamp, no frame yet for a stream).

        Returns
        -------
        int
            The row's ``frame_index``.

        Raises
        ------
        SchemaError
            Unknown column, wrong length or type, a value the stored dtype cannot hold,
            lockstep mismatch, non-increasing timestamp (with ``reject_bad`` only the last).
        CodecError
            A frame of the wrong size/dtype, or a stream with no frame yet (with ``reject_bad``
            only the last). Nothing of a refused row is stored.
        """
        if self._closed:
            raise EgopoolError(f"episode {self.index} is already finished or aborted")
        values = dict(values or {})
        self._lenient = self._lenient or reject_bad
        fi = self._rows
        ts = float(fi / self.fps) if timestamp is None else float(timestamp)
        ts32 = float(np.float32(ts))
        if not np.isfinite(ts32) or ts < 0 or (self._last_ts is not None and ts32 <= self._last_ts):
            raise SchemaError(f"timestamp {ts} must be finite, >= 0 and strictly increasing in float32 "
                              f"(previous {self._last_ts})", column="timestamp",
                              hint=f"at {self.fps:g} fps float32 tells rows apart for the first "
                                   f"{checks.max_episode_seconds(self.fps):.0f} s of an episode")
        counts: dict[str, int] = {}  # merged into drop_stats only once the row is accepted
        reasons: dict[str, str] = {}

        def reject(name: str, why: str, n: int = 1) -> None:
            key = rejected_key(name)
            counts[key] = counts.get(key, 0) + n
            reasons.setdefault(key, f"row {fi}: {why}")

        for name in list(values):
            if name not in self._specs or name in ALWAYS_KEY_COLUMNS:
                if not reject_bad:
                    raise SchemaError("not declared for this episode", column=name,
                                      hint="pass its ColumnSpec to begin_episode(columns=...)")
                reject(name, f"column {name!r} is not declared for this episode")
                del values[name]
        try:
            hw = _int64(hardware_ns)
        except SchemaError as exc:
            if not reject_bad:
                raise
            reject("hardware_ns", exc.message)
            hw = 0  # 0 = unknown (§7.1)
        row: dict[str, Any] = {
            "episode_index": self.index, "frame_index": fi, "timestamp": ts32, "task_index": 0,
            "wall_time": self.created_at + ts32, "hardware_ns": hw,
        }
        filled: set[str] = set()
        refused: set[str] = set()
        masks: dict[str, np.ndarray] = {}  # IMU samples kept (reject_bad), applied to their stamps too
        for name, spec in self._specs.items():
            if name in row:
                continue
            if name not in values:
                row[name] = spec.empty_value()
                continue
            try:
                v, changed = spec.normalise_counted(values[name])
                v, keep = self._finite(name, spec, v, fi, reject_bad, reject, counts, reasons)
                if keep is not None:
                    masks[name] = keep
            except Exception as exc:  # noqa: BLE001 - any value a source can push (reject_bad)
                if not reject_bad:
                    raise
                reject(name, exc.message if isinstance(exc, EgopoolError) else f"{type(exc).__name__}: {exc}")
                refused.add(name)
                row[name] = spec.empty_value()
                continue
            if changed:
                key = saturated_key(name)
                counts[key] = counts.get(key, 0) + changed
            row[name] = v
            if _fills(spec, v):
                filled.add(name)
        for name, spec in self._specs.items():
            if spec.lockstep and spec.lockstep[0] in masks:  # one stamp per kept sample / point
                keep = masks[spec.lockstep[0]]
                if len(row[name]) == len(keep):
                    row[name] = row[name][keep]
                    if not _fills(spec, row[name]):
                        filled.discard(name)
        for name in refused:  # a rejected sample has no time either (§5.5: "_ns = 0")
            ns = name + "_ns"
            if ns in self._specs and self._specs[ns].storage == "scalar" and ns in values:
                row[ns] = self._specs[ns].empty_value()
                filled.discard(ns)
        for name, spec in self._specs.items():
            if spec.lockstep:
                partner, per = spec.lockstep
                plen = len(row[partner])
                need = plen // per if self._specs[partner].storage == "list" else plen
                if len(row[name]) != need or (self._specs[partner].storage == "list" and plen % per):
                    why = (f"has {len(row[name])} stamps but {partner!r} has {plen / per:g} items in this row "
                           "(they must run in lockstep; write 0 for a missing stamp)")
                    if not reject_bad:
                        raise SchemaError(why, column=name)
                    if partner not in refused:
                        reject(partner, f"{name!r} {why}")
                    refused |= {name, partner}
                    row[name], row[partner] = spec.empty_value(), self._specs[partner].empty_value()
                    filled -= {name, partner}
        self._encode_images(images or {}, reject_bad, reject)
        self._seen |= filled  # only once the row is accepted
        for key, n in counts.items():
            self.drop_stats[key] = int(self.drop_stats.get(key, 0)) + n
        for key, why in reasons.items():
            self._reasons.setdefault(key, why)
        for name, v in row.items():
            self._buf.values[name].append(v)
            self._buf.nbytes += getattr(v, "nbytes", 8)
        self._buf.rows += 1
        self._rows += 1
        if self._last_ts is None:
            self._first_ts = ts32
        self._last_ts = ts32
        if self._buf.rows >= _ROW_GROUP_ROWS or self._buf.nbytes >= _ROW_GROUP_BYTES:
            try:
                with StorageError.guard(self._data_final, action="cannot write the data parquet"):
                    self._flush()
            except BaseException as exc:
                self._broken = f"data parquet: {exc}"
                raise
        return fi

    def _finite(self, name: str, spec: ColumnSpec, value: Any, row: int, reject_bad: bool,
                reject: Callable[..., None], counts: dict[str, int],
                reasons: dict[str, str]) -> tuple[Any, np.ndarray | None]:
        """A float column's value without NaN/Infinity, and the samples / points kept (decisions.md #19, #22).

        Every float column (issue 15 G): with ``reject_bad`` (the recorder) IMU samples and trajectory
        points holding NaN/Infinity are left out one by one (add_frame drops their stamps with them) and
        counted; any other value raises, and add_frame stores the whole sample as "no sample" and counts
        it. Strict: a stats column raises (stats.json cannot hold NaN); another float column is stored as
        given (a caller's deliberate "no reading", e.g. a joint a hand tracker lacks) and its non-finite
        values are counted as ``<signal>_nonfinite_count``, warned at finish and reported by ``validate``.
        """
        if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or not value.size \
                or spec.kind == "force_matrix":  # its codec refuses NaN and counts cells beyond float32 (#22)
            return value, None
        good = np.isfinite(value)
        if good.all():
            return value, None
        stats = name in self._stats_cols
        if not reject_bad:
            if stats:
                checks.check_finite_values(name, value, row)
            if "missing_value" in (spec.feature or {}):
                return value, None  # NaN is this column's declared "missing" (and its importer counts it)
            key = nonfinite_key(name)
            counts[key] = counts.get(key, 0) + int((~good).sum())
            reasons.setdefault(key, f"row {row}: {value.reshape(-1)[~good.reshape(-1)][0]}")
            return value, None
        width = spec.length if spec.storage == "list_list" else 8 if spec.kind == "slam_trajectory" else None
        if not width:  # raises: the whole sample is stored as "no sample"
            if stats:
                checks.check_finite_values(name, value, row)
            first = value.reshape(-1)[~good.reshape(-1)][0]
            raise SchemaError(f"row {row} holds {first} ({int((~good).sum())} non-finite value(s))", column=name)
        items = value.reshape(-1, width)
        ok = good.reshape(-1, width).all(axis=1)
        bad = int((~ok).sum())
        what = "sample(s)" if spec.storage == "list_list" else "point(s)"
        reject(name, f"{bad} {what} hold NaN or Infinity", bad)
        kept = np.ascontiguousarray(items[ok])
        return (kept if spec.storage == "list_list" else kept.reshape(-1)), ok

    def _encode_images(self, images: Mapping[str, np.ndarray], reject_bad: bool = False,
                       reject: Callable[..., None] | None = None) -> None:
        if self._broken is not None:
            raise EgopoolError(f"episode {self.index}: an earlier write failed ({self._broken}); "
                               "its streams are no longer in step with its rows", hint="abort() the episode")
        # frames of a stream dropped for its encoder (reject_bad) are expected, not bad samples
        unknown = set(images) - set(self._streams) - {k for k in images if encode_failed_key(str(k)) in self.drop_stats}
        if unknown:
            if not reject_bad or reject is None:
                raise CodecError(f"images for undeclared streams {sorted(unknown)}",
                                 hint="declare them with begin_episode(streams=[StreamSpec(...)])")
            for key in sorted(unknown, key=str):
                reject(str(key), f"no declared stream {key!r}")
        # Check every frame first: a row refused for one stream must not reach any other,
        # or the streams would no longer hold exactly one frame per data row.
        frames: dict[str, np.ndarray] = {}
        fresh: set[str] = set()
        for key, st in self._streams.items():
            frame = images.get(key)
            if isinstance(st.encoder, VideoCopy):
                if frame is not None:
                    st.encoder.check(frame)  # refuses: a copied stream takes no frames
                continue
            if frame is not None:
                try:
                    frames[key] = st.encoder.check(frame)
                    fresh.add(key)
                    continue
                except Exception as exc:  # noqa: BLE001 - any frame a source can push (reject_bad)
                    if not reject_bad or reject is None:
                        raise
                    reject(key, exc.message if isinstance(exc, EgopoolError) else f"{type(exc).__name__}: {exc}")
            if st.last is None:
                raise CodecError(f"stream {key!r} has no frame for row {self._rows}; the first row must "
                                 "carry every declared stream")
            frames[key] = st.last
        for key, st in list(self._streams.items()):
            if key not in frames:  # copied from its source file
                continue
            try:
                st.encode(frames[key])
            except BaseException as exc:
                if not reject_bad or not isinstance(exc, Exception):
                    self._broken = f"{key}: {exc}"
                    raise
                self._drop_stream(key, exc)  # the other streams keep one frame per row
                continue
            if key not in fresh and images.get(key) is None:
                st.repeated += 1
            st.last = frames[key]

    def _drop_stream(self, key: str, exc: BaseException) -> None:
        """Leave a stream whose encoder failed out of the episode (reject_bad): its frames so far are lost,
        the rows and the other streams go on; counted and its reason kept for the notes."""
        st = self._streams.pop(key)
        st.abort()
        with contextlib.suppress(FileNotFoundError):
            st.temp.unlink()
        with contextlib.suppress(OSError):
            st.temp.parent.rmdir()  # only when empty (the stream's directory made for this episode)
        fkey = encode_failed_key(key)
        self.drop_stats[fkey] = 1
        self._reasons.setdefault(fkey, f"row {self._rows}: {exc}")

    def _flush(self) -> None:
        if not self._buf.rows:
            return
        # force matrices go to the writer row by row, not concatenated first (a copy spent twice, R25)
        arrays = [s.to_arrow_rows(self._buf.values[n]) if s.kind == "force_matrix" else s.to_arrow(self._buf.values[n])
                  for n, s in self._specs.items()]
        self._pq.write_table(pa.Table.from_arrays(arrays, schema=self._schema), row_group_size=self._buf.rows)
        # Every row group counts, also those before the column's first sample (§4: all-zero
        # rows included), so the accumulator equals a recomputation from data/; blocks of
        # columns the episode never filled are dropped in finish() with the column.
        for col in self._stats_cols & set(self._specs):
            vals = self._buf.values[col]
            x = np.concatenate(vals) if col == "observation.imu" else np.stack(vals)
            blk = StatsBlock.of(x)
            if blk is not None:
                self._stats[col] = self._stats[col].merge(blk) if col in self._stats else blk
        self._buf = _Buffers({n: [] for n in self._specs})

    def flush(self) -> None:
        """Write the rows buffered so far as one row group now (the writer does so every 256 rows or
        32 MB by itself); what the capacity measurement times (:mod:`egopool.capacity`).

        Raises
        ------
        StorageError
            The data parquet could not be written (the episode can then only be aborted).
        """
        try:
            with StorageError.guard(self._data_final, action="cannot write the data parquet"):
                self._flush()
        except BaseException as exc:
            self._broken = f"data parquet: {exc}"
            raise

    @property
    def length(self) -> int:
        """Rows written so far."""
        return self._rows

    def bytes_written(self) -> dict[str, int]:
        """Bytes on disk so far: image_key -> its video temp file, ``"data"`` -> the data parquet temp.

        For live status displays; a file not created yet (or already published) counts 0.
        """
        out: dict[str, int] = {}
        for key, path in [*((k, st.temp) for k, st in self._streams.items()), ("data", self._data_temp)]:
            try:
                out[key] = path.stat().st_size
            except OSError:
                out[key] = 0
        return out

    # -- finish / abort ----------------------------------------------------------------------------
    def _drop_unseen_columns(self) -> list[str]:
        keep = [n for n in self._specs if n in self._seen]
        dropped = [n for n in self._specs if n not in self._seen]
        if not dropped:
            return []
        src = pq.ParquetFile(str(self._data_temp))
        temp2 = temp_path_for(self._data_final)
        schema = pa.schema([self._schema.field(n) for n in keep])
        try:
            with pq.ParquetWriter(str(temp2), schema, compression="zstd",
                                  use_dictionary=[n for n in keep if n in self._dict_cols],
                                  write_statistics=[p for n in keep for p in self._stats_paths.get(n, ())]) as w:
                for i in range(src.num_row_groups):
                    w.write_table(src.read_row_group(i, columns=keep))
            src.close()
            os.replace(temp2, self._data_temp)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                temp2.unlink()
            raise
        return dropped

    def finish(self) -> EpisodeResult:
        """Publish the episode and merge task metadata (file_format.md §4, §6.1, DESIGN §5).

        Raises
        ------
        EgopoolError
            No rows were added: the episode is discarded (as by :meth:`abort`) and N is free again.
        StorageError
            A file could not be written or published (disk full...): nothing of the episode
            stays and N is free again.
        MetaUpdateError
            The episode was saved (its row is committed) but ``info.json`` / ``stats.json``
            could not be updated; the message names the file and the fix.
        """
        if self._closed:
            raise EgopoolError(f"episode {self.index} is already finished or aborted")
        if self._rows == 0:
            self.abort()
            raise EgopoolError(f"episode {self.index} has no frames; it was discarded and N={self.index} is free "
                               "again", hint="add_frame() at least once before finish()")
        if self._broken is not None:
            raise EgopoolError(f"episode {self.index}: a write failed ({self._broken}), so its "
                               "streams are not one frame per row", hint="abort() the episode")
        try:
            with StorageError.guard(self._data_final, action="cannot write the data parquet"):
                self._flush()
                self._pq.close()
                self._drop_unseen_columns()
            video_codec: dict[str, Any] = {}
            for key, st in list(self._streams.items()):
                if isinstance(st.encoder, VideoCopy):  # a copy must hold one frame per row (§7.3)
                    check_copy_frames(key, st.encoder, self._rows)
                try:
                    video_codec[key] = st.close()  # an encoder thread reports its failure here at the latest
                except Exception as exc:
                    if not self._lenient:
                        raise
                    self._drop_stream(key, exc)  # as in add_frame(reject_bad=True): the rest is published
                    continue
                if st.repeated:
                    self.drop_stats[f"{key}_repeated_count"] = st.repeated
                clipped = getattr(st.encoder, "clipped", 0)
                if clipped:  # DESIGN §3 log code: beyond [d_min, d_max] (decisions.md #22)
                    self.drop_stats[clipped_key(key)] = int(clipped)
                    p = st.encoder.params if isinstance(st.encoder, DepthEncoder) else None
                    if p is not None:
                        self._reasons.setdefault(clipped_key(key), f"range {p.d_min:g}..{p.d_max:g} mm")
        except BaseException:
            self._roll_back([])
            raise
        self._closed = True
        present = {n for n in self._specs if n in self._seen}
        published: list[Path] = []
        committed = False
        try:
            for st in self._streams.values():
                with StorageError.guard(st.final, action="cannot publish"):
                    publish(st.temp, st.final)
                published.append(st.final)
            with StorageError.guard(self._data_final, action="cannot publish"):
                publish(self._data_temp, self._data_final)
            published.append(self._data_final)
            ep_path = self.task.layout.episodes_file(self.index)
            with StorageError.guard(ep_path, action="cannot write the episode row"), task_lock(self.task.task_dir):
                # The episodes row is the commit record (decisions.md #5): before it, a failure
                # rolls the whole file group back; after it, the episode stands. The pending
                # declarations let a successor finish the merge if this process dies (recovery.py).
                write_pending(self.task.task_dir, self.index, self._episode_declarations(present))
                write_episode_row(ep_path, self._episode_row(video_codec, present))
                committed = True
                published.append(ep_path)
                self._merge_task_meta(present)
                if self._meta_error is None:  # else the next writer replays the merge (recovery.py)
                    clear_pending(self.task.task_dir, self.index)
                markers.clear_recycled(self.task.task_dir, self.index)
                self.task.note_taken(self.index)
        except BaseException:
            if not committed:
                self._roll_back(published)
            raise
        finally:
            markers.release(self.task.task_dir, self.index)
        err = self._meta_error
        reg_error = self.task.register(self.index, published, warn=err is None)  # else said once, below
        notes = tuple(self.notes)
        if self.warn_changes:
            for line in notes:
                warnings.warn(line, ValueChangedWarning, stacklevel=2)
        result = EpisodeResult(self.index, self.chunk, self.file, self._rows, tuple(published), reg_error, notes,
                               dict(self.drop_stats))
        if err is not None:  # the episode stands (committed); what is still to do, in one message
            if reg_error:
                err.message += f"; it is not in the registry either ({_strip_hint(reg_error)})"
            err.hint = ("once the cause is fixed (a full disk: free space), run `egopool repair clean TASK`: it "
                        "finishes the merge"
                        + (" and records the episode" if reg_error else "") + "; the next recording into the task "
                        "does it too")
            err.args = (err.one_line(),)
            err.result = result
            raise err
        return result

    @property
    def notes(self) -> list[str]:
        """One line per kind of value stored otherwise than given so far, with its first reason."""
        return changed_value_notes(self.drop_stats, self.index, self._reasons)

    def _trajectory_specs(self, present: set[str]) -> dict[str, ColumnSpec]:
        return {n: s for n, s in self._specs.items() if s.kind == "slam_trajectory" and n in present}

    def _episode_row(self, video_codec: Mapping[str, Any], present: set[str]) -> dict[str, Any]:
        slam_specs = {}
        for n, s in self._trajectory_specs(present).items():
            feat = dict(s.feature or {})
            slam_specs[n] = {k: feat[k] for k in ("frame", "frame_axes", "time", "owner", "source_slot") if k in feat}
        fm_specs = {n: {k: v for k, v in (s.feature or {}).items()}
                    for n, s in self._specs.items() if s.kind == "force_matrix" and n in present}
        assert self._last_ts is not None
        return {
            "episode_index": self.index, "task_index": 0, "start_frame_index": 0,
            "end_frame_index": self._rows - 1, "length": self._rows, "created_at": self.created_at,
            "duration_sec": float(self._last_ts - self._first_ts + 1.0 / self.fps),
            "drop_stats": dict(self.drop_stats), "video_codec": dict(video_codec),
            "calibration": self._decl["calibration"], "force_matrix_specs": fm_specs, "slam_specs": slam_specs,
        }

    def _episode_declarations(self, present: set[str]) -> dict[str, Any]:
        features = {n: dict(s.feature) for n, s in self._specs.items() if s.feature is not None and n in present}
        cameras = {}
        for key, st in self._streams.items():
            if st.spec.kind == "rgb":
                cam: dict[str, Any] = {"height": st.spec.height, "width": st.spec.width}
                if st.spec.fps and st.spec.fps != self.fps:
                    cam["fps"] = float(st.spec.fps)
                cameras[key] = cam
        decl: dict[str, Any] = {
            "app_version": self.task.app_version, "fps": self.fps, "video": bool(self._streams),
            "features": features, "cameras": cameras,
            "video_extensions": {k: st.final.suffix.lstrip(".") for k, st in self._streams.items()},
            "devices": self._decl["devices"], "device_names": self._decl["device_names"],
            "sensors": self._decl["sensors"], "total_episodes": self.index,
        }
        if self._decl["calibration"]:
            decl["calibration"] = self._decl["calibration"]
        if self._decl["sensor_dim"] is not None:
            decl["sensor_dim"] = int(self._decl["sensor_dim"])
        trajs = self._trajectory_specs(present)
        frames = {n: s.feature["frame"] for n, s in trajs.items() if s.feature and "frame" in s.feature}
        if frames:
            decl["slam_frames"] = frames
        gripper = [n for n, s in trajs.items()
                   if (s.feature or {}).get("owner", {}).get("role", "ego" if ".ego_" in n else "gripper") == "gripper"]
        if gripper:
            rig1 = "observation.slam_trajectory" if "observation.slam_trajectory" in gripper else gripper[0]
            decl["gripper_slam_frame"] = (trajs[rig1].feature or {}).get("frame", "right_forward_up")
        decl.update(self._decl["info_extra"])
        return decl

    def _merge_task_meta(self, present: set[str]) -> None:
        """Merge into info.json / stats.json (task_meta.py); a failure is kept for finish() to raise."""
        blocks = {c: b for c, b in self._stats.items() if c in present}
        try:
            merge_task_meta(self.task.task_dir, self.index, self._episode_declarations(present), blocks,
                            self.task.layout)
        except MetaUpdateError as exc:
            self._meta_error = exc

    def _discard(self) -> None:
        self._closed = True
        with contextlib.suppress(Exception):
            self._pq.close()
        for st in self._streams.values():
            st.abort()
            with contextlib.suppress(FileNotFoundError):
                st.temp.unlink()
        with contextlib.suppress(FileNotFoundError):
            self._data_temp.unlink()

    def _roll_back(self, published: Sequence[Path]) -> None:
        """Undo a failed finish: temps and already-published files of this N go, N is recycled.

        Only files of this episode's own reserved N are removed, so nothing of another
        episode is touched; the recycled marker lets the next recording reuse N (§7.5).
        """
        self._discard()
        for path in published:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        with contextlib.suppress(Exception), task_lock(self.task.task_dir):
            markers.write_recycled(self.task.task_dir, self.index)
        markers.release(self.task.task_dir, self.index)

    def count(self, key: str, n: int = 1, reason: str | None = None) -> None:
        """Add ``n`` to ``drop_stats[key]``, keeping the first ``reason`` for :attr:`notes` (e.g. the
        recorder's ``rows_rejected``)."""
        self.drop_stats[key] = int(self.drop_stats.get(key, 0)) + int(n)
        if reason:
            self._reasons.setdefault(key, reason)

    @property
    def broken(self) -> bool:
        """True when a write failed half-way (the data parquet, or a stream outside ``reject_bad``):
        rows and streams may no longer match, so the episode can only be aborted or set aside."""
        return self._broken is not None

    def set_aside(self, reason: str) -> Path | None:
        """Stop without publishing, keeping what was written under ``<task>/.egopool_backup/unfinished-<N>-<UTC>/``.

        For an episode that cannot be published (:attr:`broken`, e.g. the data parquet could
        not be written): the data parquet (closed if it still can be, so its row groups so far
        are readable) and the video files move there with ``reason.json`` (N, rows, reason,
        ``drop_stats``); N is freed for the next recording like :meth:`abort`. A dot directory
        every reader ignores (file_format.md §11; docs/decisions.md #14, #22).

        Returns
        -------
        Path or None
            The directory, or None when nothing could be kept (everything is then discarded).
        """
        if self._closed:
            return None
        self._closed = True
        with contextlib.suppress(Exception):
            if self._broken is None:
                self._flush()
        with contextlib.suppress(Exception):
            self._pq.close()
        for st in self._streams.values():
            try:
                st.close()  # through the worker: it finishes encoding before the file closes
            except Exception:  # noqa: BLE001 - keep what the file holds so far
                with contextlib.suppress(Exception):
                    st.encoder.close()  # the worker has stopped: only this thread touches it now
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        dest = self.task.task_dir / ".egopool_backup" / f"unfinished-{self.index}-{stamp}"
        try:
            moves = [(self._data_temp, self._data_final)] + [(st.temp, st.final) for st in self._streams.values()]
            for temp, final in moves:
                if temp.exists():
                    target = dest / final.relative_to(self.task.task_dir)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(temp, target)
            note = {"episode_index": self.index, "rows": self._rows, "reason": reason,
                    "created_at": self.created_at, "drop_stats": dict(self.drop_stats)}
            atomic_write_json(dest / "reason.json", note)
        except (OSError, EgopoolError, ValueError):
            dest = None  # type: ignore[assignment]
        self._discard()  # whatever did not move
        with contextlib.suppress(Exception), task_lock(self.task.task_dir):
            markers.write_recycled(self.task.task_dir, self.index)
        markers.release(self.task.task_dir, self.index)
        return dest

    def abort(self) -> None:
        """Discard everything written and free N for the next recording (file_format.md §7.5)."""
        if self._closed:
            return
        self._discard()
        with task_lock(self.task.task_dir):
            markers.write_recycled(self.task.task_dir, self.index)
            markers.release(self.task.task_dir, self.index)

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.finish()
