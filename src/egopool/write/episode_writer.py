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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import checks
from .._atomic import atomic_write_json, publish, task_lock, temp_path_for
from ..errors import EgopoolError, MetaUpdateError, SchemaError, StorageError, ValueChangedWarning
from ..meta import markers
from ..meta.drop_stats import (changed_value_notes)
from ..meta.digests import DIGEST_COLUMN, file_digests_of
from ..meta.episodes import write_episode_row
from ..meta.stats import StatsBlock
from .local_paths import local_file
from .recovery import clear_pending, write_pending
from .row_values import RowRejects, check_row
from .declarations import EpisodeDeclarations, row_specs
from .episode_video import EpisodeVideo
from .streams import StreamSpec
from ..schema import ALWAYS_KEY_COLUMNS, ColumnSpec, key_column, vector_column
from ..storage import ObjectPath
from .task_meta import merge_task_meta

if TYPE_CHECKING:
    import av

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


def _leaf_paths(name: str, typ: pa.DataType) -> list[str]:
    """Parquet leaf column paths of an arrow field (lists nest as ``<name>.list.element``), the names
    pyarrow's per-column writer options match."""
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return _leaf_paths(f"{name}.list.element", typ.value_type)
    return [name]


def _strip_hint(line: str) -> str:
    """An error line without its trailing ``(hint)``, to quote it inside another message."""
    return re.sub(r" \([^()]*\)$", "", line)




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
        self._decl = EpisodeDeclarations([dict(d) for d in devices], dict(device_names or {}), dict(calibration or {}),
                                   list(sensors or []), sensor_dim, dict(info_extra or {}))
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
        self._stats_cols = {f"observation.{s}" for s in self._decl.sensors} | {"observation.imu"}
        self._rows = 0
        self._last_ts: float | None = None
        self._first_ts = 0.0
        self._closed = False
        self._broken: str | None = None
        self._lenient = False  # some add_frame(reject_bad=True): finish() drops a failed stream too
        self._meta_error: MetaUpdateError | None = None
        self._data_final = local_file(task.layout.data_file(index))
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
        self.encoder_threads = bool(getattr(task, "encoder_threads", True))
        self._video = EpisodeVideo(self.drop_stats, self._reasons, threads=self.encoder_threads)
        self._streams = self._video.streams
        try:
            for st in streams:
                _, ext = st.codec_ext()
                self._video.open(st, local_file(task.layout.video_file(index, st.image_key, ext)), st.fps or self.fps)
        except BaseException:
            self._discard()
            raise

    # -- rows --------------------------------------------------------------------------------------
    def add_frame(self, values: Mapping[str, Any] | None = None, *, timestamp: float | None = None,
                  hardware_ns: int = 0, images: Mapping[str, np.ndarray | av.VideoFrame] | None = None,
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
            image_key -> frame (RGB uint8 ``(H, W, 3)`` / gray ``(H, W)``, or a decoded
            :class:`av.VideoFrame` of the stream's size; depth uint16 mm ``(H, W)``). A stream without a frame in
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
        rejects = RowRejects(fi)
        keys = {"episode_index": self.index, "frame_index": fi, "timestamp": ts32, "task_index": 0,
                "wall_time": self.created_at + ts32}
        row, filled = check_row(self._specs, self._stats_cols, values, keys, hardware_ns, rejects,
                                reject_bad=reject_bad)
        failure = self._failure()
        if failure is not None:
            raise EgopoolError(f"episode {self.index}: an earlier write failed ({failure}); "
                               "its streams are no longer in step with its rows", hint="abort() the episode")
        self._video.add_frames(images or {}, self._rows, reject_bad, rejects.reject)
        self._seen |= filled  # only once the row is accepted
        for key, n in rejects.counts.items():
            self.drop_stats[key] = int(self.drop_stats.get(key, 0)) + n
        for key, why in rejects.reasons.items():
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
        failure = self._failure()
        if failure is not None:
            raise EgopoolError(f"episode {self.index}: a write failed ({failure}), so its "
                               "streams are not one frame per row", hint="abort() the episode")
        try:
            with StorageError.guard(self._data_final, action="cannot write the data parquet"):
                self._flush()
                self._pq.close()
                self._drop_unseen_columns()
            video_codec = self._video.close(self._rows, self._lenient)
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
            ep_path = local_file(self.task.layout.episodes_file(self.index))
            with StorageError.guard(ep_path, action="cannot write the episode row"), task_lock(self.task.task_dir):
                # The episodes row is the commit record (decisions.md #5): before it, a failure
                # rolls the whole file group back; after it, the episode stands. The pending
                # declarations let a successor finish the merge if this process dies (recovery.py).
                write_pending(self.task.task_dir, self.index, self._declarations(present))
                write_episode_row(ep_path, {**self._episode_row(video_codec, present),
                                            DIGEST_COLUMN: file_digests_of(self.task.task_dir, published)})
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

    def _episode_row(self, video_codec: Mapping[str, Any], present: set[str]) -> dict[str, Any]:
        assert self._last_ts is not None
        return {
            "episode_index": self.index, "task_index": 0, "start_frame_index": 0,
            "end_frame_index": self._rows - 1, "length": self._rows, "created_at": self.created_at,
            "duration_sec": float(self._last_ts - self._first_ts + 1.0 / self.fps),
            "drop_stats": dict(self.drop_stats), "video_codec": dict(video_codec),
            "calibration": self._decl.calibration, **row_specs(self._specs, present),
        }

    def _declarations(self, present: set[str]) -> dict[str, Any]:
        return self._decl.info(self._specs, present, self._streams, app_version=self.task.app_version, fps=self.fps,
                               index=self.index)

    def _merge_task_meta(self, present: set[str]) -> None:
        """Merge into info.json / stats.json (task_meta.py); a failure is kept for finish() to raise."""
        blocks = {c: b for c, b in self._stats.items() if c in present}
        try:
            merge_task_meta(self.task.task_dir, self.index, self._declarations(present), blocks, self.task.layout)
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
        return self._failure() is not None

    def _failure(self) -> str | None:
        """What failed half-way (the data parquet, or a stream outside ``reject_bad``), or None."""
        return self._broken or self._video.broken

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
            if self._failure() is None:
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
        kept: Path | None = dest
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
            kept = None
        self._discard()  # whatever did not move
        with contextlib.suppress(Exception), task_lock(self.task.task_dir):
            markers.write_recycled(self.task.task_dir, self.index)
        markers.release(self.task.task_dir, self.index)
        return kept

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
