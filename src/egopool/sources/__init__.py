"""Device sources: real cameras (FFmpeg input devices via PyAV), RealSense (pyrealsense2), and the
simulated stand-ins, behind one interface; the recording session of ``egopool record``.

Public surface: :class:`Source`, :class:`CameraSource`, :class:`RealSenseSource` (needs the
``devices`` extra), :class:`SimSource`, :class:`RecordingSession`, :func:`parse_device_spec`,
:func:`parse_device_specs`, :func:`list_devices`.
"""

from __future__ import annotations

from .base import RateMeter, Source, SourceStatus
from .camera import CameraSource, default_input_format
from .discovery import list_devices
from .realsense import RealSenseSource
from .session import DeviceLine, RecordingSession
from .simulated import SimSource
from .spec import parse_device_spec, parse_device_specs

__all__ = ["CameraSource", "DeviceLine", "RateMeter", "RealSenseSource", "RecordingSession", "SimSource", "Source",
           "SourceStatus", "default_input_format", "list_devices", "parse_device_spec", "parse_device_specs"]

