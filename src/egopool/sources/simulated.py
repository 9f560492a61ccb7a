"""Simulated devices behind the source interface (``--device sim:glove``...).

Devices without a public SDK or OS interface (S80M SDK, UMI gripper BLE, glove BLE/USB) keep
standing in through :mod:`egopool.devices.simulated`: the same signals ``egopool simulate``
records, pushed against the wall clock from the source's own thread.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from ..devices.kinds import Device
from ..devices.simulated import SimulatedRig
from .base import Source

if TYPE_CHECKING:
    from ..devices.rig import RegisteredDevice, Rig
    from ..recorder import Frame, Recorder

__all__ = ["SIM_KINDS", "SimSource", "sim_device"]

#: ``sim:<what>`` -> (detected kind, key stem, default size, side, role).
SIM_KINDS: dict[str, tuple[str, str, tuple[int, int], str | None, str | None]] = {
    "glove": ("usb_glove", "usbglove:sim", (640, 480), None, None),
    "glove-left": ("usb_glove", "usbglove:sim-left", (640, 480), "left", None),
    "glove-right": ("usb_glove", "usbglove:sim-right", (640, 480), "right", None),
    "ble-glove": ("data_ble", "ble:sim", (640, 480), None, None),
    "gripper": ("gripper", "gripper:sim", (1280, 960), None, None),
    "s80c": ("s80c", "s80m:sim", (1280, 800), None, "ego"),
    "s80m": ("s80m", "s80m:sim", (1280, 800), None, "ego"),
    "d435": ("d435", "d435:sim", (640, 480), None, None),
    "uvc": ("uvc", "uvc:sim", (640, 480), None, None),
}


def sim_device(what: str, n: int, *, width: int | None = None, height: int | None = None,
               name: str | None = None, side: str | None = None) -> tuple[Device, str | None]:
    """The :class:`Device` (and default role) of the ``n``-th (1-based) ``sim:<what>`` device.

    Raises
    ------
    KeyError
        Unknown ``what`` (the spec parser turns it into a DeviceError).
    """
    kind, stem, (w, h), default_side, role = SIM_KINDS[what]
    return Device(kind, f"{stem}-{n}", name, width or w, height or h, side=side or default_side), role


class _Counting:
    """Counts what one simulated device pushes (its status line), forwarding to the recorder."""

    def __init__(self, rec: Recorder, src: SimSource) -> None:
        self._rec, self._src = rec, src

    def push_frame(self, slot: str, frame: Frame) -> None:
        if slot == self._src.count_key:
            self._src.delivered()
        self._rec.push_frame(slot, frame)

    def push_sample(self, column: str, value: Any, ns: int = 0) -> None:
        if column == self._src.count_key:
            self._src.delivered()
        self._rec.push_sample(column, value, ns)

    def push_points(self, column: str, points: Any, ns: Any = None) -> None:
        self._rec.push_points(column, points, ns)

    def mark_disconnected(self, sids: Any, reason: str) -> None:
        self._rec.mark_disconnected(sids, reason)


class SimSource(Source):
    """One simulated device (``sim:glove``, ``sim:gripper``, ``sim:s80c``...) of a live rig.

    Parameters
    ----------
    device, role:
        As :func:`sim_device` builds them.
    seed:
        Makes its signals deterministic.
    """

    def __init__(self, device: Device, role: str | None = None, *, seed: int = 0, label: str | None = None) -> None:
        super().__init__(device, role, label)
        self.seed = seed
        self._sim: SimulatedRig | None = None
        self.count_key: str | None = None

    def bind(self, reg: RegisteredDevice, rig: Rig | None = None) -> None:
        super().bind(reg, rig)
        assert rig is not None
        self._sim = SimulatedRig(rig, fps=reg.device.fps or 30.0, seed=self.seed, keys={reg.key})
        self.count_key = reg.rgb_slots[0] if reg.rgb_slots else (reg.signals.get("pressure") or reg.signals.get("state"))

    def start(self, rec: Recorder) -> None:
        """Start a new episode clock (the ENTER press of its SLAM) and push into ``rec``."""
        assert self._sim is not None
        self._sim.reset(time.monotonic_ns())
        super().start(rec)

    def _run(self, stop: threading.Event) -> None:
        assert self._sim is not None
        last = time.monotonic_ns()
        while not stop.is_set():
            now = time.monotonic_ns()
            rec = self._rec
            if rec is not None:
                self._sim.feed(last, now, _Counting(rec, self))
            last = now
            stop.wait(0.004)

    def _close(self) -> None:
        """Nothing to release: a simulated device holds no handle."""
