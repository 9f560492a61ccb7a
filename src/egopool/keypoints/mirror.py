"""The hand-keypoints mirror layout (file_format.md §10, multi_device_storage.md §1.4).

Post-processing output lives outside the recording directory, keyed like it::

    keypoints_output/<task>/episode_{N:06d}/          # N = global 1-based episode index
    ├── hand_pose/chunk-000.parquet                  # 2-D keypoints (MediaPipe backend)
    ├── auto_labels/auto_labels.parquet              # automatic per-frame labels
    └── hand_pose_3d/chunk-000.parquet               # bare 63-value world landmarks per hand

Every file has one row per data row, keyed by the data parquet's ``frame_index`` (§10:
"按帧 frame_index 与 data parquet 对齐"); no file name carries N. ``<task>`` is the task
directory's name. The mirror root defaults to ``keypoints_output`` *beside the recordings
root* (``data/recordings/<task>`` -> ``data/keypoints_output/<task>``); the environment
variable ``EGOPOOL_KEYPOINTS_ROOT`` or an explicit ``root`` moves it.

Columns (``<side>`` is ``left`` / ``right``, joints in MediaPipe order, 0 = wrist):

``hand_pose/chunk-000.parquet``
    ``frame_index`` int64; ``<side>_present`` bool; ``<side>_hand_2d`` list<float32> of
    42 = 21 × (u, v) in **pixels** of the stored video (origin at the top-left corner of
    the top-left pixel, u right, v down; MediaPipe's normalised x·width, y·height);
    ``<side>_hand_z`` list<float32> of 21: MediaPipe's relative depth (wrist ≈ 0, same
    scale as u/width, negative = nearer the camera; not metric); ``<side>_score`` float32
    handedness confidence.
``hand_pose_3d/chunk-000.parquet``
    ``frame_index`` int64; ``<side>_present`` bool; ``<side>_hand_pose`` list<float32> of
    63 = 21 × (x, y, z) **metres**: MediaPipe world landmarks, origin at the hand's
    approximate geometric centre, axes parallel to the camera's (x right, y down, z away
    from the camera) — a hand shape, not a position in the scene. These are the values
    ``egopool keypoints backfill`` writes into ``observation.<side>_hand_pose`` (§7.2).
``auto_labels/auto_labels.parquet``
    ``frame_index`` int64; ``hands`` string (``none``/``left``/``right``/``both``);
    ``<side>_present`` bool; ``<side>_score`` float32.

A hand not found in a frame is a row of zeros with ``<side>_present = false``
(multi_device_storage.md §5.5: a fixed-length ``[0.0]*d`` is "no sample", not a value).
Each file carries the extractor's parameters as JSON in its parquet key-value metadata
under ``egopool.keypoints``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import fsync_dir, temp_path_for
from .._safe_read import loads_json, read_parquet
from ..errors import FormatError
from ..storage import ObjectPath, as_path, is_object_uri

__all__ = [
    "AUTO_LABELS",
    "ENV_ROOT",
    "HAND_POSE_2D",
    "HAND_POSE_3D",
    "JOINTS",
    "MIRROR_DIRNAME",
    "SIDES",
    "EpisodeKeypoints",
    "HandPose2D",
    "HandPose3D",
    "default_mirror_root",
    "episode_mirror_dir",
    "hand_labels",
    "mirror_tables",
    "read_episode_keypoints",
    "write_episode_keypoints",
]

MIRROR_DIRNAME = "keypoints_output"
ENV_ROOT = "EGOPOOL_KEYPOINTS_ROOT"
HAND_POSE_2D = "hand_pose/chunk-000.parquet"
AUTO_LABELS = "auto_labels/auto_labels.parquet"
HAND_POSE_3D = "hand_pose_3d/chunk-000.parquet"
SIDES = ("left", "right")
JOINTS = 21
META_KEY = b"egopool.keypoints"

_CHUNK_RE = re.compile(r"^chunk-(\d+)\.parquet$")


def default_mirror_root(task_dir: str | Path | ObjectPath) -> Path:
    """``$EGOPOOL_KEYPOINTS_ROOT``, else ``keypoints_output`` beside the task's recordings root.

    Raises
    ------
    FormatError
        The task is in a bucket (``s3://``) and ``$EGOPOOL_KEYPOINTS_ROOT`` is unset: the mirror is
        written to a local directory, which must then be named.
    """
    env = os.environ.get(ENV_ROOT)
    if env:
        return Path(env)
    if isinstance(task_dir, ObjectPath) or is_object_uri(task_dir):
        raise FormatError("the task is in object storage: name the local keypoints_output directory to write",
                          path=str(task_dir), hint=f"pass --mirror-root DIR or set {ENV_ROOT}")
    return Path(os.path.abspath(task_dir)).parent.parent / MIRROR_DIRNAME


def episode_mirror_dir(task_dir: str | Path | ObjectPath, index: int, root: str | Path | None = None) -> Path:
    """``<root>/<task directory name>/episode_{N:06d}`` (N 1-based, multi_device_storage.md §1.4)."""
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < 1:
        raise FormatError(f"episode index must be an integer >= 1, got {index!r}")
    base = Path(root) if root is not None else default_mirror_root(task_dir)
    name = as_path(task_dir).name if isinstance(task_dir, ObjectPath) or is_object_uri(task_dir) \
        else Path(os.path.abspath(task_dir)).name
    return base / name / f"episode_{int(index):06d}"


@dataclass(frozen=True)
class HandPose2D:
    """2-D hand keypoints of one episode (``hand_pose/``), per side ``left``/``right``.

    Attributes
    ----------
    frame_index:
        ``(R,)`` int64, the data parquet's ``frame_index`` of each row.
    present:
        side -> ``(R,)`` bool.
    pixels:
        side -> ``(R, 21, 2)`` float32 (u, v) in pixels; zeros where absent.
    z_rel:
        side -> ``(R, 21)`` float32 MediaPipe relative depth (not metric); zeros where absent.
    score:
        side -> ``(R,)`` float32 handedness confidence; 0 where absent.
    """

    frame_index: np.ndarray
    present: dict[str, np.ndarray]
    pixels: dict[str, np.ndarray]
    z_rel: dict[str, np.ndarray]
    score: dict[str, np.ndarray]


@dataclass(frozen=True)
class HandPose3D:
    """3-D world landmarks of one episode (``hand_pose_3d/``).

    Attributes
    ----------
    frame_index:
        ``(R,)`` int64.
    present:
        side -> ``(R,)`` bool.
    world:
        side -> ``(R, 21, 3)`` float32 metres (hand-centred, camera-parallel axes); zeros where absent.
    """

    frame_index: np.ndarray
    present: dict[str, np.ndarray]
    world: dict[str, np.ndarray]

    def flat(self, side: str) -> np.ndarray:
        """``(R, 63)`` float32: the bare values of ``observation.<side>_hand_pose`` (§7.2)."""
        return np.ascontiguousarray(self.world[side].reshape(-1, JOINTS * 3), dtype=np.float32)


@dataclass(frozen=True)
class EpisodeKeypoints:
    """What the mirror holds for one episode; a member is None when its file does not exist.

    Attributes
    ----------
    directory:
        ``keypoints_output/<task>/episode_{N:06d}``.
    hand_pose:
        2-D keypoints, or None.
    hand_pose_3d:
        World landmarks, or None.
    auto_labels:
        The labels table (``frame_index``, ``hands``, ``<side>_present``, ``<side>_score``), or None.
    metadata:
        The extractor's parameters (stream, image size, backend and version...) from the first
        file found; {} when none.
    """

    directory: Path
    hand_pose: HandPose2D | None = None
    hand_pose_3d: HandPose3D | None = None
    auto_labels: pa.Table | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        """True when at least one of the three files exists."""
        return any(x is not None for x in (self.hand_pose, self.hand_pose_3d, self.auto_labels))


def hand_labels(present: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per-row label ``none``/``left``/``right``/``both`` from the two presence flags."""
    left, right = np.asarray(present["left"], bool), np.asarray(present["right"], bool)
    names = np.array(["none", "left", "right", "both"], dtype=object)
    return names[left.astype(np.int8) + 2 * right.astype(np.int8)]


def _list_array(values: np.ndarray, width: int) -> pa.Array:
    flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    offsets = np.arange(values.shape[0] + 1, dtype=np.int32) * width
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, type=pa.float32()))


def mirror_tables(pose2d: HandPose2D, pose3d: HandPose3D, metadata: Mapping[str, Any]) -> dict[str, pa.Table]:
    """The three mirror files' tables (relative path -> table), metadata attached.

    Raises
    ------
    FormatError
        The two poses do not share ``frame_index``, or an array has the wrong shape.
    """
    fi = np.asarray(pose2d.frame_index, dtype=np.int64)
    r = fi.shape[0]
    if not np.array_equal(fi, np.asarray(pose3d.frame_index, dtype=np.int64)):
        raise FormatError("2-D and 3-D keypoints do not share frame_index")
    for side in SIDES:
        shapes = {"pixels": (pose2d.pixels[side].shape, (r, JOINTS, 2)), "z_rel": (pose2d.z_rel[side].shape,
                  (r, JOINTS)), "world": (pose3d.world[side].shape, (r, JOINTS, 3))}
        for name, (got, want) in shapes.items():
            if tuple(got) != want:
                raise FormatError(f"{side} {name} has shape {tuple(got)}, expected {want}")
    meta = {META_KEY: json.dumps(dict(metadata), ensure_ascii=False, allow_nan=False).encode("utf-8")}
    cols2: dict[str, pa.Array] = {"frame_index": pa.array(fi, pa.int64())}
    cols3: dict[str, pa.Array] = {"frame_index": pa.array(fi, pa.int64())}
    labels: dict[str, pa.Array] = {"frame_index": pa.array(fi, pa.int64()),
                                   "hands": pa.array(hand_labels(pose3d.present).tolist(), pa.string())}
    for side in SIDES:
        present = pa.array(np.asarray(pose2d.present[side], bool), pa.bool_())
        cols2[f"{side}_present"] = present
        cols2[f"{side}_hand_2d"] = _list_array(pose2d.pixels[side], JOINTS * 2)
        cols2[f"{side}_hand_z"] = _list_array(pose2d.z_rel[side], JOINTS)
        cols2[f"{side}_score"] = pa.array(np.asarray(pose2d.score[side], np.float32), pa.float32())
        cols3[f"{side}_present"] = pa.array(np.asarray(pose3d.present[side], bool), pa.bool_())
        cols3[f"{side}_hand_pose"] = _list_array(pose3d.world[side], JOINTS * 3)
        labels[f"{side}_present"] = present
        labels[f"{side}_score"] = cols2[f"{side}_score"]
    return {HAND_POSE_2D: pa.table(cols2).replace_schema_metadata(meta),
            AUTO_LABELS: pa.table(labels).replace_schema_metadata(meta),
            HAND_POSE_3D: pa.table(cols3).replace_schema_metadata(meta)}


def write_episode_keypoints(directory: str | Path, pose2d: HandPose2D, pose3d: HandPose3D,
                            metadata: Mapping[str, Any], *, publish_lock: Any = None) -> list[Path]:
    """Write the three mirror files of one episode, each through a dot-temp + ``os.replace``.

    Every temp is written first; then, inside ``publish_lock`` (a context manager, e.g. the
    task lock) when given, they are renamed into place with ``hand_pose_3d`` last (it is what
    ``backfill`` reads, so it never appears beside stale 2-D files). A reader sees each file
    old or new, never half-written.

    Returns
    -------
    list[Path]
        The three final paths.

    Raises
    ------
    FormatError
        Inconsistent input (see :func:`mirror_tables`).
    OSError
        The file system refused a write (temps are removed).
    """
    base = Path(directory)
    tables = mirror_tables(pose2d, pose3d, metadata)
    temps: list[tuple[Path, Path]] = []
    try:
        for rel in (HAND_POSE_2D, AUTO_LABELS, HAND_POSE_3D):
            final = base / rel
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = temp_path_for(final)
            temps.append((tmp, final))
            pq.write_table(tables[rel], tmp, compression="zstd")
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        with publish_lock if publish_lock is not None else contextlib.nullcontext():
            for tmp, final in temps:
                os.replace(tmp, final)
                fsync_dir(final.parent)
    finally:
        for tmp, _ in temps:
            if tmp.exists():
                tmp.unlink()
    return [final for _, final in temps]


def _read_chunks(directory: Path) -> tuple[pa.Table | None, Path | None]:
    """All ``chunk-NNN.parquet`` of a mirror sub-directory, concatenated in chunk order."""
    if not directory.is_dir():
        return None, None
    files = sorted((int(m[1]), directory / n) for n in os.listdir(directory) if (m := _CHUNK_RE.match(n)))
    if not files:
        return None, None
    tables = [_read(p) for _, p in files]
    try:
        return pa.concat_tables(tables), files[0][1]
    except pa.ArrowInvalid as exc:
        raise FormatError(f"chunks do not share one schema ({exc})", path=directory,
                          hint="re-run `egopool keypoints extract` for this episode") from exc


def _read(path: Path) -> pa.Table:
    # regular files only, footer checked first: a FIFO or a lying footer is one line (issue 12 D)
    return read_parquet(path, what="keypoints parquet", hint="re-run `egopool keypoints extract` for this episode")


def _metadata(table: pa.Table) -> dict[str, Any]:
    raw = (table.schema.metadata or {}).get(META_KEY)
    try:
        obj = loads_json(raw) if raw else {}
    except FormatError:  # not JSON, not UTF-8 or nested too deep: no metadata
        return {}
    return obj if isinstance(obj, dict) else {}


def _fixed(table: pa.Table, column: str, width: int, path: Path) -> np.ndarray:
    if column not in table.column_names:
        raise FormatError(f"missing column {column!r}", path=path, hint="re-run `egopool keypoints extract`")
    col = table.column(column).combine_chunks()
    if col.null_count or not (pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type)
                              or pa.types.is_large_list(col.type)):
        raise FormatError(f"column {column!r} must be a list<float32> without nulls", path=path)
    values = np.asarray(col.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
    if values.size != len(col) * width or (len(col) and np.any(np.diff(_offsets(col)) != width)):
        raise FormatError(f"column {column!r} must hold {width} values per row", path=path)
    return values.reshape(len(col), width)


def _offsets(col: pa.Array) -> np.ndarray:
    if pa.types.is_fixed_size_list(col.type):
        return np.arange(len(col) + 1) * col.type.list_size
    return np.asarray(col.offsets, dtype=np.int64)


def _scalar(table: pa.Table, column: str, dtype: Any, path: Path) -> np.ndarray:
    if column not in table.column_names:
        raise FormatError(f"missing column {column!r}", path=path, hint="re-run `egopool keypoints extract`")
    col = table.column(column)
    if col.null_count:
        raise FormatError(f"column {column!r} has nulls", path=path)
    return np.asarray(col.to_numpy(), dtype=dtype)


def _frame_index(table: pa.Table, path: Path) -> np.ndarray:
    fi = _scalar(table, "frame_index", np.int64, path)
    if fi.size and np.any(np.diff(fi) <= 0):
        raise FormatError("frame_index is not strictly increasing", path=path,
                          hint="re-run `egopool keypoints extract` for this episode")
    return fi


def read_episode_keypoints(directory: str | Path) -> EpisodeKeypoints:
    """Read whatever the mirror holds for one episode (missing files are None, never an error).

    Parameters
    ----------
    directory:
        ``keypoints_output/<task>/episode_{N:06d}`` (see :func:`episode_mirror_dir`).

    Raises
    ------
    FormatError
        A file exists but is unreadable or breaks the column layout above (named).
    """
    base = Path(directory)
    pose2d = pose3d = None
    metadata: dict[str, Any] = {}
    t2, p2 = _read_chunks(base / Path(HAND_POSE_2D).parent)
    if t2 is not None and p2 is not None:
        fi = _frame_index(t2, p2)
        pose2d = HandPose2D(fi, {s: _scalar(t2, f"{s}_present", bool, p2) for s in SIDES},
                            {s: _fixed(t2, f"{s}_hand_2d", JOINTS * 2, p2).reshape(-1, JOINTS, 2) for s in SIDES},
                            {s: _fixed(t2, f"{s}_hand_z", JOINTS, p2) for s in SIDES},
                            {s: _scalar(t2, f"{s}_score", np.float32, p2) for s in SIDES})
        metadata = metadata or _metadata(t2)
    t3, p3 = _read_chunks(base / Path(HAND_POSE_3D).parent)
    if t3 is not None and p3 is not None:
        fi = _frame_index(t3, p3)
        pose3d = HandPose3D(fi, {s: _scalar(t3, f"{s}_present", bool, p3) for s in SIDES},
                            {s: _fixed(t3, f"{s}_hand_pose", JOINTS * 3, p3).reshape(-1, JOINTS, 3) for s in SIDES})
        metadata = metadata or _metadata(t3)
    labels_path = base / AUTO_LABELS
    labels = _read(labels_path) if labels_path.is_file() else None
    if labels is not None:
        _frame_index(labels, labels_path)
        metadata = metadata or _metadata(labels)
    return EpisodeKeypoints(base, pose2d, pose3d, labels, metadata)
