"""Intel RealSense D435 / D405 through ``pyrealsense2`` (multi_device_storage.md §4.3, §4.8).

Live cameras are picked by serial; recordings (``.bag``: ROS1, what RealSense Viewer wrote
up to SDK 2.57; ``.db3``: ROS2, what the SDK's recorder writes since 2.58) play back as if
live (at their own pace) or as fast as the recorder takes them::

    RealSenseSource(serial="213622075531", width=1280, height=720, fps=30)
    RealSenseSource(file="session.db3")                  # as if live
    RealSenseSource(file="session.db3", realtime=False)  # as fast as possible (virtual clock)

What reaches the recorder (docs/decisions.md R11):

* colour as uint8 ``(H, W, 3)`` RGB to ``<base>_rgb``, depth as uint16 **mm** ``(H, W)`` to
  ``<base>_depth`` (raw z16 × the device depth scale × 1000, rounded; 0 stays "no depth");
* a colour frame and the depth frame paired with it are pushed together, so depth frame i
  belongs to RGB frame i (§4.3); a colour frame without a new depth frame pushes no depth
  and the row repeats the previous one (``depth_dup`` = 1);
* ``align=True`` maps depth into the colour camera (``rs.align``), else depth keeps its own
  geometry and intrinsics (both are in ``calibration``);
* stamps of the D435 chain (file_format.md §7.1): ``raw_hw_ns`` = the frame's own device
  timestamp, ``hardware_ns`` = anchor + (frame counter − first counter) × T, the counter
  feeds ``*_dup`` / ``*_gap``, ``ts_src`` = 1 for a per-frame device clock, 2 for
  global time, 3 for a host-clock stamp (then ``host_ns`` = the host monotonic arrival);
* intrinsics into ``calibration`` (§6.5): ``left_camera`` = colour, ``right_camera`` = depth
  (= colour when aligned), ``depth_scale`` 0.001 (what is stored is mm), plus the device's
  own scale, model, and the depth-to-colour extrinsics.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..devices.kinds import Device, stereo_calibration
from ..errors import DeviceError
from ..recorder import Frame, Recorder
from .base import Source

__all__ = ["RealSenseSource", "list_realsense", "rs_module"]

_TS_SRC = {"hardware_clock": 1, "global_time": 2, "system_time": 3}


def rs_module() -> Any:
    """``pyrealsense2``, or a DeviceError saying how to install it (the ``devices`` extra)."""
    try:
        import pyrealsense2 as rs
    except ImportError as exc:
        raise DeviceError("RealSense support needs pyrealsense2",
                          hint="pip install 'egopool[devices]'") from exc
    return rs


def list_realsense() -> list[dict[str, Any]]:
    """Connected RealSense cameras: serial, name, firmware, USB type, and their colour/depth modes."""
    try:
        rs = rs_module()
    except DeviceError:
        return []
    out = []
    for dev in rs.context().query_devices():
        info = {k: (dev.get_info(getattr(rs.camera_info, k)) if dev.supports(getattr(rs.camera_info, k)) else None)
                for k in ("serial_number", "name", "firmware_version", "usb_type_descriptor")}
        modes = set()
        for sensor in dev.query_sensors():
            for p in sensor.get_stream_profiles():
                if p.is_video_stream_profile() and p.stream_type() in (rs.stream.color, rs.stream.depth):
                    v = p.as_video_stream_profile()
                    modes.add((str(p.stream_type()).split(".")[-1], v.width(), v.height(), p.fps(),
                               str(p.format()).split(".")[-1]))
        info["modes"] = [dict(zip(("stream", "width", "height", "fps", "format"), m)) for m in sorted(modes)]
        out.append(info)
    return out


def _intrinsic(intr: Any) -> tuple[list[float], list[float]]:
    return [float(intr.fx), float(intr.fy), float(intr.ppx), float(intr.ppy)], [float(c) for c in intr.coeffs]


class RealSenseSource(Source):
    """A RealSense D435/D405 (live by serial, or a recording) as a ``d435`` device of the rig.

    Parameters
    ----------
    serial:
        Live camera serial (``d435:<serial>`` is its key). None with ``file=None``: the first camera.
    file:
        A ``.bag`` / ``.db3`` recording to play instead of a live camera.
    width, height, fps:
        Requested colour and depth mode of a live camera (px, frames/s); a recording has its own.
    realtime:
        Recordings: play at their own pace (True) or as fast as the recorder takes them (False,
        for :meth:`Recorder.record_virtual` through :meth:`feed`).
    align:
        Map depth into the colour camera's geometry (``rs.align``).
    depth_codec:
        ``None`` (the writer's 12-bit log HEVC) or ``"ffv1"`` (lossless mm).
    name, role:
        User name (also the slot base: ``D405_head`` -> ``D405_head_rgb``, §4.3), ``"ego"`` or None.

    Raises
    ------
    DeviceError
        (from :meth:`open`) pyrealsense2 missing, no such camera or file, no colour + depth stream.
    """

    def __init__(self, serial: str | None = None, *, file: str | os.PathLike[str] | None = None,
                 width: int = 640, height: int = 480, fps: float = 30.0, realtime: bool = True, align: bool = False,
                 depth_codec: str | None = None, name: str | None = None, role: str | None = None,
                 label: str | None = None) -> None:
        self.serial, self.file = serial, Path(file) if file is not None else None
        self.req = (int(width), int(height), float(fps))
        self.realtime, self.align = bool(realtime), bool(align)
        self.replayable = self.file is not None and not self.realtime
        key = f"d435:{serial}" if serial else f"d435:{self.file.stem if self.file else 'first'}"
        dev = Device("d435", key, name, int(width), int(height), float(fps), depth_codec=depth_codec)
        super().__init__(dev, role, label or (f"realsense-bag:{file}" if file else f"realsense:{serial}"))
        self._rs: Any = None
        self._device: Any = None
        self._sensors: list[Any] = []
        self._syncer: Any = None
        self._aligner: Any = None
        self.depth_scale = 0.001
        self.model = ""
        self._anchor: int | None = None
        self._counter0 = 0
        self._last = {"color": -1, "depth": -1}
        self._pending_depth: Any = None
        self._virtual: collections.deque[tuple[int, Any, Any]] = collections.deque()
        self._vt0: tuple[int, int] | None = None
        self._exhausted = False

    # -- open --------------------------------------------------------------------------------------
    def _open(self) -> Device:
        rs = self._rs = rs_module()
        ctx = rs.context()
        try:
            if self.file is not None:
                if not self.file.is_file():
                    raise DeviceError("RealSense recording not found", path=self.file)
                dev = ctx.load_device(str(self.file))
                playback = dev.as_playback()
                playback.set_real_time(self.realtime)
            else:
                devs = list(ctx.query_devices())
                found = [d for d in devs if self.serial is None or d.get_info(rs.camera_info.serial_number) == self.serial]
                if not found:
                    seen = [d.get_info(rs.camera_info.serial_number) for d in devs]
                    raise DeviceError(f"no RealSense camera with serial {self.serial!r} (connected: {seen or 'none'})",
                                      hint="list cameras with `egopool devices`")
                dev = found[0]
                self.serial = dev.get_info(rs.camera_info.serial_number)
        except DeviceError:
            raise
        except RuntimeError as exc:  # pyrealsense2's one error type
            raise DeviceError(f"cannot open RealSense {self.label}: {exc}", path=self.file) from exc
        self._device = dev
        self.model = dev.get_info(rs.camera_info.name) if dev.supports(rs.camera_info.name) else "RealSense"
        if self.file is not None and dev.supports(rs.camera_info.serial_number):
            self.serial = dev.get_info(rs.camera_info.serial_number)
        color_p, depth_p = self._pick_profiles(dev)
        self._sensors = []
        for sensor in dev.query_sensors():
            mine = [p for p in (color_p, depth_p) if any(p == q for q in sensor.get_stream_profiles())]
            if mine:
                sensor.open(mine if len(mine) > 1 else mine[0])
                self._sensors.append(sensor)
            if sensor.is_depth_sensor():
                self.depth_scale = float(sensor.as_depth_sensor().get_depth_scale())
        cv, dv = color_p.as_video_stream_profile(), depth_p.as_video_stream_profile()
        cal = self._calibration(cv, dv, depth_p.get_extrinsics_to(color_p), dev)
        self._aligner = rs.align(rs.stream.color) if self.align else None
        dsize = None if self.align or (dv.width(), dv.height()) == (cv.width(), cv.height()) else (dv.width(), dv.height())
        kind = "d405" if "D405" in self.model else "d435"
        key = f"d435:{self.serial}" if self.serial else self.device.key
        return dataclasses.replace(self.device, kind=kind, key=key, width=cv.width(), height=cv.height(),
                                   fps=float(color_p.fps()), depth_size=dsize, calibration=cal)

    def _pick_profiles(self, dev: Any) -> tuple[Any, Any]:
        rs = self._rs
        w, h, fps = self.req
        color = depth = None
        for sensor in dev.query_sensors():
            for p in sensor.get_stream_profiles():
                if not p.is_video_stream_profile():
                    continue
                v = p.as_video_stream_profile()
                live_ok = self.file is not None or (v.width(), v.height(), p.fps()) == (w, h, int(fps))
                if p.stream_type() == rs.stream.color and p.format() == rs.format.rgb8 and live_ok and color is None:
                    color = p
                if p.stream_type() == rs.stream.depth and p.format() == rs.format.z16 and live_ok and depth is None:
                    depth = p
        if color is None or depth is None:
            what = "recording" if self.file is not None else f"camera in mode {w}x{h}@{fps:g} fps"
            raise DeviceError(f"RealSense {self.label}: the {what} has no "
                              f"{'rgb8 colour' if color is None else 'z16 depth'} stream", path=self.file,
                              hint="record colour (rgb8) and depth (z16); `egopool devices` lists a camera's modes")
        return color, depth

    def _calibration(self, cv: Any, dv: Any, extr: Any, dev: Any) -> dict[str, Any]:
        rs = self._rs
        ci, cd = _intrinsic(cv.get_intrinsics())
        di, _ = _intrinsic(dv.get_intrinsics())
        baseline = 0.0
        for sensor in dev.query_sensors():
            if sensor.is_depth_sensor() and sensor.supports(rs.option.stereo_baseline):
                baseline = float(sensor.get_option(rs.option.stereo_baseline)) / 1000.0  # mm -> m
        cal = stereo_calibration("realsense", resolution=(cv.width(), cv.height()), fps=float(cv.fps()),
                                 baseline=baseline, intrinsic=ci, right_intrinsic=ci if self.align else di,
                                 distortion=cd, depth_scale=0.001)
        cal.update({"model": self.model, "device_depth_scale": self.depth_scale, "depth_aligned_to_color": self.align,
                    "depth_to_color": {"rotation": [float(v) for v in extr.rotation],
                                       "translation": [float(v) for v in extr.translation]}})
        if not self.align:
            cal["depth_resolution"] = [dv.width(), dv.height()]
        return cal

    # -- frames ------------------------------------------------------------------------------------
    def _start_sensors(self) -> None:
        rs = self._rs
        self._syncer = rs.syncer(64)
        for sensor in self._sensors:
            sensor.start(self._syncer)

    def _stamps(self, frame: Any, arrival: int) -> tuple[int, int, int, int, int]:
        """``(hardware_ns, raw_hw_ns, counter, ts_src, host_ns)`` of a colour or depth frame."""
        raw = int(round(frame.get_timestamp() * 1e6))  # ms -> ns
        counter = int(frame.get_frame_number())
        src = _TS_SRC.get(str(frame.get_frame_timestamp_domain()).split(".")[-1], 0)
        if self._anchor is None:
            self._anchor, self._counter0 = raw, counter
        period = int(round(1e9 / (self.device.fps or 30.0)))
        hw = self._anchor + (counter - self._counter0) * period
        return hw, raw, counter, src, arrival if src == 3 else 0

    def _depth_mm(self, frame: Any) -> np.ndarray:
        raw = np.asanyarray(frame.get_data())
        if abs(self.depth_scale - 0.001) < 1e-12:
            return np.array(raw, dtype=np.uint16, copy=True)
        mm = np.rint(raw.astype(np.float64) * (self.depth_scale * 1000.0))
        return np.minimum(mm, 65535).astype(np.uint16)

    def _pairs(self, fs: Any) -> tuple[Any, Any] | None:
        """The (colour, depth-or-None) to push for one frameset, or None (nothing new to push)."""
        color, depth = fs.get_color_frame(), fs.get_depth_frame()
        new_c = color if color and color.get_frame_number() != self._last["color"] else None
        new_d = depth if depth and depth.get_frame_number() != self._last["depth"] else None
        if new_d is not None:
            self._last["depth"] = new_d.get_frame_number()
        if new_c is None:
            if new_d is not None:
                self._pending_depth = (new_d, fs)
            return None
        self._last["color"] = new_c.get_frame_number()
        if self._aligner is not None:
            if new_d is None:  # aligning needs both in one frameset: this depth counts as not delivered
                self._pending_depth = None
                return new_c, None
            aligned = self._aligner.process(fs)
            return aligned.get_color_frame() or new_c, aligned.get_depth_frame()
        if new_d is None and self._pending_depth is not None:
            new_d = self._pending_depth[0]
        self._pending_depth = None
        return new_c, new_d

    def _frames_of(self, color: Any, depth: Any, arrival: int) -> tuple[Frame, Frame | None]:
        hw, raw, counter, src, host = self._stamps(color, arrival)
        rgb = np.array(np.asanyarray(color.get_data()), dtype=np.uint8, copy=True)
        cf = Frame(rgb, hw, raw, counter, src, host)
        df = None
        if depth is not None:
            dhw, draw, dcounter, dsrc, dhost = self._stamps(depth, arrival)
            df = Frame(self._depth_mm(depth), dhw, draw, dcounter, dsrc, dhost)
        return cf, df

    def _run(self, stop: threading.Event) -> None:
        assert self.reg is not None
        rgb_slot, depth_slot = self.reg.rgb_slots[0], next(iter(self.reg.depth_slots))
        self._start_sensors()
        idle_since = time.monotonic()
        while not stop.is_set():
            ok, fs = self._syncer.try_wait_for_frames(100)
            if not ok:
                if self.file is not None and self._playback_done() and time.monotonic() - idle_since > 0.5:
                    return  # the recording played to its end
                continue
            idle_since = time.monotonic()
            pair = self._pairs(fs)
            if pair is None:
                continue
            cf, df = self._frames_of(*pair, time.monotonic_ns())
            self.delivered()
            rec = self._rec
            if rec is not None:  # colour and its depth go in together (§4.3)
                rec.push_frame(rgb_slot, cf)
                if df is not None:
                    rec.push_frame(depth_slot, df)

    def _playback_done(self) -> bool:
        try:
            return bool(self._device.as_playback().current_status() == self._rs.playback_status.stopped)
        except RuntimeError:
            return True

    # -- as fast as possible -----------------------------------------------------------------------
    def feed(self, t0: int, t1: int, rec: Recorder) -> None:
        """Virtual-clock feed for :meth:`Recorder.record_virtual` (``realtime=False`` recordings).

        Frames are placed on the host clock at ``start + (device time - first device time)``;
        every frame whose place is in ``(t0, t1]`` (ns) is pushed. The playback runs ahead as far
        as the frame buffer allows and waits for the recorder otherwise, so no frame is lost.
        """
        assert self.reg is not None
        rgb_slot, depth_slot = self.reg.rgb_slots[0], next(iter(self.reg.depth_slots))
        if self._syncer is None:
            self._start_sensors()
        while not self._exhausted and (not self._virtual or self._virtual[-1][0] <= t1):
            ok, fs = self._syncer.try_wait_for_frames(2000)
            if not ok:
                self._exhausted = self._playback_done()
                if self._exhausted:
                    self._state = "ended"
                continue
            pair = self._pairs(fs)
            if pair is None:
                continue
            dev_ns = int(round(pair[0].get_timestamp() * 1e6))
            if self._vt0 is None:
                self._vt0 = (t1, dev_ns)
            host = self._vt0[0] + (dev_ns - self._vt0[1])
            cf, df = self._frames_of(pair[0], pair[1], host)
            self._virtual.append((host, cf, df))
        while self._virtual and self._virtual[0][0] <= t1:
            _, cf, df = self._virtual.popleft()
            self.delivered()
            rec.push_frame(rgb_slot, cf)
            if df is not None:
                rec.push_frame(depth_slot, df)

    @property
    def exhausted(self) -> bool:
        """Virtual-clock playback delivered its last frame."""
        return self._exhausted and not self._virtual

    def _close(self) -> None:
        for sensor in self._sensors:
            for op in (sensor.stop, sensor.close):
                try:
                    op()
                except RuntimeError:  # not started / already closed
                    pass
        self._sensors = []
        self._device = None
