"""``egopool import tum FILE``: a TUM trajectory file -> one episode with a trajectory column.

TUM format (one pose per line): ``timestamp tx ty tz qx qy qz qw`` with ``timestamp``
in seconds, position in metres and a unit quaternion xyzw. ``#`` lines are comments;
a UTF-8 byte order mark is accepted; a first line of column names without ``#`` is
skipped only when every token is a name (any other unparsable line is an error naming
it); numbers may use ``e+09`` notation. A stamp that cannot be seconds (after the year
2286: milliseconds or nanoseconds since the epoch) is refused with its line; poses that
repeat the previous stamp are kept and reported. The points are stored unchanged as ``[t, x, y, z, qx, qy, qz, qw]``
(multi_device_storage.md §4.7) and ``_ns`` is the file's timestamp converted exactly
to ns. Rows are laid on a ``1/fps`` grid starting at the first pose; each row holds the
poses whose time falls in its window (§5.3), so the row times are synthesised.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import FormatError
from ..frames import frame_axes
from ..schema import slam_trajectory_columns
from ..unix_time import UNIX_2000_S, UNIX_2100_S, plausible_unix_unit
from ._common import (ImportResult, ImportSource, Progress, check_fps, default_task_name, looks_like_header,
                      plain_number, read_input_lines, seconds_to_ns, task_writer, window_offsets)

__all__ = ["TumTrajectory", "import_tum", "read_tum"]

#: Rows one import may create (46 h at 30 fps): beyond it the file's time span is suspect.
MAX_ROWS = 5_000_000
#: Largest |stamp| read as seconds (year 2286); beyond it the column is another unit.
MAX_SECONDS = 1e10


@dataclass(frozen=True)
class TumTrajectory:
    """A parsed TUM file.

    Attributes
    ----------
    path:
        The file.
    points:
        ``(K, 8)`` float64 ``[t, x, y, z, qx, qy, qz, qw]``, each value ``float(token)``
        of the file (t in s, xyz in m).
    ns:
        ``(K,)`` int64 timestamps in ns, converted from the decimal text exactly.
    lines:
        ``(K,)`` 1-based line numbers of the poses.
    duplicates:
        ``(line, earlier line)`` of every pose whose stamp equals the previous pose's.
    """

    path: Path
    points: np.ndarray
    ns: np.ndarray
    lines: np.ndarray
    duplicates: tuple[tuple[int, int], ...] = ()

    @property
    def quaternion_norm_error(self) -> float:
        """Largest ``| |q| − 1 |`` over the poses (TUM files round to a few decimals)."""
        if not len(self.points):
            return 0.0
        return float(np.max(np.abs(np.linalg.norm(self.points[:, 4:8], axis=1) - 1.0)))


def read_tum(path: str | Path) -> TumTrajectory:
    """Parse a TUM trajectory file.

    Raises
    ------
    FormatError
        Missing/unreadable file (or not UTF-8, named by line), a line without exactly 8
        numbers, a non-finite value, a stamp that is not seconds (``|t| > 1e10``: the
        message says which unit it looks like), a quaternion far from unit length
        (``|q|`` outside 0.5..1.5: not xyzw data), timestamps that go backwards, or no
        pose at all. The message names the file and the 1-based line.
    """
    path = Path(path)
    rows: list[list[float]] = []
    ns: list[int] = []
    lines: list[int] = []
    duplicates: list[tuple[int, int]] = []
    seen_data = False
    for no, line in read_input_lines(path, "TUM trajectory file"):
        if line.startswith("#"):
            continue
        tokens = line.replace(",", " ").split()
        if not seen_data and looks_like_header(tokens):
            seen_data = True
            continue  # a column-name line without '#'
        seen_data = True
        if len(tokens) != 8:
            raise FormatError(f"line {no}: expected 8 values 'timestamp tx ty tz qx qy qz qw', "
                              f"got {len(tokens)}", path=path)
        try:
            vals = [plain_number(t) for t in tokens]
        except ValueError:
            raise FormatError(f"line {no}: not a number in {line[:60]!r}", path=path) from None
        if not all(np.isfinite(vals)):
            raise FormatError(f"line {no}: non-finite value in {line[:60]!r}", path=path)
        if abs(vals[0]) > MAX_SECONDS:
            unit = plausible_unix_unit(vals[0])
            guess = f"; it looks like {unit} since the Unix epoch" if unit and unit != "seconds" else ""
            raise FormatError(f"line {no}: timestamp {tokens[0]} is not in seconds (as seconds it is after the year "
                              f"2286){guess}; TUM timestamps are seconds", path=path,
                              hint="convert the first column to seconds (e.g. divide milliseconds by 1000)")
        norm = float(np.linalg.norm(vals[4:8]))
        if not 0.5 <= norm <= 1.5:
            raise FormatError(f"line {no}: quaternion norm {norm:.3g} is not ~1 (columns must be qx qy qz qw)",
                              path=path)
        t_ns = seconds_to_ns(tokens[0], path=path, line=no)
        if ns and t_ns < ns[-1]:
            raise FormatError(f"line {no}: timestamp {tokens[0]} is earlier than line {lines[-1]}'s",
                              path=path, hint="sort the file by time")
        if ns and t_ns == ns[-1]:
            duplicates.append((no, lines[-1]))
        rows.append(vals)
        ns.append(t_ns)
        lines.append(no)
    if not rows:
        raise FormatError("no poses in TUM trajectory file", path=path)
    return TumTrajectory(path, np.asarray(rows, dtype=np.float64), np.asarray(ns, dtype=np.int64),
                         np.asarray(lines, dtype=np.int64), tuple(duplicates))


def _row_edges(first_ns: int, last_ns: int, fps: float, count: int, ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Grid edges ``first + round(i·1e9/fps)`` covering every pose, and the per-row offsets."""
    rows = int((last_ns - first_ns) * fps // 1_000_000_000) + 1
    if rows > MAX_ROWS:
        raise FormatError(f"poses span {(last_ns - first_ns) / 1e9:.6g} s: {rows} rows at {fps:g} fps "
                          f"(more than {MAX_ROWS})", hint="check the timestamps column or lower --fps")
    while True:
        edges = first_ns + np.rint(np.arange(rows + 1) * (1e9 / fps)).astype(np.int64)
        offsets = window_offsets(ns, edges)
        if offsets[-1] == count:
            return edges, offsets
        rows += 1


def import_tum(path: str | Path, out: str | Path = "recordings", *, frame: str, task: str | None = None,
               fps: float = 30.0, prefix: str = "ego_", progress: Progress | None = None,
               allow_duplicate: bool = False) -> ImportResult:
    """Import a TUM trajectory as one episode (multi_device_storage.md §4.7, §5.3, §6.6).

    Parameters
    ----------
    path:
        The TUM file.
    out:
        Recordings root; the task goes to ``out/task``.
    frame:
        Registered frame id the poses are expressed in (``egopool.frames.FRAMES``); a
        TUM file does not say, so the caller must (e.g. ``ego_cam_optical`` for SLAM
        output relative to the first camera).
    task:
        Task name (default: the file name without extension).
    fps:
        Row rate. Row ``i`` covers ``[t0 + i/fps, t0 + (i+1)/fps)`` of the file's clock.
    prefix:
        Column prefix: ``ego_`` -> ``observation.ego_slam_trajectory``; ``""`` -> rig1 gripper.
    progress:
        ``progress(done_rows, total_rows)``.
    allow_duplicate:
        Import even when the task already holds an episode imported from the same content
        (otherwise refused, naming that N; docs/decisions.md D6).

    Returns
    -------
    ImportResult
        One episode; ``counts`` has ``poses``, ``rows`` and ``duplicate_stamps``.

    Raises
    ------
    FormatError
        Malformed file (see :func:`read_tum`); nothing is written.
    SchemaError
        Unknown ``frame`` or a prefix that makes an invalid column name.
    """
    fps = check_fps(fps)
    traj = read_tum(path)
    frame_axes(frame)  # SchemaError for an unknown frame, before anything is written
    role = "ego" if prefix.startswith("ego") else "gripper"
    key = f"tum:{traj.path.name}"
    owner = {"role": role, "device_key": key}
    col, col_ns = slam_trajectory_columns(prefix, frame=frame, owner=owner,
                                          time={"t": "sensor_s", "clock": "source_file", "epoch": "source_file"})
    first, last = int(traj.ns[0]), int(traj.ns[-1])
    try:
        edges, offsets = _row_edges(first, last, fps, len(traj.ns), traj.ns)
    except FormatError as exc:
        raise FormatError(exc.message, path=traj.path, hint=exc.hint) from None
    rows = len(edges) - 1
    first_s = first / 1e9
    # only a 2000-2100 first stamp is wall-clock time (docs/decisions.md V5)
    created = first_s if UNIX_2000_S <= first_s <= UNIX_2100_S else time.time()
    task = task if task is not None else default_task_name(traj.path)
    synthesised = [f"row timestamps: a 1/{fps:g} s grid from the first pose (the file has poses, not frames); "
                   "hardware_ns = the grid on the file's clock"]
    if created != first_s:
        synthesised.append("created_at/wall_time: import time (the file's timestamps are not Unix time)")
    device = {"key": key, "kind": "trajectory_file", "name": traj.path.name, "slots": []}
    source = ImportSource((traj.path,), str(traj.path))
    with task_writer(out, task, fps, source=source, allow_duplicate=allow_duplicate) as tw:
        with tw.begin_episode(columns=[col, col_ns], devices=[device], created_at=created) as ep:
            for i in range(rows):
                a, b = int(offsets[i]), int(offsets[i + 1])
                ep.add_frame({col.name: traj.points[a:b].reshape(-1), col_ns.name: traj.ns[a:b]},
                             hardware_ns=int(edges[i]))
                if progress:
                    progress(i + 1, rows)
            result = ep.finish()
    notes = [f"{len(traj.ns)} poses into {rows} rows; frame {frame!r} as declared by the caller",
             f"largest quaternion norm error in the file: {traj.quaternion_norm_error:.2e} (stored unchanged)"]
    if traj.duplicates:
        line, earlier = traj.duplicates[0]
        dup = (f"{len(traj.duplicates)} pose(s) repeat the previous pose's timestamp (first: line {line} repeats "
               f"line {earlier}); all were kept, in file order")
        notes.append(dup)
        warnings.warn(f"{traj.path}: {dup}", UserWarning, stacklevel=2)
    unit = _whole_second_steps(traj)
    if unit is not None:
        notes.append(unit)
        warnings.warn(f"{traj.path}: {unit}", UserWarning, stacklevel=2)
    return ImportResult(tw.task_dir, (result,), tuple(synthesised), tuple(notes),
                        {"poses": len(traj.ns), "rows": rows, "duplicate_stamps": len(traj.duplicates)})


def _whole_second_steps(traj: TumTrajectory) -> str | None:
    """A note when every stamp is a whole number and poses are >= 1 s apart (relative milliseconds?).

    TUM stamps are seconds; relative millisecond stamps (0, 33, 66...) read as seconds turn
    3 poses into a 66 s episode. They stay seconds (a slow keyframe trajectory looks the
    same), but the user is told.
    """
    if len(traj.ns) < 3 or np.any(traj.ns % 1_000_000_000):
        return None
    step_s = float(np.median(np.diff(traj.ns))) / 1e9
    if step_s < 1.0:
        return None
    return (f"every timestamp is a whole number and poses are a median {step_s:g} s apart: read as seconds "
            "(TUM); if they are milliseconds, divide the first column by 1000 and import again")
