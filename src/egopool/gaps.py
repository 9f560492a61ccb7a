"""Per-slot gap audit of episodes: where stamps step further than the nominal frame interval.

For each episode, every stamp series is examined (file_format.md §7.3,
multi_device_storage.md §3.1, §5.4):

* ``hardware_ns`` (unwrapped when it is the signed-32-bit truncated kind), and the
  other ``*_ns`` key columns present (``raw_hw_ns``, ``depth_ns``, ``host_ns``);
* each scalar ``*_ns`` signal column (``*_force_ns``, ``*_force_matrix_ns``...);
* each trajectory's ``*_slam_trajectory_ns`` (flattened points).

``imu_ts_ns`` is not audited here (device clock at the IMU rate, not frames). Repeated
stamps (a held-over sample, a duplicated frame) are not steps. A zero carries no stamp;
in a row series (``hardware_ns``...) and in a trajectory's ``_ns`` it still stands for a
frame / point that is there, so a step over it should take one interval more; in a sparse
signal ``*_ns`` it is a row without a sample (§5.5).

Nominal interval (docs/decisions.md C8): ``1 / fps`` for the row series; a signal or
trajectory keeps its own rate (a 15 Hz sensor in 30 fps rows, a 100 Hz trajectory, §5.3),
so its interval is the median step of its own stamps (``1 / fps`` when it has fewer than
3 steps). A step longer than ``interval · (k + tolerance)`` over ``k`` positions is a gap.
A gap says where to look, not that a picture was lost (§7.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .arrowutil import int_values_to_numpy, list_offsets
from .codecs.timebase import (
    Gaps,
    find_gaps,
    looks_truncated32,
    nominal_interval,
    unwrap_ns,
)
from .errors import SchemaError

if TYPE_CHECKING:
    from .read.reader import Episode

__all__ = ["EpisodeGapReport", "SeriesGaps", "audit_episode_gaps", "check_rate", "stamp_series"]


@dataclass(frozen=True)
class SeriesGaps:
    """Gaps of one stamp series of one episode.

    Attributes
    ----------
    column:
        The ``*_ns`` column audited.
    stamps:
        Distinct non-zero stamps examined.
    unwrapped:
        True when the series was the truncated 32-bit kind and was unwrapped first.
    rows:
        ``(G,)`` data row where each gap ends.
    delta_ns:
        ``(G,)`` length of each gap in ns.
    missing:
        ``(G,)`` estimated missing frames per gap.
    interval_ns:
        Nominal interval the steps were measured against (``1 / fps`` for row series, the
        series' own median step for signals and trajectories).
    kind:
        ``"rows"`` (one stamp per data row), ``"samples"`` (sparse signal, 0 = no sample) or
        ``"points"`` (trajectory ``_ns``, 0 = unstamped point).
    """

    column: str
    stamps: int
    unwrapped: bool
    rows: np.ndarray
    delta_ns: np.ndarray
    missing: np.ndarray
    interval_ns: float = 0.0
    kind: str = "rows"

    @property
    def count(self) -> int:
        """Number of gaps."""
        return int(self.rows.shape[0])

    @property
    def missing_total(self) -> int:
        """Sum of estimated missing frames."""
        return int(self.missing.sum())

    @property
    def max_gap_ms(self) -> float:
        """Longest gap in ms (0 when none)."""
        return float(self.delta_ns.max() / 1e6) if self.count else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary with every gap (row, ms, missing)."""
        return {
            "column": self.column, "kind": self.kind, "interval_ms": round(self.interval_ns / 1e6, 6),
            "stamps": self.stamps, "unwrapped": self.unwrapped, "gaps": self.count,
            "missing_frames": self.missing_total, "max_gap_ms": round(self.max_gap_ms, 3),
            "list": [{"row": int(r), "gap_ms": round(float(d) / 1e6, 3), "missing": int(m)}
                     for r, d, m in zip(self.rows, self.delta_ns, self.missing)],
        }


@dataclass(frozen=True)
class EpisodeGapReport:
    """Gap audit of one episode.

    Attributes
    ----------
    episode_index:
        Global N.
    length:
        Data rows.
    interval_ms:
        Nominal row interval (1000 / fps).
    tolerance:
        Allowed excess over the interval, as a fraction.
    series:
        One entry per audited stamp series.
    """

    episode_index: int
    length: int
    interval_ms: float
    tolerance: float
    series: list[SeriesGaps] = field(default_factory=list)

    @property
    def gaps(self) -> int:
        """Total gaps over every series."""
        return sum(s.count for s in self.series)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready report."""
        return {"episode_index": self.episode_index, "length": self.length,
                "interval_ms": round(self.interval_ms, 6), "tolerance": self.tolerance, "gaps": self.gaps,
                "series": [s.to_dict() for s in self.series]}


def _is_ns_column(name: str, typ: pa.DataType) -> bool:
    if not name.endswith("_ns") or name == "imu_ts_ns":
        return False
    if pa.types.is_integer(typ):
        return True
    return bool((pa.types.is_list(typ) or pa.types.is_large_list(typ)) and pa.types.is_integer(typ.value_type))


def _series_kind(name: str, typ: pa.DataType) -> str:
    if not pa.types.is_integer(typ):
        return "points"
    return "samples" if name.startswith("observation.") else "rows"


def stamp_series(ep: Episode) -> dict[str, tuple[np.ndarray, np.ndarray, str]]:
    """Every audited ``*_ns`` series of an episode: ``column -> (stamps (K,) int64, rows (K,) int64, kind)``.

    ``hardware_ns`` first, then the other columns in schema order. Nulls read as 0. ``kind``
    is ``"rows"`` (key columns: one stamp per row), ``"samples"`` (``observation.*_ns``
    scalars: 0 = no sample) or ``"points"`` (list columns, flattened: 0 = unstamped point).
    """
    schema = ep.schema
    fields = [f for f in schema if _is_ns_column(f.name, f.type)]
    fields.sort(key=lambda f: f.name != "hardware_ns")
    if not fields:
        return {}
    table = ep.columns([f.name for f in fields])
    out: dict[str, tuple[np.ndarray, np.ndarray, str]] = {}
    for f in fields:
        col = table.column(f.name)
        kind = _series_kind(f.name, col.type)
        if kind != "points":
            ns = int_values_to_numpy(col)
            rows = np.arange(ns.shape[0], dtype=np.int64)
        else:
            ns = int_values_to_numpy(col, flatten=True)
            rows = np.repeat(np.arange(len(col), dtype=np.int64), np.diff(list_offsets(col)))
        out[f.name] = (ns, rows, kind)
    return out


def check_rate(fps: Any, where: str) -> float:
    """``fps`` as a float, or SchemaError naming ``where`` unless it is a finite number > 0."""
    try:
        rate = float(fps)
    except (TypeError, ValueError):
        rate = float("nan")
    if isinstance(fps, bool) or not (np.isfinite(rate) and rate > 0):
        raise SchemaError(f"{where} must be a finite number > 0 to audit gaps, got {fps!r}")
    return rate


def audit_episode_gaps(ep: Episode, tolerance: float = 0.5, fps: float | None = None) -> EpisodeGapReport:
    """Find every gap beyond the nominal interval in one episode's stamp series.

    Parameters
    ----------
    ep:
        The episode.
    tolerance:
        A step over ``k`` positions is a gap when longer than ``(k + tolerance)`` nominal
        intervals (default 0.5).
    fps:
        Row rate; default ``info.json`` ``fps``. Row series are measured against ``1 / fps``,
        signal and trajectory series against their own median step.

    Returns
    -------
    EpisodeGapReport

    Raises
    ------
    SchemaError
        ``fps`` (given, or from info.json) not a finite number > 0.
    FormatError
        The data parquet cannot be read.
    """
    if fps is not None:
        rate = check_rate(fps, "fps")
    else:
        try:
            rate = check_rate(ep.task.info.get("fps"), "info.json fps")
        except SchemaError as exc:
            raise SchemaError(exc.message, path=ep.task.path / "meta" / "info.json", hint="pass --fps") from exc
    interval = 1e9 / rate
    series: list[SeriesGaps] = []
    for name, (ns, rows, kind) in stamp_series(ep).items():
        wrapped = looks_truncated32(ns)
        if wrapped:
            ns = unwrap_ns(ns)
        count_zeros = kind != "samples"
        own = interval if kind == "rows" else (nominal_interval(ns, count_zeros) or interval)
        g: Gaps = find_gaps(ns, own, tolerance, count_zeros=count_zeros)
        series.append(SeriesGaps(name, g.stamps, wrapped, rows[g.index], g.delta_ns, g.missing, own, kind))
    return EpisodeGapReport(ep.index, ep.length, interval / 1e6, float(tolerance), series)
