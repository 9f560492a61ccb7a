"""``egopool import euroc DIR``: an ASL/EuRoC folder (cam0 + imu0 [+ ground truth]) -> one episode.

Layout::

    DIR/mav0/cam0/data.csv      #timestamp [ns],filename
    DIR/mav0/cam0/data/*.png    8-bit gray (752x480 on the VI-Sensor)
    DIR/mav0/cam0/sensor.yaml   intrinsics, distortion, rate_hz, T_BS (optional)
    DIR/mav0/imu0/data.csv      #timestamp [ns], w_RS_S_x,y,z [rad s^-1], a_RS_S_x,y,z [m s^-2] (optional)
    DIR/mav0/state_groundtruth_estimate0/data.csv   #timestamp, p xyz [m], q w x y z, ... (optional)

One row per cam0 frame; ``hardware_ns`` = the cam0 stamp and ``timestamp`` = seconds
since the first frame, both real. Row ``i`` owns ``[t_i, t_{i+1})`` (the last row
``[t_last, t_last + 1/fps)``); the IMU samples and ground-truth poses stamped in a row's
window are attached to it (file_format.md §7.3, multi_device_storage.md §5.3); samples
outside every window are counted, not stored. The IMU is ``observation.imu`` on the
camera's ``stereo_left`` slot (§4.4). Ground-truth quaternions are w-first in EuRoC
and are reordered to xyzw. ``sensor.yaml`` becomes ``calibration.head_stereo`` (§6.5).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._safe_read import read_text, regular_file_size, require_directory
from ..errors import FormatError
from ..frames import frame_axes
from ..schema import imu_columns, slam_trajectory_columns
from ..unix_time import UNIX_2000_S, UNIX_2100_S, plausible_unix_unit
from ..write.task_writer import StreamSpec
from ._common import (ImportResult, ImportSource, Progress, camera_calibration, check_fps, default_task_name,
                      looks_like_header, plain_number, read_input_lines, task_writer, window_offsets,
                      with_feature)
from ._images import image_header, read_gray

__all__ = ["EurocDataset", "import_euroc", "parse_sensor_yaml", "scan_euroc"]

_SLOT = "stereo_left"


# -- tiny YAML subset (OpenCV-style sensor.yaml; PyYAML rejects its '%YAML:1.0' line) -----------------
def _scalar(tok: str) -> Any:
    tok = tok.strip().strip("'\"")
    for conv in (int, float):
        try:
            return conv(tok)
        except ValueError:
            pass
    return tok


def _value(text: str) -> Any:
    text = text.strip()
    if text.startswith("["):
        inner = text[1:text.rindex("]")]
        return [_scalar(t) for t in inner.split(",") if t.strip()]
    return _scalar(text)


def parse_sensor_yaml(path: str | Path) -> dict[str, Any]:
    """Parse the subset of YAML used by EuRoC ``sensor.yaml`` files.

    Supports ``key: scalar``, ``key: [flow, list]`` over several lines, and one level
    of nested block mappings (``T_BS:`` with ``rows``/``cols``/``data``). ``#`` starts a
    comment; ``%`` directive lines are skipped.

    Raises
    ------
    FormatError
        Unreadable file, or a line that is not ``key: value`` (with its line number).
    """
    path = Path(path)
    lines = read_text(path, what="sensor.yaml").splitlines()
    out: dict[str, Any] = {}
    block: dict[str, Any] | None = None
    pending: tuple[dict[str, Any], str, str, int] | None = None
    for no, raw in enumerate(lines, start=1):
        line = raw.split("#", 1)[0].rstrip()
        if pending is not None:
            target, key, acc, start = pending
            acc += " " + line.strip()
            if "]" in acc:
                target[key] = _value(acc)
                pending = None
            else:
                pending = (target, key, acc, start)
            continue
        if not line.strip() or line.lstrip().startswith("%") or line.strip() == "---":
            continue
        indented = line[0] in " \t"
        m = re.match(r"^\s*([A-Za-z_][\w\-]*)\s*:\s*(.*)$", line)
        if not m:
            raise FormatError(f"line {no}: expected 'key: value', got {line.strip()[:60]!r}", path=path)
        key, val = m.group(1), m.group(2)
        if not indented:
            block = None
        target = block if (indented and block is not None) else out
        if not val:
            block = {}
            out[key] = block
            continue
        if val.startswith("[") and "]" not in val:
            pending = (target, key, val, no)
            continue
        target[key] = _value(val)
    if pending is not None:
        raise FormatError(f"line {pending[3]}: unterminated '[' list", path=path)
    return out


# -- CSV ---------------------------------------------------------------------------------------------
_NS_TOKEN = re.compile(r"-?[0-9]+")
_INT64_MAX = 2**63 - 1
#: Smallest median step (ns) between consecutive stamps of a EuRoC stream: 20 µs (50 kHz).
#: Steps below it mean the stamps are not nanoseconds (milliseconds step by ~5-50 per line).
_MIN_MEDIAN_STEP_NS = 20_000


def _check_ns_units(path: Path, stamps: list[int], lines: list[int]) -> None:
    """Refuse stamps that cannot be EuRoC nanoseconds: microseconds since the epoch (year 2000-2100
    as µs), or a median step below 20 µs (milliseconds or seconds counted as integers)."""
    if not stamps:
        return
    unit = plausible_unix_unit(float(stamps[0]))
    if unit == "microseconds":
        raise FormatError(f"line {lines[0]}: timestamp {stamps[0]} looks like microseconds since the Unix epoch; "
                          "EuRoC timestamps are integer nanoseconds", path=path,
                          hint="multiply the timestamp column by 1000")
    if len(stamps) > 2:
        step = float(np.median(np.diff(np.asarray(stamps, dtype=np.int64))))
        if step < _MIN_MEDIAN_STEP_NS:
            guess = f"; they look like {unit} since the Unix epoch" if unit and unit != "nanoseconds" else ""
            raise FormatError(f"line {lines[0]}: timestamps advance by a median of {step:g} per line, which as "
                              f"nanoseconds is a rate above 50 kHz{guess}; EuRoC timestamps are integer nanoseconds",
                              path=path, hint="convert the timestamp column to nanoseconds")


def _read_csv(path: Path, ncols: int, what: str, *, min_cols: int | None = None) -> tuple[np.ndarray, list[list[str]]]:
    """Rows of a EuRoC CSV: ``(K,)`` int64 ns stamps and the other fields as text.

    ``#`` lines are comments, a UTF-8 byte order mark is accepted, a first line of column
    names without ``#`` is skipped; every other line must be ``stamp,field,...`` with an
    integer ns stamp that fits int64, strictly increasing.
    """
    stamps: list[int] = []
    lines: list[int] = []
    fields: list[list[str]] = []
    need = min_cols or ncols
    seen_data = False
    for no, line in read_input_lines(path, what):
        if line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",")]
        if not seen_data and looks_like_header(parts):
            seen_data = True
            continue
        seen_data = True
        if len(parts) < need or (min_cols is None and len(parts) != ncols):
            raise FormatError(f"line {no}: expected {ncols} comma-separated fields, got {len(parts)}", path=path)
        if not _NS_TOKEN.fullmatch(parts[0]):
            raise FormatError(f"line {no}: timestamp {parts[0][:40]!r} is not an integer ns value", path=path,
                              hint="EuRoC timestamps are integer nanoseconds")
        ts = int(parts[0]) if len(parts[0]) <= 20 else -1  # longer never fits int64 (and int() has a digit limit)
        if not 0 <= ts <= _INT64_MAX:
            raise FormatError(f"line {no}: timestamp {parts[0][:40]} does not fit int64 nanoseconds (0 to "
                              f"{_INT64_MAX}, year 2262); EuRoC timestamps are integer nanoseconds", path=path)
        if stamps and ts <= stamps[-1]:
            raise FormatError(f"line {no}: timestamp {ts} does not increase (previous {stamps[-1]})", path=path)
        stamps.append(ts)
        lines.append(no)
        fields.append(parts[1:ncols])
    _check_ns_units(path, stamps, lines)
    return np.asarray(stamps, dtype=np.int64), fields


def _floats(path: Path, rows: list[list[str]], stamps: np.ndarray, what: str) -> np.ndarray:
    try:
        arr = np.asarray([[plain_number(v) for v in r] for r in rows], dtype=np.float64)
    except ValueError:
        for r, ts in zip(rows, stamps, strict=True):
            for v in r:
                try:
                    plain_number(v)
                except ValueError:
                    raise FormatError(f"{what} row with timestamp {ts}: {v!r} is not a number", path=path) from None
        raise
    if arr.size and not np.all(np.isfinite(arr)):
        bad = int(np.argwhere(~np.isfinite(arr))[0][0])
        raise FormatError(f"{what} row with timestamp {int(stamps[bad])} has a non-finite value", path=path)
    return arr


@dataclass(frozen=True)
class EurocDataset:
    """A checked EuRoC folder (images not decoded yet).

    Attributes
    ----------
    cam_ns:
        ``(F,)`` int64 cam0 stamps (ns), strictly increasing.
    images:
        One PNG path per frame.
    imu_ns, imu:
        ``(K,)`` int64 and ``(K, 6)`` float64 ``[wx, wy, wz, ax, ay, az]`` (rad/s, m/s²);
        empty when there is no ``imu0``.
    gt_ns, gt:
        ``(G,)`` int64 and ``(G, 7)`` float64 ``[px, py, pz, qx, qy, qz, qw]`` (m; xyzw,
        reordered from the file's w-first); empty without ground truth.
    sensor:
        Parsed ``cam0/sensor.yaml`` (empty dict when absent).
    """

    mav: Path
    cam_ns: np.ndarray
    images: tuple[Path, ...]
    width: int
    height: int
    imu_ns: np.ndarray
    imu: np.ndarray
    gt_ns: np.ndarray
    gt: np.ndarray
    sensor: dict[str, Any]


def _find_mav(root: Path) -> Path:
    require_directory(root, what="EuRoC folder", hint="pass the folder that holds mav0/")
    if (root / "mav0").is_dir():
        return root / "mav0"
    if (root / "cam0").is_dir():
        return root
    raise FormatError("no mav0/cam0 folder (not an ASL/EuRoC layout)", path=root,
                      hint="pass the folder that holds mav0/")


def scan_euroc(directory: str | Path) -> EurocDataset:
    """Read and check every CSV of a EuRoC folder (image headers only).

    Raises
    ------
    FormatError
        Missing ``cam0/data.csv`` or a listed image, malformed lines (with line
        number), non-increasing stamps, images of different sizes.
    """
    mav = _find_mav(Path(directory))
    cam_csv = mav / "cam0" / "data.csv"
    cam_ns, cam_rows = _read_csv(cam_csv, 2, "cam0/data.csv")
    if not len(cam_ns):
        raise FormatError("no frames listed", path=cam_csv)
    images = tuple(mav / "cam0" / "data" / r[0] for r in cam_rows)
    for img in images:  # missing, or a FIFO / directory / socket named as such (never opened blocking)
        regular_file_size(img, what="image listed in cam0/data.csv")
    w, h, _ = image_header(images[0])
    for img in images[1:]:
        iw, ih, _ = image_header(img)
        if (iw, ih) != (w, h):
            raise FormatError(f"size {iw}x{ih} differs from the first frame's {w}x{h}", path=img)
    imu_csv = mav / "imu0" / "data.csv"
    if imu_csv.exists():
        imu_ns, rows = _read_csv(imu_csv, 7, "imu0/data.csv")
        imu = _floats(imu_csv, rows, imu_ns, "imu0")
        too_big = np.abs(imu) > np.finfo(np.float32).max  # stored as float32 (§7.2): Infinity otherwise
        if too_big.any():
            bad = int(np.argwhere(too_big)[0][0])
            raise FormatError(f"imu0 row with timestamp {int(imu_ns[bad])} holds {imu[too_big][0]:g}, beyond float32 "
                              "(the stored IMU type)", path=imu_csv)
    else:
        imu_ns, imu = np.zeros(0, np.int64), np.zeros((0, 6))
    gt_csv = mav / "state_groundtruth_estimate0" / "data.csv"
    if gt_csv.exists():
        gt_ns, rows = _read_csv(gt_csv, 8, "state_groundtruth_estimate0/data.csv", min_cols=8)
        raw = _floats(gt_csv, rows, gt_ns, "ground truth")
        gt = np.concatenate([raw[:, 0:3], raw[:, 4:7], raw[:, 3:4]], axis=1)  # q w,x,y,z -> x,y,z,w
    else:
        gt_ns, gt = np.zeros(0, np.int64), np.zeros((0, 7))
    yaml = mav / "cam0" / "sensor.yaml"
    sensor = parse_sensor_yaml(yaml) if yaml.exists() else {}
    return EurocDataset(mav, cam_ns, images, w, h, imu_ns, imu, gt_ns, gt, sensor)


def _calibration(ds: EurocDataset, fps: float) -> dict[str, Any]:
    s = ds.sensor
    intr = s.get("intrinsics")
    if not (isinstance(intr, list) and len(intr) == 4):
        return {}
    extra: dict[str, Any] = {k: s[k] for k in ("camera_model", "distortion_model") if k in s}
    tbs = s.get("T_BS")
    if isinstance(tbs, dict) and isinstance(tbs.get("data"), list):
        extra["T_BS"] = [float(v) for v in tbs["data"]]
    res: list[Any] = s["resolution"] if isinstance(s.get("resolution"), list) else [ds.width, ds.height]
    return {"head_stereo": camera_calibration("head_stereo", res, fps, intr, s.get("distortion_coefficients") or [],
                                              **extra)}


def import_euroc(directory: str | Path, out: str | Path = "recordings", *, task: str | None = None,
                 fps: float | None = None, frame: str | None = None,
                 progress: Progress | None = None, allow_duplicate: bool = False) -> ImportResult:
    """Import a EuRoC/ASL folder as one episode (rows = cam0 frames).

    Parameters
    ----------
    directory:
        The dataset folder (holding ``mav0/``) or ``mav0`` itself.
    out:
        Recordings root; the task goes to ``out/task``.
    task:
        Task name (default: the folder name).
    fps:
        Nominal row rate for the task and the video (default: ``rate_hz`` of
        ``cam0/sensor.yaml``, else the median cam0 interval). It also sets the last
        row's window length.
    frame:
        Registered frame id of the ground-truth world. Ground truth is imported only
        when given (its world frame's axes cannot be read from the files).
    progress:
        ``progress(done_frames, total_frames)``.
    allow_duplicate:
        Import even when the task already holds an episode imported from the same content
        (otherwise refused, naming that N; docs/decisions.md D6).

    Returns
    -------
    ImportResult
        One episode; ``counts``: ``frames``, ``imu_samples``, ``imu_outside``,
        ``gt_points``, ``gt_outside``.

    Raises
    ------
    FormatError
        Malformed input, named by file (checked before writing).
    SchemaError
        Unknown ``frame``.
    """
    if fps is not None:
        fps = check_fps(fps)
    ds = scan_euroc(directory)
    if frame is not None:
        frame_axes(frame)
    if fps is None:
        rate = ds.sensor.get("rate_hz")
        if isinstance(rate, (int, float)) and rate > 0:
            fps = float(rate)
        elif len(ds.cam_ns) > 1:
            fps = 1e9 / float(np.median(np.diff(ds.cam_ns)))
        else:
            fps = 20.0
    period = int(round(1e9 / fps))
    edges = np.concatenate([ds.cam_ns, [ds.cam_ns[-1] + period]])
    imu_off = window_offsets(ds.imu_ns, edges)
    use_gt = frame is not None and len(ds.gt_ns) > 0
    gt_off = window_offsets(ds.gt_ns, edges)
    key = f"euroc:{ds.mav.resolve().parent.name}"
    columns = []
    imu_col, imu_ts = imu_columns()
    if len(ds.imu_ns):
        columns += [imu_col, imu_ts]
    if use_gt:
        traj, traj_ns = slam_trajectory_columns(
            "ego_", frame=frame, owner={"role": "ego", "device_key": key}, source_slot=_SLOT,
            time={"t": "sensor_s", "clock": "euroc_ns", "epoch": "unix"})
        traj = with_feature(traj, source="state_groundtruth_estimate0")
        columns += [traj, traj_ns]
    device: dict[str, Any] = {"key": key, "kind": "vi_sensor", "name": "EuRoC cam0+imu0", "slots": [_SLOT]}
    task = task if task is not None else default_task_name(ds.mav.parent if ds.mav.name == "mav0" else ds.mav)
    total = len(ds.cam_ns)
    t0 = int(ds.cam_ns[0])
    # relative stamps (a recording starting near 0) are no wall-clock time (docs/decisions.md V5)
    created = t0 / 1e9 if UNIX_2000_S <= t0 / 1e9 <= UNIX_2100_S else time.time()
    source = ImportSource((Path(directory),), str(directory))
    with task_writer(out, task, fps, source=source, allow_duplicate=allow_duplicate) as tw:
        with tw.begin_episode(columns=columns, streams=[StreamSpec(_SLOT, "rgb", ds.width, ds.height)],
                              devices=[device], device_names={_SLOT: device["name"]},
                              calibration=_calibration(ds, fps), created_at=created) as ep:
            for i in range(total):
                values: dict[str, Any] = {}
                if len(ds.imu_ns):
                    a, b = int(imu_off[i]), int(imu_off[i + 1])
                    values[imu_col.name] = ds.imu[a:b].astype(np.float32)
                    values[imu_ts.name] = ds.imu_ns[a:b]
                if use_gt:
                    a, b = int(gt_off[i]), int(gt_off[i + 1])
                    pts = np.concatenate([ds.gt_ns[a:b, None] / 1e9, ds.gt[a:b]], axis=1)
                    values[traj.name] = pts.reshape(-1)
                    values[traj_ns.name] = ds.gt_ns[a:b]
                ep.add_frame(values, timestamp=(int(ds.cam_ns[i]) - t0) / 1e9, hardware_ns=int(ds.cam_ns[i]),
                             images={_SLOT: read_gray(ds.images[i])})
                if progress:
                    progress(i + 1, total)
            result = ep.finish()
    imu_in = int(imu_off[-1] - imu_off[0])
    gt_in = int(gt_off[-1] - gt_off[0]) if use_gt else 0
    notes = [f"{total} cam0 frames {ds.width}x{ds.height} at {fps:g} fps; rows follow cam0 stamps (real)",
             f"IMU: {imu_in} of {len(ds.imu_ns)} samples fall in the frames' windows and were attached"]
    if not len(ds.imu_ns):
        notes[-1] = ("imu0/data.csv has no samples: no IMU columns" if (ds.mav / "imu0" / "data.csv").exists()
                     else "no imu0/data.csv: no IMU columns")
    if len(ds.gt_ns) and not use_gt:
        notes.append("ground truth present but not imported: pass --frame to declare its world frame")
    elif use_gt:
        notes.append(f"ground truth: {gt_in} of {len(ds.gt_ns)} poses attached; quaternions reordered wxyz -> xyzw")
    if not ds.sensor:
        notes.append("no cam0/sensor.yaml: no calibration")
    if (ds.mav / "cam1").is_dir():
        notes.append("cam1 present but not imported (rows follow cam0 only)")
    counts = {"frames": total, "imu_samples": imu_in, "imu_outside": len(ds.imu_ns) - imu_in,
              "gt_points": gt_in, "gt_outside": (len(ds.gt_ns) - gt_in) if use_gt else 0}
    synthesised = ["none: row timestamps and hardware_ns are the cam0 stamps"]
    if created != t0 / 1e9:
        synthesised = ["created_at/wall_time: import time (the cam0 stamps are not Unix time)"]
    return ImportResult(tw.task_dir, (result,), tuple(synthesised), tuple(notes), counts)
