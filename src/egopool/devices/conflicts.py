"""The capability and conflict matrix (multi_device_storage.md §5.1).

Devices are checked in opening order; the device opened later is the one refused
("后开者被拒绝"), with a :class:`~egopool.errors.ConflictError` naming both devices
and the rule.

=============================  =======  ==============================================
combination                    allowed  rule
=============================  =======  ==============================================
UVC × N                        yes      up to 8 (``slots.MAX_UVC``)
D435/D405 × N                  yes      slots numbered per prefix
D435 + S80M/S80C               no       they share ``video0``/``video2``
S80M × S80M                    no       ``stereo_left/right`` are global slot names
gripper + standalone S80M      no       the gripper's ORB bridge owns the stereo pair
gripper + D435                 yes
gripper × 2                    yes      rig2 is ``gripper_2_``
glove × 2                      yes      ``left_glove`` / ``right_glove``
glove × 3                      no       no free sensor column
same device key twice          no       a device is opened once
=============================  =======  ==============================================

"Standalone" S80M: an S80M/S80C that is not the ego camera. The typical rig of §5.6
and Appendix B (two grippers + ego S80C) is allowed, so the ego head camera does not
count as the standalone S80M the gripper conflicts with (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConflictError
from .kinds import GLOVE_KINDS, Device

__all__ = ["MAX_GLOVES", "Opened", "check_can_open"]

MAX_GLOVES = 2


@dataclass(frozen=True)
class Opened:
    """What the matrix needs to know of an already open device."""

    device: Device
    role: str | None = None
    records_glove: bool = False


def _label(dev: Device) -> str:
    return f"{dev.kind} {dev.key}"


def check_can_open(opened: Sequence[Opened], new: Device, role: str | None, *, records_glove: bool) -> None:
    """Raise when ``new`` (with ``role``) may not be opened beside ``opened`` (§5.1).

    Parameters
    ----------
    opened:
        Devices already open, in opening order.
    new:
        The device being opened.
    role:
        ``"ego"`` when ``new`` is the ego camera, else None.
    records_glove:
        Whether ``new`` is recorded as a glove (``data_ble``/``usb_glove``, and ``ble`` in
        the lite program).

    Raises
    ------
    ConflictError
        The combination is refused; the message names the device already open.
    """
    kind = new.recorded_kind
    for o in opened:
        if o.device.key == new.key:
            raise ConflictError(f"{_label(new)} is already open", hint="a device is opened once per rig")
    for o in opened:
        other = o.device.recorded_kind
        pair = {kind, other}
        if pair == {"d435", "s80m"}:
            raise ConflictError(f"{_label(new)} refused: {_label(o.device)} is open and D435/D405 and S80M/S80C "
                                "share video0/video2 (§5.1)", hint="close the other camera first")
        if kind == other == "s80m":
            raise ConflictError(f"{_label(new)} refused: only one S80M/S80C at a time, stereo_left/stereo_right "
                                f"are global slot names and {_label(o.device)} holds them (§5.1)")
        if pair == {"gripper", "s80m"}:
            s80m_role = role if kind == "s80m" else o.role
            if s80m_role != "ego":
                raise ConflictError(f"{_label(new)} refused: {_label(o.device)} is open and a UMI gripper's ORB "
                                    "bridge owns the stereo pair of a standalone S80M (§5.1)",
                                    hint="open the S80M/S80C as the ego camera, or close one of them")
    if records_glove and new.kind in GLOVE_KINDS:
        gloves = [o for o in opened if o.records_glove]
        if len(gloves) >= MAX_GLOVES:
            raise ConflictError(f"{_label(new)} refused: {MAX_GLOVES} gloves are open "
                                f"({', '.join(g.device.key for g in gloves)}) and a third glove gets no free "
                                "sensor column (§4.5, §5.1)", hint="close one glove first")
