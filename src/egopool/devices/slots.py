"""Video-slot names, column prefixes and glove sensor columns (multi_device_storage.md §2.3, §4.2–§4.7).

Pure naming functions; the :class:`~egopool.devices.rig.Rig` calls them in opening
order. Rules:

* the first instance is never numbered; the second and later get ``_2``, ``_3``...
  (slots ``d435_rgb_2``, ``gripper_2_rgb``; column prefix ``gripper_2_``), and rig1
  of the gripper keeps the empty prefix (never ``gripper_1_``);
* UVC: index 0 -> ``head_left_rgb``, 1 -> ``head_right_rgb``, N >= 2 -> ``head_right_rgb_N``;
* D435/D405: ``<base>_rgb`` / ``<base>_depth``, base = cleaned user name or ``d435``;
* S80M/S80C: the global slots ``stereo_left`` / ``stereo_right`` / ``stereo_depth``;
* new namespaces start with the role name: ``ego_``, then ``ego_2_``.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from ..errors import ConflictError

__all__ = [
    "MAX_UVC",
    "S80M_SLOTS",
    "d435_slots",
    "ego_prefix",
    "glove_sensor",
    "gripper_prefix",
    "gripper_slots",
    "strip_instance",
    "uvc_slot",
]

#: ``settings.MAX_CAMERAS``: design limit of UVC cameras (§4.2).
MAX_UVC = 8
S80M_SLOTS = ("stereo_left", "stereo_right", "stereo_depth")
_INSTANCE = re.compile(r"_\d+$")


def uvc_slot(index: int) -> str:
    """Slot of the UVC camera opened ``index``-th (0-based) (§4.2 ``_camera_slot_name``).

    Raises
    ------
    ConflictError
        ``index >= MAX_UVC`` (the design limit of 8 cameras).
    """
    if index < 0:
        raise ValueError(f"UVC index must be >= 0, got {index}")
    if index >= MAX_UVC:
        raise ConflictError(f"a {index + 1}th UVC camera is refused: the design limit is {MAX_UVC} (§4.2)")
    if index == 0:
        return "head_left_rgb"
    if index == 1:
        return "head_right_rgb"
    return f"head_right_rgb_{index}"


def _numbered(name: str, n: int) -> str:
    return name if n == 1 else f"{name}_{n}"


def d435_slots(base: str, taken: Collection[str]) -> tuple[str, str]:
    """``(<base>_rgb, <base>_depth)`` for the next D435/D405 with slot base ``base`` (§4.3).

    The first free instance number is used for both slots together: ``d435_rgb`` /
    ``d435_depth``, then ``d435_rgb_2`` / ``d435_depth_2``... A slot already taken by
    any device of the rig counts as taken (§5.2 rule 1: one image_key per device).
    """
    n = 1
    while True:
        rgb, depth = _numbered(f"{base}_rgb", n), _numbered(f"{base}_depth", n)
        if rgb not in taken and depth not in taken:
            return rgb, depth
        n += 1


def gripper_prefix(rig: int) -> str:
    """Column prefix of gripper rig ``rig`` (1-based): ``""`` for rig1, ``gripper_<rig>_`` after (§2.2, §2.3)."""
    if rig < 1:
        raise ValueError(f"gripper rig numbers start at 1, got {rig}")
    return "" if rig == 1 else f"gripper_{rig}_"


def gripper_slots(rig: int) -> tuple[str, ...]:
    """The five slots of gripper rig ``rig`` in registration order (§4.6, Appendix B).

    ``(gripper_stereo_left, gripper_rgb, gripper_pose, gripper_force_left,
    gripper_force_right)`` for rig1, with ``gripper_2_`` in place of ``gripper_`` for
    rig2. Only ``*_rgb`` is recorded; the stereo slot feeds SLAM and the display.
    """
    p = "gripper_" if rig == 1 else f"gripper_{rig}_"
    return (f"{p}stereo_left", f"{p}rgb", f"{p}pose", f"{p}force_left", f"{p}force_right")


def ego_prefix(index: int) -> str:
    """Trajectory prefix of the ``index``-th (1-based) ego camera: ``ego_``, ``ego_2_``... (§2.3, §4.7)."""
    if index < 1:
        raise ValueError(f"ego numbers start at 1, got {index}")
    return "ego_" if index == 1 else f"ego_{index}_"


def glove_sensor(side: str | None, taken: Collection[str], key: str) -> str:
    """Sensor column of a glove: its side's ``<side>_glove``, or the first free one (§4.5).

    Raises
    ------
    ConflictError
        The side's column is already written by another glove, or both are taken (a
        third glove is refused, never silently mapped onto ``left_glove``).
    """
    if side is not None:
        sensor = f"{side}_glove"
        if sensor in taken:
            raise ConflictError(f"glove {key} wants observation.{sensor}, which another glove already writes "
                                "(§5.2 rule 2: one writer per column)",
                                hint="re-bind the glove to the other hand or close the other glove")
        return sensor
    for sensor in ("left_glove", "right_glove"):
        if sensor not in taken:
            return sensor
    raise ConflictError(f"glove {key} refused: left_glove and right_glove are both taken, a third glove gets no "
                        "sensor column (§4.5, §5.1)", hint="close one of the two open gloves first")


def strip_instance(slot: str) -> str:
    """A slot without its instance number: ``d435_rgb_2 -> d435_rgb`` (§6.5 calibration keys)."""
    return _INSTANCE.sub("", slot)
