"""``egopool import aria RECORDING.vrs [--mps DIR] --task NAME``: Project Aria (Gen1) glasses -> one episode.

Read with Meta's ``projectaria-tools`` (the ``interop`` extra). Everything is on the glasses'
device clock (ns), which becomes ``hardware_ns``.

* Rows: one per RGB frame (``aria_rgb``; the task fps is the RGB stream's nominal rate). Row i
  owns ``[t_i, t_{i+1})``; the first row also owns one frame period before it and the last one
  after it, so sensors that start a few ms before the camera lose nothing (decisions.md I4).
* SLAM cameras -> ``aria_slam_left`` / ``aria_slam_right`` (gray, one frame a row: the last one
  captured before the row's window ends, repeated until the next; its own capture stamp in
  ``observation.<slot>_frame_ns``).
* IMUs: ``imu-right`` (1 kHz) -> ``observation.imu`` + ``imu_ts_ns``; ``imu-left`` (800 Hz) ->
  ``observation.imu_left`` + ``observation.imu_left_ts_ns``; samples ``[gyro xyz rad/s, accel xyz
  m/s²]`` with their own device stamps, attached by window (file_format.md §7.2, §7.3).
* MPS (``--mps``): the closed-loop trajectory -> ``observation.ego_slam_trajectory`` (+ ``_ns``),
  re-expressed in the gravity-aligned frame whose +X is the device's initial horizontal heading
  (``forward_left_up``; the rotation about gravity is recorded in the feature); hand tracking ->
  ``observation.{left,right}_hand_pose`` in MediaPipe joint order (device frame) + ``_ns``; eye
  gaze -> ``observation.eye_gaze`` ``[yaw, pitch, yaw_low, yaw_high, pitch_low, pitch_high, depth]``
  (rad, CPF frame; m) + ``_ns``. A sample outside every row window is counted, not stored.
* Without a VRS, ``--mps`` alone builds rows on a ``--fps`` grid over the trajectory's span
  (``hardware_ns`` = the grid, stated as synthesised).
"""

from __future__ import annotations

import csv
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EgopoolError, FormatError
from ..meta.drop_stats import missing_key, rejected_key
from ..schema import ColumnSpec, imu_columns, slam_trajectory_columns, vector_column
from ..write.task_writer import StreamSpec
from ..importers._common import (ImportResult, ImportSource, Progress, camera_calibration, check_fps,
                                 task_writer, window_offsets)
from .._native_output import native_output
from ._releases import ARIA

__all__ = ["ARIA_TO_MEDIAPIPE", "AriaRecording", "import_aria", "read_aria"]

#: MediaPipe joint j <- Aria MPS landmark ARIA_TO_MEDIAPIPE[j]; -1: Aria has no thumb CMC (NaN).
#: Aria: 0-4 fingertips, 5 wrist, 6-7 thumb intermediate/distal, 8-19 proximal/intermediate/distal
#: of index..pinky, 20 palm centre (not kept).
ARIA_TO_MEDIAPIPE = (5, -1, 6, 7, 0, 8, 9, 10, 1, 11, 12, 13, 2, 14, 15, 16, 3, 17, 18, 19, 4)
_SLOTS = {"camera-rgb": "aria_rgb", "camera-slam-left": "aria_slam_left", "camera-slam-right": "aria_slam_right"}
_DEVICE_AXES = {"+X": "down", "+Y": "left", "+Z": "forward"}   # Gen1 device frame = left SLAM camera, worn upright
_CPF_AXES = {"+X": "left", "+Y": "up", "+Z": "forward"}         # central pupil frame (Aria docs)
_GAZE_NAMES = ["yaw", "pitch", "yaw_low", "yaw_high", "pitch_low", "pitch_high", "depth"]
#: The generalized_eye_gaze.csv column of each _GAZE_NAMES field.
_GAZE_CSV = ["yaw_rads_cpf", "pitch_rads_cpf", "yaw_low_rads_cpf", "yaw_high_rads_cpf", "pitch_low_rads_cpf",
             "pitch_high_rads_cpf", "depth_m"]


def _pat() -> Any:
    """projectaria-tools' readers, once its release is one egopool reads with (``_releases.ARIA``)."""
    ARIA.require()
    from projectaria_tools.core import data_provider, mps
    from projectaria_tools.core.sensor_data import TimeDomain

    return data_provider, mps, TimeDomain


@dataclass
class _Mps:
    traj_ns: np.ndarray          # (K,) int64 device ns
    traj: np.ndarray             # (K, 8) float64 t, xyz, qxyzw in forward_left_up
    yaw: float
    hands: dict[str, tuple[np.ndarray, np.ndarray]]   # side -> ((M,) ns, (M, 21, 3) mediapipe order)
    gaze_ns: np.ndarray
    gaze: np.ndarray             # (G, 7), NaN where the MPS field was empty
    utc_start: float | None      # Unix s of the first pose (MPS utc_timestamp), if any
    blank_poses: int = 0         # trajectory rows with an empty pose field (left out)


@dataclass(frozen=True)
class AriaRecording:
    """What :func:`read_aria` found (counts as projectaria-tools reports them)."""

    vrs: Path | None
    frames: dict[str, int]
    imu_samples: dict[str, int]
    mps: dict[str, int]


def _quat_xyzw(m: np.ndarray) -> np.ndarray:
    from ..importers._common import rotation_to_quaternion

    return rotation_to_quaternion(m)


#: What VRS logs when it reads a file only in part (a truncated copy).
_VRS_DAMAGE = re.compile(r"records are beyond the end of the file|Index incomplete|record #\d+ truncated")


_log = logging.getLogger("egopool.interop.aria")


def _native_log():
    """Collect what projectaria-tools' C++ code prints on file descriptors 1 and 2 (its ``Loaded #...``
    counts on stdout, its logger and CSV parse errors on stderr) instead of showing it.

    The lines are judged by the caller (truncated VRS, unparsable MPS file), so a failure stays one
    egopool line, and stdout stays egopool's own (``--json`` prints only JSON there). Each line is
    also logged at INFO on the ``egopool.interop.aria`` logger (``import aria --verbose`` shows them).
    """
    return native_output(_log, prefix="projectaria-tools: ")


def _blank_cells(path: Path, names: dict[str, str]) -> dict[str, np.ndarray]:
    """Which cells of an MPS CSV are empty, per field: ``{field: (rows,) bool}`` for each CSV column
    ``names[field]`` the file has (read with pyarrow's CSV reader; an empty cell is null).

    projectaria-tools reads an empty cell as 0.0, which a reader cannot tell from a real zero: the
    caller stores those values as missing instead (multi_device_storage.md §5.5)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        header = next(csv.reader(fh), [])
    have = {f: c for f, c in names.items() if c in header}
    if not have:
        return {}
    try:
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            include_columns=list(have.values()), column_types={c: pa.float64() for c in have.values()},
            null_values=[""], strings_can_be_null=True))
    except pa.ArrowInvalid as exc:
        raise FormatError(f"cannot read the MPS CSV's numbers: {exc}", path=path,
                          hint="the file is not an MPS output; pass the MPS folder as MPS wrote it") from None
    return {f: table.column(c).is_null().to_numpy(zero_copy_only=False) for f, c in have.items()}


def _read_csv(path: Path, reader: Callable[[str], Any], what: str) -> list[Any]:
    """Every row of an MPS CSV through projectaria-tools, or a FormatError quoting its complaint.

    projectaria-tools returns what it parsed up to a bad line (or nothing) and prints why; a
    result with fewer entries than the file's data rows is refused (a truncated or foreign file).
    """
    with _native_log() as log:
        try:
            rows = list(reader(str(path)))
        except RuntimeError as exc:
            raise FormatError(f"projectaria-tools cannot read the {what}: {exc}", path=path,
                              hint="pass the MPS output folder as MPS wrote it") from None
    expected = _csv_rows(path)
    if len(rows) != expected or not rows:
        why = next((ln for ln in reversed(log) if "Failed to parse" in ln or "line" in ln), None)
        got = f"{len(rows)} of its {expected} rows" if expected else "no rows"
        raise FormatError(f"projectaria-tools reads {got} from the {what}" + (f": {why}" if why else ""), path=path,
                          hint="the file is truncated or not an MPS output; pass the MPS folder as MPS wrote it")
    return rows


def _read_mps(directory: Path) -> _Mps:
    _, mps, _ = _pat()
    traj_path = directory / "trajectory" / "closed_loop_trajectory.csv"
    if not traj_path.is_file():
        raise FormatError("no trajectory/closed_loop_trajectory.csv", path=directory,
                          hint="pass the MPS output folder (trajectory/, hand_tracking/, eye_gaze/)")
    poses = _read_csv(traj_path, mps.read_closed_loop_trajectory, "closed-loop trajectory")
    blank = _blank_cells(traj_path, {k: k for k in ("tracking_timestamp_us", *(f"{a}_world_device" for a in (
        "tx", "ty", "tz", "qx", "qy", "qz", "qw")))})
    unusable = np.logical_or.reduce(list(blank.values())) if blank else np.zeros(len(poses), bool)
    if unusable.all():
        raise FormatError("every pose of the closed-loop trajectory has an empty time or pose field", path=traj_path,
                          hint="pass the MPS output folder as MPS wrote it")
    poses = [p for p, bad in zip(poses, unusable, strict=True) if not bad]  # no pose is better than a made-up 0
    ns = np.array([round(p.tracking_timestamp.total_seconds() * 1e6) * 1000 for p in poses], dtype=np.int64)
    mats = np.stack([np.asarray(p.transform_world_device.to_matrix()) for p in poses])
    gravity = np.asarray(poses[0].gravity_world, dtype=np.float64).reshape(3)
    if not np.allclose(gravity / np.linalg.norm(gravity), [0, 0, -1], atol=1e-3):
        raise FormatError(f"gravity_world is {gravity.tolist()}, not along -Z", path=traj_path,
                          hint="the import relies on MPS's gravity-aligned world (+Z up)")
    fwd = mats[0, :3, 2]                                  # device +Z (forward) in the world
    yaw = math.atan2(fwd[1], fwd[0])
    c, s = math.cos(-yaw), math.sin(-yaw)
    rz = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    pos = mats[:, :3, 3] @ rz.T
    rot = rz @ mats[:, :3, :3]
    traj = np.concatenate([(ns / 1e9)[:, None], pos, _quat_xyzw(rot)], axis=1)
    hands: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    hpath = directory / "hand_tracking" / "hand_tracking_results_v2.csv"
    if hpath.exists():
        results = _read_csv(hpath, mps.hand_tracking.read_hand_tracking_results, "hand tracking results")
        hblank = _blank_cells(hpath, {"t": "tracking_timestamp_us", **{
            f"{side}{k}{a}": f"t{a}_{side}_landmark_{k}_device" for side in ("left", "right") for k in range(21)
            for a in "xyz"}})
        no_time = hblank.pop("t", np.zeros(len(results), bool))
        for side in ("left", "right"):
            stamps, joints = [], []
            for i, r in enumerate(results):
                hand = getattr(r, f"{side}_hand")
                if hand is None or hand.confidence < 0 or no_time[i]:
                    continue
                lm = np.asarray([np.asarray(v, dtype=np.float64).reshape(3) for v in hand.landmark_positions_device])
                for k in range(len(lm)):
                    for j, axis in enumerate("xyz"):
                        if hblank.get(f"{side}{k}{axis}", no_time)[i]:
                            lm[k, j] = np.nan  # an empty MPS field is missing, not 0 m (§5.5)
                mp = np.full((21, 3), np.nan)
                for j, a in enumerate(ARIA_TO_MEDIAPIPE):
                    if a >= 0:
                        mp[j] = lm[a]
                stamps.append(round(r.tracking_timestamp.total_seconds() * 1e6) * 1000)
                joints.append(mp)
            hands[side] = (np.asarray(stamps, dtype=np.int64), np.asarray(joints).reshape(-1, 21, 3))
    gaze_ns, gaze = np.zeros(0, np.int64), np.zeros((0, 7))
    gpath = directory / "eye_gaze" / "generalized_eye_gaze.csv"
    if gpath.exists():
        g = _read_csv(gpath, mps.read_eyegaze, "eye gaze")
        gblank = _blank_cells(gpath, {"t": "tracking_timestamp_us", **dict(zip(_GAZE_NAMES, _GAZE_CSV, strict=True))})
        keep = ~gblank.pop("t", np.zeros(len(g), bool))
        gaze_ns = np.array([round(e.tracking_timestamp.total_seconds() * 1e6) * 1000 for e in g], dtype=np.int64)
        gaze = np.array([[e.yaw, e.pitch, e.yaw_low, e.yaw_high, e.pitch_low, e.pitch_high, e.depth] for e in g],
                        dtype=np.float64).reshape(-1, 7)
        for j, name in enumerate(_GAZE_NAMES):
            if name in gblank:
                gaze[gblank[name], j] = np.nan  # an empty MPS field is missing, not 0 (§5.5)
        gaze_ns, gaze = gaze_ns[keep], gaze[keep]
    utc = poses[0].utc_timestamp.total_seconds() if getattr(poses[0], "utc_timestamp", None) else 0.0
    return _Mps(ns, traj, yaw, hands, gaze_ns, gaze, utc if utc > 0 else None, int(unusable.sum()))


def _fisheye_calibration(dc: Any, label: str, name: str, fps: float) -> dict[str, Any]:
    cam = dc.get_camera_calib(label)
    params = [float(v) for v in cam.get_projection_params()]
    w, h = (int(v) for v in cam.get_image_size())
    # Fisheye624: [f, cx, cy, k0..k5, p0, p1, s0..s3] (one focal length)
    return camera_calibration(name, [w, h], fps, [params[0], params[0], params[1], params[2]], params[3:],
                              type_="aria_fisheye_camera", distortion_model=cam.get_model_name().name
                              if hasattr(cam.get_model_name(), "name") else str(cam.get_model_name()),
                              projection_params=params, sensor=label,
                              T_device_camera=np.asarray(cam.get_transform_device_camera().to_matrix()).tolist())


def read_aria(vrs: str | Path | None, mps_dir: str | Path | None = None) -> AriaRecording:
    """Counts of a recording as projectaria-tools reports them (frames, IMU samples, MPS records)."""
    data_provider, mps, _ = _pat()
    frames, imu = {}, {}
    if vrs is not None:
        p = data_provider.create_vrs_data_provider(str(vrs))
        for label in _SLOTS:
            frames[label] = int(p.get_num_data(p.get_stream_id_from_label(label)))
        for label in ("imu-right", "imu-left"):
            imu[label] = int(p.get_num_data(p.get_stream_id_from_label(label)))
    counts = {}
    if mps_dir is not None:
        m = _read_mps(Path(mps_dir))
        counts = {"trajectory": len(m.traj_ns), "gaze": len(m.gaze_ns),
                  **{f"{s}_hand": len(v[0]) for s, v in m.hands.items()}}
    return AriaRecording(Path(vrs) if vrs else None, frames, imu, counts)


def _edges(stamps: np.ndarray, period_ns: int) -> np.ndarray:
    """Row window edges: ``[t_0 - period, t_1, ..., t_last + period]`` (first/last rows padded)."""
    edges = np.concatenate([stamps, [stamps[-1] + period_ns]]).astype(np.int64)
    edges[0] = stamps[0] - period_ns
    return edges


def _latest(sample_ns: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per row, the index of the last sample in its window, or -1."""
    offs = window_offsets(sample_ns, edges)
    return np.where(offs[1:] > offs[:-1], offs[1:] - 1, -1)


def import_aria(vrs: str | Path | None, root: str | Path, *, task: str, mps_dir: str | Path | None = None,
                fps: float = 30.0, progress: Progress | None = None, allow_duplicate: bool = False) -> ImportResult:
    """Import an Aria recording (VRS) and/or its MPS output as one episode of ``root/task``.

    Parameters
    ----------
    vrs:
        The ``.vrs`` recording, or None to import the MPS output alone (needs ``mps_dir``).
    root, task:
        Recordings root and task name (the task is created or appended to).
    mps_dir:
        MPS output folder (``trajectory/closed_loop_trajectory.csv``, ``hand_tracking/``, ``eye_gaze/``).
    fps:
        Row rate without a VRS (with one, the RGB camera's nominal rate is used).
    progress:
        Called with ``(rows done, rows total)``.
    allow_duplicate:
        Import even when the task already holds an episode imported from the same content
        (otherwise refused, naming that N; docs/decisions.md D6).

    Raises
    ------
    EgopoolError
        Neither a VRS nor an MPS folder; projectaria-tools missing, or a release other than 1.7.1
        to 2.3 (``_releases.ARIA``).
    FormatError
        A file projectaria-tools cannot read, an MPS folder without a trajectory, a world frame
        that is not gravity-aligned.
    """
    if vrs is None and mps_dir is None:
        raise EgopoolError("nothing to import", hint="pass RECORDING.vrs and/or --mps DIR")
    data_provider, _, time_domain = _pat()
    notes: list[str] = []
    synth: list[str] = []
    m = _read_mps(Path(mps_dir)) if mps_dir is not None else None
    provider = None
    if vrs is not None:
        vrs = Path(vrs)
        if not vrs.is_file():
            raise FormatError("no such VRS file", path=vrs)
        provider = _open_vrs(data_provider, vrs)
        absent = [label for label in (*_SLOTS, "imu-right", "imu-left")
                  if provider.get_stream_id_from_label(label) is None]
        if absent:
            raise FormatError(f"the recording has no {', '.join(absent)} stream (an Aria Gen1 recording has "
                              f"{', '.join((*_SLOTS, 'imu-right', 'imu-left'))})", path=vrs,
                              hint="record with a profile that keeps the RGB and SLAM cameras and both IMUs")
        rgb_id = provider.get_stream_id_from_label("camera-rgb")
        fps = float(provider.get_nominal_rate_hz(rgb_id))
        n = int(provider.get_num_data(rgb_id))
        stamps = np.array([provider.get_image_data_by_index(rgb_id, i)[1].capture_timestamp_ns for i in range(n)],
                          dtype=np.int64)
    else:
        assert m is not None
        fps = check_fps(fps)
        span = int(m.traj_ns[-1] - m.traj_ns[0])
        n = int(span * fps // 1_000_000_000) + 1
        stamps = m.traj_ns[0] + np.round(np.arange(n) * 1e9 / fps).astype(np.int64)
        synth.append(f"hardware_ns: a {fps:g} fps grid over the MPS trajectory's span (no VRS, no camera frames)")
    period = int(round(1e9 / fps))
    edges = _edges(stamps, period)
    if m is not None and provider is not None and (m.traj_ns[-1] < edges[0] or m.traj_ns[0] >= edges[-1]):
        raise FormatError(f"the MPS trajectory covers device time {m.traj_ns[0] / 1e9:.3f}-"
                          f"{m.traj_ns[-1] / 1e9:.3f} s, "
                          f"the recording {stamps[0] / 1e9:.3f}-{stamps[-1] / 1e9:.3f} s: it was not computed from "
                          "this recording", path=Path(mps_dir or "."),
                          hint="pass the recording the MPS output belongs to, or import the MPS folder alone")
    columns: list[ColumnSpec] = []
    streams: list[StreamSpec] = []
    calibration: dict[str, Any] = {}
    per_row: dict[str, Any] = {}
    images: dict[str, Any] = {}
    counts: dict[str, int] = {"rows": n}
    missing: dict[str, tuple[int, str]] = {}  # column -> (values stored as missing / left out, note)
    if provider is not None:
        dc = provider.get_device_calibration()
        for label, slot in _SLOTS.items():
            sid = provider.get_stream_id_from_label(label)
            k = int(provider.get_num_data(sid))
            cam_ns = np.array([provider.get_image_data_by_index(sid, i)[1].capture_timestamp_ns for i in range(k)],
                              dtype=np.int64)
            cfg = provider.get_image_configuration(sid)
            streams.append(StreamSpec(slot, "rgb", int(cfg.image_width), int(cfg.image_height)))
            if label == "camera-rgb":
                pick = np.arange(n)
            else:
                pick = np.searchsorted(cam_ns, edges[1:], side="left") - 1
                early = int(np.count_nonzero(pick < 0))
                if early:
                    notes.append(f"{slot}: its first frame is also shown on the {early} row(s) before it")
                pick = np.clip(pick, 0, k - 1)
                col = ColumnSpec(f"observation.{slot}_frame_ns", "scalar", "int64", None,
                                 {"dtype": "int64", "shape": [1], "encoding": "aria_device_ns", "source_slot": slot},
                                 kind="ns", sparse=True)
                columns.append(col)
                per_row[col.name] = ("value", cam_ns[pick])
                skipped = k - len(np.unique(pick))
                if skipped:
                    notes.append(f"{slot}: {skipped} of {k} frames fall in a row that shows a later one")
            images[slot] = (sid, pick)
            counts[f"{slot}_frames"] = len(np.unique(pick))
            name = "head_stereo" if label == "camera-slam-left" else f"{slot}_calibration"
            calibration[name] = _fisheye_calibration(dc, label, name, float(provider.get_nominal_rate_hz(sid)))
        for label, prefix in (("imu-right", ""), ("imu-left", "_left")):
            sid = provider.get_stream_id_from_label(label)
            k = int(provider.get_num_data(sid))
            data = [provider.get_imu_data_by_index(sid, i) for i in range(k)]
            ts = np.array([d.capture_timestamp_ns for d in data], dtype=np.int64)
            vals = np.array([[*d.gyro_radsec, *d.accel_msec2] for d in data], dtype=np.float32).reshape(-1, 6)
            order = np.argsort(ts, kind="stable")
            ts, vals = ts[order], vals[order]
            imu, imu_ts = imu_columns()
            if prefix:
                imu = ColumnSpec(f"observation.imu{prefix}", "list_list", "float32", 6,
                                 {"dtype": "float32", "shape": [6], "sensor": label}, kind="imu", sparse=True)
                imu_ts = ColumnSpec(f"observation.imu{prefix}_ts_ns", "list", "int64", None,
                                    {"dtype": "int64", "shape": [1], "encoding": f"flat_parallel_to_{imu.name}",
                                     "clock": "aria_device_ns"}, kind="imu_ts", sparse=True, lockstep=(imu.name, 1))
            offs = window_offsets(ts, edges)
            columns += [imu, imu_ts]
            per_row[imu.name] = ("window", offs, vals)
            per_row[imu_ts.name] = ("window", offs, ts)
            counts[f"{label}_samples"] = int(offs[-1] - offs[0])
            if offs[-1] - offs[0] != k:
                notes.append(f"{label}: {k - int(offs[-1] - offs[0])} of {k} samples outside every row, not stored")
    if m is not None:
        traj, traj_ns = slam_trajectory_columns(
            "ego_", frame="forward_left_up", time={"t": "sensor_s", "clock": "aria_device", "epoch": "device_boot"},
            owner={"role": "ego", "device": "project_aria_gen1"}, source_slot="aria_slam_left")
        traj = ColumnSpec(traj.name, traj.storage, traj.dtype, traj.length, {
            **dict(traj.feature or {}), "source": "aria_mps closed_loop_trajectory T_world_device",
            "world_alignment": {"from": "MPS world (gravity along -Z)", "yaw_rad": m.yaw,
                                "applied": "p = Rz(-yaw) p_world, R = Rz(-yaw) R_world_device: +X = the device's "
                                           "initial +Z (forward) heading, +Z = up"}},
            kind=traj.kind, sparse=True)
        traj_ns = ColumnSpec(traj_ns.name, traj_ns.storage, traj_ns.dtype, None,
                             {**dict(traj_ns.feature or {}), "clock": "aria_device_ns"}, kind=traj_ns.kind,
                             sparse=True, lockstep=traj_ns.lockstep)
        if m.blank_poses:
            counts["trajectory_blank_poses"] = m.blank_poses
            missing[traj.name] = (m.blank_poses, f"MPS trajectory: {m.blank_poses} pose(s) with an empty time or pose "
                                                 "field left out (a pose cannot be partly missing)")
        offs = window_offsets(m.traj_ns, edges)
        columns += [traj, traj_ns]
        per_row[traj.name] = ("window", offs, m.traj)
        per_row[traj_ns.name] = ("window", offs, m.traj_ns)
        stored = int(offs[-1] - offs[0])
        counts["trajectory_points"] = stored
        if stored != len(m.traj_ns):
            notes.append(f"MPS trajectory: {len(m.traj_ns) - stored} of {len(m.traj_ns)} poses outside the "
                         "recording's rows (not the same recording, or longer), not stored")
        for side, (hns, joints) in m.hands.items():
            col = vector_column(f"observation.{side}_hand_pose", [21, 3], sparse=False, kind="hand_pose",
                                joint_order="mediapipe", frame="aria_device", frame_axes=dict(_DEVICE_AXES),
                                source="aria_mps hand_tracking_results_v2 landmarks (m, device frame); joint 1 "
                                       "(thumb CMC) has no Aria landmark: NaN; Aria's palm centre is not kept",
                                missing_value="NaN: joint 1 always, and any coordinate the MPS CSV left empty")
            ns_col = ColumnSpec(f"{col.name}_ns", "scalar", "int64", None,
                                {"dtype": "int64", "shape": [1], "encoding": "aria_device_ns", "missing_sentinel": 0},
                                kind="ns", sparse=True)
            pick = _latest(hns, edges) if len(hns) else np.full(n, -1)
            columns += [col, ns_col]
            per_row[col.name] = ("pick", pick, joints)
            per_row[ns_col.name] = ("value", np.where(pick >= 0, hns[np.maximum(pick, 0)] if len(hns) else 0, 0))
            counts[f"{side}_hand_samples"] = int(np.count_nonzero(pick >= 0))
            stored_joints = joints[pick[pick >= 0]] if len(hns) else np.zeros((0, 21, 3))
            empty = int(np.isnan(np.delete(stored_joints, 1, axis=1)).sum())  # joint 1 has no Aria landmark at all
            if empty:
                counts[f"{side}_hand_missing_values"] = empty
                missing[col.name] = (empty, f"MPS {side} hand: {empty} landmark coordinate(s) of the stored samples "
                                            "were empty in the CSV: stored as NaN (missing), not 0")
            if counts[f"{side}_hand_samples"] != len(hns):
                notes.append(f"MPS {side} hand: {len(hns) - counts[f'{side}_hand_samples']} of {len(hns)} tracked "
                             "samples outside the rows (or several in one row: the last is kept), not stored")
        if len(m.gaze_ns):
            gaze = vector_column("observation.eye_gaze", [7], names=_GAZE_NAMES, units=["rad"] * 6 + ["m"],
                                 frame="aria_cpf", frame_axes=dict(_CPF_AXES),
                                 source="aria_mps generalized_eye_gaze (yaw/pitch in the central pupil frame)",
                                 missing_value="NaN: the MPS field was empty (MPS leaves depth_m empty without a "
                                               "vergence estimate)")
            gns = ColumnSpec("observation.eye_gaze_ns", "scalar", "int64", None,
                             {"dtype": "int64", "shape": [1], "encoding": "aria_device_ns", "missing_sentinel": 0},
                             kind="ns", sparse=True)
            pick = _latest(m.gaze_ns, edges)
            columns += [gaze, gns]
            per_row[gaze.name] = ("pick", pick, m.gaze)
            per_row[gns.name] = ("value", np.where(pick >= 0, m.gaze_ns[np.maximum(pick, 0)], 0))
            counts["gaze_samples"] = int(np.count_nonzero(pick >= 0))
            stored_gaze = m.gaze[pick[pick >= 0]]
            empty_fields = {f: int(np.isnan(stored_gaze[:, j]).sum()) for j, f in enumerate(_GAZE_NAMES)}
            empty_fields = {f: k for f, k in empty_fields.items() if k}
            for f, k in empty_fields.items():
                counts[f"gaze_{f}_missing"] = k
            if empty_fields:
                what = ", ".join(f"{f} in {k}" for f, k in empty_fields.items())
                missing[gaze.name] = (sum(empty_fields.values()),
                                      f"MPS eye gaze: empty fields in the {len(stored_gaze)} stored "
                                      f"samples ({what}): stored as NaN (missing), not 0")
            if counts["gaze_samples"] != len(m.gaze_ns):
                notes.append(f"MPS eye gaze: {len(m.gaze_ns) - counts['gaze_samples']} of {len(m.gaze_ns)} samples "
                             "outside the rows (or several in one row: the last is kept), not stored")
    notes += [note for _, note in missing.values()]
    name = vrs.stem if vrs is not None else Path(mps_dir or "aria").name
    serial = ""
    if provider is not None:
        try:
            serial = str(provider.get_metadata().device_serial)
        except Exception:  # noqa: BLE001 - metadata is optional in a VRS
            serial = ""
    device = {"key": f"aria:{serial or name}", "kind": "aria_gen1", "name": "Project Aria",
              "slots": [s.image_key for s in streams]}
    created_at = None
    if provider is not None:
        start = int(getattr(provider.get_metadata(), "start_time_epoch_sec", 0) or 0)
        if start > 0:
            created_at = float(start)
            synth.append("created_at: the VRS metadata's start_time_epoch_sec (1 s resolution); wall_time = "
                         "created_at + timestamp (the device clock is not a wall clock)")
        else:
            synth.append("created_at / wall_time: the import time (the VRS has no start time)")
    elif m is not None and m.utc_start is not None:
        created_at = m.utc_start
        synth.append("created_at: the first trajectory pose's utc_timestamp (MPS)")
    else:
        synth.append("created_at / wall_time: the import time (no wall clock in the input)")
    source = ImportSource(tuple(Path(p) for p in (vrs, mps_dir) if p is not None),
                          " + ".join(str(p) for p in (vrs, mps_dir) if p is not None))
    with task_writer(root, task, fps, source=source, allow_duplicate=allow_duplicate) as tw:
        with tw.begin_episode(columns, streams, devices=[device] if streams else (),
                              device_names={s.image_key: "Project Aria" for s in streams},
                              calibration=calibration or None, created_at=created_at) as ep:
            for i in range(n):
                row: dict[str, Any] = {}
                for col in columns:
                    how, *data = per_row[col.name]
                    if how == "window":   # every sample stamped in the row's window
                        offs, arr = data
                        row[col.name] = arr[offs[i]:offs[i + 1]]
                    elif how == "pick":   # the row's latest sample, if any (else "no sample", §5.5)
                        pick, arr = data
                        if pick[i] >= 0:
                            row[col.name] = arr[pick[i]]
                    else:
                        row[col.name] = data[0][i]
                frames = {}
                for slot, (sid, pick) in images.items():
                    assert provider is not None  # images come from the VRS
                    if i == 0 or pick[i] != pick[i - 1]:
                        frames[slot] = provider.get_image_data_by_index(sid, int(pick[i]))[0].to_numpy_array()
                ep.add_frame(row, timestamp=float(stamps[i] - stamps[0]) / 1e9, hardware_ns=int(stamps[i]),
                             images=frames)
                if progress is not None:
                    progress(i + 1, n)
            for col_name, (k, note) in missing.items():
                ep.count(missing_key(col_name) if col_name != "observation.ego_slam_trajectory"
                         else rejected_key(col_name), k, note)
            result = ep.finish()
    return ImportResult(tw.task_dir, (result,), tuple(synth), tuple(notes), counts)


def _open_vrs(data_provider: Any, vrs: Path) -> Any:
    """projectaria-tools' data provider of ``vrs``; a file it cannot open, or one it reads only in
    part (records beyond the end of a truncated file are dropped), is refused."""
    with _native_log() as log:
        try:
            provider = data_provider.create_vrs_data_provider(str(vrs))
        except RuntimeError as exc:
            provider = None
            log.append(str(exc))  # the captured lines follow it when the block ends
    damage = next((ln for ln in log if _VRS_DAMAGE.search(ln)), None)
    if provider is None or damage is not None:
        why = damage or next((ln for ln in reversed(log) if "ERROR" in ln), None) or (log[0] if log else "")
        why = re.sub(r"^(\[[^\]]*\])+:?\s*", "", why)
        raise FormatError("projectaria-tools cannot read it as a whole Aria recording" + (f": {why}" if why else ""),
                          path=vrs, hint="it is truncated or damaged: copy the whole .vrs again"
                          if damage else "pass an Aria (Gen1) .vrs recording")
    return provider


def _csv_rows(path: Path) -> int:
    """Data rows of a CSV file (header and blank lines excluded)."""
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        return max(0, sum(1 for row in csv.reader(fh) if row) - 1)


def mps_csv_rows(directory: str | Path) -> dict[str, int]:
    """Data rows of the MPS CSV files (header excluded), read without projectaria-tools."""
    d = Path(directory)
    out = {}
    for key, rel in (("trajectory", "trajectory/closed_loop_trajectory.csv"),
                     ("hands", "hand_tracking/hand_tracking_results_v2.csv"),
                     ("gaze", "eye_gaze/generalized_eye_gaze.csv")):
        if (d / rel).exists():
            out[key] = _csv_rows(d / rel)
    return out

