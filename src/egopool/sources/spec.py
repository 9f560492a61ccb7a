"""``--device`` specs of ``egopool record``: one string per device, in opening order (§2.3).

::

    KIND:TARGET[?option=value&option=value...]

=================================  ==========================================================
``uvc:/dev/video0``                a camera through FFmpeg (v4l2 / avfoundation / dshow by OS)
``uvc:lavfi:testsrc2=size=1280x720:rate=30``  any FFmpeg input format named before the target
``realsense:213622075531``         a live RealSense D435/D405 by serial (``realsense:`` = first)
``realsense-bag:session.db3``      a RealSense recording (``.bag`` ROS1 / ``.db3`` ROS2)
``sim:glove``                      a simulated device: glove, glove-left, glove-right,
                                   ble-glove, gripper, s80c, s80m, d435, uvc
=================================  ==========================================================

Options: ``size=WxH``, ``fps=F``, ``pix=FMT`` (camera pixel format or ``mjpeg``),
``name=NAME`` (user name, ``device_names``; the slot base of a RealSense), ``role=ego`` (the
ego camera, §4.7) or ``role=none`` (not the ego camera: ``sim:s80m`` / ``sim:s80c`` are the
ego camera unless told so), ``key=uvc:...`` (a camera's stable key),
``depth=ffv1`` (lossless depth), ``realtime=0`` (a recording as fast as possible), ``side=left``.

Recordings are keyed ``d435:<file stem>`` until they are open (then ``d435:<serial>`` when the
recording names its camera); two recordings with the same stem are numbered ``d435:<stem>-2``...,
the same file given twice is refused.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from urllib.parse import parse_qsl

from ..errors import DeviceError
from .base import Source
from .camera import CameraSource
from .simulated import SIM_KINDS, SimSource, sim_device

__all__ = ["INPUT_FORMATS", "KINDS", "parse_device_spec", "parse_device_specs"]

KINDS = ("uvc", "realsense", "realsense-bag", "sim")
#: Largest frame side a ``size=`` may ask for (px; 8K, the top level of H.264 / HEVC).
MAX_SIDE = 8192
#: Largest ``fps=`` (frames/s), as ``egopool record --fps``.
MAX_FPS = 1000.0
#: FFmpeg input formats a ``uvc:`` target may name first (``uvc:lavfi:...``).
INPUT_FORMATS = ("lavfi", "v4l2", "video4linux2", "avfoundation", "dshow", "x11grab", "gdigrab", "file")
_OPTIONS = {
    "uvc": {"size", "fps", "pix", "name", "role", "key", "pace"},
    "realsense": {"size", "fps", "name", "role", "depth"},
    "realsense-bag": {"name", "role", "depth", "realtime"},
    "sim": {"size", "name", "side", "role"},
}


def _size(spec: str, value: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in value.lower().split("x"))
    except ValueError:
        raise DeviceError(f"--device {spec!r}: size must look like 1280x720, got {value!r}") from None
    if w <= 0 or h <= 0:
        raise DeviceError(f"--device {spec!r}: size must be positive, got {value!r}")
    if w > MAX_SIDE or h > MAX_SIDE:
        raise DeviceError(f"--device {spec!r}: size must be at most {MAX_SIDE}x{MAX_SIDE}, got {value!r}",
                          hint="use a mode `egopool devices` lists")
    return w, h


def _number(spec: str, key: str, value: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise DeviceError(f"--device {spec!r}: {key} must be a number, got {value!r}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise DeviceError(f"--device {spec!r}: {key} must be > 0, got {value!r}")
    if v > MAX_FPS:
        raise DeviceError(f"--device {spec!r}: {key} must be at most {MAX_FPS:g}, got {value!r}")
    return v


def _flag(spec: str, key: str, value: str) -> bool:
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise DeviceError(f"--device {spec!r}: {key} must be 0 or 1, got {value!r}")


def parse_device_spec(spec: str, *, counts: dict[str, int] | None = None) -> Source:
    """One ``--device`` string -> an unopened :class:`Source`.

    Parameters
    ----------
    spec:
        See the module docstring.
    counts:
        Running count per simulated key stem (numbers the keys of repeated simulated devices).

    Raises
    ------
    DeviceError
        Unknown kind or option, a malformed value; the message names the spec.
    """
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in KINDS:
        raise DeviceError(f"--device {spec!r}: unknown device kind {kind!r}",
                          hint=f"use one of {', '.join(k + ':...' for k in KINDS)}")
    target, _, query = rest.partition("?")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise DeviceError(f"--device {spec!r}: options must look like ?size=1280x720&fps=30") from None
    opts = dict(pairs)
    if len(opts) < len(pairs):
        twice = sorted({k for k, _ in pairs if sum(1 for k2, _ in pairs if k2 == k) > 1})
        raise DeviceError(f"--device {spec!r}: option(s) {twice} given twice", hint="give each option once")
    unknown = set(opts) - _OPTIONS[kind]
    if unknown:
        raise DeviceError(f"--device {spec!r}: unknown option(s) {sorted(unknown)}",
                          hint=f"{kind} takes {', '.join(sorted(_OPTIONS[kind]))}")
    role = opts.get("role") or None
    if role not in (None, "ego", "none"):
        raise DeviceError(f"--device {spec!r}: role must be 'ego' or 'none', got {role!r}")
    no_role = role == "none"
    role = None if no_role else role
    w, h = _size(spec, opts["size"]) if "size" in opts else (None, None)
    fps = _number(spec, "fps", opts["fps"]) if "fps" in opts else None
    name = opts.get("name") or None
    if name is not None and (name != name.strip() or any(unicodedata.category(ch) in ("Cc", "Cf", "Cs")
                                                         for ch in name)):
        raise DeviceError(f"--device {spec!r}: name {name!r} has control characters or spaces at its ends",
                          hint="name the device with visible characters (Chinese allowed)")
    if kind == "uvc":
        fmt = None
        head, colon, tail = target.partition(":")
        if colon and head in INPUT_FORMATS:
            fmt, target = (None if head == "file" else head), tail
        if not target:
            raise DeviceError(f"--device {spec!r}: no camera named", hint="e.g. uvc:/dev/video0")
        key = opts.get("key")
        if key is not None and not key.startswith("uvc:"):
            raise DeviceError(f"--device {spec!r}: key must start with 'uvc:', got {key!r}")
        pace = _flag(spec, "pace", opts["pace"]) if "pace" in opts else None
        return CameraSource(target, input_format=fmt, width=w, height=h, fps=fps, pixel_format=opts.get("pix"),
                            key=key, name=name, role=role, pace=pace, label=spec)
    if kind in ("realsense", "realsense-bag"):
        from .realsense import RealSenseSource

        depth = opts.get("depth") or None
        if depth not in (None, "ffv1", "hevc12"):
            raise DeviceError(f"--device {spec!r}: depth must be 'ffv1' or 'hevc12', got {depth!r}")
        if kind == "realsense":
            return RealSenseSource(target or None, width=w or 640, height=h or 480, fps=fps or 30.0,
                                   depth_codec=depth, name=name, role=role, label=spec)
        if not target:
            raise DeviceError(f"--device {spec!r}: no recording named", hint="e.g. realsense-bag:session.db3")
        realtime = _flag(spec, "realtime", opts["realtime"]) if "realtime" in opts else True
        counts = counts if counts is not None else {}
        stem = f"bag:{Path(target).stem}"  # same-named recordings in different folders: numbered keys
        counts[stem] = counts.get(stem, 0) + 1
        key = f"d435:{Path(target).stem}" + (f"-{counts[stem]}" if counts[stem] > 1 else "")
        return RealSenseSource(file=target, realtime=realtime, depth_codec=depth, name=name, role=role,
                               label=spec, key=key)
    if target not in SIM_KINDS:
        raise DeviceError(f"--device {spec!r}: unknown simulated device {target!r}",
                          hint=f"use one of {', '.join('sim:' + k for k in SIM_KINDS)}")
    counts = counts if counts is not None else {}
    stem = SIM_KINDS[target][1]  # s80c and s80m share the key stem: number them together
    counts[stem] = counts.get(stem, 0) + 1
    side = opts.get("side") or None
    if side not in (None, "left", "right"):
        raise DeviceError(f"--device {spec!r}: side must be 'left' or 'right', got {side!r}")
    dev, default_role = sim_device(target, counts[stem], width=w, height=h, name=name, side=side)
    return SimSource(dev, None if no_role else role or default_role, seed=counts[stem], label=spec)


def parse_device_specs(specs: list[str]) -> list[Source]:
    """Every ``--device`` of a command line, in order (see :func:`parse_device_spec`).

    Raises
    ------
    DeviceError
        A spec is malformed (see :func:`parse_device_spec`), or one recording file is given twice.
    """
    counts: dict[str, int] = {}
    sources = [parse_device_spec(s, counts=counts) for s in specs]
    files: dict[Path, Source] = {}
    for src in sources:
        path = getattr(src, "file", None)
        if path is None:
            continue
        other = files.setdefault(Path(os.path.abspath(path)), src)
        if other is not src:
            raise DeviceError(f"--device {src.label!r}: the recording {str(path)!r} is already given as "
                              f"--device {other.label!r}", hint="give each recording once")
    return sources
