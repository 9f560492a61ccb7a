"""``egopool import rgbd-frames DIR``: per-frame colour + depth + pose files -> one episode.

Layout (7-Scenes / tsdf-fusion style)::

    DIR/camera-intrinsics.txt          3x3 pinhole matrix K (fx 0 cx; 0 fy cy; 0 0 1)
    DIR/frame-NNNNNN.color.jpg|png     8-bit colour
    DIR/frame-NNNNNN.depth.png         uint16 depth in mm, 0 = no depth
    DIR/frame-NNNNNN.pose.txt          4x4 camera-to-world matrix, metres

The frames carry no timestamps: frame number ``n`` is placed at ``(n - n0)/fps`` s and
this is stated in the result. Poses become ``[t, x, y, z, qx, qy, qz, qw]`` points (one
per row) of ``observation.ego_slam_trajectory`` (multi_device_storage.md §4.7); there is
no host stamp, so no ``_ns`` column is written (§5.5). Colour and depth become the
``<name>_rgb`` / ``<name>_depth`` streams of one RGB-D device (§4.3, §4.8), the
intrinsics the ``calibration`` entry ``head_stereo`` (§6.5).
"""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._safe_read import require_directory
from ..codecs.depth import check_depth_codec
from ..errors import FormatError
from ..schema import slam_trajectory_columns
from ..storage import ObjectPath
from ..write.task_writer import StreamSpec
from ._common import (ImportResult, ImportSource, Progress, camera_calibration, check_fps, default_task_name,
                      nearest_rotation, read_input_lines, rotation_to_quaternion, task_writer)
from ._images import DEPTH_MODES, image_header, read_depth_mm, read_rgb

__all__ = ["RgbdFrames", "import_rgbd_frames", "read_intrinsics", "read_pose", "scan_rgbd_frames"]

_FRAME_RE = re.compile(r"^frame-(\d+)\.(color\.(?:jpg|jpeg|png)|depth\.png|pose\.txt)$", re.IGNORECASE)
#: Largest accepted |RᵀR − I| entry of a pose rotation; beyond it the file is not a pose.
MAX_ROTATION_DEFECT = 1e-2


def _read_matrix(path: Path, shape: tuple[int, int], what: str) -> np.ndarray:
    rows = []
    for no, line in read_input_lines(path, f"{what} file"):
        if line.startswith("#"):
            continue
        try:
            vals = [float(t) for t in line.replace(",", " ").split()]
        except ValueError:
            raise FormatError(f"line {no}: not a number in {line.strip()[:60]!r}", path=path) from None
        if len(vals) != shape[1]:
            raise FormatError(f"line {no}: expected {shape[1]} values, got {len(vals)}", path=path)
        rows.append(vals)
    if len(rows) != shape[0]:
        raise FormatError(f"expected a {shape[0]}x{shape[1]} {what}, got {len(rows)} rows", path=path)
    m = np.asarray(rows, dtype=np.float64)
    if not np.all(np.isfinite(m)):
        raise FormatError(f"{what} has non-finite values", path=path)
    return m


def read_intrinsics(path: str | Path) -> np.ndarray:
    """Read a 3x3 pinhole matrix; returns ``[fx, fy, cx, cy]`` float64 (pixels).

    Raises
    ------
    FormatError
        Missing file, not 3x3 numbers, or a last row other than ``0 0 1``.
    """
    path = Path(path)
    k = _read_matrix(path, (3, 3), "camera intrinsics")
    if not np.allclose(k[2], [0.0, 0.0, 1.0]) or k[0, 0] <= 0 or k[1, 1] <= 0:
        raise FormatError("not a pinhole matrix (need fx>0, fy>0 and last row 0 0 1)", path=path)
    return np.array([k[0, 0], k[1, 1], k[0, 2], k[1, 2]])


def read_pose(path: str | Path) -> tuple[np.ndarray, np.ndarray, float]:
    """Read a 4x4 camera-to-world matrix.

    Returns
    -------
    (translation, quaternion, defect):
        ``(3,)`` float64 m exactly as in the file, ``(4,)`` xyzw of the nearest proper
        rotation (SVD projection; ``qw >= 0``), and the input's ``max |RᵀR − I|``.

    Raises
    ------
    FormatError
        Missing file, not 4x4, last row not ``0 0 0 1``, or a rotation block that is
        not a rotation (reflection, or ``defect > 1e-2``).
    """
    path = Path(path)
    t = _read_matrix(path, (4, 4), "pose")
    if not np.allclose(t[3], [0.0, 0.0, 0.0, 1.0], atol=1e-9):
        raise FormatError(f"last row is {t[3].tolist()}, expected [0, 0, 0, 1]", path=path)
    try:
        r, defect = nearest_rotation(t[:3, :3])
    except ValueError as exc:
        raise FormatError(f"rotation block: {exc}", path=path) from None
    if defect > MAX_ROTATION_DEFECT:
        raise FormatError(f"rotation block is not orthonormal (|RᵀR−I| up to {defect:.3g})", path=path)
    return t[:3, 3].copy(), rotation_to_quaternion(r), defect


@dataclass(frozen=True)
class RgbdFrames:
    """The checked file list of an rgbd-frames directory (nothing decoded yet).

    Attributes
    ----------
    numbers:
        ``(F,)`` frame numbers, ascending.
    color, depth, pose:
        One path per frame.
    intrinsics:
        ``[fx, fy, cx, cy]``.
    width, height:
        Common image size (pixels).
    """

    root: Path
    numbers: tuple[int, ...]
    color: tuple[Path, ...]
    depth: tuple[Path, ...]
    pose: tuple[Path, ...]
    intrinsics: np.ndarray
    width: int
    height: int


def scan_rgbd_frames(directory: str | Path) -> RgbdFrames:
    """List and check an rgbd-frames directory (headers only, no pixel decode).

    Raises
    ------
    FormatError
        Not a directory, no frames, a frame missing one of its three files (named),
        a missing/malformed ``camera-intrinsics.txt``, images of different sizes, or a
        depth image that is not 16-bit.
    """
    found_dir = require_directory(directory, what="rgbd-frames folder",
                                  hint="pass the folder holding frame-NNNNNN.* files")
    if isinstance(found_dir, ObjectPath):  # its images are decoded from local files (Pillow)
        raise FormatError("an rgbd-frames folder is read from a local directory, not a bucket", path=str(found_dir),
                          hint="copy the folder to a local disk first")
    root = found_dir
    found: dict[int, dict[str, Path]] = {}
    for p in root.iterdir():
        m = _FRAME_RE.match(p.name)
        if m:
            kind = m.group(2).split(".")[0].lower()
            slot = found.setdefault(int(m.group(1)), {})
            if kind in slot:
                raise FormatError(f"two {kind} files for frame {m.group(1)}: {slot[kind].name}, {p.name}", path=root)
            slot[kind] = p
    if not found:
        raise FormatError("no frame-NNNNNN.color/depth/pose files", path=root,
                          hint="point at a folder holding frame-000000.color.jpg|png, .depth.png in uint16 mm, "
                               ".pose.txt with a 4x4 matrix and camera-intrinsics.txt")
    counts = {k: sum(k in v for v in found.values()) for k in ("color", "depth", "pose")}
    for n in sorted(found):
        missing = [k for k in ("color", "depth", "pose") if k not in found[n]]
        if missing:
            suffix = {"color": "color.jpg|png", "depth": "depth.png", "pose": "pose.txt"}[missing[0]]
            raise FormatError(f"frame-{n:06d}.{suffix} is missing (mismatched counts: {counts['color']} colour, "
                              f"{counts['depth']} depth, {counts['pose']} pose files)", path=root)
    intr = read_intrinsics(root / "camera-intrinsics.txt")
    numbers = tuple(sorted(found))
    color = tuple(found[n]["color"] for n in numbers)
    depth = tuple(found[n]["depth"] for n in numbers)
    w, h, _ = image_header(color[0])
    for c, d in zip(color, depth, strict=True):
        cw, ch, _ = image_header(c)
        dw, dh, dmode = image_header(d)
        if (cw, ch) != (w, h) or (dw, dh) != (w, h):
            raise FormatError(f"size {cw}x{ch} / depth {dw}x{dh} differs from the first frame's {w}x{h}", path=c)
        if dmode not in DEPTH_MODES:
            raise FormatError(f"depth image has mode {dmode!r}; expected a 16-bit single-channel PNG", path=d)
    return RgbdFrames(root, numbers, color, depth, tuple(found[n]["pose"] for n in numbers), intr, w, h)


def import_rgbd_frames(directory: str | Path, out: str | Path = "recordings", *, frame: str,
                       task: str | None = None, fps: float = 30.0, name: str = "camera",
                       depth_codec: str = "hevc12", progress: Progress | None = None,
                       allow_duplicate: bool = False) -> ImportResult:
    """Import an rgbd-frames directory as one episode.

    Parameters
    ----------
    directory:
        The folder (layout in the module docstring).
    out:
        Recordings root; the task goes to ``out/task``.
    frame:
        Registered frame id of the world the poses are expressed in (the files do not say).
    task:
        Task name (default: the directory name).
    fps:
        Nominal frame rate used to synthesise timestamps ``(n - n0)/fps`` s.
    name:
        Device name; slots are ``<name>_rgb`` and ``<name>_depth`` (§4.3 user-named rule).
    depth_codec:
        ``hevc12`` (12-bit log code: small, lossy, clips to 100..20000 mm and counts the
        clipped pixels in ``drop_stats`` as ``<name>_depth_clipped_count``) or ``ffv1``
        (lossless uint16 mm MKV), file_format.md §8.
    progress:
        ``progress(done_frames, total_frames)``.
    allow_duplicate:
        Import even when the task already holds an episode imported from the same content
        (otherwise refused, naming that N; docs/decisions.md D6).

    Returns
    -------
    ImportResult
        One episode; ``counts`` has ``frames``; notes give the largest rotation defect.

    Raises
    ------
    FormatError
        Malformed input, named by file (checked before anything is written; a file that
        fails to decode mid-way aborts the episode, nothing stays on disk).
    SchemaError
        Unknown ``frame``.
    CodecError
        Unknown ``depth_codec``.
    """
    fps = check_fps(fps)
    check_depth_codec(depth_codec)
    src = scan_rgbd_frames(directory)
    poses = [read_pose(p) for p in src.pose]
    defect = max(p[2] for p in poses)
    n0 = src.numbers[0]
    ts = [(n - n0) / fps for n in src.numbers]
    rgb_key, depth_key = f"{name}_rgb", f"{name}_depth"
    key = f"rgbd:{src.root.resolve().name}"
    traj, _ = slam_trajectory_columns(
        "ego_", frame=frame, owner={"role": "ego", "device_key": key}, source_slot=rgb_key,
        time={"t": "sensor_s", "clock": "synthesised_frame_number", "epoch": "first_frame"})
    streams = [StreamSpec(rgb_key, "rgb", src.width, src.height),
               StreamSpec(depth_key, "depth", src.width, src.height, codec=depth_codec, master_slot=rgb_key)]
    device = {"key": key, "kind": "rgbd_camera", "name": name, "slots": [rgb_key, depth_key]}
    calibration = {"head_stereo": camera_calibration(
        "head_stereo", (src.width, src.height), fps, src.intrinsics.tolist(), [], type_="rgbd_camera", depth_scale=0.001,
        distortion_model="unknown")}
    task = task if task is not None else default_task_name(src.root)
    total = len(src.numbers)
    source = ImportSource((Path(directory),), str(directory))
    with task_writer(out, task, fps, source=source, allow_duplicate=allow_duplicate) as tw:
        with tw.begin_episode(columns=[traj], streams=streams, devices=[device],
                              device_names={rgb_key: name, depth_key: name}, calibration=calibration,
                              created_at=time.time()) as ep:
            for i in range(total):
                tr, q, _ = poses[i]
                point = np.concatenate([[ts[i]], tr, q])
                ep.add_frame({traj.name: point}, timestamp=ts[i],
                             images={rgb_key: read_rgb(src.color[i]), depth_key: read_depth_mm(src.depth[i])})
                if progress:
                    progress(i + 1, total)
            result = ep.finish()
    gaps = sum(1 for a, b in itertools.pairwise(src.numbers) if b != a + 1)
    synthesised = [f"timestamps: (frame number - {n0}) / {fps:g} s (the files carry none); hardware_ns = 0 (unknown)",
                   "trajectory t = the synthesised timestamp; no _ns column (no host stamps)"]
    notes = [f"{total} frames, {src.width}x{src.height}; frame {frame!r} as declared by the caller",
             f"pose rotations deviate from orthonormal by up to {defect:.2e}; stored quaternions are the "
             "nearest rotations (SVD), translations unchanged",
             "calibration: intrinsics from camera-intrinsics.txt; distortion unknown (empty list)"]
    if gaps:
        notes.append(f"{gaps} gap(s) in frame numbering; timestamps keep the gaps")
    notes.extend(result.notes)  # values stored otherwise than given (clipped depth), also warned
    return ImportResult(tw.task_dir, (result,), tuple(synthesised), tuple(notes), {"frames": total})
