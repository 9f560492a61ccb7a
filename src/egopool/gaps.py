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

from collections.abc import Callable, Sequence
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
from .errors import EgopoolError, FormatError, SchemaError

if TYPE_CHECKING:
    from .read.reader import Episode, Task

__all__ = ["EpisodeGapReport", "SeriesGaps", "SkippedEpisode", "TaskGapReport", "audit_episode_gaps",
           "audit_task_gaps", "check_rate", "stamp_series"]


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
    start_rows:
        ``(G,)`` data row of the stamp before each gap (None when not known).
    """

    column: str
    stamps: int
    unwrapped: bool
    rows: np.ndarray
    delta_ns: np.ndarray
    missing: np.ndarray
    interval_ns: float = 0.0
    kind: str = "rows"
    start_rows: np.ndarray | None = None

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
                     for r, d, m in zip(self.rows, self.delta_ns, self.missing, strict=True)],
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
        starts = np.asarray([rows[int(np.argmax(ns == a))] for a in g.start_ns], np.int64)
        series.append(SeriesGaps(name, g.stamps, wrapped, rows[g.index], g.delta_ns, g.missing, own, kind, starts))
    return EpisodeGapReport(ep.index, ep.length, interval / 1e6, float(tolerance), series)


@dataclass(frozen=True)
class SkippedEpisode:
    """An episode a whole-task audit could not examine.

    Attributes
    ----------
    episode_index:
        Global N.
    reason:
        ``"no data parquet"`` (an incomplete file group, e.g. one still being recorded) or
        ``"unreadable"``.
    error:
        For an unreadable episode, the error's one line (file and what to do), else ``""``.
    """

    episode_index: int
    reason: str
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        """``{"episode_index", "reason"[, "error"]}``."""
        out: dict[str, Any] = {"episode_index": self.episode_index, "reason": self.reason}
        if self.error:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class TaskGapReport:
    """Gap audit of a task: every episode that could be read, and the ones that could not.

    Attributes
    ----------
    episodes:
        One report per audited episode, ascending N.
    skipped:
        Episodes without a data parquet or whose files could not be read.
    """

    episodes: list[EpisodeGapReport]
    skipped: list[SkippedEpisode]

    @property
    def ok(self) -> bool:
        """False when an episode was skipped because it could not be read (damage, not an incomplete group)."""
        return not any(s.error for s in self.skipped)


def audit_task_gaps(task: Task, indices: Sequence[int] | None = None, *, tolerance: float = 0.5,
                    fps: float | None = None,
                    progress: Callable[[int, int], None] | None = None) -> TaskGapReport:
    """Audit every episode of a task (or the given N): one broken episode never stops the others.

    An episode whose data parquet or columns cannot be read is listed in ``skipped`` with
    its error, and the audit goes on (docs/decisions.md C8); an episode without a data
    parquet is skipped too, unless it was asked for by N.

    Parameters
    ----------
    task:
        The opened task.
    indices:
        Only these global N; default every episode.
    tolerance, fps:
        See :func:`audit_episode_gaps`.
    progress:
        ``progress(done, total)`` after each episode.

    Returns
    -------
    TaskGapReport

    Raises
    ------
    EpisodeNotFoundError
        An asked-for N has no file.
    FormatError
        An asked-for N has no data parquet.
    SchemaError
        ``fps`` (given, or from info.json) not a finite number > 0.
    """
    if fps is not None:
        check_rate(fps, "--fps")
    episodes = [task.episode(n) for n in indices] if indices else task.episodes()
    reports: list[EpisodeGapReport] = []
    skipped: list[SkippedEpisode] = []
    for i, ep in enumerate(episodes, 1):
        if ep.files.data is None:
            if indices:
                raise FormatError(f"episode {ep.index} has no data parquet, nothing to audit",
                                  path=task.layout.data_file(ep.index), hint="run `egopool validate TASK`")
            skipped.append(SkippedEpisode(ep.index, "no data parquet"))
        else:
            try:
                reports.append(audit_episode_gaps(ep, tolerance=tolerance, fps=fps))
            except SchemaError as exc:
                if exc.path == task.path / "meta" / "info.json":
                    raise  # the task's fps: every episode would fail alike
                skipped.append(SkippedEpisode(ep.index, "unreadable", exc.one_line()))
            except EgopoolError as exc:
                skipped.append(SkippedEpisode(ep.index, "unreadable", exc.one_line()))
        if progress is not None:
            progress(i, len(episodes))
    return TaskGapReport(reports, skipped)
