"""Small pyarrow <-> numpy helpers for list columns (no copies where pyarrow allows)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["FLOAT_VECTOR", "IMU", "NS_LIST", "NS_SCALAR", "TRAJECTORY", "Physical", "int_values_to_numpy",
           "list_column_to_numpy", "list_offsets", "numpy_dtype", "numpy_to_list_array"]


def numpy_dtype(typ: pa.DataType) -> np.dtype:
    """The numpy dtype of a primitive arrow type (``int64`` -> ``int64``, ``float`` -> ``float32``).

    ``DataType.to_pandas_dtype()`` imports pandas in pyarrow < 26, which egopool does not
    depend on (the ``keypoints`` extra's venv has pyarrow 25); an empty array's
    ``to_numpy`` gives the same dtype without it.

    Nested and string types give ``object``, as ``to_pandas_dtype`` does.

    Raises
    ------
    TypeError
        pyarrow cannot convert ``typ`` to numpy at all.
    """
    try:
        return np.asarray(pa.array([], type=typ).to_numpy(zero_copy_only=False)).dtype
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as exc:
        raise TypeError(f"no numpy dtype for arrow type {typ}") from exc


def _combine(col: Any) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def int_values_to_numpy(col: Any, flatten: bool = False) -> np.ndarray:
    """An integer stamp column (or the flattened values of a ``list<int>`` one) as int64 with
    nulls as 0, egopool's "no stamp" (a null would otherwise come back as NaN -> INT64_MIN)."""
    arr = _combine(col)
    if flatten:
        arr = _values(arr) if len(arr) else pa.array([], type=pa.int64())
    if arr.null_count:
        arr = arr.fill_null(0)
    return np.asarray(arr.to_numpy(zero_copy_only=False)).astype(np.int64, copy=False)


def list_offsets(col: Any) -> np.ndarray:
    """Row offsets ``(rows + 1,)`` int64 of a list column (chunk-normalised, nulls as empty)."""
    arr = _combine(col)
    if isinstance(arr.type, pa.FixedSizeListType):
        n = arr.type.list_size
        return np.arange(len(arr) + 1, dtype=np.int64) * n
    offs = np.asarray(arr.offsets, dtype=np.int64)
    return offs - offs[0]


def _values(arr: pa.Array) -> pa.Array:
    if isinstance(arr.type, pa.FixedSizeListType):
        return arr.flatten()
    return arr.values.slice(arr.offsets[0].as_py(), arr.offsets[-1].as_py() - arr.offsets[0].as_py())


def list_column_to_numpy(col: Any, depth: int = 1) -> np.ndarray:
    """Flatten a list column to a 2-D numpy array of its elements.

    ``depth=1``: ``list<T>`` rows of equal length d -> ``(rows, d)``.
    ``depth=2``: ``list<list<T>>`` (e.g. ``observation.imu``) -> ``(samples, d)``.
    Raises ValueError when rows are ragged.
    """
    arr = _combine(col)
    if depth == 2:
        inner = _values(arr)
        return list_column_to_numpy(inner, depth=1)
    values = np.asarray(_values(arr).to_numpy(zero_copy_only=False))
    rows = len(arr)
    if rows == 0:
        return values.reshape(0, 0)
    if values.size % rows:
        raise ValueError("ragged list column")
    offs = list_offsets(arr)
    d = values.size // rows
    if not np.all(np.diff(offs) == d):
        raise ValueError("ragged list column")
    return values.reshape(rows, d)


def numpy_to_list_array(values: np.ndarray, offsets: np.ndarray, value_type: pa.DataType) -> pa.ListArray:
    """Build ``list<value_type>`` from flat ``values`` and int32/int64 ``offsets``."""
    flat = pa.array(np.ascontiguousarray(values).reshape(-1), type=value_type)
    return pa.ListArray.from_arrays(pa.array(np.asarray(offsets, dtype=np.int32)), flat)


@dataclass(frozen=True)
class Physical:
    """A physical column type a reader decodes: list nesting depth and the kind of leaf values.

    Attributes
    ----------
    depth:
        List nesting (0 scalar, 1 ``list<T>``, 2 ``list<list<T>>``); ``fixed_size_list`` and
        ``large_list`` count as lists (decisions.md #1).
    leaf:
        ``"int64"`` (exactly int64: a narrower ns column is truncated by construction) or
        ``"float"`` (float16/32/64, widened losslessly on read).
    text:
        How the spec writes the type, for messages.
    """

    depth: int
    leaf: str
    text: str

    def matches(self, typ: pa.DataType) -> bool:
        """True when ``typ`` is this physical type."""
        depth = 0
        while pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
            typ, depth = typ.value_type, depth + 1
        if depth != self.depth:
            return False
        if self.leaf == "int64":
            return bool(pa.types.is_int64(typ))
        return bool(pa.types.is_floating(typ))


#: ``hardware_ns``, ``raw_hw_ns``, ``*_force_ns``...: one int64 stamp per row (file_format.md §7.1, §7.3).
NS_SCALAR = Physical(0, "int64", "int64")
#: ``*_slam_trajectory_ns``, ``imu_ts_ns``: int64 stamps per row (multi_device_storage.md §4.6, §7.2).
NS_LIST = Physical(1, "int64", "list<int64>")
#: ``*_slam_trajectory``: 8 float64 per point, several points per row (§4.6).
TRAJECTORY = Physical(1, "float", "list<float64>")
#: Vector signals (force ``[fx, fy, fz]``, gloves...): ``list<float32>``.
FLOAT_VECTOR = Physical(1, "float", "list<float32>")
#: ``observation.imu``: samples of 6 float32 per row (§7.2).
IMU = Physical(2, "float", "list<list<float32, 6>>")
