"""Device kinds, slot and column naming, the rig and simulated sources (multi_device_storage.md §2–§6).

Public surface: :class:`Device`, :class:`Rig`, :class:`RegisteredDevice`,
:class:`SimulatedRig`, :func:`build_rig`, :func:`stereo_calibration`.
"""

from __future__ import annotations

from .kinds import Device, slot_base, stereo_calibration
from .rig import RegisteredDevice, Rig
from .simulated import RIGS, SimulatedRig, build_rig

__all__ = ["RIGS", "Device", "RegisteredDevice", "Rig", "SimulatedRig", "build_rig", "slot_base",
           "stereo_calibration"]
