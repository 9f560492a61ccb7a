"""One row's values checked against its episode's columns (file_format.md §7, multi_device_storage.md §5.5).

Strict (an importer, a script): a value a column cannot hold raises. With ``reject_bad`` (the
recorder, so one bad sample never costs the recording, docs/decisions.md #22): it is stored as
"no sample" (zeros / ``[]`` / 0, its ``*_ns`` 0), non-finite IMU samples and trajectory points are
left out one by one with their stamps, and each is counted as ``<signal>_rejected_count``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from . import checks
from ..errors import EgopoolError, SchemaError
from ..meta.drop_stats import nonfinite_key, rejected_key, saturated_key
from ..schema import ALWAYS_KEY_COLUMNS, ColumnSpec

__all__ = ["RowRejects", "check_row"]


class RowRejects:
    """What one row left out or stored otherwise than given: ``drop_stats`` counts and their first reasons,
    merged into the episode only once the row is accepted.

    Attributes
    ----------
    row:
        The row's ``frame_index`` (named in the reasons).
    counts, reasons:
        ``drop_stats`` key -> count, and -> ``"row <i>: <why>"``.
    """

    def __init__(self, row: int) -> None:
        self.row = row
        self.counts: dict[str, int] = {}
        self.reasons: dict[str, str] = {}

    def add(self, key: str, n: int, why: str | None = None) -> None:
        """Count ``n`` under ``key``; ``why`` is kept when it is the key's first reason."""
        self.counts[key] = self.counts.get(key, 0) + n
        if why is not None:
            self.reasons.setdefault(key, f"row {self.row}: {why}")

    def reject(self, name: str, why: str, n: int = 1) -> None:
        """``n`` samples of ``name`` were left out (``<signal>_rejected_count``)."""
        self.add(rejected_key(name), n, why)


def check_row(specs: Mapping[str, ColumnSpec], stats_cols: set[str], values: dict[str, Any], keys: Mapping[str, Any],
              hardware_ns: Any, rejects: RowRejects, *, reject_bad: bool) -> tuple[dict[str, Any], set[str]]:
    """The stored row of ``values`` and the sparse columns it fills (decisions.md #2).

    Parameters
    ----------
    specs:
        Every column of the episode.
    stats_cols:
        Columns that enter ``stats.json`` (NaN / Infinity is refused there).
    values:
        Column name -> this row's value (undeclared names are removed with ``reject_bad``).
    keys:
        The row's key columns but ``hardware_ns`` (``episode_index``, ``frame_index``, ``timestamp``...).
    hardware_ns:
        The frame's device-clock ns, checked into an int64 (0 = unknown).
    rejects:
        Where what is left out is counted.

    Raises
    ------
    SchemaError
        Without ``reject_bad``: an undeclared or key column, a value a column cannot hold, stamps
        out of lockstep with their items.
    """
    for name in list(values):
        if name not in specs or name in ALWAYS_KEY_COLUMNS:
            if not reject_bad:
                raise SchemaError("not declared for this episode", column=name,
                                  hint="pass its ColumnSpec to begin_episode(columns=...)")
            rejects.reject(name, f"column {name!r} is not declared for this episode")
            del values[name]
    try:
        hw = _int64(hardware_ns)
    except SchemaError as exc:
        if not reject_bad:
            raise
        rejects.reject("hardware_ns", exc.message)
        hw = 0  # 0 = unknown (§7.1)
    row: dict[str, Any] = {**keys, "hardware_ns": hw}
    filled: set[str] = set()
    refused: set[str] = set()
    masks: dict[str, np.ndarray] = {}  # IMU samples kept (reject_bad), applied to their stamps too
    for name, spec in specs.items():
        if name in row:
            continue
        if name not in values:
            row[name] = spec.empty_value()
            continue
        try:
            v, changed = spec.normalise_counted(values[name])
            v, keep = _finite(name, spec, v, rejects, reject_bad, stats=name in stats_cols)
            if keep is not None:
                masks[name] = keep
        except Exception as exc:  # noqa: BLE001 - any value a source can push (reject_bad)
            if not reject_bad:
                raise
            rejects.reject(name, exc.message if isinstance(exc, EgopoolError) else f"{type(exc).__name__}: {exc}")
            refused.add(name)
            row[name] = spec.empty_value()
            continue
        if changed:
            key = saturated_key(name)
            rejects.add(key, changed)
        row[name] = v
        if _fills(spec, v):
            filled.add(name)
    for name, spec in specs.items():
        if spec.lockstep and spec.lockstep[0] in masks:  # one stamp per kept sample / point
            keep = masks[spec.lockstep[0]]
            if len(row[name]) == len(keep):
                row[name] = row[name][keep]
                if not _fills(spec, row[name]):
                    filled.discard(name)
    for name in refused:  # a rejected sample has no time either (§5.5: "_ns = 0")
        ns = name + "_ns"
        if ns in specs and specs[ns].storage == "scalar" and ns in values:
            row[ns] = specs[ns].empty_value()
            filled.discard(ns)
    for name, spec in specs.items():
        if spec.lockstep:
            partner, per = spec.lockstep
            plen = len(row[partner])
            need = plen // per if specs[partner].storage == "list" else plen
            if len(row[name]) != need or (specs[partner].storage == "list" and plen % per):
                why = (f"has {len(row[name])} stamps but {partner!r} has {plen / per:g} items in this row "
                       "(they must run in lockstep; write 0 for a missing stamp)")
                if not reject_bad:
                    raise SchemaError(why, column=name)
                if partner not in refused:
                    rejects.reject(partner, f"{name!r} {why}")
                refused |= {name, partner}
                row[name], row[partner] = spec.empty_value(), specs[partner].empty_value()
                filled -= {name, partner}
    return row, filled


def _finite(name: str, spec: ColumnSpec, value: Any, rejects: RowRejects, reject_bad: bool, *,
            stats: bool) -> tuple[Any, np.ndarray | None]:
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
    if not reject_bad:
        if stats:
            checks.check_finite_values(name, value, rejects.row)
        if "missing_value" in (spec.feature or {}):
            return value, None  # NaN is this column's declared "missing" (and its importer counts it)
        key = nonfinite_key(name)
        rejects.add(key, int((~good).sum()), str(value.reshape(-1)[~good.reshape(-1)][0]))
        return value, None
    width = spec.length if spec.storage == "list_list" else 8 if spec.kind == "slam_trajectory" else None
    if not width:  # raises: the whole sample is stored as "no sample"
        if stats:
            checks.check_finite_values(name, value, rejects.row)
        first = value.reshape(-1)[~good.reshape(-1)][0]
        raise SchemaError(f"row {rejects.row} holds {first} ({int((~good).sum())} non-finite value(s))", column=name)
    items = value.reshape(-1, width)
    ok = np.asarray(good.reshape(-1, width).all(axis=1))  # (items,) bool
    bad = int((~ok).sum())
    what = "sample(s)" if spec.storage == "list_list" else "point(s)"
    rejects.reject(name, f"{bad} {what} hold NaN or Infinity", bad)
    kept = np.ascontiguousarray(items[ok])
    return (kept if spec.storage == "list_list" else kept.reshape(-1)), ok


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
