"""``egopool export lerobot TASK OUT``: a task as a LeRobot v3.0 dataset (mapping: :mod:`.lerobot_plan`).

::

    from egopool.interop import export_lerobot
    result = export_lerobot("recordings/pick_cup", "lerobot/pick_cup", state=["observation.gripper_state"])

Each episode is exported by :func:`export_episode`, a function of the task and its N (plus
its fixed place in the dataset) that writes only that episode's files and returns its
metadata; :func:`export_lerobot` merges the results into ``meta/``. The episodes run through
an :class:`~egopool.jobs.Executor`: in a loop in this process (default), or one Ray task per
episode (``executor=RayExecutor(...)``, ``--ray``) writing into the same directory on a shared
file system; the driver alone writes ``meta/`` from the parts in episode order, so both give
the same files (docs/decisions.md K8). Every file goes to a dot-temp directory beside OUT
that is renamed into place at the end, so a failed export leaves no partial dataset (an
existing OUT is replaced only with ``overwrite``).

Videos: an H.264/HEVC stream whose frames sit exactly at ``i / fps`` is copied byte for byte
(lerobot decodes both); any other stream, or every one with ``gop`` (a key frame every ``gop``
frames, for random access), is decoded and re-encoded (H.264, yuv420p). Depth streams of a
lerobot >= 0.6 export (the default target) become LeRobot depth videos (:mod:`.lerobot_depth`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import fsync_dir
from ..arrowutil import list_column_to_numpy
from ..codecs.depth_error import DepthErrorTally
from ..codecs.video import RgbEncoder, read_rgb_frames
from ..codecs.video_copy import COPYABLE_CODECS, packet_times
from ..errors import EgopoolError, FormatError, SchemaError, StorageError
from ..storage import ObjectPath, TaskPath
from ..jobs.executor import Executor, LocalExecutor
from ..read.reader import Episode, open_task
from . import lerobot_format as fmt
from ._checks import check_output_dir
from .lerobot_depth import LeRobotDepthMap, LeRobotDepthWriter
from .lerobot_events import ExportEvents, add_events
from .lerobot_language import language_array, language_type, loads_rows
from .lerobot_meta import DEPTH_GOP, EpisodePart, write_meta
from .lerobot_staging import staging_name, sweep_stale
from .lerobot_plan import IMPORTED_ACTION, ColumnMap, EpisodeJob, LeRobotPlan, StreamMap, plan_export

__all__ = ["EpisodePart", "LeRobotExport", "export_episode", "export_episode_unit", "export_lerobot"]

_BATCH_ROWS = 256
_COPY_PIX_FMTS = ("yuv420p", "yuvj420p")
#: x264 without macroblock-tree rate control: with it the same frames give other bytes from run to
#: run (in one process, one thread); without it a re-encoded video is the same in every export (K8).
_REPRODUCIBLE_X264 = "mbtree=0"
#: CRF of a re-encoded video: 3 below the recorder's 23 makes up for mbtree=0 (about the quality
#: and size x264 gives with mbtree at 23) and for the second generation of loss.
_REENCODE_CRF = 20
#: Progress callback ``(episodes done, episodes total)``.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class LeRobotExport:
    """Result of :func:`export_lerobot`.

    Attributes
    ----------
    out:
        The dataset root: a directory, or the ``s3://`` URI of a bucket export
        (:func:`~egopool.interop.lerobot_bucket.export_lerobot_to_bucket`); None for a dry run.
    plan:
        The mapping (features, renamed and dropped columns, episodes).
    parts:
        One :class:`EpisodePart` per exported episode (empty for a dry run).
    events_repeated:
        Reviewers' events (``events``) already in the exported ``language_events`` (imported with the task) and
        therefore not written again (docs/decisions.md I23).
    """

    out: Path | str | None
    plan: LeRobotPlan
    parts: tuple[EpisodePart, ...] = ()
    events_repeated: int = 0

    @property
    def warnings(self) -> tuple[str, ...]:
        """What makes the dataset untrainable as it is (an ``action`` that never changes, issue 27), and reviewers'
        events that were in the task's ``language_events`` already (I23)."""
        out: tuple[str, ...] = ()
        if self.events_repeated:
            out += (f"{self.events_repeated} event(s) were in the task's language_events already (imported with "
                    "it): written once",)
        blocks = [p.stats["action"] for p in self.parts if "action" in p.stats]
        if not blocks:
            return out
        merged = fmt.aggregate_stats(blocks)
        if np.all(np.asarray(merged["min"]) == np.asarray(merged["max"])):
            src = next((c.sources for c in self.plan.columns if c.name == "action" and c.kind == "concat"), None)
            what = ("the pooled placeholder [0.0]" if src is None else
                    f"{src[0]}, the task's own action" if src == (IMPORTED_ACTION,) else "--action columns")
            has_own = src is None and any(c.name == IMPORTED_ACTION for c in self.plan.columns)
            out += (f"action is constant in every exported frame ({what}): a policy learns nothing from it; "
                    + (f"the task's own action is {IMPORTED_ACTION} (exported as a feature): --action "
                       f"{IMPORTED_ACTION}" if has_own else
                       "choose the commanded signals with --action (e.g. the next gripper state / TCP pose)"),)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: the mapping, the output, frames and which videos were copied."""
        return {"out": str(self.out) if self.out else None, "dry_run": self.out is None,
                "episodes": len(self.plan.jobs), "frames": sum(j.length for j in self.plan.jobs),
                "videos_copied": {p.index: list(p.copied) for p in self.parts}, "warnings": list(self.warnings),
                "mapping": self.plan.mapping()}


def _sample_rows(length: int) -> np.ndarray:
    """Frames sampled for image statistics (lerobot's rule: about length^0.75, at least 100 or all)."""
    n = length if length < 100 else max(100, min(int(length ** 0.75), 10_000))
    return np.unique(np.round(np.linspace(0, length - 1, n)).astype(np.int64))


def _thumb(frame: np.ndarray) -> np.ndarray:
    """Every k-th pixel so the larger side is about 150 (lerobot samples stats on small images)."""
    k = max(1, max(frame.shape[:2]) // 150)
    return frame[::k, ::k]


def _copyable(path: TaskPath, length: int, fps: int) -> bool:
    """H.264/HEVC yuv420p with exactly ``length`` frames at ``i / fps`` (what lerobot looks up)."""
    try:
        times, info = packet_times(path)
    except EgopoolError:
        return False
    if info["codec"] not in COPYABLE_CODECS or info["pix_fmt"] not in _COPY_PIX_FMTS or len(times) != length:
        return False
    return bool(np.all(np.abs(times - np.arange(length) / fps) < 1e-6))


def _export_video(ep: Episode, s: StreamMap, dst: Path, length: int, fps: int,
                  gop: int | None = None) -> tuple[bool, np.ndarray]:
    """Copy or re-encode one RGB stream (re-encoded with a key frame every ``gop`` frames when given);
    returns (copied, sampled thumbnails for stats)."""
    src = ep.stream_path(s.key)
    rows = set(_sample_rows(length).tolist())
    thumbs: list[np.ndarray] = []
    dst.parent.mkdir(parents=True, exist_ok=True)
    copied = gop is None and _copyable(src, length, fps)
    if copied:
        if isinstance(src, ObjectPath):  # streamed from the bucket, one buffer at a time
            with src.open("rb") as fin, open(dst, "wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
        else:
            shutil.copyfile(src, dst)
        for i, frame in enumerate(read_rgb_frames(src)):
            if i in rows:
                thumbs.append(_thumb(frame))
        return True, np.stack(thumbs)
    params = _REPRODUCIBLE_X264 if gop is None else f"{_REPRODUCIBLE_X264}:keyint={gop}:min-keyint={gop}:scenecut=0"
    enc = RgbEncoder(dst, s.width, s.height, fps, codec="h264", crf=_REENCODE_CRF, params=params)
    try:
        n = 0
        for n, frame in enumerate(ep.video(s.key), start=1):
            enc.encode(frame)
            if n - 1 in rows:
                thumbs.append(_thumb(frame))
        enc.close()
    except BaseException:
        enc.abort()
        raise
    if n != length:
        raise SchemaError(f"stream {s.key!r} has {n} frames for {length} rows (one per row, file_format.md §7.3)",
                          path=src)
    return False, np.stack(thumbs)


def _export_depth_video(ep: Episode, s: StreamMap, dst: Path, length: int, fps: int,
                        gop: int | None) -> tuple[np.ndarray, DepthErrorTally]:
    """One depth stream as a LeRobot 0.6 depth video; returns (sampled thumbnails ``(S, h, w, 1)`` uint16 mm for
    stats, the quantisation's errors)."""
    rows = set(_sample_rows(length).tolist())
    thumbs: list[np.ndarray] = []
    dst.parent.mkdir(parents=True, exist_ok=True)
    enc = LeRobotDepthWriter(dst, s.width, s.height, fps, LeRobotDepthMap(), gop=gop or DEPTH_GOP)
    n = 0
    try:
        for n, frame in enumerate(ep.depth(s.key), start=1):
            enc.encode(frame)
            if n - 1 in rows:
                thumbs.append(_thumb(frame)[..., None])
        enc.close()
    except BaseException:
        enc.abort()
        raise
    if n != length:
        raise SchemaError(f"depth stream {s.key!r} has {n} frames for {length} rows (one per row, file_format.md "
                          "§7.3)", path=ep.stream_path(s.key))
    return np.stack(thumbs), enc.errors


def _task_indices(plan: LeRobotPlan, batch: pa.RecordBatch, rows: int, task_of: Mapping[str, int],
                  used: dict[str, None]) -> np.ndarray:
    """LeRobot's ``task_index`` of each row ``(rows,) int64``: the position of the row's text of
    ``plan.task_column`` in ``plan.task_texts`` (no column or a null: ``plan.task_text``, I24); ``used`` gets the
    texts in order."""
    if plan.task_column is None or plan.task_column not in batch.schema.names:
        used.setdefault(plan.task_text)
        return np.full(rows, task_of[plan.task_text], np.int64)
    texts = batch.column(batch.schema.get_field_index(plan.task_column)).to_pylist()
    out = np.empty(rows, np.int64)
    for i, t in enumerate(texts):
        text = plan.task_text if t is None else str(t)
        used.setdefault(text)
        out[i] = task_of[text]
    return out


def _language_values(col: ColumnMap, batch: pa.RecordBatch, first: int, where: str) -> pa.Array:
    """A language column's rows from one record batch (rows ``first``.. of the episode), in lerobot's type (none
    where the episode lacks the column)."""
    at = batch.schema.get_field_index(col.sources[0])
    texts = batch.column(at).to_pylist() if at >= 0 else [None] * batch.num_rows
    return language_array([loads_rows(t, col.name, where=f"{where}row {first + i}: ") for i, t in enumerate(texts)],
                          col.name)


def _column_values(col: ColumnMap, batch: pa.RecordBatch, rows: int) -> np.ndarray:
    """``(rows, *shape)`` values of a copied or concatenated feature from one record batch."""
    parts = []
    for src in col.sources:
        arr = batch.column(batch.schema.get_field_index(src))
        pooled = col.pooled[src]
        if pooled["storage"] == "string":
            return np.asarray(arr.to_pylist(), dtype=object)
        if pooled["storage"] == "scalar":
            parts.append(arr.to_numpy(zero_copy_only=False).reshape(rows, 1))
            continue
        n = int(pooled["length"])
        try:
            vals = list_column_to_numpy(arr)
        except Exception as exc:  # noqa: BLE001 - ragged rows: named below
            raise SchemaError(f"rows are not all {n} values: {exc}", column=src) from exc
        if vals.shape != (rows, n):
            raise SchemaError(f"rows hold {vals.shape[1:] or '?'} values, the declared shape needs {n}", column=src)
        parts.append(vals)
    if col.kind == "concat":
        return np.concatenate([p.astype(np.float32) for p in parts], axis=1)
    shape = col.feature["shape"]
    return parts[0].reshape((rows,) if shape == [1] else (rows, *shape))


def export_episode(job: EpisodeJob, plan: LeRobotPlan, root: Path) -> EpisodePart:
    """Write one episode's data parquet and videos under ``root`` (a dataset directory being built).

    Parameters
    ----------
    job:
        The episode (task, N) and its fixed place in the dataset.
    plan:
        The export mapping (:func:`~egopool.interop.lerobot_plan.plan_export`).
    root:
        Dataset root being built; only this episode's files are written.

    Returns
    -------
    EpisodePart
        Its length, files, copied videos and per-feature statistics.

    Raises
    ------
    SchemaError
        A row of a fixed-shape column with another element count, or a stream whose frame
        count differs from the rows.
    CodecError, FormatError
        A file of the episode cannot be read.
    """
    ep = open_task(job.task_dir).episode(job.index)
    length, fps = ep.length, plan.fps
    if length != job.length:
        raise EgopoolError(f"episode {job.index} changed while exporting ({job.length} -> {length} rows)",
                           path=job.task_dir)
    c, f = fmt.chunk_file(job.episode_index)
    data_path = root / fmt.DATA_PATH.format(chunk_index=c, file_index=f)
    data_path.parent.mkdir(parents=True, exist_ok=True)
    features = plan.features
    data_feats = {n: v for n, v in features.items() if v["dtype"] != "video"}
    plain = plan.target != "0.4"  # lerobot >= 0.6: plain nested lists, one row group per episode (issue 31)
    schema = pa.schema([pa.field(n, language_type(n)) if v["dtype"] == "language" else
                        fmt.arrow_field(n, v, plain_nested=plain) for n, v in data_feats.items()])
    batches: list[pa.RecordBatch] = []
    have = set(ep.schema.names)  # a language column may be missing in an episode (none on its frames)
    need = sorted({s for col in plan.columns if col.kind != "depth" for s in col.sources if s in have}
                  | {"frame_index"} | ({plan.task_column} if plan.task_column is not None and plan.task_column in have
                                       else set()))
    task_of = {t: i for i, t in enumerate(plan.task_texts)}
    used: dict[str, None] = {}
    language: dict[str, pa.Array] = {}
    values: dict[str, list[np.ndarray]] = {n: [] for n in data_feats if n not in ("index", "episode_index")}
    depth_iters = {col.name: iter(ep.depth(col.sources[0].removeprefix("videos/")))
                   for col in plan.columns if col.kind == "depth"}
    depth_stats = {name: fmt.CountedStats() for name in depth_iters}
    done = 0
    with pq.ParquetWriter(str(data_path), schema, compression="zstd") as writer:
        for batch in pq.ParquetFile(str(ep.files.data)).iter_batches(batch_size=_BATCH_ROWS, columns=need):
            rows = batch.num_rows
            arrays: dict[str, np.ndarray] = {}
            for col in plan.columns:
                if col.kind == "depth":
                    frames = []
                    for _ in range(rows):
                        try:
                            frame = next(depth_iters[col.name])
                        except StopIteration:
                            raise SchemaError(f"stream {col.sources[0]} has fewer frames than the {length} rows",
                                              path=job.task_dir) from None
                        frames.append(frame)
                    arrays[col.name] = np.stack(frames)
                    depth_stats[col.name].update(fmt.as_vectors(arrays[col.name]))
                elif col.kind == "language":
                    try:
                        language[col.name] = _language_values(col, batch, done, f"episode {job.index} ")
                    except FormatError as exc:  # name the task and the episode's file (issue 27 review)
                        raise FormatError(f"task {plan.task_name!r} {exc.message}", path=ep.files.data,
                                          hint=exc.hint) from None
                else:
                    arrays[col.name] = _column_values(col, batch, rows)
            fi = batch.column(batch.schema.get_field_index("frame_index")).to_numpy(zero_copy_only=False)
            arrays["timestamp"] = (fi / fps).astype(np.float32)
            arrays["frame_index"] = fi.astype(np.int64)
            arrays["episode_index"] = np.full(rows, job.episode_index, np.int64)
            arrays["index"] = np.arange(job.from_index + done, job.from_index + done + rows, dtype=np.int64)
            arrays["task_index"] = _task_indices(plan, batch, rows, task_of, used)
            batch_out = pa.record_batch([language[n] if n in language else
                                         fmt.feature_array(arrays[n], data_feats[n], plain_nested=plain)
                                         for n in data_feats], schema=schema)
            if plain:
                batches.append(batch_out)
            else:
                writer.write_batch(batch_out)
            for n in values:
                if data_feats[n]["dtype"] not in ("string", "language") and not n.startswith("observation.depth."):
                    values[n].append(arrays[n])
            done += rows
        if plain and batches:
            writer.write_table(pa.Table.from_batches(batches, schema=schema), row_group_size=max(done, 1))
    for name, it in depth_iters.items():
        if next(it, None) is not None:
            raise SchemaError(f"{name}: the depth stream has more frames than the {length} rows", path=job.task_dir)
    stats = {n: fmt.feature_stats(np.concatenate(v)) for n, v in values.items() if v}
    # lerobot's writer buffers timestamp as the float64 frame_index / fps (float32 only in the parquet)
    stats["timestamp"] = fmt.feature_stats(np.concatenate(values["frame_index"]) / fps)
    stats["episode_index"] = fmt.feature_stats(np.full(length, job.episode_index, np.int64))
    stats["index"] = fmt.feature_stats(np.arange(job.from_index, job.from_index + length, dtype=np.int64))
    for name, counted in depth_stats.items():
        stats[name] = counted.result(length)
    videos: dict[str, tuple[int, int, float, float]] = {}
    copied: list[str] = []
    errors: dict[str, DepthErrorTally] = {}
    for s in plan.streams:
        dst = root / fmt.VIDEO_PATH.format(video_key=s.name, chunk_index=c, file_index=f)
        if s.depth:  # lerobot 0.6: per channel (1, 1, 1) of the sampled mm frames, not divided by 255
            sampled, errors[s.name] = _export_depth_video(ep, s, dst, length, fps, plan.gop)
            stats[s.name] = fmt.image_stats(sampled, scale=1.0)
        else:
            was_copied, sampled = _export_video(ep, s, dst, length, fps, plan.gop)
            if was_copied:
                copied.append(s.name)
            stats[s.name] = fmt.image_stats(sampled)
        videos[s.name] = (c, f, 0.0, length / fps)
    return EpisodePart(job.index, job.episode_index, length, job.from_index, (c, f), videos, tuple(copied), stats,
                       errors, tuple(used))


@dataclass(frozen=True)
class _ExportInput:
    """What every episode unit shares (sent once to a Ray cluster): the plan and the staging root."""

    plan: LeRobotPlan
    root: Path


def export_episode_unit(shared: _ExportInput, job: EpisodeJob) -> EpisodePart:
    """One unit of an export job, in-process or as a Ray task: :func:`export_episode` of ``job``.

    :func:`export_lerobot` passes absolute paths (a Ray worker has its own working directory);
    the unit writes only its episode's files under ``shared.root`` and returns its
    :class:`EpisodePart` to the driver, which writes ``meta/`` (errors: :func:`export_episode`).
    """
    return export_episode(job, shared.plan, shared.root)


def _publish_dir(staging: Path, out: Path, overwrite: bool) -> None:
    old: Path | None = None
    emptied = False
    if out.exists() and not overwrite:
        try:
            out.rmdir()  # an empty directory made for it is accepted (issue 27 review); anything else refused
        except OSError:
            raise EgopoolError("the output exists", path=out,
                               hint="choose a new directory or pass --overwrite") from None
        emptied = True
    if out.exists():
        old = staging_name(out, old=True)
        out.rename(old)
    try:
        staging.rename(out)
    except BaseException:
        if old is not None:
            old.rename(out)
        elif emptied:
            out.mkdir(exist_ok=True)
        raise
    fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export_lerobot(task: str | Path, out: str | Path, *, episodes: Sequence[int] | None = None,
                   state: Sequence[str] = (), action: Sequence[str] = (), depth: bool = True,
                   repo_id: str | None = None, dry_run: bool = False, overwrite: bool = False,
                   progress: Progress | None = None, lerobot: str = "0.6", gop: int | None = None,
                   executor: Executor[Any, Any, Any] | None = None, events: ExportEvents | None = None
                   ) -> LeRobotExport:
    """Export a task (or some of its episodes) as a LeRobot v3.0 dataset at ``out``.

    Parameters
    ----------
    task:
        Source task directory.
    out:
        Dataset root to create (``LeRobotDataset(repo_id, root=out)`` loads it).
    episodes:
        Global N to export (default all), in ascending N -> LeRobot episodes 0, 1, ...
    state, action:
        Columns concatenated into ``observation.state`` / ``action`` (float32, flattened).
    depth:
        Export depth streams (default True): LeRobot depth videos ``observation.images.<key>`` for
        lerobot >= 0.6, ``observation.depth.<key>`` uint16 mm ``[H, W]`` in the data for ``lerobot="0.4"``.
    repo_id:
        Recorded in the mapping (default ``local/<task dir name>``).
    dry_run:
        Compute and return the mapping only; nothing is written.
    overwrite:
        Replace an existing ``out`` (atomically, once the new dataset is complete); it must be
        an earlier LeRobot dataset (``meta/info.json``) or empty.
    progress:
        Called with ``(episodes done, total)``.
    lerobot:
        The release written for: "0.6" (default: depth videos, 0.6's keys, plain nested 2-D lists, one row
        group per episode) or "0.4" (the output lerobot 0.4.x reads, docs/decisions.md I1).
    gop:
        Re-encode every RGB video with a key frame every ``gop`` frames (random access reads at most
        ``gop`` frames; None: stream copy where possible, I1/I16).
    executor:
        Runs :func:`export_episode_unit` per episode: in-process (default) or a
        :class:`~egopool.jobs.RayExecutor` (one Ray task per episode; ``task`` and ``out``
        must be on a file system every node sees under the same path). The files are the same.
    events:
        Reviewers' events (``--events-from``): LeRobot's ``language_events`` (lerobot >= 0.6) and the
        mapping's ``events`` (:mod:`.lerobot_events`, docs/decisions.md P17).

    Returns
    -------
    LeRobotExport
        The mapping and one :class:`EpisodePart` per episode.

    Raises
    ------
    EgopoolError
        ``out`` exists without ``overwrite``, or with ``overwrite`` is not an earlier LeRobot
        export (no ``meta/info.json``, not empty); ``out`` is, is in or holds the task; the task
        cannot be exported (see :func:`~egopool.interop.lerobot_plan.plan_export`).
    StorageError
        The output cannot be written, or is a file (nothing is left behind).
    OperationError
        From a Ray ``executor``: the cluster could not finish (nothing is left behind).
    """
    plan = plan_export(open_task(task), episodes=episodes, state=state, action=action, depth=depth,
                       repo_id=repo_id, target=lerobot, gop=gop)
    if dry_run:
        return LeRobotExport(None, plan)
    out = check_output_dir(out, plan.task_dir, what="a LeRobot dataset", overwrite=overwrite,
                           marker="meta/info.json", empty_ok=True)
    with StorageError.guard(out, action="cannot write the LeRobot dataset"):
        out.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(out)  # what a killed export of the same OUT left (I27)
        staging = staging_name(out)
        staging.mkdir()
        try:
            # a Ray worker has its own working directory: units see absolute paths (K4)
            jobs = [j if isinstance(j.task_dir, ObjectPath) else
                    dataclasses.replace(j, task_dir=Path(os.path.abspath(j.task_dir))) for j in plan.jobs]
            shared = _ExportInput(plan, Path(os.path.abspath(staging)))
            parts = (executor or LocalExecutor()).map(export_episode_unit, shared, jobs, progress=progress)
            write_meta(plan, parts, staging)
            repeated = 0
            if events is not None:
                repeated = add_events(staging, events, plan.fps, plan.target,
                                      [(p.index, p.episode_index, p.length, p.data_file) for p in parts])
            _publish_dir(staging, out, overwrite)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return LeRobotExport(out, plan, tuple(parts), repeated)
