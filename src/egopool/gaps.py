"""Per-slot gap audit of episodes: where stamps step further than the nominal frame interval.

For each episode, every stamp series is examined (file_format.md §7.3,
multi_device_storage.md §3.1, §5.4):

* ``hardware_ns`` (unwrapped when it is the signed-32-bit truncated kind), and the
  other ``*_ns`` key columns present (``raw_hw_ns``, ``depth_ns``, ``host_ns``);
* each scalar ``*_ns`` signal column (``*_force_ns``, ``*_force_matrix_ns``...);
* each trajectory's ``*_slam_trajectory_ns`` (flattened points).

``imu_ts_ns`` is not audited here (device clock at the IMU rate, not frames). Zeros
(no stamp) are skipped and repeated stamps (a held-over sample, a duplicated frame)
are not steps. The nominal interval is ``1 / fps``; a step longer than
``interval · (1 + tolerance)`` is a gap. A gap says where to look, not that a picture
was lost (§7.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .arrowutil import list_offsets
from .codecs.timebase import Gaps, find_gaps, looks_truncated32, unwrap_ns
from .errors import SchemaError

if TYPE_CHECKING:
    from .reader import Episode

__all__ = ["EpisodeGapReport", "SeriesGaps", "audit_episode_gaps", "stamp_series"]


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
    """

    column: str
    stamps: int
    unwrapped: bool
    rows: np.ndarray
    delta_ns: np.ndarray
    missing: np.ndarray

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
            "column": self.column, "stamps": self.stamps, "unwrapped": self.unwrapped, "gaps": self.count,
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
        Nominal interval (1000 / fps).
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


def stamp_series(ep: Episode) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every audited ``*_ns`` series of an episode: ``column -> (stamps (K,) int64, rows (K,) int64)``.

    ``hardware_ns`` first, then the other columns in schema order.
    """
    schema = ep.schema
    names = [f.name for f in schema if _is_ns_column(f.name, f.type)]
    names.sort(key=lambda n: n != "hardware_ns")
    if not names:
        return {}
    table = ep.columns(names)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in names:
        col = table.column(name)
        if pa.types.is_integer(col.type):
            ns = np.asarray(col.to_numpy(), dtype=np.int64)
            rows = np.arange(ns.shape[0], dtype=np.int64)
        else:
            arr = pa.chunked_array(col.chunks, type=col.type).combine_chunks()
            ns = np.asarray(arr.flatten().to_numpy(zero_copy_only=False), dtype=np.int64)
            rows = np.repeat(np.arange(len(arr), dtype=np.int64), np.diff(list_offsets(arr)))
        out[name] = (ns, rows)
    return out


def audit_episode_gaps(ep: Episode, tolerance: float = 0.5, fps: float | None = None) -> EpisodeGapReport:
    """Find every gap beyond the nominal interval in one episode's stamp series.

    Parameters
    ----------
    ep:
        The episode.
    tolerance:
        A step is a gap when longer than ``(1 + tolerance) / fps`` (default 0.5).
    fps:
        Nominal rate; default ``info.json`` ``fps``.

    Returns
    -------
    EpisodeGapReport

    Raises
    ------
    SchemaError
        ``fps`` missing or not positive.
    FormatError
        The data parquet cannot be read.
    """
    rate = float(fps if fps is not None else ep.task.info.get("fps") or 0)
    if not rate > 0:
        raise SchemaError(f"fps must be > 0 to audit gaps, got {rate}", path=ep.task.path / "meta" / "info.json",
                          hint="pass --fps")
    interval = 1e9 / rate
    series: list[SeriesGaps] = []
    for name, (ns, rows) in stamp_series(ep).items():
        wrapped = looks_truncated32(ns)
        if wrapped:
            ns = unwrap_ns(ns)
        g: Gaps = find_gaps(ns, interval, tolerance)
        series.append(SeriesGaps(name, g.stamps, wrapped, rows[g.index], g.delta_ns, g.missing))
    return EpisodeGapReport(ep.index, ep.length, interval / 1e6, float(tolerance), series)
