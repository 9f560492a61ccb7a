"""What ``egopool devices`` lists: cameras FFmpeg can open on this OS, with their modes, and
connected RealSense cameras.

Cameras are enumerated by FFmpeg itself (``av.enumerate_input_devices`` for the OS's input
format: ``v4l2`` / ``avfoundation`` / ``dshow``); their modes are what FFmpeg reports when
asked (``list_formats=all`` for v4l2, ``list_options=true`` for dshow). RealSense cameras come
from ``pyrealsense2`` when the ``devices`` extra is installed.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import av

from ..errors import install_hint
from .camera import default_input_format
from .realsense import list_realsense

__all__ = ["camera_modes", "list_cameras", "list_devices", "parse_mode_lines"]

_V4L2_LINE = re.compile(r"^(Raw|Compressed)\s*:\s*(\S+)\s*:\s*(.*)\s+:\s+(.*)$")
_DSHOW_LINE = re.compile(r"(pixel_format|vcodec)=(\S+)\s+min s=(\d+x\d+) fps=([\d.]+)\s+max s=(\d+x\d+) fps=([\d.]+)")


def parse_mode_lines(fmt: str, lines: list[str]) -> list[dict[str, Any]]:
    """Modes out of FFmpeg's own listing lines (v4l2 ``list_formats``, dshow ``list_options``)."""
    modes: list[dict[str, Any]] = []
    for line in lines:
        line = re.sub(r"^\[[^\]]*\]\s*", "", line.strip())  # FFmpeg's "[v4l2 @ 0x..]" context prefix
        m = _V4L2_LINE.match(line) if fmt in ("v4l2", "video4linux2") else None
        if m:
            modes.append({"pix_fmt": m.group(2), "compressed": m.group(1) == "Compressed",
                          "description": m.group(3), "sizes": m.group(4).split()})
            continue
        d = _DSHOW_LINE.search(line) if fmt == "dshow" else None
        if d:
            modes.append({"pix_fmt": d.group(2), "compressed": d.group(1) == "vcodec",
                          "sizes": sorted({d.group(3), d.group(5)}), "fps": [float(d.group(4)), float(d.group(6))]})
    return modes


def camera_modes(name: str, fmt: str) -> list[dict[str, Any]]:
    """The modes FFmpeg lists for camera ``name`` of input format ``fmt`` ([] when it lists none)."""
    option = {"v4l2": "list_formats", "video4linux2": "list_formats", "dshow": "list_options"}.get(fmt)
    if option is None:
        return []
    target = name if fmt != "dshow" or name.startswith("video=") else f"video={name}"
    with av.logging.Capture() as logs:
        try:
            av.open(target, format=fmt, options={option: "all" if fmt != "dshow" else "true"}, timeout=5.0).close()
        except Exception:  # noqa: BLE001 - FFmpeg exits after listing; the listing is in the log
            pass
    return parse_mode_lines(fmt, [str(entry[2]) for entry in logs])


def list_cameras(fmt: str | None = None) -> tuple[str, list[dict[str, Any]], str | None]:
    """``(input format, cameras, why none could be listed)``; each camera ``{name, description, modes, spec}``."""
    fmt = fmt or default_input_format()
    try:
        found = av.enumerate_input_devices(fmt)
    except Exception as exc:  # noqa: BLE001 - no such input format in this FFmpeg, or no enumeration
        return fmt, [], f"{fmt}: {exc}"
    cams = []
    for d in found:
        if d.media_types and "video" not in d.media_types:
            continue
        cams.append({"name": d.name, "description": d.description, "default": bool(d.is_default),
                     "modes": camera_modes(d.name, fmt), "spec": f"uvc:{d.name}" if fmt == default_input_format()
                     else f"uvc:{fmt}:{d.name}"})
    return fmt, cams, None


def list_devices() -> dict[str, Any]:
    """Everything ``egopool devices`` shows: ``{platform, input_format, cameras, realsense, notes}``."""
    fmt, cams, why = list_cameras()
    notes = [why] if why else []
    try:
        import pyrealsense2  # noqa: F401
        realsense = list_realsense()
    except ImportError:
        realsense = []
        notes.append(f"RealSense: pyrealsense2 is not installed ({install_hint('devices')})")
    for r in realsense:
        r["spec"] = f"realsense:{r['serial_number']}"
    return {"platform": sys.platform, "input_format": fmt, "cameras": cams, "realsense": realsense, "notes": notes}
