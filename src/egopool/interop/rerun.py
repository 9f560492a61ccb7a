"""``egopool export rerun`` / ``egopool view``: episodes as a Rerun recording (``rerun-sdk`` 0.26 to 0.41).

Entities of episode N (all under ``/episode_N``)::

    cameras/<key>         RGB: the stored MP4 as a video asset (no re-encode) + one frame reference a row;
                          a pinhole from ``calibration`` when one has the stream's resolution
    depth/<key>           uint16 mm depth images (meter = 1000) + the same pinhole
    world/<signal>        a SLAM trajectory's frame: view coordinates from its ``frame_axes`` words,
                          the whole path as a line strip; world/<signal>/pose: one transform a point
    imu/gyro, imu/accel   IMU samples (rad/s, m/s²) at their device stamps
    signals/<column>      every other fixed-length numeric column (forces mN, gripper state,
                          glove pressure, glove IMU...) as scalars, one series per element
    force_matrix/<column> force matrices as (250, 250, 3) float32 mN tensors
    hands/<side>          hand pose as 21 3-D points (rows that hold a pose)

Timelines: ``frame_index`` (rows), ``wall_time`` (Unix s), ``hardware_ns`` (each row's device
stamp, 32-bit series unwrapped), ``imu_ts_ns`` (IMU device clock) and ``host_ns`` (the
trajectories' ``_ns`` host stamps). Nothing is resampled: every value is logged at the stamp
it was stored with.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import temp_path_for
from ..arrowutil import list_column_to_numpy
from ..errors import CodecError, EgopoolError, StorageError
from ..storage import ObjectPath
from ..read.reader import Episode, Task, open_task
from ..schema import signal_kind
from ..curation.review_events import ReviewEvent
from .rerun_events import log_events
from ._checks import check_output_file, episode_streams
from ._releases import RERUN, release_numbers

__all__ = ["RerunExport", "export_rerun", "has_display", "view_episode", "view_axes"]

#: Progress callback ``(episodes done, total)``.
Progress = Callable[[int, int], None]
_LETTER = {"right": "R", "left": "L", "up": "U", "down": "D", "forward": "F", "backward": "B"}
_SKIP_KINDS = {"slam_trajectory", "slam_trajectory_ns", "force_matrix", "force_matrix_ns", "force_ns", "hand_pose",
               "imu", "imu_ts"}


def _rr() -> Any:
    """The ``rerun`` module, once its release is one egopool drives (``_releases.RERUN``)."""
    RERUN.require()
    import rerun as rr

    return rr


#: The oldest rerun-sdk whose .rrd files the Rerun viewer 0.41 opens as they are (checked with its
#: ``rerun rrd verify``: 0.26 and 0.27 files have no RRD footer, docs/decisions.md I10).
_VIEWER_041_READS = (0, 28)


def _old_format_note(out: Path) -> list[str]:
    """What a user of the current Rerun viewer must do with ``out`` written by an older rerun-sdk."""
    from importlib.metadata import version

    release = version("rerun-sdk")
    numbers = release_numbers(release)
    if numbers is None or numbers[:2] >= _VIEWER_041_READS:
        return []
    return [f"written with rerun-sdk {release}: its own viewer opens it; Rerun viewers 0.41 and later only after "
            f"`rerun rrd migrate {out}`"]


def _pose_columns(rr: Any, translation: np.ndarray, quaternion: np.ndarray) -> list[Any]:
    """Transform3D columns of (K, 3) positions and (K, 4) xyzw quaternions, drawn as 5 cm axes.

    rerun-sdk 0.28 moved ``axis_length`` from ``Transform3D`` to its own ``TransformAxes3D``."""
    axes = [0.05] * len(translation)
    if hasattr(rr, "TransformAxes3D"):
        return [*rr.Transform3D.columns(translation=translation, quaternion=quaternion),
                *rr.TransformAxes3D.columns(axis_length=axes)]
    return list(rr.Transform3D.columns(translation=translation, quaternion=quaternion, axis_length=axes))


@dataclass(frozen=True)
class RerunExport:
    """What :func:`export_rerun` / :func:`view_episode` logged.

    Attributes
    ----------
    path:
        The ``.rrd`` written (None when the viewer was spawned instead).
    episodes:
        Global N of the logged episodes.
    entities:
        Entity path -> number of rows logged on it (static entities count 1).
    notes:
        What could not be shown (no calibration for a stream, ...).
    """

    path: Path | None
    episodes: tuple[int, ...]
    entities: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"path": str(self.path) if self.path else None, "episodes": list(self.episodes),
                "entities": dict(self.entities), "notes": list(self.notes)}


def view_axes(frame_axes: Mapping[str, str]) -> str:
    """Rerun view-coordinates name of ``frame_axes`` (``{"+X": "down", "+Y": "left", "+Z": "forward"}`` -> ``"DLF"``).

    Raises
    ------
    EgopoolError
        A word that is not a direction (file_format.md §3.1 words only).
    """
    try:
        return "".join(_LETTER[frame_axes[k]] for k in ("+X", "+Y", "+Z"))
    except KeyError as exc:
        raise EgopoolError(f"frame_axes {dict(frame_axes)} are not three direction words") from exc


def has_display() -> bool:
    """Whether a viewer window can open here (a desktop session on macOS/Windows, or X11/Wayland)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _pinhole(rr: Any, ep: Episode, width: int, height: int) -> tuple[Any, str] | None:
    """A pinhole from the episode's (else the task's) calibration whose resolution is the stream's."""
    cal = ep.meta.get("calibration") if ep.files.meta is not None else None
    if not isinstance(cal, Mapping) or not cal:
        cal = ep.task.info.get("calibration")
    if not isinstance(cal, Mapping):
        return None
    for name, entry in cal.items():
        if not isinstance(entry, Mapping):
            continue
        res = entry.get("resolution")
        cam = entry.get("left_camera")
        intr = cam.get("intrinsic") if isinstance(cam, Mapping) else None
        if isinstance(res, list) and list(res) == [width, height] and isinstance(intr, list) and len(intr) == 4:
            fx, fy, cx, cy = (float(v) for v in intr)
            return rr.Pinhole(focal_length=[fx, fy], principal_point=[cx, cy], width=width, height=height,
                              camera_xyz=rr.ViewCoordinates.RDF), str(name)
    return None


class _Logger:
    """Logs one episode into a recording stream; counts rows per entity."""

    def __init__(self, rr: Any, rec: Any, ep: Episode, stride: int) -> None:
        self.rr, self.rec, self.ep, self.stride = rr, rec, ep, stride
        self.root = f"episode_{ep.index}"
        self.entities: dict[str, int] = {}
        self.notes: list[str] = []
        table = ep.columns([c for c in ("frame_index", "wall_time", "hardware_ns") if c in ep.column_names])
        self.frames = table.column("frame_index").to_numpy().astype(np.int64)
        self.wall = table.column("wall_time").to_numpy() if "wall_time" in table.column_names else None
        self.hw = ep.hardware_ns()

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *(self.rr.escape_entity_path_part(p) for p in parts)])

    def row_times(self, rows: np.ndarray) -> list[Any]:
        rr = self.rr
        cols = [rr.TimeColumn("frame_index", sequence=self.frames[rows])]
        if self.wall is not None:
            cols.append(rr.TimeColumn("wall_time", timestamp=self.wall[rows]))
        if np.any(self.hw[rows] != 0):
            cols.append(rr.TimeColumn("hardware_ns", duration=self.hw[rows].astype("timedelta64[ns]")))
        return cols

    def count(self, entity: str, n: int) -> None:
        self.entities[entity] = self.entities.get(entity, 0) + int(n)

    # -- streams ---------------------------------------------------------------------------------
    def streams(self) -> None:
        rr = self.rr
        for key, (kind, width, height) in episode_streams(self.ep).items():
            if kind == "depth":
                self.depth(key)
                continue
            path = self.ep.stream_path(key)
            entity = self.path("cameras", key)
            try:
                # a bucket's object: its bytes (rerun reads a local file whole too)
                asset = (rr.AssetVideo(contents=path.read_bytes(), media_type="video/mp4")
                         if isinstance(path, ObjectPath) else rr.AssetVideo(path=str(path)))
                ts = np.asarray(asset.read_frame_timestamps_nanos(), dtype=np.int64)
            except Exception as exc:  # rerun's own parser: RuntimeError "MP4 error: ...", or worse
                raise CodecError(f"rerun cannot read stream {key!r} ({type(exc).__name__}: "
                                 f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''})", path=path,
                                 hint="run `egopool validate` on the task; restore the file or leave the episode "
                                      "out") from exc
            self.rec.log(entity, asset, static=True)
            n = min(len(ts), len(self.frames))
            if len(ts) != len(self.frames):
                self.notes.append(f"{key}: {len(ts)} video frames for {len(self.frames)} rows")
            self.rec.send_columns(entity, indexes=self.row_times(np.arange(n)),
                                  columns=rr.VideoFrameReference.columns_nanos(ts[:n]))
            self.count(entity, n)
            self._pinhole(entity, key, width, height)

    def _pinhole(self, entity: str, key: str, width: int, height: int) -> None:
        found = _pinhole(self.rr, self.ep, width, height)
        if found is None:
            self.notes.append(f"{key}: no calibration of {width}x{height}, no pinhole")
            return
        self.rec.log(entity, found[0], static=True)

    def depth(self, key: str) -> None:
        rr = self.rr
        entity = self.path("depth", key)
        shape = None
        n = 0
        for i, frame in enumerate(self.ep.depth(key)):
            if i >= len(self.frames):  # more frames than rows (§8: one per row): the extra have no time
                self.notes.append(f"{key}: depth frames beyond the {len(self.frames)} rows not logged")
                break
            shape = frame.shape
            if i % self.stride:
                continue
            self.rec.set_time("frame_index", sequence=int(self.frames[i]))
            if self.wall is not None:
                self.rec.set_time("wall_time", timestamp=float(self.wall[i]))
            if self.hw[i]:
                self.rec.set_time("hardware_ns", duration=np.timedelta64(int(self.hw[i]), "ns"))
            self.rec.log(entity, rr.DepthImage(frame, meter=1000.0))
            n += 1
        self.rec.reset_time()
        self.count(entity, n)
        if shape is not None:
            self._pinhole(entity, key, int(shape[1]), int(shape[0]))

    # -- columns ---------------------------------------------------------------------------------
    def trajectories(self) -> None:
        rr = self.rr
        for col in self.ep.trajectories():
            tr = self.ep.trajectory(col)
            signal = col.removeprefix("observation.")
            base = self.path("world", signal)
            if tr.frame_axes:
                self.rec.log(base, getattr(rr.ViewCoordinates, view_axes(tr.frame_axes)), static=True)
            if not len(tr.points):
                continue
            self.rec.log(base + "/path", rr.LineStrips3D([tr.positions]), static=True)
            pose = base + "/pose"
            stamped = tr.host_ns != 0
            for sel, host in ((stamped, True), (~stamped, False)):
                if not np.any(sel):
                    continue
                idx = np.flatnonzero(sel)
                times = [rr.TimeColumn("frame_index", sequence=self.frames[tr.rows[idx]])]
                if host:
                    times.append(rr.TimeColumn("host_ns", duration=tr.host_ns[idx].astype("timedelta64[ns]")))
                self.rec.send_columns(pose, indexes=times,
                                      columns=_pose_columns(rr, tr.positions[idx], tr.quaternions[idx]))
            self.count(pose, len(tr.points))

    def imu(self) -> None:
        if "observation.imu" not in self.ep.column_names or "imu_ts_ns" not in self.ep.column_names:
            return
        rr = self.rr
        s = self.ep.imu_samples()
        if not len(s):
            return
        times = [rr.TimeColumn("frame_index", sequence=self.frames[s.rows]),
                 rr.TimeColumn("imu_ts_ns", duration=s.ts_ns.astype("timedelta64[ns]"))]
        for name, sl in (("gyro", slice(0, 3)), ("accel", slice(3, 6))):
            entity = self.path("imu", name)
            self.rec.send_columns(entity, indexes=times, columns=rr.Scalars.columns(scalars=s.values[:, sl]))
            self.count(entity, len(s))

    def signals(self) -> None:
        rr = self.rr
        schema = self.ep.schema
        rows = np.arange(len(self.frames))
        for name in self.ep.column_names:
            if not name.startswith("observation.") or name == "observation.imu":
                continue
            kind = signal_kind(name)
            typ = schema.field(name).type
            if kind == "force_matrix":
                self.force_matrix(name)
                continue
            if kind == "hand_pose":
                self.hand(name)
                continue
            if kind in _SKIP_KINDS or name.endswith("_ns"):
                continue
            col = self.ep.columns([name]).column(name)
            try:
                values = list_column_to_numpy(col) if str(typ).startswith("list") else \
                    col.to_numpy(zero_copy_only=False).reshape(-1, 1)
            except ValueError:
                continue  # variable-length rows: not a fixed signal
            if values.dtype.kind not in "fiub" or values.ndim != 2 or values.shape[0] != len(rows):
                continue
            entity = self.path("signals", name.removeprefix("observation."))
            self.rec.send_columns(entity, indexes=self.row_times(rows),
                                  columns=rr.Scalars.columns(scalars=values.astype(np.float64)))
            self.count(entity, len(rows))

    def force_matrix(self, name: str) -> None:
        rr = self.rr
        entity = self.path("force_matrix", name.removeprefix("observation."))
        rows = np.flatnonzero(self.ep.force_matrix_sampled(name))[:: self.stride]
        n = 0
        for start in range(0, len(rows), 32):  # decode 32 rows at a time: bounded memory, vectorised
            chunk = rows[start:start + 32]
            mats = self.ep.force_matrices(name, int(chunk[0]), int(chunk[-1]) + 1)
            for i in chunk:
                self.rec.set_time("frame_index", sequence=int(self.frames[i]))
                if self.wall is not None:
                    self.rec.set_time("wall_time", timestamp=float(self.wall[i]))
                self.rec.log(entity, rr.Tensor(mats[i - chunk[0]], dim_names=["row", "col", "fxyz"]))
                n += 1
        self.rec.reset_time()
        self.count(entity, n)

    def hand(self, name: str) -> None:
        rr = self.rr
        pose = list_column_to_numpy(self.ep.columns([name]).column(name)).reshape(-1, 21, 3)
        have = np.flatnonzero(np.any(pose != 0, axis=(1, 2)))
        if not len(have):
            return
        entity = self.path("hands", name.removeprefix("observation.").removesuffix("_hand_pose"))
        self.rec.send_columns(entity, indexes=self.row_times(have),
                              columns=rr.Points3D.columns(positions=pose[have].reshape(-1, 3)).partition(
                                  [21] * len(have)))
        self.count(entity, len(have))


def _log_episodes(rec: Any, task: Task, indices: Sequence[int], stride: int, progress: Progress | None,
                  events: Mapping[int, Sequence[ReviewEvent]] | None = None) -> tuple[dict[str, int], list[str]]:
    rr = _rr()
    entities: dict[str, int] = {}
    notes: list[str] = []
    for k, n in enumerate(indices):
        lg = _Logger(rr, rec, task.episode(n), stride)
        lg.streams()
        lg.trajectories()
        lg.imu()
        lg.signals()
        if events and events.get(n):  # reviewers' events as text (docs/decisions.md P18)
            fps = task.info.get("fps")
            if isinstance(fps, (int, float)) and not isinstance(fps, bool) and fps > 0:
                lg.count(lg.path("events"), log_events(rr, rec, lg.path("events"), lg.frames, float(fps), events[n]))
            else:
                notes.append(f"episode {n}: info.json has no fps; its {len(events[n])} events are not placed")
        entities.update(lg.entities)
        notes += [f"episode {n}: {m}" for m in lg.notes]
        if progress is not None:
            progress(k + 1, len(indices))
    return entities, notes


def _recording(task: Task) -> Any:
    """A recording stream of application ``egopool-<task name>``: rerun-sdk 0.41 takes only letters, digits,
    ``-``, ``_`` and spaces in an application id and otherwise renames it (``egopool/t`` -> ``egopool-t<hash>``)
    with a warning on the terminal, so anything else in the task's name becomes ``_``."""
    rr = _rr()
    name = re.sub(r"[^A-Za-z0-9_ -]", "_", task.name)
    return rr.RecordingStream(f"egopool-{name}", recording_id=str(task.path.resolve()))


def _save(rec: Any, out: Path, log: Callable[[], Any]) -> Any:
    """Log into ``rec`` saving to a dot-temp beside ``out``, then publish it (no partial .rrd)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_path_for(out)
    try:
        try:
            rec.save(str(temp))
        except RuntimeError as exc:  # rerun reports a file it cannot create as a RuntimeError
            raise StorageError(f"cannot write the Rerun recording: {exc}", path=out,
                               hint="choose a location you can write to") from exc
        result = log()
        rec.flush()
        rec.disconnect()
        os.replace(temp, out)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return result


def _indices(task: Task, indices: Sequence[int] | None) -> list[int]:
    if indices:  # an N given twice is logged once (found by qa12: its entities were logged twice)
        return [task.episode(n).index for n in dict.fromkeys(indices)]
    found = [ep.index for ep in task.episodes()]
    if not found:
        raise EgopoolError("the task has no episode", path=task.path)
    return found


def export_rerun(task: str | Path | ObjectPath, out: str | Path, indices: Sequence[int] | None = None, *,
                 stride: int = 1, progress: Progress | None = None,
                 events: Mapping[int, Sequence[ReviewEvent]] | None = None) -> RerunExport:
    """Write episodes of a task into a Rerun ``.rrd`` file (module docstring: entities and timelines).

    Parameters
    ----------
    task:
        Task directory, or a task in a bucket (``s3://...``).
    out:
        The ``.rrd`` to write (replaced atomically).
    indices:
        Global N (default: every episode).
    stride:
        Log every ``stride``-th depth frame and force matrix (they are stored raw in the .rrd);
        everything else is logged whole.
    progress:
        Called with ``(episodes done, total)``.
    events:
        ``{N: reviewers' events}`` (``--events-from``), logged as text under ``episode_N/events``
        (:mod:`.rerun_events`).

    Raises
    ------
    EpisodeNotFoundError
        An N that is not in the task.
    EgopoolError
        ``stride < 1``; rerun-sdk missing (``pip install 'egopool[interop]'``) or a release other
        than 0.26 to 0.41; ``out`` is in the task directory.
    FormatError
        An episode's meta row describes a stream whose file is missing.
    StorageError
        ``out`` cannot be written (a directory, under a file, no permission).
    """
    if stride < 1:
        raise EgopoolError(f"stride must be >= 1, got {stride}")
    t = open_task(task)
    chosen = _indices(t, indices)
    out = check_output_file(out, t.path, what="the Rerun recording", example=f"{t.path.name}.rrd")
    rec = _recording(t)
    with StorageError.guard(out, action="cannot write the Rerun recording"):
        entities, notes = _save(rec, out, lambda: _log_episodes(rec, t, chosen, stride, progress, events))
    return RerunExport(out, tuple(chosen), entities, tuple(notes + _old_format_note(out)))


def view_episode(task: str | Path | ObjectPath, index: int, *, out: str | Path | None = None,
                 spawn: bool | None = None, stride: int = 1) -> RerunExport:
    """Show episode N in the Rerun viewer when a display exists, else write an ``.rrd`` and return where.

    Parameters
    ----------
    spawn:
        Force (True) or forbid (False) spawning the viewer; default :func:`has_display`.
    out:
        The ``.rrd`` written without a viewer (default ``<task>_N<N>.rrd`` in the current directory).

    Raises
    ------
    EpisodeNotFoundError
        No episode N.
    EgopoolError, FormatError, StorageError
        As :func:`export_rerun` (a bad ``out``, a stream file the meta row describes missing);
        with ``spawn``, no display (Linux without ``DISPLAY``/``WAYLAND_DISPLAY``), or a viewer
        that cannot be started or does not take the recording.
    """
    t = open_task(task)
    n = t.episode(index).index
    if spawn is None:
        spawn = has_display()
    elif spawn and not has_display():
        raise EgopoolError("--spawn: no display here (DISPLAY and WAYLAND_DISPLAY are unset), the Rerun viewer "
                           "cannot open",
                           hint="leave out --spawn: `egopool view TASK N` then writes an .rrd to open where a display "
                                "exists")
    if not spawn:
        dest = Path(out) if out is not None else Path(f"{t.path.name}_N{n}.rrd")
        return export_rerun(t.path, dest, [n], stride=stride)
    rec = _recording(t)
    _spawn_viewer(rec)
    entities, notes = _log_episodes(rec, t, [n], stride, None)
    try:
        rec.flush()
    except RuntimeError as exc:  # the viewer died (no display) or never listened
        raise EgopoolError(f"the Rerun viewer did not take the recording: {str(exc).splitlines()[0]}",
                           hint=_NO_VIEWER_HINT) from None
    return RerunExport(None, (n,), entities, tuple(notes))


_NO_VIEWER_HINT = "write an .rrd instead (`egopool view TASK N --no-spawn`) and open it where a display exists"


def _spawn_viewer(rec: Any) -> None:
    """Start the Rerun viewer for ``rec``. rerun-sdk looks for its ``rerun`` executable on PATH
    only; the one installed beside this Python (a venv that is not activated) is used too."""
    here = Path(sys.executable).parent
    path = os.environ.get("PATH", "")
    if shutil.which("rerun") is None and shutil.which("rerun", path=str(here)) is not None:
        os.environ["PATH"] = os.pathsep.join([str(here), path]) if path else str(here)
    try:
        rec.spawn()
    except RuntimeError as exc:
        raise EgopoolError(f"cannot start the Rerun viewer: {str(exc).splitlines()[0]}",
                           hint=_NO_VIEWER_HINT) from None
    finally:
        os.environ["PATH"] = path
