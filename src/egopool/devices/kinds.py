"""Device kinds, the devices to open, and their compact ``devices[]`` entries (multi_device_storage.md §2.1, §4, §6.4).

A :class:`Device` is what a detector hands the recorder: a kind, a stable key
(``<kind>:<id>``), an optional user name and the stream geometry. Kinds accepted as
detected: ``uvc``, ``d435``/``d405``, ``s80m``/``s80c``, ``gripper``, ``data_ble``
(BLE glove), ``ble`` (other BLE device) and ``usb_glove``. D405 and S80C are models of
the ``d435`` and ``s80m`` kinds (§4.1): ``devices[].kind`` is written as the kind, the
model only shows in the name.

Glove entries depend on the program that records (§4.5, §6.4): the main program
writes every glove as ``kind: "data_ble"`` with ``slots: []`` and does not record a
plain ``ble`` device at all (placeholder, no data, not in ``devices``); the lite
program writes ``"ble_glove"`` / ``"usb_glove"`` with ``slots: [<sensor>]`` and opens a
``ble`` device as a glove.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import SchemaError

__all__ = [
    "DETECTED_KINDS",
    "GLOVE_KINDS",
    "KEY_PREFIXES",
    "PROGRAMS",
    "VIDEO_KINDS",
    "Device",
    "glove_entry_kind",
    "kind_of",
    "slot_base",
    "stereo_calibration",
]

#: Detected kind -> recorded kind (``devices[].kind`` for non-glove devices, §4.1).
DETECTED_KINDS: dict[str, str] = {
    "uvc": "uvc", "d435": "d435", "d405": "d435", "s80m": "s80m", "s80c": "s80m",
    "gripper": "gripper", "data_ble": "data_ble", "ble": "ble", "usb_glove": "usb_glove",
}
GLOVE_KINDS = ("data_ble", "ble", "usb_glove")
#: Kinds that can host the ego role (§4.1 "ego 相机 实际是 d435/s80m/uvc 之一").
VIDEO_KINDS = ("uvc", "d435", "s80m")
PROGRAMS = ("main", "lite")

#: Recorded kind -> the key prefixes its devices carry (§2.1, §4.1 "设备 key 示例").
KEY_PREFIXES: dict[str, tuple[str, ...]] = {
    "uvc": ("uvc:",), "d435": ("d435:",), "s80m": ("s80m:",), "gripper": ("gripper:",),
    "data_ble": ("ble:", "usbglove:"), "ble": ("ble:",), "usb_glove": ("usbglove:",),
}

_DEFAULT_MODEL = {"uvc": "UVC", "d435": "D435", "d405": "D405", "s80m": "S80M", "s80c": "S80C",
                  "gripper": "UMI 夹爪", "data_ble": "BLE 手套", "ble": "BLE", "usb_glove": "USB 手套"}
_SLOT_BAD = re.compile(r"[^\w]+", re.UNICODE)


def kind_of(detected: str) -> str:
    """The recorded kind of a detected kind (``d405 -> d435``, ``s80c -> s80m``).

    Raises
    ------
    SchemaError
        Unknown kind.
    """
    try:
        return DETECTED_KINDS[detected]
    except KeyError:
        raise SchemaError(f"unknown device kind {detected!r}",
                          hint=f"use one of {sorted(DETECTED_KINDS)}") from None


def glove_entry_kind(detected: str, program: str) -> str | None:
    """``devices[].kind`` of a glove for ``program`` (§4.5, §6.4), None = not in ``devices``.

    main: ``data_ble`` and ``usb_glove`` -> ``"data_ble"``; ``ble`` -> None (placeholder).
    lite: ``data_ble`` and ``ble`` -> ``"ble_glove"``; ``usb_glove`` -> ``"usb_glove"``.
    """
    if program == "main":
        return None if detected == "ble" else "data_ble"
    return "usb_glove" if detected == "usb_glove" else "ble_glove"


def slot_base(name: str) -> str:
    """Clean a user name into a video-slot base (§2.4: illegal characters -> ``_``, Chinese kept).

    ``"D405 head" -> "D405_head"``; runs of illegal characters collapse into one ``_``
    and leading/trailing ``_`` are stripped (a slot may not start with ``_``, §11).
    Returns ``""`` when nothing usable is left.
    """
    return _SLOT_BAD.sub("_", name).strip("_")


def stereo_calibration(name: str, *, resolution: tuple[int, int], fps: float, baseline: float,
                       intrinsic: Sequence[float], right_intrinsic: Sequence[float] | None = None,
                       distortion: Sequence[float] = (0.0, 0.0, 0.0, 0.0, 0.0), depth_scale: float = 0.001,
                       cam_imu_timeshift: float = 0.0, kind: str = "stereo_rgbd_camera") -> dict[str, Any]:
    """A calibration dict of the shape ``StereoCalibration.to_dict()`` produces (§6.5).

    Parameters
    ----------
    name:
        Calibration name (the calibration key it is stored under, e.g. ``head_stereo``).
    resolution:
        ``(width, height)`` in px.
    fps:
        Stream rate, frames/s.
    baseline:
        Stereo baseline in m.
    intrinsic, right_intrinsic:
        ``[fx, fy, cx, cy]`` in px (right defaults to the left one).
    distortion:
        Distortion coefficients (5, plumb-bob).
    depth_scale:
        Metres per depth unit (0.001: depth in mm).
    cam_imu_timeshift:
        Camera-to-IMU time shift in s.
    """
    dist = [float(d) for d in distortion]
    right = right_intrinsic if right_intrinsic is not None else intrinsic
    return {
        "type": kind, "name": name, "resolution": [int(resolution[0]), int(resolution[1])], "fps": float(fps),
        "baseline": float(baseline),
        "left_camera": {"intrinsic": [float(v) for v in intrinsic], "distortion": dist},
        "right_camera": {"intrinsic": [float(v) for v in right], "distortion": list(dist)},
        "depth_scale": float(depth_scale), "cam_imu_timeshift": float(cam_imu_timeshift),
    }


@dataclass(frozen=True)
class Device:
    """One device to open, as a detector would report it (§2.1, §4.1).

    Attributes
    ----------
    kind:
        Detected kind: ``uvc``, ``d435``, ``d405``, ``s80m``, ``s80c``, ``gripper``,
        ``data_ble``, ``ble`` or ``usb_glove``.
    key:
        Stable device key ``<kind>:<id>`` (``d435:213622075531``, ``gripper:CC:BA:97:25:B4:44``,
        ``usbglove:364933593535``); the only hardware identity written to disk (§5.2 rule 3).
    name:
        User name (``device_names`` value). For a D435/D405 it is also the slot base
        (``D405_head`` -> ``D405_head_rgb``, §4.3); unnamed D435s use ``d435``.
    width, height, fps:
        Geometry of the recorded RGB (and depth) streams, px and frames/s
        (``fps=None``: the task fps).
    depth:
        Whether the device records a depth stream (D435/D405 always; S80C when its depth
        engine is available, default True for ``s80c``, False for ``s80m``).
    side:
        Gloves: ``"left"`` / ``"right"`` (the persisted sensor role, §4.5); None = first free.
    sensor:
        Gloves: explicit sensor column name (default ``<side>_glove``); checked against §2.4.
    calibration:
        D435/S80M: the device's stereo calibration (:func:`stereo_calibration` form), or None.
    depth_size:
        ``(width, height)`` of the depth stream when it differs from the RGB one.
    depth_codec:
        Depth stream codec: None = the writer's default (``hevc12``, 12-bit log code, file_format.md
        §8), ``"ffv1"`` = lossless uint16 mm (MKV).
    """

    kind: str
    key: str
    name: str | None = None
    width: int = 640
    height: int = 480
    fps: float | None = None
    depth: bool | None = None
    side: str | None = None
    sensor: str | None = None
    calibration: Mapping[str, Any] | None = field(default=None, compare=False)
    depth_size: tuple[int, int] | None = None
    depth_codec: str | None = None

    def __post_init__(self) -> None:
        rec = kind_of(self.kind)
        if not isinstance(self.key, str) or not self.key.startswith(KEY_PREFIXES[rec]) or \
                len(self.key) <= len(self.key.split(":", 1)[0]) + 1:
            raise SchemaError(f"device key {self.key!r} of a {self.kind} device must look like "
                              f"'{KEY_PREFIXES[rec][0]}<stable id>' (§2.1)")
        if self.side not in (None, "left", "right"):
            raise SchemaError(f"glove side must be 'left' or 'right', got {self.side!r}")
        if self.width <= 0 or self.height <= 0:
            raise SchemaError(f"device {self.key}: frame size must be positive, got {self.width}x{self.height}")
        if self.depth_codec not in (None, "hevc12", "ffv1"):
            raise SchemaError(f"device {self.key}: depth codec must be 'hevc12' or 'ffv1', got {self.depth_codec!r}")

    @property
    def recorded_kind(self) -> str:
        """``devices[].kind`` for non-glove kinds (``d405 -> d435``, ``s80c -> s80m``)."""
        return kind_of(self.kind)

    @property
    def model(self) -> str:
        """Default display name of the model (``D435``, ``S80C``, ``UMI 夹爪``...)."""
        return _DEFAULT_MODEL[self.kind]

    @property
    def display_name(self) -> str:
        """The user name, or the model name when unnamed."""
        return self.name if self.name else self.model

    @property
    def has_depth(self) -> bool:
        """Whether a depth stream is recorded (§4.3, §4.4)."""
        if self.recorded_kind == "d435":
            return True if self.depth is None else bool(self.depth)
        if self.recorded_kind == "s80m":
            return (self.kind == "s80c") if self.depth is None else bool(self.depth)
        return False
