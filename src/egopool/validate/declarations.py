"""Checks of the task-level declarations in ``info.json`` (multi_device_storage.md §6, file_format.md §3.1).

``features`` (column grammar §2.4, what may be declared §6.8, ``dtype``/``shape``/
``encoding`` §8.1.5, force matrices ``encoding`` + ``scale`` §8.1.4, SLAM ``frame`` /
``frame_axes`` §3.1 / §8.1.6), ``slam_frames`` and ``gripper_slam_frame`` (§6.6),
``cameras`` / ``video_extensions`` (§6.3, §4.8) and ``devices`` / ``device_names`` (§6.4).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..codecs.force_matrix import ENCODINGS as FM_ENCODINGS
from ..errors import SchemaError
from ..frames import FRAMES
from ..meta.info import info_path
from ..schema import KEY_COLUMNS, check_column_name, signal_kind
from .context import Context

__all__ = ["check_declarations", "check_force_matrix_spec", "check_frame_spec", "check_stream_declarations",
           "is_depth_name"]

R_GRAMMAR = "multi_device_storage.md §2.4"
R_PREFIX = "multi_device_storage.md §2.2"
R_FEATURE = "multi_device_storage.md §6.2"
R_CAMERAS = "multi_device_storage.md §6.3"
R_DEVICES = "multi_device_storage.md §6.4"
R_SLAM_DECL = "multi_device_storage.md §6.6"
R_NOT_DECLARED = "multi_device_storage.md §6.8.2"
R_FM_DECL = "multi_device_storage.md §8.1.4"
R_DTYPE_SHAPE = "multi_device_storage.md §8.1.5"
R_FRAME_AXES = "multi_device_storage.md §8.1.6"
R_DEPTH = "multi_device_storage.md §4.8"
R_FRAME = "file_format.md §3.1"
R_INFO = "file_format.md §3"
R_VIDEO = "file_format.md §8"

_WORDS = {"right", "left", "up", "down", "forward", "backward"}
_AXIS_OF = {"right": "lr", "left": "lr", "up": "ud", "down": "ud", "forward": "fb", "backward": "fb"}
_DEPTH_NAME_RE = re.compile(r"depth(_\d+)?$")
_VIDEO_EXTS = ("mp4", "mkv")


def is_depth_name(image_key: str) -> bool:
    """A slot named like a depth slot (``*_depth``, ``*_depth_2``, ``stereo_depth``), §4.3, §4.8."""
    return bool(_DEPTH_NAME_RE.search(image_key))


def _axes_problem(axes: Any) -> str | None:
    if not isinstance(axes, Mapping) or set(axes) != {"+X", "+Y", "+Z"}:
        return "frame_axes must be an object with exactly the keys +X, +Y, +Z"
    words = [axes[k] for k in ("+X", "+Y", "+Z")]
    if any(not isinstance(w, str) or w not in _WORDS for w in words):
        return f"frame_axes words must be among {sorted(_WORDS)}, got {words}"
    if len({_AXIS_OF[w] for w in words}) != 3:
        return f"frame_axes {words} do not name three different directions"
    return None


def check_frame_spec(ctx: Context, path: Any, column: str, spec: Mapping[str, Any], *, where: str,
                     frame_required: bool = True) -> None:
    """``frame`` / ``frame_axes`` of one trajectory declaration (file_format.md §3.1, §8.1.6).

    ``frame`` missing means the legacy ``right_forward_up`` frame (a warning when the
    declaration should carry one); a known frame id must come with that frame's axes;
    an unknown id must at least have valid direction words.
    """
    if "frame" not in spec:
        if frame_required:
            ctx.report.warning(R_FRAME, path, f"{where} column {column!r} declares no 'frame': readers take the "
                                              "legacy right_forward_up frame (v1.3.12 and earlier); if the data "
                                              "is in another frame, declare frame and frame_axes")
        return
    frame = spec["frame"]
    if not isinstance(frame, str):
        ctx.report.error(R_FRAME, path, f"{where} column {column!r}: frame must be a frame id string, got {frame!r}")
        return
    if "frame_axes" not in spec:
        ctx.report.error(R_FRAME_AXES, path, f"{where} column {column!r} has frame {frame!r} but no frame_axes; "
                                             "every SLAM column declares its own frame_axes "
                                             f"(e.g. {FRAMES.get(frame, FRAMES['down_left_forward'])})")
        return
    axes = spec["frame_axes"]
    problem = _axes_problem(axes)
    if problem:
        ctx.report.error(R_FRAME, path, f"{where} column {column!r}: {problem}")
        return
    known = FRAMES.get(frame)
    if known is not None and dict(axes) != known:
        ctx.report.error(R_FRAME, path, f"{where} column {column!r}: frame {frame!r} has frame_axes {known}, "
                                        f"but {dict(axes)} is declared; fix whichever is wrong")
    elif known is None:
        ctx.report.warning(R_FRAME, path, f"{where} column {column!r}: frame id {frame!r} is not a known frame "
                                          f"({sorted(FRAMES)}); readers interpret it by its frame_axes only")


def check_force_matrix_spec(ctx: Context, path: Any, column: str, spec: Mapping[str, Any], *, where: str) -> None:
    """``encoding`` + ``scale`` of a force matrix declaration (multi_device_storage.md §8.1.4, §7.2.1)."""
    enc, scale = spec.get("encoding"), spec.get("scale")
    if enc is None or scale is None:
        missing = [k for k in ("encoding", "scale") if spec.get(k) is None]
        ctx.report.error(R_FM_DECL, path, f"{where} force matrix column {column!r} lacks {missing}: the scale "
                                          "cannot be inferred from the data; declare encoding and scale")
        return
    if enc not in FM_ENCODINGS:
        ctx.report.error(R_FM_DECL, path, f"{where} force matrix column {column!r}: unknown encoding {enc!r}, "
                                          f"use one of {list(FM_ENCODINGS)}")
        return
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        ctx.report.error(R_FM_DECL, path, f"{where} force matrix column {column!r}: scale must be a number > 0, "
                                          f"got {scale!r}")
    elif enc == "row_flat_raw" and scale != 1:
        ctx.report.error("file_format.md §7.2.1", path, f"{where} force matrix column {column!r}: row_flat_raw "
                                                         f"stores raw float32 values, its scale is 1, got {scale!r}")
    want = "int16" if enc == "row_diff_quantized" else "float32"
    if "dtype" in spec and spec["dtype"] != want:
        ctx.report.error("file_format.md §7.2.1", path, f"{where} force matrix column {column!r}: encoding {enc} "
                                                         f"is stored as {want}, but dtype {spec['dtype']!r} is "
                                                         "declared")


def _is_gripper_trajectory(name: str, spec: Mapping[str, Any]) -> bool:
    owner = spec.get("owner")
    if isinstance(owner, Mapping) and "role" in owner:
        return bool(owner["role"] == "gripper")
    return not name.startswith("observation.ego")


def _gripper_rig1(trajs: Mapping[str, Mapping[str, Any]]) -> tuple[str, Any] | None:
    """(rig1's gripper trajectory column, its frame) among ``trajs``, or None without a gripper trajectory."""
    gripper = {n: s for n, s in trajs.items() if _is_gripper_trajectory(n, s)}
    if not gripper:
        return None
    rig1 = "observation.slam_trajectory" if "observation.slam_trajectory" in gripper else sorted(gripper)[0]
    return rig1, gripper[rig1].get("frame", "right_forward_up")


def expected_gripper_slam_frame(features: Mapping[str, Any]) -> Any:
    """What ``info.json``'s ``gripper_slam_frame`` must be for these ``features`` (file_format.md §6.6): rig1's
    gripper SLAM trajectory's frame, or None when no gripper ``observation.*slam_trajectory`` is declared (then the
    key is absent). What ``egopool edit`` keeps it to after a column's removal or rename."""
    trajs = {n: s for n, s in features.items()
             if isinstance(s, Mapping) and signal_kind(n) == "slam_trajectory" and n.startswith("observation.")}
    rig = _gripper_rig1(trajs)
    return None if rig is None else rig[1]


def check_declarations(ctx: Context) -> None:
    """Every check of ``info.json`` declarations that needs no episode data."""
    path = info_path(ctx.root)
    feats = ctx.info.get("features")
    if isinstance(feats, dict):
        if "action" not in feats:
            ctx.report.error(R_INFO, path, "features lacks 'action' (always declared: "
                                           '{"dtype": "float32", "shape": [1]})')
        for name, spec in feats.items():
            _check_feature(ctx, path, name, spec)
    trajs = {n: s for n, s in ctx.features.items()
             if isinstance(s, Mapping) and signal_kind(n) == "slam_trajectory" and n.startswith("observation.")}
    _check_slam_frames(ctx, path, trajs)
    _check_cameras(ctx, path)
    _check_devices(ctx, path)


def _check_feature(ctx: Context, path: Any, name: str, spec: Any) -> None:
    if name in KEY_COLUMNS or name.startswith("status."):
        ctx.report.error(R_NOT_DECLARED, path, f"features declares {name!r}: status.* and frame-key columns are "
                                               "never declared in features; remove the entry")
        return
    if name != "action" and not name.startswith("observation."):
        if name != "imu_ts_ns":
            ctx.report.error(R_PREFIX, path, f"features key {name!r} is not a column name of the form "
                                             "observation.<signal>; remove or rename it")
        return
    try:
        check_column_name(name)
    except SchemaError as exc:
        ctx.report.error(R_GRAMMAR, path, f"features key: {exc.message}"
                                          + (f" ({exc.hint})" if exc.hint else ""))
    if not isinstance(spec, Mapping):
        ctx.report.error(R_FEATURE, path, f"features[{name!r}] must be an object with dtype and shape, got "
                                          f"{spec!r:.40}")
        return
    missing = [k for k in ("dtype", "shape") if k not in spec]
    if missing:
        ctx.report.error(R_DTYPE_SHAPE, path, f"features[{name!r}] lacks {missing}; every column declares dtype "
                                              "and shape (the element shape)")
    shape = spec.get("shape")
    if "shape" in spec and (not isinstance(shape, list) or not shape
                            or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape)):
        ctx.report.error(R_FEATURE, path, f"features[{name!r}] shape must be a non-empty list of positive "
                                          f"integers (the element shape), got {shape!r}")
    kind = signal_kind(name)
    if kind == "slam_trajectory":
        if "encoding" not in spec:
            ctx.report.error(R_DTYPE_SHAPE, path, f"features[{name!r}] lacks encoding (variable-length columns "
                                                  "declare it: flat_points_8_txyz_qxyzw)")
        check_frame_spec(ctx, path, name, spec, where="features")
    elif kind == "force_matrix":
        check_force_matrix_spec(ctx, path, name, spec, where="features")


def _check_slam_frames(ctx: Context, path: Any, trajs: Mapping[str, Mapping[str, Any]]) -> None:
    sf = ctx.info.get("slam_frames")
    if sf is not None:
        if not isinstance(sf, Mapping):
            ctx.report.error(R_SLAM_DECL, path, "slam_frames must be an object: trajectory column -> frame id")
        else:
            for col, frame in sf.items():
                if col not in trajs:
                    ctx.report.error(R_SLAM_DECL, path, f"slam_frames names {col!r}, which is not a declared "
                                                        "observation.*slam_trajectory feature")
                elif trajs[col].get("frame") != frame:
                    ctx.report.error(R_SLAM_DECL, path, f"slam_frames[{col!r}] = {frame!r} but features[{col!r}] "
                                                        f"frame = {trajs[col].get('frame')!r}; both must come "
                                                        "from the same table")
    gsf = ctx.info.get("gripper_slam_frame")
    rig = _gripper_rig1(trajs)
    if gsf is not None and rig is None:
        ctx.report.warning(R_INFO, path, "gripper_slam_frame is written only when the task has a gripper "
                                         "observation.*slam_trajectory column, and this one has none")
    elif rig is not None:
        rig1, expected = rig
        if gsf is None:
            ctx.report.warning(R_INFO, path, f"gripper SLAM column {rig1!r} exists but gripper_slam_frame is "
                                             f"missing; old readers need it (= {expected!r})")
        elif gsf != expected:
            ctx.report.error(R_SLAM_DECL, path, f"gripper_slam_frame is {gsf!r} but rig1's {rig1!r} is in frame "
                                                f"{expected!r}; gripper_slam_frame must equal rig1's frame")


def _check_cameras(ctx: Context, path: Any) -> None:
    cams = ctx.info.get("cameras")
    if isinstance(cams, dict):
        for key, cam in cams.items():
            if not isinstance(cam, Mapping) or any(
                    isinstance(cam.get(k), bool) or not isinstance(cam.get(k), int) or cam.get(k, 0) < 1
                    for k in ("height", "width")):
                ctx.report.error(R_CAMERAS, path, f"cameras[{key!r}] must be {{height, width[, fps]}} with "
                                                  f"positive integer sizes, got {cam!r:.60}")
    for key, ext in ctx.video_extensions.items():
        if ext not in _VIDEO_EXTS:
            ctx.report.warning(R_VIDEO, path, f"video_extensions[{key!r}] = {ext!r}; recorded streams are mp4 "
                                              "(RGB, 12-bit depth) or mkv (FFV1 depth)")


def check_stream_declarations(ctx: Context) -> None:
    """After the episodes were probed: depth slots are not cameras (§4.8), RGB slots are (§6.3)."""
    path = info_path(ctx.root)
    cams = ctx.info.get("cameras")
    if not isinstance(cams, dict):
        return
    for key in sorted(cams):
        if key in ctx.depth_keys or (key not in ctx.rgb_keys and is_depth_name(key)):
            ctx.report.error(R_DEPTH, path, f"depth slot {key!r} is declared in cameras; depth slots appear only "
                                            "in video_extensions: remove it from cameras")
    for key in sorted(ctx.rgb_keys - set(cams)):
        ctx.report.error(R_CAMERAS, path, f"RGB stream {key!r} is recorded but not declared in cameras; add "
                                          f'cameras[{key!r}] = {{"height": H, "width": W}}')


def _check_devices(ctx: Context, path: Any) -> None:
    devices = ctx.info.get("devices")
    if not isinstance(devices, list):
        return
    names = ctx.info.get("device_names")
    names = names if isinstance(names, dict) else {}
    for i, dev in enumerate(devices):
        if not isinstance(dev, Mapping):
            ctx.report.error(R_DEVICES, path, f"devices[{i}] must be an object {{key, kind, name, slots}}")
            continue
        missing = [k for k in ("key", "kind", "name", "slots") if k not in dev]
        if missing:
            ctx.report.error(R_DEVICES, path, f"devices[{i}] ({dev.get('key', '?')}) lacks {missing}; the compact "
                                              "device entry is {key, kind, name, slots}")
        slots = dev.get("slots")
        if "slots" in dev and not isinstance(slots, list):
            ctx.report.error(R_DEVICES, path, f"devices[{i}].slots must be a list of slot names")
            continue
        unnamed = [s for s in slots or [] if s not in names]
        if unnamed:
            ctx.report.warning(R_DEVICES, path, f"device {dev.get('key', i)!r}: slots {unnamed} are missing from "
                                                "device_names (it maps every slot of devices[].slots)")
