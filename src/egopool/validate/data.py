"""Checks of one episode's data parquet (file_format.md §7, multi_device_storage.md §2–§8).

The schema is checked first (key columns and their dtypes §7.1, column grammar §2.2 /
§2.4 with reserved suffixes matched against the stored type, every ``observation.*``
column declared §6.8.2, declared ``dtype`` = stored element type §6.2), then the rows
are streamed in small batches so that an episode with force matrices never sits in
memory whole: ``episode_index`` = N (§2), ``frame_index`` 0..n-1 (§7.1), trajectory rows
of 8 values with ``_ns`` in lockstep (§4.6, §8.1.3), IMU samples of 6 with one
``imu_ts_ns`` each (§7.2), fixed-length rows = the feature's element count (§6.2),
force matrix rows of 250×750 values (§7.2.1), and ``wall_time`` (§7.3).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..arrowutil import list_offsets, numpy_dtype
from ..codecs.force_matrix import FRAME_VALUES
from .._safe_read import open_parquet
from ..errors import EgopoolError, ObjectStoreError, SchemaError
from ..storage import store_failure
from ..schema import (ALWAYS_KEY_COLUMNS, IMU_COLUMN, IMU_TS_COLUMN, KEY_COLUMNS, check_column_name, owner_column,
                      signal_kind)
from ..storage import TaskPath
from .context import Context

__all__ = ["DataSummary", "check_data", "first_line", "open_data"]

R_NUMBERING = "file_format.md §2"
R_PARQUET = "file_format.md §7"
R_KEYS = "file_format.md §7.1"
R_OBS = "file_format.md §7.2"
R_FM = "file_format.md §7.2.1"
R_TIME = "file_format.md §7.3"
R_PREFIX = "multi_device_storage.md §2.2"
R_GRAMMAR = "multi_device_storage.md §2.4"
R_STATUS = "multi_device_storage.md §3"
R_TRAJ = "multi_device_storage.md §4.6"
R_MISSING = "multi_device_storage.md §5.5"
R_FEATURE = "multi_device_storage.md §6.2"
R_NOT_DECLARED = "multi_device_storage.md §6.8.2"
R_LOCKSTEP = "multi_device_storage.md §8.1.3"

_BATCH_ROWS = 64
#: Decoded bytes of one batch of the row checks, at most (a full-rig episode's four force matrices are ~3 MB a
#: row as stored: 64 rows made batches of ~200 MB per column that the allocator returned to the system and
#: faulted in again; a few MB keep the same buffers reused, docs/decisions.md U37).
_BATCH_BYTES = 32 << 20
#: A frame-key column name (multi_device_storage.md §2.2 ``<key_column>``, §2.4 charset).
_KEY_NAME_RE = re.compile(r"^[a-z0-9_]+$")


def first_line(exc: BaseException) -> str:
    """First line of an exception text (pyarrow messages run over several lines)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@dataclass
class DataSummary:
    """What the episode-level checks need from the data parquet.

    Attributes
    ----------
    rows:
        Row count. ``first_frame`` / ``last_frame``: ``frame_index`` of the first and
        last row (None when unreadable or empty).
    max_timestamp:
        Largest ``|timestamp|`` (s) when every one is finite, else None.
    columns:
        Column name -> arrow type.
    """

    rows: int
    first_frame: int | None = None
    last_frame: int | None = None
    max_timestamp: float | None = None
    columns: dict[str, pa.DataType] = field(default_factory=dict)


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def _leaf(t: pa.DataType) -> pa.DataType:
    while _is_list(t):
        t = t.value_type
    return t


def _depth(t: pa.DataType) -> int:
    d = 0
    while _is_list(t):
        t, d = t.value_type, d + 1
    return d


def _leaf_name(t: pa.DataType) -> str:
    leaf = _leaf(t)
    if pa.types.is_string(leaf) or pa.types.is_large_string(leaf):
        return "string"
    try:
        return str(numpy_dtype(leaf).name)
    except TypeError:  # numpy_dtype's only error
        return str(leaf)


#: reserved kind -> (predicate on the stored type, what it should be).
_KIND_TYPES: dict[str, tuple[Any, str]] = {
    "slam_trajectory": (lambda t: _depth(t) == 1 and _leaf_name(t) == "float64", "list<float64>"),
    "slam_trajectory_ns": (lambda t: _depth(t) == 1 and _leaf_name(t) == "int64", "list<int64>"),
    "force_matrix": (lambda t: _depth(t) == 1 and _leaf_name(t) in ("int16", "float32"),
                     "list<int16> or list<float32>"),
    "force_matrix_ns": (lambda t: _depth(t) == 0 and _leaf_name(t) == "int64", "int64"),
    "force_ns": (lambda t: _depth(t) == 0 and _leaf_name(t) == "int64", "int64"),
    "force": (lambda t: _depth(t) == 1 and _leaf_name(t) == "float32", "list<float32>"),
    "state": (lambda t: _depth(t) == 1 and _leaf_name(t) == "float32", "list<float32>"),
    "imu_quat": (lambda t: _depth(t) == 1 and _leaf_name(t) == "float32", "list<float32>"),
    "imu_valid": (lambda t: _depth(t) == 1 and _leaf_name(t) == "float32", "list<float32>"),
    "hand_pose": (lambda t: _depth(t) == 1 and _leaf_name(t) == "float32", "list<float32>"),
}


def _open(ctx: Context, path: TaskPath, index: int) -> pq.ParquetFile | None:
    try:
        return open_parquet(path, what="data parquet")
    except ObjectStoreError:
        raise  # the store failed, not the task: no verdict on what could not be read (O3)
    except EgopoolError as exc:  # not a regular file, impossible footer, ArrowInvalid...: one boundary
        ctx.report.error(R_PARQUET, path, f"cannot read parquet ({exc.message}): the file is truncated or "
                                          f"corrupt; restore it from a backup or delete episode {index}")
        return None


def open_data(ctx: Context, path: TaskPath, index: int) -> pq.ParquetFile | None:
    """The data parquet of episode ``index`` opened once for every check of it (:func:`check_data`,
    :func:`~egopool.validate.changes.check_value_changes`); None, after an error finding, when it cannot be
    opened (the footer is checked first, :func:`egopool._safe_read.open_parquet`). The caller closes it."""
    return _open(ctx, path, index)


def check_data(ctx: Context, path: TaskPath, index: int, pf: pq.ParquetFile | None = None,
               visit: Callable[[pa.RecordBatch, int], None] | None = None) -> DataSummary | None:
    """Check the data parquet of episode ``index`` (global N). None when it cannot be read.

    ``pf``: the file as :func:`open_data` opened it (left open); None opens (and closes) it here.
    ``visit(batch, first_row)``: called with every batch of rows the checks read (every ``observation.*``,
    ``status.*``, ``action`` and ``imu_ts_ns`` column, in row order), so another check of the same
    columns reads them no second time (:class:`~egopool.validate.changes.NonFiniteScan`, U20).
    """
    own = pf is None
    if pf is None:
        pf = _open(ctx, path, index)
        if pf is None:
            return None
    schema = pf.schema_arrow
    summary = DataSummary(int(pf.metadata.num_rows), columns={f.name: f.type for f in schema})
    _check_schema(ctx, path, summary.columns)
    try:
        _check_rows(ctx, pf, path, index, summary, visit)
    except ObjectStoreError:
        raise  # the store failed, not the task: no verdict on what could not be read (O3)
    except Exception as exc:  # a corrupt page deep inside the file
        if (failed := store_failure(exc, path)) is not None:
            raise failed from exc  # the store failed mid-read: no verdict (O3)
        ctx.report.error(R_PARQUET, path, f"cannot read parquet rows ({first_line(exc)}): the file is corrupt; "
                                          f"restore it from a backup or delete episode {index}")
    finally:
        if own:
            pf.close()
    return summary


def _check_schema(ctx: Context, path: TaskPath, cols: dict[str, pa.DataType]) -> None:
    for name in ALWAYS_KEY_COLUMNS:
        if name not in cols:
            ctx.report.error(R_KEYS, path, f"key column {name!r} is missing; every data parquet has "
                                           f"{list(ALWAYS_KEY_COLUMNS)}")
    if "action" not in cols:
        ctx.report.error(R_OBS, path, "column 'action' is missing; it is always written (list<float32> [0.0])")
    feats = ctx.features
    for name, typ in cols.items():
        if name in KEY_COLUMNS:
            if typ != KEY_COLUMNS[name]:
                ctx.report.error(R_KEYS, path, f"key column {name!r} is stored as {typ}, the spec says "
                                               f"{KEY_COLUMNS[name]}; rewrite the column with that dtype")
            continue
        if name in ("action", "imu_ts_ns"):
            pass
        elif not name.startswith(("observation.", "status.")):
            _unknown_top_level(ctx, path, name)
            continue
        elif name.endswith("slam_pose"):
            # historical column (UMIGripper_Action_AI): readers ignore it, writers no longer produce it (§9.1)
            ctx.report.warning(R_GRAMMAR, path, f"column {name!r} is the abolished slam_pose; readers ignore it "
                                                "(multi_device_storage.md §9.1), new writes must not produce it")
            continue
        else:
            try:
                check_column_name(name)
            except SchemaError as exc:
                ctx.report.error(R_GRAMMAR, path, exc.message + (f" ({exc.hint})" if exc.hint else ""))
        if name.startswith("status."):
            if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
                ctx.report.error(R_STATUS, path, f"column {name!r} is {typ}; status columns are strings "
                                                 "('connected' / 'disconnected')")
            continue
        kind = signal_kind(name) if name.startswith("observation.") else None
        if kind in _KIND_TYPES and not _KIND_TYPES[kind][0](typ):
            ctx.report.error(R_GRAMMAR, path, f"column {name!r} ends in a reserved suffix meaning {kind}, which "
                                              f"is stored as {_KIND_TYPES[kind][1]}, but it is {typ}; rename the "
                                              "signal or store it as that kind")
        if name == "imu_ts_ns":
            if not (_depth(typ) == 1 and _leaf_name(typ) == "int64"):
                ctx.report.error(R_OBS, path, f"column 'imu_ts_ns' is {typ}, the spec says list<int64>")
            continue
        if name == "observation.imu" and not (_depth(typ) == 2 and _leaf_name(typ) == "float32"):
            ctx.report.error(R_OBS, path, f"column 'observation.imu' is {typ}, the spec says "
                                          "list<list<float32, 6>>")
        if name.startswith("observation."):
            if name not in feats:
                ctx.report.error(R_NOT_DECLARED, path, f"column {name!r} is not declared in info.json features; "
                                                       "add its declaration (dtype, shape[, encoding])")
                continue
        spec = feats.get(name)
        if kind == "force_matrix":
            continue  # its dtype follows the episode's own force_matrix_specs (file_format.md §7.2.1), see episode.py
        if isinstance(spec, dict) and isinstance(spec.get("dtype"), str) and spec["dtype"] != _leaf_name(typ):
            ctx.report.error(R_FEATURE, path, f"column {name!r} stores {_leaf_name(typ)} but features declares "
                                              f"dtype {spec['dtype']!r}; fix the declaration")
    for name in cols:  # a stamp column without the column it stamps (schema.owner_column; E83)
        owner = owner_column(name)
        if owner is None or owner in cols:
            continue
        if signal_kind(name) == "slam_trajectory_ns":
            ctx.report.error(R_LOCKSTEP, path, f"column {name!r} exists without its trajectory {owner!r}; "
                                               "drop it or restore the trajectory column")
        elif name == IMU_TS_COLUMN:
            ctx.report.error(R_OBS, path, f"column {name!r} exists without {owner!r}")
    if IMU_COLUMN in cols and IMU_TS_COLUMN not in cols:
        ctx.report.error(R_OBS, path, "column 'observation.imu' has no 'imu_ts_ns' (one stamp per sample, §12.9)")


def _unknown_top_level(ctx: Context, path: TaskPath, name: str) -> None:
    """A top-level column egopool does not know (docs/decisions.md V3).

    A newer collector may add a frame-key column (v1.3.11 added ``raw_hw_ns``): a name of
    the key-column form (one ``[a-z0-9_]+`` segment, multi_device_storage.md §2.2 / §2.4)
    is a warning, so older readers keep validating newer data. A name outside the column
    grammar (upper case, other characters, a dotted name of an unknown namespace) is an error.
    """
    if name == "slam_pose":
        ctx.report.warning(R_GRAMMAR, path, "column 'slam_pose' is the abolished slam_pose; readers ignore it "
                                            "(multi_device_storage.md §9.1), new writes must not produce it")
    elif _KEY_NAME_RE.match(name):
        ctx.report.warning(R_PREFIX, path, f"column {name!r} is not a frame-key column egopool knows "
                                           "(file_format.md §7.1); a newer writer may have added it, as v1.3.11 "
                                           "added raw_hw_ns: egopool ignores it (update egopool if the writer "
                                           "is newer)")
    else:
        ctx.report.error(R_PREFIX, path, f"column {name!r} breaks the column grammar: a column is a frame-key "
                                         "column (one [a-z0-9_] word), observation.<signal> or status.<id>; "
                                         "rename or drop it")


def _fixed_length(ctx: Context, name: str, typ: pa.DataType) -> int | None:
    """Element count every row of a fixed-length vector column must have, else None."""
    if _depth(typ) != 1 or name == "imu_ts_ns" or not (name == "action" or name.startswith("observation.")):
        return None
    kind = signal_kind(name)
    if kind in ("slam_trajectory", "slam_trajectory_ns", "force_matrix"):
        return None
    spec = ctx.features.get(name)
    if not isinstance(spec, dict) or "encoding" in spec:  # variable-length columns declare an encoding (§8.1.5)
        return None
    shape = spec.get("shape")
    if not isinstance(shape, list) or not shape or not all(isinstance(s, int) and s > 0 for s in shape):
        return None
    return prod(shape)


class _FirstRow:
    """Remembers the first offending row of one check so each problem is reported once."""

    def __init__(self) -> None:
        self.found: dict[str, tuple[int, str]] = {}

    def note(self, key: str, base: int, bad: np.ndarray, describe: Any) -> None:
        if key in self.found or not bad.any():
            return
        i = int(np.flatnonzero(bad)[0])
        self.found[key] = (base + i, describe(i))


def _check_rows(ctx: Context, pf: pq.ParquetFile, path: TaskPath, index: int, summary: DataSummary,
                visit: Callable[[pa.RecordBatch, int], None] | None = None) -> None:
    cols = summary.columns
    n = summary.rows
    _check_keys(ctx, pf, path, index, summary)
    fixed = {c: d for c in cols if (d := _fixed_length(ctx, c, cols[c])) is not None}
    trajs = [c for c in cols if c.startswith("observation.") and signal_kind(c) == "slam_trajectory"
             and _depth(cols[c]) == 1]
    fms = [c for c in cols if c.startswith("observation.") and signal_kind(c) == "force_matrix"
           and _depth(cols[c]) == 1]
    imu = "observation.imu" if "observation.imu" in cols and _depth(cols["observation.imu"]) == 2 else None
    imu_ts = "imu_ts_ns" if "imu_ts_ns" in cols and _depth(cols["imu_ts_ns"]) == 1 else None
    # an unknown top-level column (a newer writer's key column) has no rule of ours to check
    nullable = [c for c in cols if c not in KEY_COLUMNS and (c.startswith(("observation.", "status."))
                                                             or c in ("action", "imu_ts_ns"))]
    wanted = sorted(set(fixed) | set(trajs) | {t + "_ns" for t in trajs if t + "_ns" in cols} | set(fms)
                    | ({imu} if imu else set()) | ({imu_ts} if imu_ts else set()) | set(nullable))
    if not wanted or n == 0:
        return
    first = _FirstRow()
    base = 0
    # one thread: a verification runs one per core (docs/decisions.md U34, U37); pyarrow's pool only adds handoffs
    for batch in pf.iter_batches(batch_size=batch_rows(pf, wanted), columns=wanted, use_threads=False):
        if visit is not None:
            visit(batch, base)
        arrays = {name: batch.column(name) for name in wanted}
        for name, arr in arrays.items():
            if arr.null_count:
                nulls = np.asarray(arr.is_null().to_numpy(zero_copy_only=False))
                first.note(f"null:{name}", base, nulls, lambda i: "")
        for name, d in fixed.items():
            lens = np.diff(list_offsets(arrays[name]))
            first.note(f"fixed:{name}", base, lens != d, lambda i, lens=lens: str(int(lens[i])))
        for name in fms:
            lens = np.diff(list_offsets(arrays[name]))
            first.note(f"fm:{name}", base, (lens != 0) & (lens != FRAME_VALUES), lambda i, lens=lens: str(int(lens[i])))
        for name in trajs:
            lens = np.diff(list_offsets(arrays[name]))
            first.note(f"traj:{name}", base, lens % 8 != 0, lambda i, lens=lens: str(int(lens[i])))
            if name + "_ns" in arrays:
                ns_lens = np.diff(list_offsets(arrays[name + "_ns"]))
                first.note(f"lock:{name}", base, ns_lens * 8 != lens,
                           lambda i, lens=lens, ns_lens=ns_lens: f"{int(lens[i]) / 8:g} points, "
                                                                 f"{int(ns_lens[i])} stamps")
        if imu:
            arr = arrays[imu]
            outer = np.diff(list_offsets(arr))
            inner = np.diff(list_offsets(arr.flatten())) if len(arr) else np.zeros(0, np.int64)
            if inner.size and (inner != 6).any():
                # map the first bad sample back to its row
                bad_sample = int(np.flatnonzero(inner != 6)[0])
                row = int(np.searchsorted(np.cumsum(outer), bad_sample, side="right"))
                mask = np.zeros(len(outer), bool)
                mask[row] = True
                first.note("imu6", base, mask, lambda i, v=int(inner[bad_sample]): str(v))
            if imu_ts:
                ts_lens = np.diff(list_offsets(arrays[imu_ts]))
                first.note("imu_ts", base, ts_lens != outer,
                           lambda i, o=outer, t=ts_lens: f"{int(o[i])} samples, {int(t[i])} stamps")
        base += batch.num_rows
    for key, (row, detail) in first.found.items():
        kind, _, name = key.partition(":")
        if kind == "null":
            ctx.report.error(R_MISSING, path, f"column {name!r} row {row} is null; a row without a sample holds "
                                              "zeros, [] or 0, never null")
        elif kind == "fixed":
            ctx.report.error(R_FEATURE, path, f"column {name!r} row {row} has {detail} values, but features shape "
                                              f"{ctx.features[name].get('shape')} means {fixed[name]} per row "
                                              "(shape is the element shape); fix the data or the declaration")
        elif kind == "fm":
            ctx.report.error(R_FM, path, f"column {name!r} row {row} has {detail} values; a force matrix row is "
                                         f"one 250x250x3 frame = {FRAME_VALUES} values (or [] without a sample)")
        elif kind == "traj":
            ctx.report.error(R_TRAJ, path, f"column {name!r} row {row} has {detail} values, not a multiple of 8 "
                                           "([t,x,y,z,qx,qy,qz,qw] per point)")
        elif kind == "lock":
            ctx.report.error(R_LOCKSTEP, path, f"column {name + '_ns'!r} is not in lockstep with {name!r}: row {row} "
                                               f"has {detail}; write one stamp per point (0 for a missing stamp)")
        elif key == "imu6":
            ctx.report.error(R_OBS, path, f"column 'observation.imu' row {row} holds a sample of {detail} values; "
                                          "each IMU sample has 6 (gyro xyz, accel xyz)")
        elif key == "imu_ts":
            ctx.report.error(R_OBS, path, f"column 'imu_ts_ns' is not one-to-one with 'observation.imu': row {row} "
                                          f"has {detail}")


def batch_rows(pf: pq.ParquetFile, columns: list[str]) -> int:
    """Rows per batch when reading ``columns`` of ``pf``: :data:`_BATCH_ROWS`, fewer when their rows are large
    (at most :data:`_BATCH_BYTES` decoded as the footer declares them; at least one row). The footer is only a
    guide here: its sizes were bounded before anything was read (docs/decisions.md U9), and a batch is never
    more than :data:`_BATCH_ROWS` rows."""
    md = pf.metadata
    rows = md.num_rows
    if rows <= 0:
        return _BATCH_ROWS
    groups = [md.row_group(i) for i in range(md.num_row_groups)]
    if sum(rg.total_byte_size for rg in groups) * _BATCH_ROWS <= _BATCH_BYTES * rows:
        return _BATCH_ROWS  # every column together is small (what most episodes are): no per-column sum
    wanted = set(columns)
    size = 0
    for rg in groups:
        for j in range(rg.num_columns):
            col = rg.column(j)
            if col.path_in_schema.split(".list.", 1)[0] in wanted:
                size += max(int(col.total_uncompressed_size), 0)
    per_row = size / rows
    return max(1, min(_BATCH_ROWS, int(_BATCH_BYTES // per_row) if per_row > 0 else _BATCH_ROWS))


def _check_keys(ctx: Context, pf: pq.ParquetFile, path: TaskPath, index: int, summary: DataSummary) -> None:
    cols = summary.columns
    names = [c for c in ("episode_index", "frame_index", "timestamp", "wall_time")
             if c in cols and (pa.types.is_integer(cols[c]) or pa.types.is_floating(cols[c]))]
    others = [c for c in cols if c in KEY_COLUMNS and c not in names]
    if not names and not others:
        return
    t = pf.read(columns=others + names)  # one read of the key columns (scalars, U20)
    for c in others:  # hardware_ns, task_index, raw_hw_ns, D435 forensic columns: never null (0 = unknown)
        nulls = t.column(c).null_count
        if nulls:
            ctx.report.error(R_KEYS, path, f"key column {c!r} has {nulls} null value(s); key columns are never "
                                           "null (write 0 for an unknown stamp, file_format.md §7.1)")
    if not names:
        return
    n = t.num_rows
    if n == 0:
        return
    vals = {}
    for c in names:
        col = t.column(c)
        if col.null_count:
            ctx.report.error(R_KEYS, path, f"key column {c!r} has {col.null_count} null value(s); key columns are "
                                           "never null")
            continue
        vals[c] = col.to_numpy()
    if "episode_index" in vals:
        ei = vals["episode_index"]
        bad = ei != index
        if bad.any():
            got = sorted({int(v) for v in ei[bad][:5]})
            ctx.report.error(R_NUMBERING, path, f"column 'episode_index' holds {got} but the path means N={index} "
                                                "(N = chunk*chunks_size + file + 1); fix the column or move the "
                                                "file group")
    if "frame_index" in vals:
        fi = vals["frame_index"].astype(np.int64)
        summary.first_frame, summary.last_frame = int(fi[0]), int(fi[-1])
        bad = fi != np.arange(n, dtype=np.int64)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            ctx.report.error(R_KEYS, path, f"column 'frame_index' must run 0..{n - 1} without holes, but row {i} "
                                           f"holds {int(fi[i])}; renumber the rows")
    finite = True
    for c in ("timestamp", "wall_time"):
        if c in vals:
            bad = ~np.isfinite(vals[c].astype(np.float64))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                ctx.report.error(R_TIME, path, f"column {c!r} row {i} holds {vals[c][i]} ({int(bad.sum())} "
                                               "non-finite value(s)); times are finite seconds, never NaN/inf")
                finite = False
    if "timestamp" in vals and finite:
        summary.max_timestamp = float(np.abs(vals["timestamp"].astype(np.float64)).max())
        _check_timestamp(ctx, path, vals["timestamp"])
    if "wall_time" in vals and "timestamp" in vals and ctx.wall_time_rule and finite:
        _check_wall_time(ctx, path, vals["wall_time"], vals["timestamp"])


def _check_timestamp(ctx: Context, path: TaskPath, ts: np.ndarray) -> None:
    """Strictly increasing ``timestamp``, in every app version (docs/decisions.md V2).

    ``timestamp`` is the row's time in the episode (§7.1: relative seconds of the frame row,
    written in row order), so a row at or before its predecessor is a clock reset or a
    float32 that can no longer tell two rows apart; the first such row is named.
    """
    steps = np.diff(ts.astype(np.float64))
    bad = np.flatnonzero(steps <= 0)
    if bad.size:
        i = int(bad[0]) + 1
        ctx.report.error(R_KEYS, path, f"column 'timestamp' is not strictly increasing: row {i} ({float(ts[i]):.6f} "
                                       f"s) <= row {i - 1} ({float(ts[i - 1]):.6f} s), {bad.size} such row(s); "
                                       "timestamp is the row's time in the episode, one row after another")


def _check_wall_time(ctx: Context, path: TaskPath, wall: np.ndarray, ts: np.ndarray) -> None:
    """Strictly increasing ``wall_time`` and a constant ``wall_time - timestamp`` (both finite here)."""
    wall = wall.astype(np.float64)
    steps = np.diff(wall)
    if (steps <= 0).any():
        i = int(np.flatnonzero(steps <= 0)[0])
        ctx.report.error(R_TIME, path, f"column 'wall_time' is not strictly increasing: row {i + 1} "
                                       f"({wall[i + 1]:.6f}) <= row {i} ({wall[i]:.6f}); since v1.3.17 "
                                       "wall_time = episode start + timestamp")
    # timestamp is float32 (§7.1): the offset may wobble by one float32 step of the
    # largest timestamp (the writer may add the float64 time before rounding it to
    # float32) plus float64 rounding of the absolute wall clock.
    tol = (1e-5 + float(np.spacing(np.float32(np.abs(ts).max())))
           + 4 * float(np.spacing(np.abs(wall).max())))
    off = wall - ts.astype(np.float64)
    ref = float(np.median(off))
    dev = np.abs(off - ref)
    if (dev > tol).any():
        # name the first row where the offset changes (a jump), else the first far from the median
        jumps = np.flatnonzero(np.abs(np.diff(off)) > tol)
        i = int(jumps[0]) + 1 if jumps.size else int(np.argmax(dev > tol))
        before = float(off[i - 1]) if jumps.size else ref
        ctx.report.error(R_TIME, path, f"wall_time - timestamp is not constant: at row {i} it changes by "
                                       f"{off[i] - before:+.6f} s (from {before:.6f} s; tolerance {tol:.1e} s); "
                                       "since v1.3.17 wall_time = episode start + timestamp")
