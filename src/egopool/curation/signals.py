"""``signals.json``: the time series a reviewer plots beside the videos (docs/decisions.md Q3).

Shape::

    {"t": [s, ...], "rows": [row, ...],
     "series": [{"name", "unit", "group": "imu"|"gripper"|"glove <column>"|"force", "values": [float|null, ...]}],
     "trajectories": [{"column", "frame", "x": [m, ...], "y": [m, ...]}]}

Every series is per data row and shares ``t`` (the ``timestamp`` column, s; ``row / fps``
without it) and ``rows`` (the data row of each point): at most ``max_points`` rows evenly
spread over the episode (:func:`downsample_rows`), the value *at* that row (never an average,
so a point is a stored value). A row without a sample (§5.5: empty list, zero stamp) is null.

* IMU (``observation.imu``): per row, the mean |gyro| (rad/s) and |accel| (m/s²) of the row's samples;
* gripper (``observation.*gripper_state``, ``[open_pct, gripped, fz_mN]``): open % and fz (mN);
  ``observation.*_force`` ``[fx, fy, fz]`` mN (not matrices): fz, null where ``_ns`` is 0;
* glove (a ``*glove*`` vector column): mean and max of the row's cells (sensor units);
* force (``observation.*_force_matrix``): Σ of the fz plane (mN) of the decoded matrix, null
  on rows without a matrix sample;
* trajectories: the points' x/y in ``right_forward_up`` (a top view: right, forward) when the
  column's frame words allow it (else as stored, ``frame`` says which), points downsampled alike.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

from ..arrowutil import int_values_to_numpy, list_offsets
from ..errors import EgopoolError
from ..read.forces import iter_force_matrix_blocks
from ..read.reader import Episode

__all__ = ["MAX_POINTS", "downsample_rows", "episode_signals"]

#: Points per series at most.
MAX_POINTS = 2000


def downsample_rows(n: int, max_points: int = MAX_POINTS) -> np.ndarray:
    """``(min(n, max_points),)`` int64 row indices evenly spread over ``[0, n)``, first and last included."""
    if n <= max_points:
        return np.arange(n, dtype=np.int64)
    return np.unique(np.round(np.linspace(0, n - 1, max_points)).astype(np.int64))


def _json(values: np.ndarray) -> list[float | None]:
    return [None if not math.isfinite(v) else round(float(v), 6) for v in np.asarray(values, np.float64)]


def _rows_matrix(col: pa.ChunkedArray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """A ``list<number>`` column as ``(values (R, D) float64 NaN-padded, present (R,) bool)``; D = widest row."""
    offs = list_offsets(col)
    counts = np.diff(offs)
    flat = np.asarray(pa.chunked_array(col.chunks, type=col.type).combine_chunks().flatten()
                      .to_numpy(zero_copy_only=False), np.float64) if len(col) else np.zeros(0)
    width = int(counts.max()) if counts.size else 0
    out = np.full((rows, max(width, 1)), np.nan)
    for i in np.flatnonzero(counts):
        out[i, : counts[i]] = flat[offs[i]: offs[i + 1]]
    return out, counts > 0


def _series(name: str, unit: str, group: str, values: np.ndarray, idx: np.ndarray) -> dict[str, Any]:
    return {"name": name, "unit": unit, "group": group, "values": _json(values[idx])}


def _imu(ep: Episode, rows: int, idx: np.ndarray) -> list[dict[str, Any]]:
    s = ep.imu_samples()
    if not len(s.rows):
        return []
    out = []
    for name, unit, cols in (("imu.gyro_norm", "rad/s", slice(0, 3)), ("imu.accel_norm", "m/s²", slice(3, 6))):
        norm = np.linalg.norm(s.values[:, cols].astype(np.float64), axis=1)
        total = np.bincount(s.rows, weights=norm, minlength=rows)[:rows]
        count = np.bincount(s.rows, minlength=rows)[:rows]
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append(_series(name, unit, "imu", np.where(count > 0, total / np.maximum(count, 1), np.nan), idx))
    return out


def _ns_present(ep: Episode, column: str, present: np.ndarray) -> np.ndarray:
    ns = column + "_ns"
    if ns in ep.column_names:
        stamps = int_values_to_numpy(ep.columns([ns]).column(ns))
        if stamps.shape == present.shape:
            return present & (stamps != 0)
    return present


def episode_signals(ep: Episode, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """The ``signals.json`` document of one episode (module docstring).

    Parameters
    ----------
    ep:
        The episode (its data parquet is read; videos are not).
    max_points:
        Points per series at most.

    Returns
    -------
    dict
        ``{"t", "rows", "series", "trajectories"}``; a signal that cannot be read is left out
        and named in ``"skipped": [{"name", "error"}]``.

    Raises
    ------
    FormatError
        The data parquet cannot be read.
    """
    rows = ep.length
    names = ep.column_names
    idx = downsample_rows(rows, max_points)
    fps = float(ep.task.info.get("fps") or 30.0)
    if "timestamp" in names:
        t = np.asarray(ep.columns(["timestamp"]).column("timestamp").to_numpy(zero_copy_only=False), np.float64)
    else:
        t = np.arange(rows, dtype=np.float64) / fps
    series: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    trajectories: list[dict[str, Any]] = []

    def attempt(what: str, fn: Any) -> None:
        try:
            fn()
        except (EgopoolError, ValueError) as exc:
            skipped.append({"name": what, "error": exc.one_line() if isinstance(exc, EgopoolError) else str(exc)})

    if "observation.imu" in names and "imu_ts_ns" in names:
        attempt("observation.imu", lambda: series.extend(_imu(ep, rows, idx)))

    def vector(col: str) -> None:
        values, present = _rows_matrix(ep.columns([col]).column(col), rows)
        if col.endswith("gripper_state"):
            values[~present] = np.nan
            series.append(_series(f"{col}.open_pct", "%", "gripper", values[:, 0], idx))
            if values.shape[1] >= 3:
                series.append(_series(f"{col}.fz", "mN", "gripper", values[:, 2], idx))
        elif col.endswith("_force"):
            keep = _ns_present(ep, col, present)
            fz = np.where(keep, values[:, min(2, values.shape[1] - 1)], np.nan)
            series.append(_series(f"{col}.fz", "mN", "gripper" if "gripper" in col else "force", fz, idx))
        else:  # a glove
            with np.errstate(invalid="ignore"):
                mean = np.where(present, np.nanmean(np.where(present[:, None], values, 0.0), axis=1), np.nan)
                peak = np.where(present, np.nanmax(np.where(present[:, None], values, 0.0), axis=1), np.nan)
            # one plot (one value axis) per glove column: pressure, quaternion and flag columns are not one scale (P10)
            series.append(_series(f"{col}.mean", "raw", f"glove {col}", mean, idx))
            series.append(_series(f"{col}.max", "raw", f"glove {col}", peak, idx))

    def matrix(col: str) -> None:
        total = np.full(rows, np.nan)
        sampled = np.zeros(rows, bool)
        for first, frames in iter_force_matrix_blocks(ep, col):  # one decode: the sum and the sample mask
            stop = first + frames.shape[0]
            total[first:stop] = frames[..., 2].sum(axis=(1, 2), dtype=np.float64)
            sampled[first:stop] = np.any(frames.reshape(frames.shape[0], -1) != 0, axis=1)
        total[~_ns_present(ep, col, sampled)] = np.nan  # as force_matrix_sampled says
        series.append(_series(f"{col}.sum_fz", "mN", "force", total, idx))

    for col in names:
        if not col.startswith("observation."):
            continue
        if col.endswith("gripper_state") or col.endswith("_force") or ("glove" in col and not col.endswith("_ns")):
            attempt(col, lambda c=col: vector(c))
        elif col.endswith("_force_matrix"):
            attempt(col, lambda c=col: matrix(c))

    def trajectory(col: str) -> None:
        tr = ep.trajectory(col)
        frame = "right_forward_up"
        try:
            pos = tr.to_frame(frame).positions
            x, y = pos[:, 0], pos[:, 1]
        except EgopoolError:
            frame = tr.frame
            x, y = tr.positions[:, 0], tr.positions[:, 1]
        keep = downsample_rows(len(x), max_points)
        trajectories.append({"column": col, "frame": frame, "x": _json(x[keep]), "y": _json(y[keep])})

    for col in ep.trajectories():
        attempt(col, lambda c=col: trajectory(c))
    doc: dict[str, Any] = {"t": _json(t[idx]), "rows": idx.tolist(), "series": series, "trajectories": trajectories}
    if skipped:
        doc["skipped"] = skipped
    return doc
