"""Force matrices of one episode: scale authority, whole-episode decode, the Σfz self-check.

Reads ``observation.*_force_matrix`` columns (file_format.md §7.2.1,
multi_device_storage.md §4.6) through :class:`egopool.codecs.force_matrix.ForceMatrixCodec`,
one parquet row group at a time, so a long episode is never held twice in memory.

Rows without a sample: the writer stores the "no new sample" value of §5.5 (187500
zeros, i.e. an all-zero frame) and ``*_force_matrix_ns = 0``; older files may hold an
empty list or a null. Both decode to an all-zero frame; :func:`force_matrix_sampled`
tells them apart from real samples.

Use it through :class:`egopool.read.episode.Episode` (``ep.force_matrices(col)``...).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..arrowutil import FLOAT_VECTOR, NS_SCALAR, int_values_to_numpy, list_column_to_numpy, list_offsets, numpy_dtype
from ..codecs.force_matrix import (FRAME_SHAPE, FRAME_VALUES, ForceMatrixCodec, ResolvedForceMatrixSpec, fz_plane_sums,
                                  fz_ratio, resolve_force_matrix_spec)
from .._safe_read import open_parquet
from ..errors import FormatError, SchemaError
from ..storage import TaskPath

if TYPE_CHECKING:
    from ..layout import EpisodeFiles


class _TaskView(Protocol):
    @property
    def path(self) -> TaskPath: ...

    @property
    def info(self) -> dict[str, Any]: ...


class Episode(Protocol):
    """What this module reads of an episode: :class:`egopool.read.episode.Episode` provides it
    (imports run one way, ``episode`` -> ``forces``)."""

    @property
    def index(self) -> int: ...

    @property
    def files(self) -> EpisodeFiles[TaskPath]: ...

    @property
    def task(self) -> _TaskView: ...

    @property
    def schema(self) -> pa.Schema: ...

    @property
    def meta(self) -> dict[str, Any]: ...

    @property
    def column_names(self) -> list[str]: ...

    @property
    def length(self) -> int: ...

    def columns(self, names: list[str]) -> pa.Table: ...

    def _data_path(self) -> TaskPath: ...

__all__ = [
    "force_column_for",
    "force_matrices",
    "force_matrix",
    "force_matrix_fz_ratio",
    "force_matrix_sampled",
    "force_matrix_spec",
    "iter_force_matrix_blocks",
]


def _check_column(ep: Episode, column: str) -> pa.DataType:
    schema = ep.schema
    if column not in schema.names:
        have = sorted(n for n in schema.names if n.endswith("_force_matrix"))
        raise SchemaError(f"not in episode {ep.index} (force matrix columns: {have})", column=column,
                          path=ep.files.data)
    typ = schema.field(column).type
    if not (pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ)):
        raise SchemaError(f"is {typ}, not a list column", column=column, path=ep.files.data)
    return typ.value_type


def force_matrix_spec(ep: Episode, column: str) -> ResolvedForceMatrixSpec:
    """Codec and scale source of ``column`` in this episode (§7.2.1 authority order).

    Returns
    -------
    ResolvedForceMatrixSpec
        ``.codec`` and ``.source`` in ``{"force_matrix_specs", "info.features", "default"}``.

    Raises
    ------
    SchemaError
        The column is not in this episode.
    CodecError
        The episode's own ``force_matrix_specs`` contradicts the stored dtype, or a declaration
        is unusable (unknown encoding, scale not a finite number > 0); the message names the
        file holding it and how to repair it.
    """
    value_type = _check_column(ep, column)
    specs = ep.meta.get("force_matrix_specs") if ep.files.meta is not None else None
    files = {"force_matrix_specs": ep.files.meta, "info.features": ep.task.path / "meta" / "info.json",
             "data": ep.files.data}
    return resolve_force_matrix_spec(column, stored_dtype=numpy_dtype(value_type),
                                     episode_specs=specs if isinstance(specs, dict) else None,
                                     features=ep.task.info.get("features", {}), files=files)


def _row_group_bounds(pf: pq.ParquetFile) -> np.ndarray:
    counts = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)


def _flat_values(chunked: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(row lengths (n,), flat values) of one list column read, zero-copy where pyarrow allows."""
    arr = chunked.combine_chunks() if chunked.num_chunks != 1 else chunked.chunk(0)
    offs = list_offsets(arr)
    values = arr.flatten().to_numpy(zero_copy_only=False) if len(arr) else np.zeros(0)
    return np.diff(offs), values


def _stored_rows(ep: Episode, column: str, start: int,
                 stop: int | None) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Per parquet row group overlapping rows ``[start, stop)``: (first row, row lengths, flat values)."""
    path = ep._data_path()
    pf = open_parquet(path, what="data parquet")
    bounds = _row_group_bounds(pf)
    total = int(bounds[-1])
    stop = total if stop is None else min(int(stop), total)
    start = max(int(start), 0)
    for g in range(len(bounds) - 1):
        g0, g1 = int(bounds[g]), int(bounds[g + 1])
        if g1 <= start or g0 >= stop:
            continue
        try:
            col = pf.read_row_group(g, columns=[column]).column(column)
        except Exception as exc:
            raise FormatError(f"cannot read row group {g}: {exc}", path=path) from exc
        lo, hi = max(start, g0) - g0, min(stop, g1) - g0
        lengths, values = _flat_values(col.slice(lo, hi - lo))
        bad = (lengths != 0) & (lengths != FRAME_VALUES)
        if bad.any():
            row = g0 + lo + int(np.flatnonzero(bad)[0])
            raise SchemaError(f"row {row} holds {int(lengths[bad][0])} values; a force matrix row holds "
                              f"{FRAME_VALUES} (or none)", column=column, path=path)
        yield g0 + lo, lengths, values


def _decode_into(codec: ForceMatrixCodec, lengths: np.ndarray, values: np.ndarray, out: np.ndarray) -> None:
    """Decode one row group's rows into ``out`` ``(n, 250, 250, 3)``; rows without a frame become zeros."""
    if (lengths == FRAME_VALUES).all():
        if lengths.size:
            codec.decode(values, out=out)
        return
    out[...] = 0
    full = np.flatnonzero(lengths == FRAME_VALUES)
    if full.size:
        out[full] = codec.decode(values)


def iter_force_matrix_blocks(ep: Episode, column: str, start: int = 0,
                             stop: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """Decode ``column`` rows ``[start, stop)`` block by block (one parquet row group each).

    Yields
    ------
    (first_row, frames):
        ``frames`` is ``(n, 250, 250, 3)`` float32 mN for rows ``first_row .. first_row+n-1``;
        rows without a stored frame are all zero.

    Raises
    ------
    SchemaError
        Column absent, or a row holds neither 0 nor 187500 values.
    FormatError
        The parquet cannot be read.
    """
    codec = force_matrix_spec(ep, column).codec
    for first, lengths, values in _stored_rows(ep, column, start, stop):
        frames = np.empty((lengths.size, *FRAME_SHAPE), dtype=np.float32)
        _decode_into(codec, lengths, values, frames)
        yield first, frames


def force_matrices(ep: Episode, column: str, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Rows ``[start, stop)`` of ``column`` as ``(R, 250, 250, 3)`` float32 mN (whole episode by default).

    Decoded straight into the result, one parquet row group at a time. Memory is
    ``R × 750 kB``; pass ``start``/``stop`` (or use :func:`iter_force_matrix_blocks`)
    for long episodes. Rows without a stored frame are all zero; see
    :func:`force_matrix_sampled`.

    Raises
    ------
    SchemaError
        Column absent, or a row holds neither 0 nor 187500 values.
    """
    codec = force_matrix_spec(ep, column).codec
    total = ep.length
    stop = total if stop is None else min(int(stop), total)
    start = max(int(start), 0)
    out = np.empty((max(stop - start, 0), *FRAME_SHAPE), dtype=np.float32)
    for first, lengths, values in _stored_rows(ep, column, start, stop):
        _decode_into(codec, lengths, values, out[first - start: first - start + lengths.size])
    return out


def force_matrix(ep: Episode, column: str, row: int) -> np.ndarray:
    """One row's frame ``(250, 250, 3)`` float32 mN (reads only that row's parquet row group).

    Raises
    ------
    SchemaError
        ``row`` outside ``[0, length)`` or the column is absent.
    """
    total = ep.length
    if not 0 <= int(row) < total:
        raise SchemaError(f"row {row} outside episode {ep.index}'s {total} rows", column=column)
    blocks = list(iter_force_matrix_blocks(ep, column, int(row), int(row) + 1))
    return np.asarray(blocks[0][1][0])


def _ns_column(ep: Episode, column: str) -> np.ndarray | None:
    ns = column + "_ns"
    if ns not in ep.column_names:
        return None
    col = ep.columns([ns]).column(ns)
    if not NS_SCALAR.matches(col.type):
        raise SchemaError(f"is stored as {col.type}, egopool reads it as {NS_SCALAR.text}", column=ns,
                          path=ep.files.data, hint="run `egopool validate TASK` for the full check")
    return int_values_to_numpy(col)


def force_matrix_sampled(ep: Episode, column: str) -> np.ndarray:
    """``(R,)`` bool: True where the row carries a real matrix sample.

    A row is a sample when it stores a frame that is not all zero and, when the
    episode has ``<column>_ns``, its stamp is not 0 (§5.5: ``0``/``[]`` = no new sample).
    """
    parts = []
    for _, frames in iter_force_matrix_blocks(ep, column):
        parts.append(np.any(frames.reshape(frames.shape[0], -1) != 0, axis=1))
    sampled = np.concatenate(parts) if parts else np.zeros(0, dtype=bool)
    ns = _ns_column(ep, column)
    if ns is not None:
        sampled &= ns != 0
    return sampled


def force_column_for(column: str) -> str:
    """``observation.gripper_2_gripper_left_force_matrix`` -> ``observation.gripper_2_gripper_left_force``."""
    if not column.endswith("_force_matrix"):
        raise SchemaError("not a *_force_matrix column", column=column)
    return column[: -len("_matrix")]


def force_matrix_fz_ratio(ep: Episode, column: str, force_column: str | None = None) -> np.ndarray:
    """The §7.2.1 self-check per row: ``Σ(fz plane)`` of the decoded matrix / the same row's force fz.

    Parameters
    ----------
    column:
        ``observation.*_force_matrix``.
    force_column:
        The ``[fx, fy, fz]`` column (mN) to compare with; default: ``column`` without
        ``_matrix``.

    Returns
    -------
    numpy.ndarray
        ``(R,)`` float64, ≈ 1.0 on a correctly scaled episode; NaN on rows where either
        sample is missing (``*_ns == 0``, empty/zero row), force fz is 0, or an int16
        (``row_diff_quantized``) matrix holds cells at the int16 limits: saturated at its
        scale, so its Σfz is only a bound and would pass for the historical truncation
        toward zero (file_format.md §7.2.1; docs/decisions.md #22), or a ``row_flat_raw``
        matrix holds ±Infinity / NaN cells (beyond float32).

    Raises
    ------
    SchemaError
        Either column is absent from the episode.
    """
    force_column = force_column or force_column_for(column)
    if force_column not in ep.column_names:
        raise SchemaError(f"not in episode {ep.index}; pass force_column=", column=force_column,
                          path=ep.files.data)
    col = ep.columns([force_column]).column(force_column)
    if not FLOAT_VECTOR.matches(col.type):
        raise SchemaError(f"is stored as {col.type}, not [fx, fy, fz] rows ({FLOAT_VECTOR.text})",
                          column=force_column, path=ep.files.data)
    try:
        forces = list_column_to_numpy(col).astype(np.float64)
    except ValueError as exc:  # ragged rows
        raise SchemaError(f"expected [fx, fy, fz] rows ({exc})", column=force_column, path=ep.files.data) from exc
    if forces.ndim != 2 or forces.shape[1] != 3:
        raise SchemaError(f"expected [fx, fy, fz] rows, got shape {forces.shape}", column=force_column,
                          path=ep.files.data)
    codec = force_matrix_spec(ep, column).codec
    limits = None
    if codec.encoding == "row_diff_quantized":  # what q = 32767 / -32768 decode to (same float32 division)
        limits = (np.float32(32767) / np.float32(codec.scale), np.float32(-32768) / np.float32(codec.scale))
    sums, nonzero = [], []
    for _, frames in iter_force_matrix_blocks(ep, column):
        flat = frames.reshape(frames.shape[0], -1)
        sums.append(fz_plane_sums(frames))
        ok = np.any(flat != 0, axis=1)
        if limits is not None:
            ok &= ~np.any((flat == limits[0]) | (flat == limits[1]), axis=1)
        else:  # row_flat_raw: a cell beyond float32 is stored as ±Infinity, its Σfz is no reading (qa12)
            ok &= np.isfinite(flat).all(axis=1)
        nonzero.append(ok)
    fz_sum = np.concatenate(sums) if sums else np.zeros(0)
    valid = np.concatenate(nonzero) if nonzero else np.zeros(0, dtype=bool)
    for ns in (_ns_column(ep, column), _ns_column(ep, force_column)):
        if ns is not None:
            valid &= ns != 0
    return fz_ratio(fz_sum, forces[:, 2], valid)
