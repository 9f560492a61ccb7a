"""Values an episode stores otherwise than they were recorded (DESIGN §8; docs/decisions.md #22).

Warnings, not errors: the files are valid, but a reader should know that

* the writer counted changed values in ``drop_stats`` (rejected samples written as "no
  sample", saturated force-matrix cells, depth clipped into the log code's range, a
  stream left out, rows left out; :mod:`egopool.meta.drop_stats`);
* an int16 force-matrix column holds cells at the int16 limits (32767 / −32768): they
  may have been saturated (file_format.md §7.2.1), whoever wrote the file, so a Σfz over
  those rows is only a bound; a float32 (``row_flat_raw``) one holds ±Infinity / NaN cells
  (beyond float32). Detected from the data itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import ObjectStoreError
from .._safe_read import open_parquet
from ..arrowutil import list_offsets
from ..codecs.force_matrix import FRAME_VALUES, ForceMatrixCodec, may_saturate, saturated_cells
from ..storage import TaskPath
from ..layout import EpisodeFiles
from ..meta.drop_stats import CHANGED_VALUE_SUFFIXES, changed_value_notes, nonfinite_key, saturated_key
from ..schema import signal_kind
from .context import Context

__all__ = ["FROZEN_SHARE", "ForceCellScan", "NonFiniteScan", "check_value_changes", "feed_all", "frozen_stream_notes"]

_RULES = {"_rejected_count": "multi_device_storage.md §5.5", "_saturated_count": "file_format.md §7.2.1",
          "_clipped_count": "file_format.md §8", "_encode_failed_count": "file_format.md §8",
          "_nonfinite_count": "multi_device_storage.md §5.5", "_disconnected_count": "multi_device_storage.md §5.5",
          "rows_rejected": "file_format.md §6.2"}
_BATCH_ROWS = 32


def check_value_changes(ctx: Context, g: EpisodeFiles[TaskPath], row: Mapping[str, Any] | None, pf: Any = None,
                        scan: NonFiniteScan | None = None, cells: ForceCellScan | None = None) -> None:
    """Warn about every changed-value count in the episode's ``drop_stats`` and saturated force cells in its data.

    ``pf``: the data parquet already open (``pyarrow.parquet.ParquetFile``, left open); None opens it here.
    ``scan``: its float columns' NaN/Infinity counts, fed by check_data's read (:class:`NonFiniteScan`);
    ``cells``: its force matrices' saturated cells, likewise (:class:`ForceCellScan`).
    """
    drop = row.get("drop_stats") if row is not None else None
    drop = drop if isinstance(drop, Mapping) else {}
    where = g.meta or g.data or ctx.root  # (a row was read: g.meta is there)
    for key in sorted(drop):
        if not (key == "rows_rejected" or key.endswith(CHANGED_VALUE_SUFFIXES)) or key.endswith("_nonfinite_count"):
            continue  # non-finite values are reported from the data itself (_non_finite_values)
        notes = changed_value_notes({key: drop[key]}, g.index)
        if notes:
            rule = next(r for suffix, r in _RULES.items() if key.endswith(suffix))
            ctx.report.warning(rule, where, f"drop_stats {key} = {drop[key]}: {notes[0]}")
    length = row.get("length") if row is not None else None
    for key, text in frozen_stream_notes(drop, length if isinstance(length, int) else None):
        ctx.report.warning("file_format.md §6.2", where, f"drop_stats {key} = {drop[key]}: {text}")
    if g.data is not None:
        _saturated_force_cells(ctx, g, g.data, drop, pf, cells)
        _non_finite_values(ctx, g.data, drop, pf, scan)


#: A stream that repeats its previous frame in at least this share of its rows does not move: a frozen camera
#: (the server's quality facts draw the same line from the decoded frames, docs/decisions.md P7, P23).
FROZEN_SHARE = 0.5


def frozen_stream_notes(drop: Mapping[str, Any], length: int | None) -> list[tuple[str, str]]:
    """``(drop_stats key, message)`` for every stream whose ``<key>_repeated_count`` (rows where the writer was
    given no new frame and repeated the previous one) is at least :data:`FROZEN_SHARE` of the episode's
    ``length`` rows: a frozen stream. The rows are named when the count says which they are (every row after
    the first); otherwise the count is all ``drop_stats`` knows."""
    out: list[tuple[str, str]] = []
    if not length or length < 2:
        return out
    for key in sorted(drop):
        n = drop[key]
        if not key.endswith("_repeated_count") or isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            continue
        if n < FROZEN_SHARE * length:
            continue
        stream = key[: -len("_repeated_count")]
        rows = (f"rows 1-{length - 1} repeat row 0's frame" if n == length - 1 else
                f"{n} of its {length} rows repeat the previous frame (which ones: the server's quality facts, "
                "frozen_ranges)")
        out.append((key, f"stream {stream} is frozen: {rows}; it shows no motion and should not be taken for a "
                         "working camera"))
    return out


def _float_columns(schema: pa.Schema) -> list[str]:
    """``observation.*`` / ``action`` columns of float elements (any list depth), force matrices excepted
    (their cells are :func:`_saturated_force_cells`' finding) and key columns (check_data's)."""
    out = []
    for f in schema:
        t = f.type
        while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            t = t.value_type
        if (f.name == "action" or f.name.startswith("observation.")) and pa.types.is_floating(t) \
                and signal_kind(f.name) != "force_matrix":
            out.append(f.name)
    return out


class _BatchScan(ABC):
    """Counts over some columns of the data parquet, fed batch by batch by check_data's row checks (its
    ``visit``), so the rows are read once for every check of them (docs/decisions.md U20, U25). The counts
    are used only when every row was fed, in order; else the check reads the columns itself. A batch whose
    values cannot be counted marks the scan failed (what a damaged row did before: check_data names it)."""

    cols: list[str]

    def __init__(self, rows: int) -> None:
        self.rows_total = rows
        self.rows_fed = 0
        self.failed = False

    @property
    def complete(self) -> bool:
        """Every row was fed, in order, from its first."""
        return self.rows_fed == self.rows_total

    def feed(self, batch: pa.RecordBatch, base: int) -> None:
        """Count the batch's rows ``base`` .. (never raises: a failure marks the scan failed)."""
        if self.failed:
            return
        if base != self.rows_fed or not set(self.cols) <= set(batch.schema.names):
            self.rows_fed = -1  # not the rows in order, or not every column: never complete, read again
            return
        try:
            self._count(batch, base)
        except ObjectStoreError:
            raise  # the store failed, not the task: no verdict on what could not be read (O3)
        except Exception:  # noqa: BLE001 - damaged rows are check_data's finding
            self.failed = True
        self.rows_fed += batch.num_rows

    def read(self, pf: Any, batch_rows: int) -> bool:
        """Count every row from ``pf`` itself (the scan was not fed whole); False when the rows cannot be read."""
        self.rows_fed, self.failed = 0, False
        try:
            for batch in pf.iter_batches(batch_size=batch_rows, columns=self.cols):
                self._count(batch, self.rows_fed)
                self.rows_fed += batch.num_rows
        except ObjectStoreError:
            raise  # the store failed, not the task: no verdict on what could not be read (O3)
        except Exception:  # noqa: BLE001 - damaged rows are check_data's finding
            return False
        return True

    @abstractmethod
    def _count(self, batch: pa.RecordBatch, base: int) -> None:
        """Add the counts of ``batch``, whose first row is row ``base`` of the file (may raise on damaged rows)."""


def feed_all(*scans: _BatchScan | None) -> Callable[[pa.RecordBatch, int], None]:
    """One ``visit`` for check_data feeding every scan given (None entries are left out)."""
    live = [s for s in scans if s is not None]

    def visit(batch: pa.RecordBatch, base: int) -> None:
        for scan in live:
            scan.feed(batch, base)
    return visit


class NonFiniteScan(_BatchScan):
    """NaN / Infinity counts of the float columns (:func:`_non_finite_values`), fed batch by batch
    (:class:`_BatchScan`, docs/decisions.md U20)."""

    def __init__(self, schema: pa.Schema, rows: int) -> None:
        super().__init__(rows)
        self.cols = _float_columns(schema)
        self.values = dict.fromkeys(self.cols, 0)
        self.rows = dict.fromkeys(self.cols, 0)
        self.first: dict[str, int] = {}

    def _count(self, batch: pa.RecordBatch, base: int) -> None:
        for name in self.cols:
            arr = batch.column(name)
            flat = arr
            while pa.types.is_list(flat.type) or pa.types.is_large_list(flat.type) \
                    or pa.types.is_fixed_size_list(flat.type):
                flat = flat.flatten()
            leaf = flat.to_numpy(zero_copy_only=False)
            bad = ~np.isfinite(leaf.astype(np.float64, copy=False))
            if not bad.any():
                continue
            row_of = _row_of_leaf(arr, len(leaf))
            hit = np.unique(row_of[bad])
            self.values[name] += int(bad.sum())
            self.rows[name] += int(hit.size)
            self.first.setdefault(name, base + int(hit[0]))


def _non_finite_values(ctx: Context, path: TaskPath, drop: Mapping[str, Any], pf: Any = None,
                       scan: NonFiniteScan | None = None) -> None:
    """NaN / Infinity in any float column (issue 15 G), found in the data, whoever wrote it.

    In a stats column (``observation.<sensor>`` of ``info.sensors``, ``observation.imu``) an error:
    ``stats.json`` accumulates the column (file_format.md §4) and JSON has no NaN, so every writer
    must refuse it (docs/decisions.md #19). Elsewhere a warning: a missing sample is zeros / ``[]``
    (multi_device_storage.md §5.5), and a reader computing with the column gets NaN; the message says
    whether the writer counted them (``<signal>_nonfinite_count``). ``scan``: the counts check_data's
    read already made (used when complete).
    """
    if scan is None or not scan.complete:
        try:
            pf = pf if pf is not None else open_parquet(path, what="data parquet")
            scan = NonFiniteScan(pf.schema_arrow, 0)
        except ObjectStoreError:
            raise  # the store failed, not the task: no verdict on what could not be read (O3)
        except Exception:  # noqa: BLE001 - an unreadable parquet is check_data's finding
            return
        if not scan.cols or not scan.read(pf, _BATCH_ROWS * 8):
            return
    if scan.failed:
        return
    cols, values, rows, first = scan.cols, scan.values, scan.rows, scan.first
    sensors = ctx.info.get("sensors")
    stats_cols = {"observation.imu"} | ({f"observation.{s}" for s in sensors if isinstance(s, str)}
                                        if isinstance(sensors, list) else set())
    for name in cols:
        if not values[name]:
            continue
        where = (f"column {name!r}: {values[name]} value(s) in {rows[name]} row(s) (first row {first[name]}) are "
                 "NaN/Infinity")
        if name in stats_cols:
            ctx.report.error("file_format.md §4", path,
                             f"{where}; stats.json accumulates this column and JSON has no NaN/Infinity, so writers "
                             "store a missing reading as 'no sample' (zeros); rewrite those rows, then `egopool stats "
                             "recalc TASK`")
            continue
        feature = ctx.features.get(name)
        if isinstance(feature, dict) and "missing_value" in feature:
            continue  # the column declares what stands for a missing value (e.g. NaN for an empty MPS field)
        counted = drop.get(nonfinite_key(name))
        trace = (f"the writer stored them as given and counted {counted} in drop_stats" if counted
                 else "drop_stats does not count them")
        ctx.report.warning(_RULES["_nonfinite_count"], path,
                           f"{where}; a missing sample is zeros / [] (multi_device_storage.md §5.5), so a reader "
                           f"computing with this column gets NaN; {trace}")


def _row_of_leaf(arr: pa.Array, n_leaves: int) -> np.ndarray:
    """Row index of every leaf value of a (nested) list column ``arr`` (a scalar column: the row itself)."""
    idx = np.arange(len(arr), dtype=np.int64)
    t = arr
    while pa.types.is_list(t.type) or pa.types.is_large_list(t.type) or pa.types.is_fixed_size_list(t.type):
        offsets = list_offsets(t)
        lens = np.diff(offsets)
        idx = np.repeat(idx, lens)
        t = t.flatten()
    return idx[:n_leaves]


def _force_matrix_columns(schema: pa.Schema) -> dict[str, bool]:
    """Force-matrix columns whose cells :class:`ForceCellScan` counts -> True for ``row_flat_raw`` (float32)."""
    return {f.name: pa.types.is_float32(f.type.value_type) for f in schema
            if f.name.startswith("observation.") and signal_kind(f.name) == "force_matrix" and pa.types.is_list(f.type)
            and (pa.types.is_int16(f.type.value_type) or pa.types.is_float32(f.type.value_type))}


class ForceCellScan(_BatchScan):
    """Saturated cells of the force-matrix columns (:func:`_saturated_force_cells`), fed batch by batch
    (:class:`_BatchScan`): check_data reads those columns for their row lengths anyway, and a full-rig
    episode's matrices are most of its bytes (docs/decisions.md U25)."""

    def __init__(self, schema: pa.Schema, rows: int) -> None:
        super().__init__(rows)
        self.raw = _force_matrix_columns(schema)
        self.cols = list(self.raw)
        self.cells = dict.fromkeys(self.cols, 0)
        self.rows = dict.fromkeys(self.cols, 0)
        self.first: dict[str, int] = {}
        self._codec = ForceMatrixCodec("row_diff_quantized", 1.0)

    def _count(self, batch: pa.RecordBatch, base: int) -> None:
        for name in self.cols:
            arr = batch.column(name)
            offsets = list_offsets(arr)
            lens = np.diff(offsets)
            full = np.flatnonzero(lens == FRAME_VALUES)
            if not full.size:
                continue
            values = arr.flatten().to_numpy(zero_copy_only=False)  # offsets are relative to it
            if full.size == lens.size and values.size == full.size * FRAME_VALUES:
                stored = values  # every row holds a frame: no copy
            else:
                stored = np.concatenate([values[int(offsets[i]): int(offsets[i]) + FRAME_VALUES] for i in full])
            if self.raw[name]:  # row_flat_raw: a cell beyond float32 was stored as ±Infinity
                bad = ~np.isfinite(stored.reshape(full.size, FRAME_VALUES))
                hit = np.flatnonzero(bad.any(axis=1))
                per_row = bad[hit].sum(axis=1)
            else:
                # only frames whose |diffs| can sum to a limit are decoded (exact: may_saturate, issue 29)
                maybe = np.flatnonzero(may_saturate(stored))
                if maybe.size:
                    frames = stored.reshape(full.size, FRAME_VALUES)
                    part = frames if maybe.size == full.size else frames[maybe]
                    q = self._codec.decode_quantized(part).reshape(maybe.size, FRAME_VALUES)
                    # max/min first: counting only pays where a row reaches a limit at all
                    at = np.flatnonzero((q.max(axis=1) == 32767) | (q.min(axis=1) == -32768))
                    hit, per_row = maybe[at], saturated_cells(q[at]) if at.size else np.zeros(0)
                else:
                    hit, per_row = maybe, np.zeros(0)
            if hit.size:
                self.cells[name] += int(per_row.sum())
                self.rows[name] += int(hit.size)
                self.first.setdefault(name, base + int(full[hit[0]]))


def _saturated_force_cells(ctx: Context, g: EpisodeFiles[TaskPath], path: TaskPath, drop: Mapping[str, Any], pf: Any = None,
                           scan: ForceCellScan | None = None) -> None:
    """Cells a force-matrix column could not hold, found in the data: int16 cells at the limits
    (``row_diff_quantized``), ±Infinity / NaN cells (``row_flat_raw`` float32). ``scan``: the counts
    check_data's read already made (used when complete)."""
    if scan is None or not scan.complete:
        try:
            pf = pf if pf is not None else open_parquet(path, what="data parquet")  # footer first (decisions.md H3)
            scan = ForceCellScan(pf.schema_arrow, 0)
        except ObjectStoreError:
            raise  # the store failed, not the task: no verdict on what could not be read (O3)
        except Exception:  # noqa: BLE001 - an unreadable parquet is check_data's finding
            return
        if not scan.cols or not scan.read(pf, _BATCH_ROWS):
            return
    if scan.failed or not scan.cols:
        return
    cols, raw, cells, rows, first = scan.cols, scan.raw, scan.cells, scan.rows, scan.first
    for name in cols:
        if not cells[name]:
            continue
        counted = drop.get(saturated_key(name))
        what = ("are Infinity/NaN in row_flat_raw (float32, beyond its range)" if raw[name]
                else "are at the int16 limits 32767/-32768 of row_diff_quantized")
        trace = (f"the writer counted {counted} saturated cell(s) in drop_stats" if counted
                 else "drop_stats does not count them, so they may be saturated readings")
        ctx.report.warning(_RULES["_saturated_count"], path,
                           f"column {name!r}: {cells[name]} cell(s) in {rows[name]} row(s) (first row {first[name]}) "
                           f"{what}; {trace}; the Σfz self-check leaves those rows out (a saturated sum is a bound, "
                           "not the historical truncation)")
