"""Clocks: 32-bit unwrap, IMU expansion, frame-drop keys, gaps, nearest-stamp pairing.

Implements the time rules of file_format.md §6.2 (``drop_stats`` keys), §7.3 and
multi_device_storage.md §3.1, §5.4:

* ``hardware_ns`` of early gripper RGB (≤078 segments) is a host-monotonic ns value
  truncated to signed 32 bits: a sawtooth every 2^32 ns ≈ 4.295 s. It is unwrapped,
  never resampled; 0 always means "unknown".
* ``imu_ts_ns`` runs one-to-one with the samples of ``observation.imu``; readers
  flatten by it and never assume a fixed number of samples per row.
* ``drop_stats`` keys ending in ``_ms`` / ``_count`` are durations / event counts,
  not frame counts.
* Stamps are paired by nearest neighbour on the same clock (``*_ns`` host-monotonic
  ↔ ``hardware_ns``); no offset is ever fitted and 0 never pairs.

numpy only; imports nothing of egopool but ``errors``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CodecError

__all__ = [
    "PAIRED_BY_ROW",
    "PAIRED_BY_STAMPS",
    "SAME_CLOCK_NS",
    "WRAP_PERIOD_NS",
    "Gaps",
    "ImuSamples",
    "TrajectoryPairing",
    "expand_imu",
    "find_gaps",
    "frame_drop_total",
    "is_frame_drop_key",
    "lift_to_reference",
    "looks_truncated32",
    "nominal_interval",
    "own_row_offset",
    "pair_nearest",
    "unwrap_ns",
]

#: Period of the signed-32-bit truncation of early gripper ``hardware_ns`` (§7.3).
WRAP_PERIOD_NS = 1 << 32
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


def _as_ns(values: Any, name: str = "stamps") -> np.ndarray:
    a = np.asarray(values)
    if a.ndim != 1:
        raise CodecError(f"{name} must be 1-D, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise CodecError(f"{name} must be integer ns, got {a.dtype}")
    return a.astype(np.int64, copy=False)


def looks_truncated32(ns: Any) -> bool:
    """True when every non-zero stamp fits in a signed 32-bit int and the series wraps.

    A genuine 64-bit host-monotonic clock is far beyond 2^31 ns (2.1 s) after boot, so a
    series confined to the int32 range that also steps backwards (the sawtooth) is the
    truncated kind of §7.3.
    """
    a = _as_ns(ns)
    nz = a[a != 0]
    if nz.size < 2 or nz.min() < _I32_MIN or nz.max() > _I32_MAX:
        return False
    return bool(np.any(np.diff(nz) < 0))


def unwrap_ns(ns: Any, period: int = WRAP_PERIOD_NS) -> np.ndarray:
    """Undo the modulo-``period`` truncation of a forward-running clock.

    Every step between consecutive non-zero stamps is taken modulo ``period`` into
    ``[0, period)`` (the clock is monotonic, so a backward jump is a wrap), and the
    steps are re-accumulated from the first stamp. Zeros (unknown) stay 0. A real
    pause of ``period`` ns or more cannot be seen in truncated data and is lost.

    Parameters
    ----------
    ns:
        ``(N,)`` int64 stamps, e.g. ``hardware_ns``; 0 = unknown.
    period:
        Wrap period in ns (2^32 for the signed-32-bit truncation).

    Returns
    -------
    numpy.ndarray
        ``(N,)`` int64, monotonic over the non-zero entries.
    """
    a = _as_ns(ns)
    out = a.copy()
    idx = np.flatnonzero(a)
    if idx.size < 2:
        return out
    v = a[idx]
    steps = np.mod(np.diff(v), period)
    out[idx[1:]] = v[0] + np.cumsum(steps, dtype=np.int64)
    return out


def lift_to_reference(unwrapped: Any, reference: Any, period: int = WRAP_PERIOD_NS) -> np.ndarray:
    """Restore the high bits of an unwrapped truncated series from a same-clock reference.

    Truncation keeps the value modulo ``period``; the lap count is lost. Given
    full-width stamps of the same clock in the same rows (e.g. a trajectory's or a
    force column's host-monotonic ``*_ns``), the integer lap ``k`` is the median of
    ``round((reference − unwrapped) / period)`` over rows where both are non-zero, and
    ``unwrapped + k·period`` is returned. Only an integer multiple of ``period`` is
    added: no clock offset is fitted.

    Raises
    ------
    CodecError
        Shapes differ, or no row has both stamps.
    """
    u, r = _as_ns(unwrapped, "unwrapped"), _as_ns(reference, "reference")
    if u.shape != r.shape:
        raise CodecError(f"unwrapped {u.shape} and reference {r.shape} stamps must have the same shape")
    both = (u != 0) & (r != 0)
    if not both.any():
        raise CodecError("no row has both a truncated stamp and a reference stamp")
    laps = np.rint((r[both] - u[both]) / float(period)).astype(np.int64)
    k = int(np.median(laps))
    return np.where(u != 0, u + k * period, 0).astype(np.int64)


def pair_nearest(query_ns: Any, ref_ns: Any, max_dt_ns: int | None = None) -> np.ndarray:
    """Index of the nearest non-zero reference stamp for each non-zero query stamp.

    Used to pair trajectory points (``*_slam_trajectory_ns``) with data rows
    (``hardware_ns``), both host-monotonic ns (multi_device_storage.md §3.1, §8.2.4).
    ``searchsorted`` on the sorted non-zero references; ties go to the earlier one.

    Parameters
    ----------
    query_ns:
        ``(K,)`` int64; 0 = no stamp (never paired).
    ref_ns:
        ``(R,)`` int64 (need not be sorted); 0 = unknown (never chosen).
    max_dt_ns:
        Leave a query unpaired when its nearest reference is farther than this.

    Returns
    -------
    numpy.ndarray
        ``(K,)`` int64 index into ``ref_ns``, or -1 when unpaired.
    """
    q, r = _as_ns(query_ns, "query"), _as_ns(ref_ns, "reference")
    out = np.full(q.shape, -1, dtype=np.int64)
    ref_idx = np.flatnonzero(r)
    qi = np.flatnonzero(q)
    if ref_idx.size == 0 or qi.size == 0:
        return out
    order = np.argsort(r[ref_idx], kind="stable")
    sorted_ref, sorted_idx = r[ref_idx][order], ref_idx[order]
    qv = q[qi]
    pos = np.searchsorted(sorted_ref, qv, side="left")
    right = np.clip(pos, 0, sorted_ref.size - 1)
    left = np.clip(pos - 1, 0, sorted_ref.size - 1)
    d_right = np.abs(sorted_ref[right] - qv)
    d_left = np.abs(qv - sorted_ref[left])
    take_left = d_left <= d_right
    best = np.where(take_left, left, right)
    dist = np.where(take_left, d_left, d_right)
    chosen = sorted_idx[best]
    if max_dt_ns is not None:
        chosen = np.where(dist <= int(max_dt_ns), chosen, -1)
    out[qi] = chosen
    return out


#: Largest typical distance between a trajectory point's host stamp and the ``hardware_ns`` of
#: the row it was attached to for both to count as one clock (docs/decisions.md C9). A point is
#: attached to the row of the tick it arrived in (multi_device_storage.md §5.3) and that row's
#: frame waited at most the slot queue (2 s in the recorder) before the tick took it; a device
#: clock (S80 SDK, D435) is off the host clock by its own epoch, seconds to days.
SAME_CLOCK_NS = 3_000_000_000

#: ``TrajectoryPairing.paired_by`` values.
PAIRED_BY_STAMPS = "hardware_ns"
PAIRED_BY_ROW = "row"


@dataclass(frozen=True)
class TrajectoryPairing:
    """Data row of each trajectory point, and how it was found (multi_device_storage.md §3.1, §5.3–§5.5).

    Attributes
    ----------
    rows:
        ``(K,)`` int64 data row per point; -1 = unpaired (only when ``paired_by`` is
        ``"hardware_ns"``: an unstamped point, one outside the stamped rows, or farther
        than the caller's ``max_dt_ns``).
    paired_by:
        ``"hardware_ns"``: nearest ``_ns`` ↔ ``hardware_ns`` on the one host clock (§5.4), or
        ``"row"``: the row each point was attached to (its tick's window, §5.3), used when
        there is no common clock: ``hardware_ns`` is a device clock (S80/D435, §3.1), the
        trajectory has no ``_ns`` stamps (§5.5), or no row has a ``hardware_ns``. Row
        pairing is exact to the tick, not to the frame: the row's frame waited in a queue.
    reason:
        One line saying why this method was used.
    offset_ns:
        Median of (point stamp − its own row's ``hardware_ns``) over points with both, or
        None when no point has both.
    """

    rows: np.ndarray
    paired_by: str
    reason: str
    offset_ns: float | None = None

    @property
    def unpaired(self) -> int:
        """Points left without a row (-1)."""
        return int(np.count_nonzero(self.rows < 0))

    def __len__(self) -> int:
        return int(self.rows.shape[0])


def own_row_offset(point_ns: Any, point_rows: Any, row_ns: Any) -> float | None:
    """Median of ``point_ns − row_ns[point_rows]`` over points whose stamp and own row's stamp are both
    non-zero (ns, float), or None when there is none. Small on one clock; a device clock's epoch otherwise."""
    q, rows, r = _as_ns(point_ns, "points"), _as_ns(point_rows, "rows"), _as_ns(row_ns, "row stamps")
    if q.shape != rows.shape:
        raise CodecError(f"{q.shape[0]} point stamps for {rows.shape[0]} point rows")
    if q.size == 0:
        return None
    if rows.min() < 0 or rows.max() >= r.shape[0]:
        raise CodecError(f"point rows must lie in [0, {r.shape[0]}), got {int(rows.min())}..{int(rows.max())}")
    own = r[rows]
    both = (q != 0) & (own != 0)
    return float(np.median((q[both] - own[both]).astype(np.float64))) if both.any() else None


@dataclass(frozen=True)
class ImuSamples:
    """Every IMU sample of an episode, flattened (file_format.md §7.2, checklist §12.9).

    Attributes
    ----------
    ts_ns:
        ``(K,)`` int64 device-clock ns from ``imu_ts_ns`` (one per sample).
    values:
        ``(K, 6)`` float32: gyro xyz rad/s, accel xyz m/s².
    rows:
        ``(K,)`` int64 data row (``frame_index``) each sample was attached to.
    """

    ts_ns: np.ndarray
    values: np.ndarray
    rows: np.ndarray

    def __len__(self) -> int:
        return int(self.ts_ns.shape[0])

    def sorted(self) -> ImuSamples:
        """The samples in ``imu_ts_ns`` order (stable; stored order is kept for equal stamps)."""
        order = np.argsort(self.ts_ns, kind="stable")
        return ImuSamples(self.ts_ns[order], self.values[order], self.rows[order])


def expand_imu(sample_counts: Any, ts_counts: Any, ts_ns: Any, values: Any) -> ImuSamples:
    """Flatten the per-row IMU lists into one sample axis aligned by ``imu_ts_ns``.

    Parameters
    ----------
    sample_counts:
        ``(R,)`` samples per row of ``observation.imu``.
    ts_counts:
        ``(R,)`` stamps per row of ``imu_ts_ns``; must equal ``sample_counts`` row by row.
    ts_ns:
        ``(K,)`` int64 flat stamps.
    values:
        ``(K, 6)`` (or ``(K*6,)``) float32 flat samples.

    Returns
    -------
    ImuSamples

    Raises
    ------
    CodecError
        A row whose stamp count differs from its sample count, or bad shapes.
    """
    sc = np.asarray(sample_counts, dtype=np.int64)
    tc = np.asarray(ts_counts, dtype=np.int64)
    if sc.shape != tc.shape:
        raise CodecError(f"observation.imu has {sc.size} rows but imu_ts_ns has {tc.size}")
    bad = np.flatnonzero(sc != tc)
    if bad.size:
        r = int(bad[0])
        raise CodecError(f"row {r}: {int(tc[r])} imu_ts_ns stamps for {int(sc[r])} observation.imu samples "
                         "(they must be one-to-one)")
    ts = _as_ns(ts_ns, "imu_ts_ns")
    v = np.asarray(values, dtype=np.float32)
    k = int(sc.sum())
    if v.size != k * 6 or ts.size != k:
        raise CodecError(f"{ts.size} stamps and {v.size} values for {k} samples of 6")
    rows = np.repeat(np.arange(sc.size, dtype=np.int64), sc)
    return ImuSamples(ts, v.reshape(k, 6), rows)


def is_frame_drop_key(key: str) -> bool:
    """True when a ``drop_stats`` key counts dropped frames (file_format.md §6.2, §7.3).

    Keys ending in ``_ms`` are durations and keys ending in ``_count`` are event
    counts (v1.3.10+); they must not be added to a frame-drop total.
    """
    return not (key.endswith("_ms") or key.endswith("_count"))


def frame_drop_total(drop_stats: Mapping[str, Any]) -> int:
    """Sum of the frame-drop counters of a ``drop_stats`` dict (non-numeric values ignored)."""
    total = 0
    for key, value in drop_stats.items():
        if is_frame_drop_key(str(key)) and isinstance(value, (int, float)) and not isinstance(value, bool):
            total += int(value)
    return total


@dataclass(frozen=True)
class Gaps:
    """Intervals between consecutive distinct stamps that exceed the allowed interval.

    Attributes
    ----------
    index:
        ``(G,)`` int64 position (in the input series) of the stamp that ends each gap.
    start_ns, end_ns:
        ``(G,)`` int64 stamps before and after each gap.
    missing:
        ``(G,)`` int64 estimated frames missing: ``round(Δ / interval) − 1`` (≥ 1).
    stamps:
        Number of distinct non-zero stamps examined.
    interval_ns:
        Nominal interval used.
    """

    index: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    missing: np.ndarray
    stamps: int
    interval_ns: float

    @property
    def delta_ns(self) -> np.ndarray:
        """``(G,)`` int64 length of each gap."""
        return np.asarray(self.end_ns - self.start_ns, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.index.shape[0])


def _distinct_runs(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs of equal consecutive non-zero stamps: (first position, last position, stamp) per run."""
    idx = np.flatnonzero(a)
    if not idx.size:
        return idx, idx, a[idx]
    v = a[idx]
    change = v[1:] != v[:-1]
    first = np.concatenate([[True], change])
    last = np.concatenate([change, [True]])
    return idx[first], idx[last], v[first]


def _steps(a: np.ndarray, count_zeros: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(run starts, run stamps, step lengths, positions each step spans) between distinct stamps."""
    starts, ends, v = _distinct_runs(a)
    steps = np.diff(v)
    spans = (starts[1:] - ends[:-1]) if count_zeros else np.ones(steps.shape, dtype=np.int64)
    return starts, v, steps, spans


def nominal_interval(ns: Any, count_zeros: bool = False, min_steps: int = 3) -> float | None:
    """A series' own nominal interval: the median forward step between distinct stamps, per
    position when ``count_zeros`` (see :func:`find_gaps`); None with fewer than ``min_steps`` steps.

    A 15 Hz sensor in 30 fps rows gives 66.7 ms, a 100 Hz trajectory 10 ms (multi_device_storage.md §5.3:
    rows are 30 fps ticks, signals keep their own rate).
    """
    _, _, steps, spans = _steps(_as_ns(ns), count_zeros)
    ok = (steps > 0) & (spans > 0)
    if int(ok.sum()) < min_steps:
        return None
    return float(np.median(steps[ok] / spans[ok]))


def find_gaps(ns: Any, interval_ns: float, tolerance: float = 0.5, *, count_zeros: bool = False) -> Gaps:
    """Find holes in a stamp series: steps longer than the interval they should take plus ``tolerance``.

    Zeros carry no stamp and a stamp equal to the previous one (a repeated frame or a
    latest-wins sample held over a row) is not a step. What a zero means decides what a
    step should take:

    * ``count_zeros=False`` (sparse signal ``*_ns``: 0 = no sample in that row): every step
      between distinct stamps should take one interval;
    * ``count_zeros=True`` (``hardware_ns``, trajectory ``_ns``: 0 = the frame or point is
      there, its stamp unknown): a step over ``k`` positions should take ``k`` intervals, so an
      unstamped frame is not counted as a missing one.

    A step is a gap when longer than ``interval_ns · (k + tolerance)``; it is estimated to miss
    ``round(Δ / interval) − k`` (≥ 1) items. A hole is not proof of a lost picture (§7.3): it
    says where to look.

    Parameters
    ----------
    ns:
        ``(N,)`` int64 stamps in row (or point) order (unwrap truncated ones first).
    interval_ns:
        Nominal interval, e.g. ``1e9 / fps``.
    tolerance:
        Allowed excess as a fraction of the interval (0.5 = a step of 1.5 intervals is
        still fine).
    count_zeros:
        See above.

    Raises
    ------
    CodecError
        Interval not a finite number > 0, or tolerance not a finite number >= 0.
    """
    if not (np.isfinite(interval_ns) and interval_ns > 0) or not (np.isfinite(tolerance) and tolerance >= 0):
        raise CodecError(f"need a finite interval_ns > 0 and tolerance >= 0, got {interval_ns} and {tolerance}")
    starts, v, steps, spans = _steps(_as_ns(ns), count_zeros)
    hit = np.flatnonzero(steps > interval_ns * (spans + tolerance))
    missing = np.maximum(np.rint(steps[hit] / interval_ns).astype(np.int64) - spans[hit], 1)
    return Gaps(starts[hit + 1].astype(np.int64), v[hit], v[hit + 1], missing.astype(np.int64), int(starts.size),
                float(interval_ns))
