"""Column grammar and column kinds of the data parquet (file_format.md §7, multi_device_storage.md §2.4, §6.2).

A :class:`ColumnSpec` says how one column is stored (arrow type), how it is
declared in ``info.features`` (or not: ``status.*`` and key columns are never
declared, §6.8.2), what a row without a sample holds (§5.5: ``[0.0]*d``, ``[]``,
``0``), and whether the column is dropped when an episode never fills it
(column-level sparsity, §4.6 "本段真的出现过该列才建").
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Mapping
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .arrowutil import numpy_dtype
from .errors import EgopoolError, SchemaError
from .frames import frame_axes as _frame_axes

__all__ = [
    "FORBIDDEN_PREFIXES",
    "IMU_COLUMN",
    "IMU_TS_COLUMN",
    "KEY_COLUMNS",
    "RESERVED_SUFFIXES",
    "ColumnSpec",
    "check_column_name",
    "check_slot_name",
    "companion_columns",
    "owner_column",
    "force_matrix_column",
    "hand_pose_column",
    "imu_columns",
    "key_column",
    "scalar_ns_column",
    "slam_trajectory_columns",
    "status_column",
    "vector_column",
]

_SEGMENT_RE = re.compile(r"^[a-z0-9_]+$")

#: Reserved signal suffixes (§2.4) -> the column kind that may use them.
RESERVED_SUFFIXES: dict[str, str] = {
    "slam_trajectory_ns": "slam_trajectory_ns",
    "slam_trajectory": "slam_trajectory",
    "_force_matrix_ns": "force_matrix_ns",
    "_force_matrix": "force_matrix",
    "_force_ns": "force_ns",
    "_force": "force",
    "_state": "state",
    "_imu_quat": "imu_quat",
    "_imu_valid": "imu_valid",
    "_hand_pose": "hand_pose",
}
FORBIDDEN_PREFIXES = ("observation.gripper_1_", "observation.images.")

#: Frame-key columns (§7.1): name -> arrow type. Always present: the first six.
KEY_COLUMNS: dict[str, pa.DataType] = {
    "episode_index": pa.int64(),
    "frame_index": pa.int64(),
    "timestamp": pa.float32(),
    "task_index": pa.int64(),
    "wall_time": pa.float64(),
    "hardware_ns": pa.int64(),
    "raw_hw_ns": pa.int64(),
    "depth_ns": pa.int64(),
    "rgb_dup": pa.int8(),
    "rgb_gap": pa.int32(),
    "depth_dup": pa.int8(),
    "depth_gap": pa.int32(),
    "ts_src": pa.int8(),
    "host_ns": pa.int64(),
}
ALWAYS_KEY_COLUMNS = ("episode_index", "frame_index", "timestamp", "task_index", "wall_time", "hardware_ns")


def signal_kind(name: str) -> str | None:
    """The reserved kind a column name's suffix implies, or None."""
    for suffix, kind in RESERVED_SUFFIXES.items():
        if name.endswith(suffix):
            return kind
    return None


def check_column_name(name: str, kind: str | None = None) -> None:
    """Check a parquet column name against §2.4.

    Dot-separated segments of ``[a-z0-9_]+`` (lowercase ASCII), the forbidden names
    (``slam_pose``, ``gripper_1_*``, ``observation.images.*``) and reserved suffixes
    (a name ending in one must be of that ``kind``).

    Raises
    ------
    SchemaError
        Naming the column and the rule it breaks.
    """
    if name in KEY_COLUMNS or name in ("imu_ts_ns", "action"):
        return
    segments = name.split(".")
    if len(segments) < 2 or segments[0] not in ("observation", "status"):
        raise SchemaError("must start with 'observation.' or 'status.' (§2.2)", column=name)
    for seg in segments:
        if not _SEGMENT_RE.match(seg):
            raise SchemaError("segments may only use [a-z0-9_] (lowercase ASCII, §2.4)", column=name,
                              hint="rename the signal; column names are not sanitised for you")
    if name.startswith(FORBIDDEN_PREFIXES):
        raise SchemaError("forbidden name (§2.4: gripper_1_* and observation.images.* do not exist)",
                          column=name, hint="rig1 has the empty prefix; videos go to videos/, not features")
    if segments[-1].endswith("slam_pose"):
        raise SchemaError("slam_pose is abolished (§2.4)", column=name,
                          hint="write a *slam_trajectory column instead")
    if segments[0] == "status":
        return
    implied = signal_kind(name)
    if kind is not None and implied is not None and implied != kind:
        raise SchemaError(f"ends with a reserved suffix that means {implied!r}, but it is a {kind!r} column (§2.4)",
                          column=name, hint="pick a signal name that does not end in a reserved suffix")


#: The IMU column and its per-sample stamps (file_format.md §7.2: one stamp per sample, checklist §12.9); both
#: names are fixed by the spec (one S80M per task, multi_device_storage.md §4.4), so neither takes a prefix.
IMU_COLUMN, IMU_TS_COLUMN = "observation.imu", "imu_ts_ns"
#: Kinds whose column may have an ``<column>_ns`` host-time column (multi_device_storage.md §2.4, §4.6, §6.6).
_NS_KINDS = ("slam_trajectory", "force", "force_matrix")
#: A glove sensor's IMU columns, ``observation.<sensor><suffix>`` (multi_device_storage.md §4.5, §2.2).
_SENSOR_SUFFIXES = ("_imu_quat", "_imu_valid")


def companion_columns(column: str, sensors: Collection[str] = ()) -> list[str]:
    """The columns that belong to ``column`` and exist only with it (docs/decisions.md E27, E83), whether or not a
    task holds them:

    * ``observation.imu`` -> ``imu_ts_ns`` (file_format.md §7.2, §12.9; required: one stamp per sample);
    * a ``slam_trajectory`` / ``_force`` / ``_force_matrix`` column ``C`` -> ``C_ns`` (its host times, §4.6);
    * a glove's pressure column ``observation.<sensor>`` (``<sensor>`` in ``info.json`` ``sensors``) ->
      ``observation.<sensor>_imu_quat``, ``observation.<sensor>_imu_valid`` and ``status.<sensor>``
      (multi_device_storage.md §4.5, §3 ``status.<传感器名>``).

    ``observation.<side>_hand_pose`` is no companion (an always-written column of its side, §7.2), nor a gripper's
    ``status.<slot>`` (its device's slot's, E35). Empty for any other column.
    """
    if column == IMU_COLUMN:
        return [IMU_TS_COLUMN]
    if signal_kind(column) in _NS_KINDS:
        return [column + "_ns"]
    sensor = column[len("observation."):] if column.startswith("observation.") else None
    if sensor is not None and sensor in sensors:
        return [f"observation.{sensor}{suffix}" for suffix in _SENSOR_SUFFIXES] + [f"status.{sensor}"]
    return []


def owner_column(column: str, sensors: Collection[str] = ()) -> str | None:
    """The column ``column`` is a companion of (:func:`companion_columns`), or None."""
    if column == IMU_TS_COLUMN:
        return IMU_COLUMN
    if column.endswith("_ns") and column[:-3] and column in companion_columns(column[:-3]):
        return column[:-3]
    for sensor in sensors:
        if column in companion_columns(f"observation.{sensor}", sensors):
            return f"observation.{sensor}"
    return None


_SLOT_RE = re.compile(r"[^\W_]\w*")  # Unicode letters (Chinese too), digits and _, not starting with _
_SLOT_BAD = re.compile(r"\W+")


def check_slot_name(name: str) -> None:
    """Check a video-slot name (``image_key``): what multi_device_storage.md §2.4's cleaning (``slot_base``:
    illegal characters -> ``_``, Chinese kept) leaves, i.e. Unicode letters, digits and ``_`` (no space, ``-``,
    ``.``, ``/``), not starting with ``_`` (a name starting with ``_`` or ``.`` is no file of the format,
    file_format.md §11), at most 255 bytes of UTF-8 (it is a directory name under ``videos/chunk-*/``).
    The writer's :class:`~egopool.write.streams.StreamSpec` and ``egopool edit rename-slot`` both check it.

    Raises
    ------
    SchemaError
        Naming the slot, the rule and a cleaned name to use instead.
    """
    if isinstance(name, str) and _SLOT_RE.fullmatch(name) and len(name.encode("utf-8")) <= 255:
        return
    fixed = _SLOT_BAD.sub("_", name if isinstance(name, str) else str(name)).strip("_")[:64]
    raise SchemaError(f"invalid slot name {name!r}: a slot name is letters (Chinese allowed), digits and '_', "
                      "not starting with '_', at most 255 bytes (multi_device_storage.md §2.4)",
                      hint=f"use {fixed!r}" if fixed else "e.g. head_rgb")


@dataclass(frozen=True)
class ColumnSpec:
    """How one data-parquet column is stored and declared.

    Attributes
    ----------
    name:
        Full column name (``observation.imu``, ``status.head_left_rgb``...).
    storage:
        ``"scalar"`` (one value per row), ``"string"``, ``"list"`` (``list<T>``: a
        fixed-length vector when ``length`` is set, else variable), ``"list_list"``
        (``list<list<T>>``, each inner of ``length`` values: IMU samples).
    dtype:
        numpy dtype name of the element (``float32``, ``float64``, ``int64``, ``int16``...).
    length:
        Fixed element count of a ``list`` row (vector) or of an inner list; None = variable.
    feature:
        The ``info.features`` declaration, or None (status and key columns, §6.8.2).
    kind:
        Semantic kind, checked against reserved suffixes (§2.4).
    sparse:
        Drop the column when no row of the episode carried a sample (§4.6, §8.1.3).
    lockstep:
        For a list column that runs parallel to another: ``(partner, values_per_item)``,
        e.g. ``("observation.slam_trajectory", 8)``: row lengths must match point counts.
    encode:
        Optional transform applied to a row's value before storage (force matrices): returns
        ``(stored value, elements changed to fit)``, e.g. cells saturated at int16.
    """

    name: str
    storage: str
    dtype: str
    length: int | None = None
    feature: Mapping[str, Any] | None = None
    kind: str = "vector"
    sparse: bool = False
    lockstep: tuple[str, int] | None = None
    encode: Callable[[Any], tuple[Any, int]] | None = None

    def __post_init__(self) -> None:
        check_column_name(self.name, self.kind)
        if self.storage not in ("scalar", "string", "list", "list_list"):
            raise SchemaError(f"unknown storage {self.storage!r}", column=self.name)

    @property
    def arrow_type(self) -> pa.DataType:
        """The pyarrow type on disk."""
        if self.storage == "string":
            return pa.string()
        elem = pa.from_numpy_dtype(np.dtype(self.dtype))
        if self.storage == "scalar":
            return elem
        if self.storage == "list":
            return pa.list_(elem)
        return pa.list_(pa.list_(elem))

    def empty_value(self) -> Any:
        """What a row without a new sample holds (§5.5): zeros for vectors, [] for variable, 0, or ''."""
        if self.storage == "string":
            return ""
        if self.storage == "scalar":
            return np.zeros((), dtype=self.dtype)[()]
        if self.storage == "list" and self.length is not None:
            return np.zeros(self.length, dtype=self.dtype)
        if self.storage == "list_list":
            return np.zeros((0, self.length or 0), dtype=self.dtype)
        return np.zeros(0, dtype=self.dtype)

    def normalise(self, value: Any) -> Any:
        """Convert one row's value to its stored numpy form, checking length, type and range.

        Raises
        ------
        SchemaError
            Wrong element count, a value of the wrong type, or a value the stored dtype
            cannot hold (see :meth:`normalise_counted`).
        """
        return self.normalise_counted(value)[0]

    def normalise_counted(self, value: Any) -> tuple[Any, int]:
        """Like :meth:`normalise`, also returning how many elements the column's codec changed to fit.

        Only an ``encode`` step changes values (force-matrix cells saturated at int16,
        file_format.md §7.2.1); everything else is stored exactly or refused. Refused: a str
        or complex value for a number column, a float that is not a whole number (or NaN) for
        an integer column, an integer outside the stored dtype's range, and a finite number
        that would become Infinity in float32 (multi_device_storage.md §5.5: a value the
        format cannot hold is a missing sample, never silently another number).

        Raises
        ------
        SchemaError
            Naming the column and what is wrong; a codec's own refusal (``CodecError``) is
            re-raised as SchemaError with the same text.
        """
        changed = 0
        self._check_shape(value)
        if self.encode is not None:
            try:
                value, changed = self.encode(value)
            except EgopoolError as exc:
                raise SchemaError(exc.message, column=self.name) from exc
        if self.storage == "string":
            if not isinstance(value, str):
                raise SchemaError(f"expects a str, got {type(value).__name__}", column=self.name)
            return value, changed
        arr = _to_dtype(value, np.dtype(self.dtype), self.name)
        if self.storage == "scalar":
            if arr.size != 1:
                raise SchemaError(f"expects one value per row, got shape {arr.shape}", column=self.name)
            return arr.reshape(())[()], changed
        if self.storage == "list_list":
            width = self.length or 0
            if arr.size % max(width, 1):
                raise SchemaError(f"expects items of {width} values, got {arr.size} values", column=self.name)
            return (arr.reshape(-1, width) if arr.size else np.zeros((0, width), self.dtype)), changed
        flat = arr.reshape(-1)
        if self.length is not None and flat.size != self.length:
            raise SchemaError(f"expects {self.length} values per row, got {flat.size}", column=self.name)
        return flat, changed

    def _check_shape(self, value: Any) -> None:
        """Refuse an array whose axes do not match the declared element shape (a transposed force matrix,
        IMU rows ``(6, K)``, trajectory points ``(8, K)``), which a flat reshape would scramble silently.

        A flat value (one axis after dropping axes of size 1) is the stored form and is left to the
        length checks; so is anything that is not a regular array.
        """
        if self.storage == "list" and self.length is not None and isinstance(value, np.ndarray) \
                and value.size != self.length:  # before any conversion copies a huge array (found by qa12)
            raise SchemaError(f"expects {self.length} values per row, got {value.size}", column=self.name)
        if self.storage in ("scalar", "string") or self.feature is None:
            return
        item = [int(n) for n in self.feature.get("shape") or () if isinstance(n, int) and n != 1]
        if self.storage == "list_list" or (self.storage == "list" and self.length is None):
            item = item[-1:] if item and item[-1] > 1 else []  # one item per point/sample, any count
        if not item:
            return
        try:
            shape = [n for n in np.shape(value) if n != 1]
        except (TypeError, ValueError):
            return
        if len(shape) < 2:
            return
        fixed = self.storage == "list" and self.length is not None
        if fixed:
            ok = shape == item or (self.kind == "force_matrix" and shape == [item[0], item[1] * item[2]])
        else:
            ok = shape[-1] == item[-1]
        if not ok:
            want = "x".join(map(str, item)) if fixed else f"Kx{item[-1]}"
            raise SchemaError(f"expects items of shape ({want}), got an array of shape {tuple(np.shape(value))}; "
                              "its values would be stored in another order", column=self.name,
                              hint="pass the element in its declared shape (or flat in C order)")

    def to_arrow(self, values: list[Any]) -> pa.Array:
        """Build the arrow array of a row group from normalised row values."""
        typ = self.arrow_type
        if self.storage == "string":
            return pa.array(values, type=typ)
        if self.storage == "scalar":
            return pa.array(np.asarray(values, dtype=self.dtype), type=typ)
        if self.storage == "list":
            lens = np.fromiter((v.size for v in values), dtype=np.int64, count=len(values))
            offsets = np.zeros(len(values) + 1, dtype=np.int64)
            np.cumsum(lens, out=offsets[1:])
            flat = np.concatenate(values) if values else np.zeros(0, self.dtype)
            return _list_array(offsets, pa.array(flat, type=typ.value_type))
        # list_list: outer offsets over samples, inner fixed-length lists
        n_inner = np.fromiter((v.shape[0] for v in values), dtype=np.int64, count=len(values))
        outer = np.zeros(len(values) + 1, dtype=np.int64)
        np.cumsum(n_inner, out=outer[1:])
        width = self.length or 0
        flat = np.concatenate([v.reshape(-1) for v in values]) if values else np.zeros(0, self.dtype)
        inner_offsets = np.arange(int(outer[-1]) + 1, dtype=np.int64) * width
        inner = _list_array(inner_offsets, pa.array(flat, type=typ.value_type.value_type))
        return _list_array(outer, inner)

    def to_arrow_rows(self, values: list[Any]) -> pa.ChunkedArray:
        """:meth:`to_arrow` as one chunk per row, each row's array wrapped without a copy.

        For large elements (a force matrix: 187500 int16 a row) concatenating a row group first is
        a copy spent twice, and the parquet writer takes the chunks as they are: the same values,
        the same bytes once written (docs/decisions.md R25). Other storages: one chunk.
        """
        typ = self.arrow_type
        if self.storage != "list" or not values:
            return pa.chunked_array([self.to_arrow(values)], type=typ)
        chunks = [pa.ListArray.from_arrays(pa.array(np.array([0, v.size], np.int32)), pa.array(v, type=typ.value_type))
                  for v in values]
        return pa.chunked_array(chunks, type=typ)


def _to_dtype(value: Any, dtype: np.dtype, column: str) -> np.ndarray:
    """``value`` as an array of ``dtype`` when every element is representable, else SchemaError.

    numpy's own cast wraps integers (300 -> 44 in int8), truncates floats toward zero in
    an integer column and turns a float64 beyond float32 into Infinity, each silently.
    """
    try:
        src = np.asarray(value)
        if src.dtype == dtype:
            return src
        if src.dtype.kind == "O":  # Python ints beyond int64, or a mix of objects
            if not all(isinstance(x, numbers.Real) for x in src.reshape(-1)):
                raise SchemaError(f"expects numbers ({dtype}), got {type(src.reshape(-1)[0]).__name__} "
                                  "values", column=column)
            src = src.astype(np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise SchemaError(f"cannot convert value to {dtype}: {exc}", column=column) from exc
    kind = src.dtype.kind
    if kind not in "biuf":
        raise SchemaError(f"expects numbers ({dtype}), got {src.dtype} values", column=column)
    if dtype.kind in "iu":
        if kind == "f":
            if src.size and not (np.isfinite(src).all() and (np.rint(src) == src).all()):
                raise SchemaError(f"expects whole numbers ({dtype}), got non-integral or non-finite floats",
                                  column=column)
        info = np.iinfo(dtype)
        if src.size and kind != "b" and (src.min() < info.min or src.max() > info.max):
            raise SchemaError(f"holds {src.min() if src.min() < info.min else src.max()}, outside the "
                              f"{dtype} range [{info.min}, {info.max}]", column=column)
        return src.astype(dtype)
    with np.errstate(over="ignore"):
        out = src.astype(dtype)
    if kind == "f" and src.size and not np.isfinite(out).all():
        grew = np.isfinite(src) & ~np.isfinite(out)
        if grew.any():
            raise SchemaError(f"holds {src[grew].reshape(-1)[0]}, beyond the {dtype} range", column=column)
    return out


def _list_array(offsets: np.ndarray, values: pa.Array) -> pa.Array:
    if offsets[-1] > np.iinfo(np.int32).max:
        return pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), values).cast(pa.list_(values.type))
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)


def key_column(name: str) -> ColumnSpec:
    """One of the frame-key columns of §7.1 with its exact dtype; optional ones are sparse."""
    try:
        typ = KEY_COLUMNS[name]
    except KeyError:
        raise SchemaError("not a frame-key column of §7.1", column=name) from None
    return ColumnSpec(name, "scalar", numpy_dtype(typ).name, kind="key",
                      sparse=name not in ALWAYS_KEY_COLUMNS)


def vector_column(name: str, shape: tuple[int, ...] | list[int], dtype: str = "float32", *,
                  encoding: str | None = None, sparse: bool = True, kind: str | None = None,
                  **extra: Any) -> ColumnSpec:
    """A fixed-length ``list<dtype>`` column whose element has ``shape`` (e.g. ``[16, 16]`` -> 256 values).

    ``features[name] = {"dtype", "shape", ["encoding"], ...extra}`` (§6.2: shape is the element shape).
    """
    shape = [int(s) for s in shape]
    feature: dict[str, Any] = {"dtype": dtype, "shape": shape}
    if encoding is not None:
        feature["encoding"] = encoding
    feature.update(extra)
    return ColumnSpec(name, "list", dtype, int(np.prod(shape)), feature,
                      kind=kind or signal_kind(name) or "vector", sparse=sparse)


def hand_pose_column(side: str) -> ColumnSpec:
    """``observation.{left,right}_hand_pose``: 21 joints × xyz float32, always written (§7.2), m."""
    if side not in ("left", "right"):
        raise SchemaError(f"hand side must be 'left' or 'right', got {side!r}")
    return vector_column(f"observation.{side}_hand_pose", [21, 3], sparse=False, kind="hand_pose")


def imu_columns() -> tuple[ColumnSpec, ColumnSpec]:
    """``observation.imu`` (list<list<float32,6>>, per-sample gyro xyz rad/s + accel xyz m/s²) and
    ``imu_ts_ns`` (list<int64>, device clock ns), one timestamp per sample (§7.2, checklist §12.9)."""
    imu = ColumnSpec(IMU_COLUMN, "list_list", "float32", 6, {"dtype": "float32", "shape": [6]},
                     kind="imu", sparse=True)
    ts = ColumnSpec(IMU_TS_COLUMN, "list", "int64", None, None, kind="imu_ts", sparse=True,
                    lockstep=(IMU_COLUMN, 1))
    return imu, ts


def slam_trajectory_columns(prefix: str = "", *, frame: str | None = "down_left_forward",
                            time: Mapping[str, str] | None = None, owner: Mapping[str, Any] | None = None,
                            source_slot: str | None = None) -> tuple[ColumnSpec, ColumnSpec]:
    """``observation.<prefix>slam_trajectory`` (flat ``[t,x,y,z,qx,qy,qz,qw]``×K float64; t in s of the
    sensor clock, xyz in m) and its ``_ns`` (K host-monotonic ns, lockstep, 0 = no stamp).

    Every trajectory column carries its own ``frame``/``frame_axes``/``time``/``owner``/
    ``source_slot`` (multi_device_storage.md §6.6). ``frame=None`` writes no frame key
    (the legacy ``right_forward_up`` meaning, §3.1).
    """
    name = f"observation.{prefix}slam_trajectory"
    feature: dict[str, Any] = {"dtype": "float64", "shape": [8], "encoding": "flat_points_8_txyz_qxyzw"}
    if frame is not None:
        feature["frame"] = frame
        feature["frame_axes"] = _frame_axes(frame)
    if time is not None:
        feature["time"] = dict(time)
    if owner is not None:
        feature["owner"] = dict(owner)
    if source_slot is not None:
        feature["source_slot"] = source_slot
    traj = ColumnSpec(name, "list", "float64", None, feature, kind="slam_trajectory", sparse=True)
    ns = ColumnSpec(name + "_ns", "list", "int64", None,
                    {"dtype": "int64", "shape": [1], "encoding": "flat_parallel_to_slam_trajectory",
                     "clock": "host_monotonic_ns"},
                    kind="slam_trajectory_ns", sparse=True, lockstep=(name, 8))
    return traj, ns


def scalar_ns_column(name: str) -> ColumnSpec:
    """An int64 sample-time scalar (host monotonic ns, 0 = no sample), e.g. ``*_force_ns``."""
    return ColumnSpec(name, "scalar", "int64", None,
                      {"dtype": "int64", "shape": [1], "encoding": "host_monotonic_ns"},
                      kind=signal_kind(name) or "ns", sparse=True)


def status_column(slot_or_sensor: str) -> ColumnSpec:
    """``status.<id>`` string column (``connected``/``disconnected``), never in features (§3)."""
    return ColumnSpec(f"status.{slot_or_sensor}", "string", "str", kind="status", sparse=False)


def force_matrix_column(name: str, encoding: str = "row_diff_quantized", scale: float = 10) -> ColumnSpec:
    """A ``*_force_matrix`` column: each row one ``(250, 250, 3)`` mN frame (file_format.md §7.2.1).

    Rows are passed as float mN frames and stored encoded (``list<int16>`` diffs or
    ``list<float32>`` raw, 187500 values). ``features`` gets ``encoding`` + ``scale``; the
    writer copies the same declaration into the episode's ``force_matrix_specs``
    (multi_device_storage.md §8.1.4).
    """
    from .codecs.force_matrix import FRAME_VALUES, ForceMatrixCodec

    codec = ForceMatrixCodec(encoding, float(scale))
    return ColumnSpec(name, "list", codec.dtype.name, FRAME_VALUES, codec.to_dict(), kind="force_matrix",
                      sparse=True, encode=codec.encode_counted)
