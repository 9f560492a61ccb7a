"""``egopool export tum``: SLAM trajectories as TUM text files (one per trajectory column).

A TUM file holds one pose per line, ``timestamp tx ty tz qx qy qz qw`` (seconds, metres,
a unit quaternion), sorted by time with unique stamps; lines starting with ``#`` are
comments. It says nothing about its axes, so the header comment names the column's
``frame`` / ``frame_axes`` (file_format.md §3.1) and the clock of the stamps.

Stamps come from the trajectory's ``_ns`` column (host monotonic ns, multi_device_storage.md
§3.1, §4.6) by default, or from the point's own ``t`` (the SLAM sensor clock, ``clock="sensor"``).
Every point that cannot be written is skipped and counted: no stamp on the chosen clock,
"lost" (a non-finite value or a zero quaternion), or a stamp already written. Nothing is
resampled or interpolated; the values are written with 17 significant digits, so a reader
gets the stored float64 back exactly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import atomic_write_bytes
from ..errors import EgopoolError, SchemaError, StorageError
from ..read.reader import Episode, Trajectory, open_task
from ._checks import check_output_dir

__all__ = ["CLOCKS", "TumExport", "export_tum", "format_ns", "tum_text"]

#: ``--clock`` values: ``host`` = the ``_ns`` column, ``sensor`` = the point's ``t``.
CLOCKS = ("host", "sensor")
#: A quaternion whose norm differs from 1 by more than this is renormalised (and counted); others are
#: written as stored.
_NORM_TOL = 1e-9


@dataclass(frozen=True)
class TumExport:
    """One written TUM file and what was left out.

    Attributes
    ----------
    column:
        The trajectory column (``observation.*slam_trajectory``).
    path:
        The file written.
    points:
        Points stored in the episode for this column.
    written:
        Poses in the file.
    unstamped:
        Points without a stamp on the chosen clock (``_ns`` = 0, or no ``_ns`` column).
    lost:
        Points with a non-finite coordinate or quaternion, or a zero quaternion.
    duplicates:
        Points whose stamp equals an earlier point's (the first one is kept).
    renormalised:
        Quaternions whose norm was not 1 within 1e-9 (written normalised; the others as stored).
    clock:
        ``"host"`` or ``"sensor"``.
    frame, frame_axes:
        The declared frame of the values (copied into the header comment).
    """

    column: str
    path: Path
    points: int
    written: int
    unstamped: int
    lost: int
    duplicates: int
    renormalised: int
    clock: str
    frame: str
    frame_axes: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (path as a string)."""
        return {"column": self.column, "path": str(self.path), "points": self.points, "written": self.written,
                "skipped": {"unstamped": self.unstamped, "lost": self.lost, "duplicate_stamp": self.duplicates},
                "renormalised": self.renormalised, "clock": self.clock, "frame": self.frame,
                "frame_axes": self.frame_axes}


def format_ns(ns: int) -> str:
    """Integer ns -> exact decimal seconds text (``1305031102175304000`` -> ``1305031102.175304000``)."""
    sign = "-" if ns < 0 else ""
    sec, frac = divmod(abs(int(ns)), 1_000_000_000)
    return f"{sign}{sec}.{frac:09d}"


def tum_text(traj: Trajectory, clock: str = "host", header: Sequence[str] = ()) -> tuple[str, dict[str, int]]:
    """The TUM lines of one trajectory and the counts of what was skipped.

    Parameters
    ----------
    traj:
        A decoded trajectory (:meth:`egopool.Episode.trajectory`): ``points`` ``(K, 8)``
        float64 ``[t, x, y, z, qx, qy, qz, qw]``, ``host_ns`` ``(K,)`` int64 (0 = no stamp).
    clock:
        ``"host"``: seconds of the ``_ns`` stamp (exact decimal); ``"sensor"``: the point's ``t``.
    header:
        Comment lines (without ``#``) written first.

    Returns
    -------
    (text, counts):
        The file content and ``{"written", "unstamped", "lost", "duplicates", "renormalised"}``.

    Raises
    ------
    EgopoolError
        ``clock`` is not one of :data:`CLOCKS`.
    """
    if clock not in CLOCKS:
        raise EgopoolError(f"unknown clock {clock!r}", hint=f"use one of {list(CLOCKS)}")
    pts = traj.points
    if clock == "host":
        stamped = traj.host_ns != 0 if traj.has_host_ns else np.zeros(len(pts), bool)
    else:
        stamped = np.isfinite(pts[:, 0])
    q = pts[:, 4:8]
    norm = np.linalg.norm(q, axis=1) if len(pts) else np.zeros(0)
    finite = np.all(np.isfinite(pts[:, 1:8]), axis=1) & np.isfinite(norm) & (norm > 1e-12)
    keep = stamped & finite
    idx = np.flatnonzero(keep)
    if clock == "host":
        order = idx[np.argsort(traj.host_ns[idx], kind="stable")]
        keys = traj.host_ns[order]
    else:
        order = idx[np.argsort(pts[idx, 0], kind="stable")]
        keys = pts[order, 0]
    first = np.ones(len(order), bool)
    first[1:] = keys[1:] != keys[:-1]
    order = order[first]
    off = np.abs(norm[order] - 1.0) > _NORM_TOL
    unit = np.where(off[:, None], pts[order, 4:8] / norm[order, None], pts[order, 4:8])
    renorm = int(np.count_nonzero(off))
    lines = [f"# {h}" for h in header]
    lines.append("# timestamp tx ty tz qx qy qz qw")
    for row, qu in zip(order, unit, strict=True):
        stamp = format_ns(int(traj.host_ns[row])) if clock == "host" else f"{pts[row, 0]:.17g}"
        values = " ".join(f"{v:.17g}" for v in (*pts[row, 1:4], *qu))
        lines.append(f"{stamp} {values}")
    counts = {"written": len(order), "unstamped": int(np.count_nonzero(~stamped)),
              "lost": int(np.count_nonzero(stamped & ~finite)), "duplicates": int(np.count_nonzero(~first)),
              "renormalised": renorm}
    return "\n".join(lines) + "\n", counts


_UNSAFE = re.compile(r"[^\w.\-]+", re.UNICODE)


def _file_name(task_name: str, index: int, column: str, clock: str) -> str:
    signal = column.removeprefix("observation.")
    base = _UNSAFE.sub("_", task_name).strip("._") or "task"
    return f"{base}_N{index}_{signal}_{clock}.txt"


def export_tum(task: str | Path, index: int, columns: Sequence[str] | None = None, *, out_dir: str | Path = ".",
               clock: str = "host") -> list[TumExport]:
    """Write one TUM file per trajectory column of episode N.

    Parameters
    ----------
    task:
        Task directory.
    index:
        Global 1-based N.
    columns:
        Trajectory columns; default every ``observation.*slam_trajectory`` of the episode.
    out_dir:
        Directory for the files ``<task>_N<N>_<signal>_<clock>.txt`` (created; files replaced atomically).
    clock:
        ``"host"`` (default): stamps from the ``_ns`` column in seconds; ``"sensor"``: the point's ``t``.

    Returns
    -------
    list[TumExport]
        One entry per written file, with the skipped-point counts.

    Raises
    ------
    EpisodeNotFoundError
        No episode N.
    SchemaError
        A column that is not a trajectory of this episode; ``clock="host"`` for a trajectory
        without a ``_ns`` column (nothing to stamp it with: use ``clock="sensor"``); an
        episode without any trajectory.
    EgopoolError
        ``out_dir`` is in (or holds) the task directory.
    StorageError
        A file cannot be written (``out_dir`` is a file, no permission).
    """
    if clock not in CLOCKS:
        raise EgopoolError(f"unknown clock {clock!r}", hint=f"use one of {list(CLOCKS)}")
    t = open_task(task)
    ep: Episode = t.episode(index)
    cols = list(columns) if columns else ep.trajectories()
    if not cols:
        raise SchemaError(f"episode {index} has no observation.*slam_trajectory column", path=ep.files.data,
                          hint="`egopool show TASK N` lists its columns")
    trajs = [ep.trajectory(c) for c in cols]
    if clock == "host":
        for tr in trajs:
            if not tr.has_host_ns:
                raise SchemaError(f"has no {tr.column}_ns column in episode {index}: no host stamps",
                                  column=tr.column, path=ep.files.data,
                                  hint="export with --clock sensor (the points' own t)")
    out = check_output_dir(out_dir, t.path, what="TUM files")
    results = []
    for tr in trajs:
        clock_name = "host_monotonic (the _ns column)" if clock == "host" else f"sensor t ({tr.spec.get('time')})"
        header = [f"egopool export tum: task {t.name!r}, episode N={index}, column {tr.column}",
                  f"frame {tr.frame} frame_axes {tr.frame_axes}", f"clock: {clock_name}"]
        text, counts = tum_text(tr, clock, header)
        path = out / _file_name(t.name, index, tr.column, clock)
        with StorageError.guard(path, action="cannot write the TUM file"):
            atomic_write_bytes(path, text.encode("utf-8"))
        results.append(TumExport(tr.column, path, len(tr.points), counts["written"], counts["unstamped"],
                                 counts["lost"], counts["duplicates"], counts["renormalised"], clock, tr.frame,
                                 dict(tr.frame_axes)))
    return results
