"""The main job: real public recordings in, a valid ``pooled_episodes_v1`` task out.

``run_demo(DIR)`` records the recordings bundled in ``egopool/samples`` as ONE
multi-device rig split into several episodes, validates the task and returns a
:class:`DemoSummary`. The rig (multi_device_storage.md §4, §6.4):

========================  ==========================================  ==============================
device (kind)             source                                      where it lands
========================  ==========================================  ==============================
``uvc`` hand camera       dex-retargeting hand video, 621 frames      ``head_left_rgb`` video,
                          @30 fps + MediaPipe 21x3 joints (m)         ``status.head_left_rgb``,
                                                                      ``observation.right_hand_pose``
``d435`` RGB-D (frozen)   one TUM RGB-D frame (held for every row:    ``d435_rgb`` / ``d435_depth``
                          validate warns "stream … is frozen")
                          + TUM fr1/xyz ground truth (~100 Hz)        ``observation.ego_slam_trajectory(_ns)``
``imu``                   x-io IMU CSV (~100 Hz, deg/s, g)            ``observation.imu`` + ``imu_ts_ns``
========================  ==========================================  ==============================

Time: the sources were recorded separately. They are placed on one rig clock, the TUM
recording's clock (ns): row ``i`` (30 fps) owns ``[t0 + i/30 s, t0 + (i+1)/30 s)`` where
``t0`` is the first TUM pose; ``hardware_ns`` is that grid, trajectory ``_ns`` are the TUM
stamps themselves, and IMU stamps are the CSV's sample times shifted so that IMU time 0
is ``t0``. Each row gets the poses and IMU samples of its window (§5.3). Video frames and
joints have no timestamps of their own: frame ``i`` is at ``i/30`` s. The summary lists
every such choice. The trajectory frame is ``tum_fr1_world`` (egopool.frames; see
docs/decisions.md).
"""

from __future__ import annotations

import contextlib
import importlib.resources
import math
import os
import shutil
import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np

from .codecs.depth import check_depth_codec
from .errors import CodecError, EgopoolError, FormatError
from .importers._common import camera_calibration, seconds_to_ns, window_offsets, with_feature
from .importers._images import read_depth_mm, read_rgb
from .importers.tum import read_tum
from .layout import list_task_episodes
from .meta.info import read_info
from .schema import hand_pose_column, imu_columns, slam_trajectory_columns, status_column
from .write.task_writer import StreamSpec, TaskWriter

__all__ = ["DEMO_TASK", "DemoPlan", "DemoSummary", "plan_demo", "read_xio_imu", "run_demo", "samples_dir"]

DEMO_TASK = "real_recordings_demo"
FPS = 30.0
GRAVITY = 9.80665  # m/s² per g
_HAND = "head_left_rgb"
_RGB, _DEPTH = "d435_rgb", "d435_depth"
_UVC_KEY = "uvc:dexretarget-hand-video"
_D435_KEY = "d435:tum-rgbd-kinect-sample"
_IMU_KEY = "imu:xio-fusion-sample"
#: TUM ROS-default Kinect intrinsics (docs/data_sources.md §1): the sample frame's sequence is unknown.
_TUM_NOMINAL_INTRINSICS = (525.0, 525.0, 319.5, 239.5)

Progress = Callable[[int, int], None]
_SAMPLE_FILES = ("dexretarget_hand_video/human_hand_video.mp4", "dexretarget_hand_video/human_joint_right.npy",
                 "evo_trajectories/freiburg1_xyz-groundtruth.txt", "xio_fusion_imu/sensor_data.csv",
                 "open3d_tum_frame/TUM_color.png", "open3d_tum_frame/TUM_depth.png")


def samples_dir() -> Path:
    """The bundled recordings, ``importlib.resources.files("egopool") / "samples"``.

    Raises
    ------
    FormatError
        The package was installed without its sample data.
    """
    path = Path(str(importlib.resources.files("egopool") / "samples"))
    for rel in _SAMPLE_FILES:
        if not (path / rel).is_file():
            raise FormatError("bundled sample recording is missing", path=path / rel,
                              hint="reinstall egopool with its package data (samples/**)")
    return path


@dataclass(frozen=True)
class DemoPlan:
    """What :func:`run_demo` will write, computed from the inputs without encoding anything.

    Attributes
    ----------
    task_dir:
        ``DIR/real_recordings_demo``.
    frames:
        Rows in total (= video frames used).
    episode_sizes:
        Rows per episode (``np.array_split`` of the frames).
    video_size:
        ``(width, height)`` of ``head_left_rgb`` as stored; ``source_size`` as decoded.
    replaces:
        True when an existing demo task will be replaced (``--overwrite``).
    """

    task_dir: Path
    frames: int
    episode_sizes: tuple[int, ...]
    video_size: tuple[int, int]
    source_size: tuple[int, int]
    source_frames: int
    replaces: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"task_dir": str(self.task_dir), "frames": self.frames, "episode_sizes": list(self.episode_sizes),
                "video_size": list(self.video_size), "source_size": list(self.source_size),
                "source_frames": self.source_frames, "replaces": self.replaces}


@dataclass
class DemoSummary:
    """The result of :func:`run_demo` (printed by ``egopool demo``; ``--json`` prints :meth:`to_dict`).

    Attributes
    ----------
    episodes:
        ``[{"episode_index", "length"}]`` in N order.
    stream_bytes:
        image_key -> bytes summed over episodes; ``data_bytes`` the data parquets,
        ``meta_bytes`` everything under ``meta/``.
    seconds:
        Wall time of the whole run (s).
    validation:
        ``validate_task(...).to_dict()``, or None when the validator is not available.
    """

    plan: DemoPlan
    episodes: list[dict[str, int]]
    stream_bytes: dict[str, int]
    data_bytes: int
    meta_bytes: int
    seconds: float
    synthesised: list[str]
    notes: list[str]
    counts: dict[str, int]
    validation: dict[str, Any] | None = None
    ok: bool = True

    @property
    def task_dir(self) -> Path:
        """The written task directory."""
        return self.plan.task_dir

    @property
    def frames(self) -> int:
        """Rows written in total."""
        return sum(e["length"] for e in self.episodes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"task_dir": str(self.task_dir), "ok": self.ok, "episodes": self.episodes, "frames": self.frames,
                "stream_bytes": self.stream_bytes, "data_bytes": self.data_bytes, "meta_bytes": self.meta_bytes,
                "total_bytes": sum(self.stream_bytes.values()) + self.data_bytes + self.meta_bytes,
                "seconds": round(self.seconds, 3), "counts": self.counts, "synthesised": self.synthesised,
                "notes": self.notes, "validation": self.validation, "plan": self.plan.to_dict()}


# -- sources -----------------------------------------------------------------------------------------
def _video_probe(path: Path) -> tuple[int, int, int]:
    try:
        with av.open(str(path)) as c:
            s = c.streams.video[0]
            return s.codec_context.width, s.codec_context.height, int(s.frames)
    except (av.error.FFmpegError, IndexError) as exc:
        raise CodecError(f"cannot open the sample video: {exc}", path=path) from exc


def _video_frames(path: Path, width: int, height: int) -> Generator[np.ndarray, None, None]:
    """Decode the sample video to RGB uint8 ``(height, width, 3)``, scaled by FFmpeg's swscale."""
    try:
        with av.open(str(path)) as c:
            stream = c.streams.video[0]
            stream.thread_type = "AUTO"
            for frame in c.decode(stream):
                yield frame.reformat(width=width, height=height, format="rgb24").to_ndarray()
    except av.error.FFmpegError as exc:
        raise CodecError(f"cannot decode the sample video: {exc}", path=path) from exc


def read_xio_imu(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read the x-io Fusion ``sensor_data.csv``.

    Returns
    -------
    (ns, samples):
        ``(K,)`` int64 sample times (ns from the CSV's ``Time (s)``, exact) and ``(K, 6)``
        float64 ``[gx, gy, gz, ax, ay, az]`` in rad/s and m/s² (converted from deg/s and g,
        ``g = 9.80665 m/s²``). The magnetometer is not stored.

    Raises
    ------
    FormatError
        A line without 10 numeric fields, or times that go backwards (names the line).
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    ns: list[int] = []
    vals: list[list[float]] = []
    for no, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        parts = raw.split(",")
        if len(parts) != 10:
            raise FormatError(f"line {no}: expected 10 fields, got {len(parts)}", path=path)
        t = seconds_to_ns(parts[0], path=path, line=no)
        if ns and t < ns[-1]:
            raise FormatError(f"line {no}: time goes backwards", path=path)
        try:
            vals.append([float(v) for v in parts[1:7]])
        except ValueError:
            raise FormatError(f"line {no}: not a number in {raw[:60]!r}", path=path) from None
        ns.append(t)
    v = np.asarray(vals, dtype=np.float64)
    out = np.empty_like(v)
    out[:, :3] = np.deg2rad(v[:, :3])
    out[:, 3:] = v[:, 3:] * GRAVITY
    return np.asarray(ns, dtype=np.int64), out


# -- plan --------------------------------------------------------------------------------------------
def _even(x: float) -> int:
    return max(2, int(round(x / 2.0)) * 2)


def plan_demo(out_dir: str | Path = "demo_out", *, episodes: int = 5, max_seconds: float | None = None,
              video_width: int = 640, overwrite: bool = False) -> DemoPlan:
    """Work out what :func:`run_demo` would write (and check the target), writing nothing.

    Raises
    ------
    EgopoolError
        ``episodes < 1``, more episodes than frames, a bad ``video_width``, or the task
        already exists and ``overwrite`` is False, or the existing directory is not an
        egopool demo task (it is never deleted then).
    """
    if episodes < 1:
        raise EgopoolError(f"--episodes must be >= 1, got {episodes}")
    samples = samples_dir()
    video = samples / "dexretarget_hand_video" / "human_hand_video.mp4"
    sw, sh, sframes = _video_probe(video)
    joints = np.load(samples / "dexretarget_hand_video" / "human_joint_right.npy", mmap_mode="r")
    frames = min(sframes, int(joints.shape[0]))
    if max_seconds is not None:
        if not math.isfinite(max_seconds) or max_seconds <= 0:
            raise EgopoolError(f"--max-seconds must be a finite number of seconds > 0, got {max_seconds}",
                               hint="leave it out to use the whole recording")
        frames = min(frames, int(max_seconds * FPS))
    if episodes > frames:
        raise EgopoolError(f"{episodes} episodes need at least as many frames; only {frames} are used")
    if not 16 <= video_width <= sw:
        raise EgopoolError(f"--video-width must be within 16..{sw}, got {video_width}")
    size = (_even(video_width), _even(sh * video_width / sw))
    sizes = tuple(len(a) for a in np.array_split(np.arange(frames), episodes))
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise EgopoolError("DIR exists and is not a directory", path=out_dir)
    task_dir = Path(out_dir) / DEMO_TASK
    replaces = task_dir.exists()
    if replaces:
        _check_replaceable(task_dir, overwrite)
    return DemoPlan(task_dir, frames, sizes, size, (sw, sh), sframes, replaces)


def _check_replaceable(task_dir: Path, overwrite: bool) -> None:
    if not overwrite:
        raise EgopoolError(f"{task_dir} already exists", path=None,
                           hint="pass --overwrite to replace that task, only that directory is removed; "
                                "or choose another DIR")
    try:
        info = read_info(task_dir)
    except FormatError:
        info = {}
    if not task_dir.is_dir() or info.get("task_name") != DEMO_TASK:
        raise EgopoolError(f"{task_dir} is not an egopool demo task; refusing to delete it",
                           hint="move it away or choose another DIR")


# -- run ---------------------------------------------------------------------------------------------
def _columns() -> tuple[list[Any], dict[str, str]]:
    imu, imu_ts = imu_columns()
    traj, traj_ns = slam_trajectory_columns(
        "ego_", frame="tum_fr1_world", owner={"role": "ego", "device_key": _D435_KEY}, source_slot=_RGB,
        time={"t": "sensor_s", "clock": "tum_groundtruth", "epoch": "unix"})
    traj = with_feature(traj, source="TUM RGB-D fr1/xyz ground truth (evo test data)")
    right, left = hand_pose_column("right"), hand_pose_column("left")
    cols = [right, left, imu, imu_ts, traj, traj_ns, status_column(_HAND)]
    names = {"right": right.name, "imu": imu.name, "imu_ts": imu_ts.name, "traj": traj.name,
             "traj_ns": traj_ns.name, "status": f"status.{_HAND}"}
    return cols, names


def _declarations(plan: DemoPlan) -> dict[str, Any]:
    devices = [
        {"key": _UVC_KEY, "kind": "uvc", "name": "hand video (dex-retargeting)", "slots": [_HAND]},
        {"key": _D435_KEY, "kind": "d435", "name": "TUM Kinect (held frame)", "slots": [_RGB, _DEPTH]},
        {"key": _IMU_KEY, "kind": "imu", "name": "x-io IMU (Fusion sample)", "slots": []},
    ]
    names = {_HAND: devices[0]["name"], _RGB: devices[1]["name"], _DEPTH: devices[1]["name"]}
    cal = {"head_stereo": camera_calibration("head_stereo", (640, 480), FPS, _TUM_NOMINAL_INTRINSICS,
                                             [0.0] * 5, type_="rgbd_camera", depth_scale=0.001,
                                             source="TUM ROS-default nominal intrinsics")}
    return {"devices": devices, "device_names": names, "calibration": cal}


def _stream_bytes(task_dir: Path) -> tuple[dict[str, int], int, int]:
    streams: dict[str, int] = {}
    data = 0
    for g in list_task_episodes(task_dir):
        for key, p in g.videos.items():
            streams[key] = streams.get(key, 0) + p.stat().st_size
        if g.data is not None:
            data += g.data.stat().st_size
    meta = sum(p.stat().st_size for p in (task_dir / "meta").rglob("*") if p.is_file() and not p.name.startswith("."))
    return dict(sorted(streams.items())), data, meta


def _validate(task_dir: Path) -> dict[str, Any] | None:
    try:
        from .validate import validate_task  # written in parallel; imported lazily
    except ModuleNotFoundError as exc:
        if exc.name != "egopool.validate":
            raise
        return None
    return validate_task(task_dir).to_dict()


def run_demo(out_dir: str | Path = "demo_out", *, episodes: int = 5, max_seconds: float | None = None,
             video_width: int = 640, overwrite: bool = False, depth_codec: str = "hevc12",
             progress: Progress | None = None) -> DemoSummary:
    """Build the demo task from the bundled recordings, validate it and summarise.

    The task is written into a dot-staging directory inside ``out_dir`` and moved to
    ``out_dir/real_recordings_demo`` only when every episode finished, so a failure
    leaves no partial task (and an existing one is replaced only then).

    Parameters
    ----------
    out_dir:
        Parent directory of the task (created if needed).
    episodes:
        Number of episodes; the frames are split evenly (``np.array_split``).
    max_seconds:
        Use only the first ``max_seconds`` of the 20.7 s video (tests); None = all.
    video_width:
        Stored width of ``head_left_rgb`` (default 640: the 1280x720 source is
        downscaled to 640x360 to keep the demo fast; the summary says so).
    overwrite:
        Replace an existing demo task in ``out_dir``.
    depth_codec:
        ``hevc12`` (12-bit log code, lossy) or ``ffv1`` (lossless uint16 mm) for ``d435_depth``.
    progress:
        ``progress(done_rows, total_rows)``.

    Returns
    -------
    DemoSummary
        ``ok`` is False when the validator reports an error finding.

    Raises
    ------
    EgopoolError
        Target exists without ``overwrite`` (see :func:`plan_demo`), or a sample file is
        unreadable.
    """
    t_start = time.perf_counter()
    check_depth_codec(depth_codec)
    plan = plan_demo(out_dir, episodes=episodes, max_seconds=max_seconds, video_width=video_width,
                     overwrite=overwrite)
    samples = samples_dir()
    n = plan.frames
    joints = np.load(samples / "dexretarget_hand_video" / "human_joint_right.npy")
    if joints.shape[1:] != (21, 3):
        raise FormatError(f"hand joints have shape {joints.shape}, expected (N, 21, 3)",
                          path=samples / "dexretarget_hand_video" / "human_joint_right.npy")
    traj = read_tum(samples / "evo_trajectories" / "freiburg1_xyz-groundtruth.txt")
    imu_ns_raw, imu = read_xio_imu(samples / "xio_fusion_imu" / "sensor_data.csv")
    color = read_rgb(samples / "open3d_tum_frame" / "TUM_color.png")
    depth = read_depth_mm(samples / "open3d_tum_frame" / "TUM_depth.png", units_per_mm=5)

    base = int(traj.ns[0])
    edges = base + np.rint(np.arange(n + 1) * (1e9 / FPS)).astype(np.int64)
    imu_ns = base + (imu_ns_raw - imu_ns_raw[0])
    traj_off = window_offsets(traj.ns, edges)
    imu_off = window_offsets(imu_ns, edges)
    cols, names = _columns()
    decl = _declarations(plan)
    vw, vh = plan.video_size
    streams = [StreamSpec(_HAND, "rgb", vw, vh),
               StreamSpec(_RGB, "rgb", color.shape[1], color.shape[0]),
               StreamSpec(_DEPTH, "depth", depth.shape[1], depth.shape[0], codec=depth_codec, master_slot=_RGB)]

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f".{DEMO_TASK}.staging-{uuid.uuid4().hex[:8]}"
    results = []
    try:
        tw = TaskWriter(staging, DEMO_TASK, fps=FPS)
        frames = _video_frames(samples / "dexretarget_hand_video" / "human_hand_video.mp4", vw, vh)
        row = 0
        for size in plan.episode_sizes:
            with tw.begin_episode(columns=cols, streams=streams, created_at=float(edges[row]) / 1e9,
                                  **decl) as ep:
                for j in range(size):
                    i = row + j
                    try:
                        image = next(frames)
                    except StopIteration:
                        raise CodecError(f"the sample video ended after {i} frames (expected {n})") from None
                    a, b = int(traj_off[i]), int(traj_off[i + 1])
                    c, d = int(imu_off[i]), int(imu_off[i + 1])
                    values = {names["right"]: joints[i].reshape(63).astype(np.float32),
                              names["imu"]: imu[c:d].astype(np.float32), names["imu_ts"]: imu_ns[c:d],
                              names["traj"]: traj.points[a:b].reshape(-1), names["traj_ns"]: traj.ns[a:b],
                              names["status"]: "connected"}
                    images = {_HAND: image}
                    if j == 0:  # the held RGB-D frame: the writer repeats it and counts the repeats
                        images.update({_RGB: color, _DEPTH: depth})
                    ep.add_frame(values, hardware_ns=int(edges[i]), images=images)
                    if progress:
                        progress(i + 1, n)
                results.append(ep.finish())
            row += size
        frames.close()
        if plan.task_dir.exists():
            _check_replaceable(plan.task_dir, overwrite)
            shutil.rmtree(plan.task_dir)
        os.replace(staging / DEMO_TASK, plan.task_dir)
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(staging)

    stream_bytes, data_bytes, meta_bytes = _stream_bytes(plan.task_dir)
    validation = _validate(plan.task_dir)
    ok = True if validation is None else bool(validation.get("ok"))
    end_s = n / FPS
    counts = {"frames": n, "episodes": len(results),
              "trajectory_points": int(traj_off[-1] - traj_off[0]), "trajectory_points_unused": len(traj.ns) - int(
                  traj_off[-1] - traj_off[0]),
              "imu_samples": int(imu_off[-1] - imu_off[0]), "imu_samples_unused": len(imu_ns) - int(
                  imu_off[-1] - imu_off[0])}
    synthesised = [
        f"video frame and hand-joint times: i/{FPS:g} s (neither source has timestamps)",
        "hardware_ns: the rig clock grid t0 + i/30 s, t0 = first TUM pose (TUM recording clock, ns)",
        "imu_ts_ns: the IMU CSV's own sample times, shifted so IMU time 0 = t0",
        "created_at / wall_time: on the TUM recording clock (2011-05-10)",
        "not synthesised: trajectory t and _ns are the TUM file's timestamps",
    ]
    notes = [
        "the sources are separate public recordings placed on one rig clock: this shows the format, "
        "not a synchronised capture",
        f"head_left_rgb: {plan.source_size[0]}x{plan.source_size[1]} video downscaled to {vw}x{vh} "
        "to keep the demo fast; hand joints unchanged",
        f"{_RGB}/{_DEPTH}: FROZEN, not a working camera: one real TUM RGB-D frame held for every row (the bundled "
        "samples have one RGB-D frame; drop_stats '<key>_repeated_count' counts the held rows, validate warns "
        "'stream … is frozen' and the server's pages mark the stream frozen and never use it as the ego stream "
        "or thumbnail); depth mm = round(v/5) from the factor-5000 PNG",
        "left_hand_pose: all-zero placeholder (an always-written column, file_format.md §7.2)",
        f"ego trajectory frame 'tum_fr1_world'; only the first {end_s:.1f} s of the 30 s trajectory and "
        "135 s IMU are used",
        "calibration.head_stereo: TUM ROS-default nominal intrinsics (the sample frame's sequence is unknown)",
        *(line for r in results for line in r.notes),  # values stored otherwise than given, also warned
    ]
    return DemoSummary(plan, [{"episode_index": r.index, "length": r.length} for r in results], stream_bytes,
                       data_bytes, meta_bytes, time.perf_counter() - t_start, synthesised, notes, counts,
                       validation, ok)
