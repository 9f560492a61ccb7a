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
* a colour frame and the depth frame of the same capture are pushed together, so depth frame i
  belongs to RGB frame i (§4.3): paired by their frame numbers when the device numbers both streams
  by capture, else by their stamps at the colour-to-depth offset measured on the first frames
  (:mod:`.pairing`, docs/decisions.md R21); a colour frame whose depth never came pushes no depth
  and the row repeats the previous one (``depth_dup`` = 1, counted as ``<rgb slot>_unpaired_count``),
  a depth frame without its colour frame is dropped (``<depth slot>_unpaired``);
* depth keeps its own geometry; both intrinsics and the depth-to-colour extrinsics are in
  ``calibration``, so a reader can map depth into the colour image (not done while recording);
* stamps of the D435 chain (file_format.md §7.1): ``raw_hw_ns`` = the frame's own device
  timestamp, ``hardware_ns`` = anchor + (frame counter − first counter) × T, the counter
  feeds ``*_dup`` / ``*_gap``, ``ts_src`` = 1 for a per-frame device clock, 2 for
  global time, 3 for a host-clock stamp (then ``host_ns`` = the host monotonic arrival);
* intrinsics into ``calibration`` (§6.5): ``left_camera`` = colour, ``right_camera`` = depth
  ``depth_scale`` 0.001 (what is stored is mm), plus the device's
  own scale, model, and the depth-to-colour extrinsics.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np

from ..devices.kinds import Device, stereo_calibration
from ..errors import DeviceError, install_hint
from ..recorder import Frame, Recorder
from .base import Source
from .pairing import CapturePairer

__all__ = ["RealSenseSource", "list_realsense", "rs_module"]

_TS_SRC = {"hardware_clock": 1, "global_time": 2, "system_time": 3}


def rs_module() -> Any:
    """``pyrealsense2``, or a DeviceError saying how to install it (the ``devices`` extra)."""
    try:
        import pyrealsense2 as rs
    except ImportError as exc:
        raise DeviceError("RealSense support needs pyrealsense2",
                          hint=install_hint("devices")) from exc
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
        info["modes"] = [dict(zip(("stream", "width", "height", "fps", "format"), m, strict=True))
                         for m in sorted(modes)]
        out.append(info)
    return out


class _RsFrame(NamedTuple):
    """One SDK frame, copied out of the SDK's buffer: stream, counter, device ms, clock domain, pixels, host ns."""

    stream: str
    number: int
    ts_ms: float
    domain: str
    data: np.ndarray
    arrival: int


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
    depth_codec:
        ``None`` (the writer's 12-bit log HEVC) or ``"ffv1"`` (lossless mm).
    name, role:
        User name (also the slot base: ``D405_head`` -> ``D405_head_rgb``, §4.3), ``"ego"`` or None.
    key:
        Device key until the device is open (default ``d435:<serial>``, for a recording
        ``d435:<file stem>``); once open, a device that reports its serial is ``d435:<serial>``.

    Raises
    ------
    DeviceError
        (from :meth:`open`) pyrealsense2 missing, no such camera or file, no colour + depth stream.
    """

    def __init__(self, serial: str | None = None, *, file: str | os.PathLike[str] | None = None,
                 width: int = 640, height: int = 480, fps: float = 30.0, realtime: bool = True,
                 depth_codec: str | None = None, name: str | None = None, role: str | None = None,
                 label: str | None = None, key: str | None = None) -> None:
        self.serial, self.file = serial, Path(file) if file is not None else None
        self.req = (int(width), int(height), float(fps))
        self.realtime = bool(realtime)
        self.replayable = self.file is not None and not self.realtime
        key = key or (f"d435:{serial}" if serial else f"d435:{self.file.stem if self.file else 'first'}")
        dev = Device("d435", key, name, int(width), int(height), float(fps), depth_codec=depth_codec)
        super().__init__(dev, role, label or (f"realsense-bag:{file}" if file else f"realsense:{serial}"))
        self._rs: Any = None
        self._device: Any = None
        self._sensors: list[Any] = []
        self._q: queue.Queue[_RsFrame | None] = queue.Queue(maxsize=64)
        self._closing = threading.Event()
        self._started = False
        self.dropped_in_sdk = 0
        self.depth_scale = 0.001
        self.model = ""
        self._anchor: int | None = None
        self._counter0 = 0
        self._pairer: CapturePairer[_RsFrame] = CapturePairer(1000.0 / (fps or 30.0))
        self._reported_depth = 0  # depth frames of _pairer.unpaired_depth already counted in an episode
        # (device ns, colour, depth or None, depth frames given up so far)
        self._virtual: collections.deque[tuple[int, _RsFrame, _RsFrame | None, int]] = collections.deque()
        self._vt0: tuple[int, int] | None = None
        self._exhausted = False

    # -- open --------------------------------------------------------------------------------------
    def _open(self) -> Device:
        rs = self._rs = rs_module()
        self._closing.clear()
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
                    what = (f"no RealSense camera with serial {self.serial!r} (connected: {', '.join(seen)})" if seen
                            else "no RealSense camera is connected")
                    raise DeviceError(f"{self.label}: {what}",
                                      hint="plug it in, or list cameras with `egopool devices`")
                dev = found[0]
                self.serial = dev.get_info(rs.camera_info.serial_number)
        except DeviceError:
            raise
        except RuntimeError as exc:  # pyrealsense2's one error type
            hint = ("is it a whole RealSense recording (a .bag from RealSense Viewer, a .db3 from the SDK's recorder)? "
                    "A copy cut short cannot be opened"
                    if self.file is not None else "is another program using the camera?")
            raise DeviceError(f"cannot open RealSense {self.label}: {exc}", path=self.file, hint=hint) from exc
        self._device = dev
        self.model = dev.get_info(rs.camera_info.name) if dev.supports(rs.camera_info.name) else "RealSense"
        if self.file is not None and dev.supports(rs.camera_info.serial_number):
            self.serial = dev.get_info(rs.camera_info.serial_number)
        (color_s, color_p), (depth_s, depth_p) = self._pick_profiles(dev)
        self._sensors = []
        try:
            if color_s is depth_s:
                color_s.open([color_p, depth_p])
                self._sensors = [color_s]
            else:
                for sensor, prof in ((depth_s, depth_p), (color_s, color_p)):
                    sensor.open(prof)
                    self._sensors.append(sensor)
            # the SDK keeps the scale as float32 (1e-4 reads 9.9999997e-05): take the shortest decimal that
            # is that float32, the scale the device was set to, so 0.1 mm units convert exactly
            self.depth_scale = float(str(np.float32(depth_s.as_depth_sensor().get_depth_scale()))) \
                if depth_s.is_depth_sensor() else 0.001
        except RuntimeError as exc:
            self._close()
            raise DeviceError(f"cannot start RealSense {self.label}: {exc}", path=self.file,
                              hint="is another program using the camera?") from exc
        cv, dv = color_p.as_video_stream_profile(), depth_p.as_video_stream_profile()
        cal = self._calibration(cv, dv, depth_p.get_extrinsics_to(color_p), dev)
        dsize = None if (dv.width(), dv.height()) == (cv.width(), cv.height()) else (dv.width(), dv.height())
        self._pairer = CapturePairer(1000.0 / float(color_p.fps() or 30))  # the mode as opened
        self._reported_depth = 0
        kind = "d405" if "D405" in self.model else "d435"
        key = f"d435:{self.serial}" if self.serial else self.device.key
        return dataclasses.replace(self.device, kind=kind, key=key, width=cv.width(), height=cv.height(),
                                   fps=float(color_p.fps()), depth_size=dsize, calibration=cal)

    def _pick_profiles(self, dev: Any) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
        """``((sensor, colour profile), (sensor, depth profile))``: rgb8 colour and z16 depth, in the
        requested mode for a live camera, as recorded for a recording."""
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
                    color = (sensor, p)
                if p.stream_type() == rs.stream.depth and p.format() == rs.format.z16 and live_ok and depth is None:
                    depth = (sensor, p)
        if color is None or depth is None:
            what = "recording" if self.file is not None else f"camera in mode {w}x{h}@{fps:g} fps"
            raise DeviceError(f"RealSense {self.label}: the {what} has no "
                              f"{'rgb8 colour' if color is None else 'z16 depth'} stream", path=self.file,
                              hint="record colour (rgb8) and depth (z16); `egopool devices` lists a camera's modes")
        return color, depth

    def _calibration(self, cv: Any, dv: Any, extr: Any, dev: Any) -> dict[str, Any]:
        rs = self._rs
        ci, cd = _intrinsic(cv.get_intrinsics())
        di, dd = _intrinsic(dv.get_intrinsics())
        baseline = 0.0
        for sensor in dev.query_sensors():
            if sensor.is_depth_sensor() and sensor.supports(rs.option.stereo_baseline):
                baseline = float(sensor.get_option(rs.option.stereo_baseline)) / 1000.0  # mm -> m
        cal = stereo_calibration("realsense", resolution=(cv.width(), cv.height()), fps=float(cv.fps()),
                                 baseline=baseline, intrinsic=ci, right_intrinsic=di,
                                 distortion=cd, depth_scale=0.001)
        cal["right_camera"]["distortion"] = dd
        cal.update({"model": self.model, "device_depth_scale": self.depth_scale,
                    "depth_to_color": {"rotation": [float(v) for v in extr.rotation],
                                       "translation": [float(v) for v in extr.translation]}})
        cal["depth_resolution"] = [dv.width(), dv.height()]
        return cal

    # -- frames ------------------------------------------------------------------------------------
    def _start_sensors(self) -> None:
        if self._started:
            return
        self._started = True
        playback = self._device.as_playback() if self.file is not None else None
        if playback is not None:  # a started sensor would miss what plays before the next one starts
            playback.pause()
        for sensor in self._sensors:
            sensor.start(self._on_frame)
        if playback is not None:
            playback.resume()

    def _on_frame(self, frame: Any) -> None:
        """SDK callback thread: copy the pixels out (the SDK recycles its buffers) and queue them.
        A recording played as fast as possible waits for room (nothing is lost); a live camera or
        real-time playback never blocks the SDK: a full queue drops the frame (counted)."""
        rs = self._rs
        try:
            stream = frame.get_profile().stream_type()
            item = _RsFrame("color" if stream == rs.stream.color else "depth", int(frame.get_frame_number()),
                            float(frame.get_timestamp()), str(frame.get_frame_timestamp_domain()).split(".")[-1],
                            np.array(np.asanyarray(frame.get_data()), copy=True), time.monotonic_ns())
        except RuntimeError:
            return
        if self.replayable:
            while not self._closing.is_set():  # close() stops the sensors, which waits for this callback
                try:
                    self._q.put(item, timeout=0.1)
                    return
                except queue.Full:
                    continue
        else:
            try:
                self._q.put_nowait(item)
            except queue.Full:
                self.dropped_in_sdk += 1

    def _stamps(self, f: _RsFrame) -> tuple[int, int, int, int, int]:
        """``(hardware_ns, raw_hw_ns, counter, ts_src, host_ns)`` of a colour or depth frame."""
        raw = int(round(f.ts_ms * 1e6))  # ms -> ns
        src = _TS_SRC.get(f.domain, 0)
        if self._anchor is None:
            self._anchor, self._counter0 = raw, f.number
        period = int(round(1e9 / (self.device.fps or 30.0)))
        hw = self._anchor + (f.number - self._counter0) * period
        return hw, raw, f.number, src, f.arrival if src == 3 else 0

    def _depth_mm(self, raw: np.ndarray) -> np.ndarray:
        if abs(self.depth_scale - 0.001) < 1e-12:
            return raw.astype(np.uint16, copy=False)
        mm = np.rint(raw.astype(np.float64) * (self.depth_scale * 1000.0))
        return np.minimum(mm, 65535).astype(np.uint16)

    def _pair(self, f: _RsFrame | None) -> list[tuple[_RsFrame, _RsFrame | None]]:
        """Feed one frame (None = the input ended); returns the (colour, depth-or-None) pairs now
        complete, in colour order (:class:`.pairing.CapturePairer`)."""
        return self._pairer.finish() if f is None else self._pairer.push(f)

    @property
    def pairing(self) -> str | None:
        """How colour and depth frames are paired, once decided on the first frames, e.g.
        ``"frame numbers, colour +20.0 ms after depth"``."""
        p = self._pairer
        return None if p.rule is None else f"{p.rule}, colour {p.offset_ms:+.1f} ms after depth"

    def _push_pair(self, rec: Recorder, slots: tuple[str, str], cf: Frame, df: Frame | None, given_up: int) -> None:
        """Colour and its depth go in together (§4.3); what could not be paired is counted."""
        rgb_slot, depth_slot = slots
        rec.push_frame(rgb_slot, cf)
        if df is not None:
            rec.push_frame(depth_slot, df)
        else:
            rec.count(f"{rgb_slot}_unpaired_count", 1, f"a colour frame without the depth frame of its capture "
                                                       f"({self.pairing}); the depth repeats")
        self._report_depth(rec, depth_slot, given_up)

    def _report_depth(self, rec: Recorder, depth_slot: str, given_up: int) -> None:
        if given_up > self._reported_depth:
            rec.count(f"{depth_slot}_unpaired", given_up - self._reported_depth,
                      f"depth frames without the colour frame of their capture ({self.pairing}), left out")
            self._reported_depth = given_up

    def _frames_of(self, color: _RsFrame, depth: _RsFrame | None, arrival: int | None = None) -> tuple[Frame, Frame | None]:
        if arrival is not None:
            color = color._replace(arrival=arrival)
            depth = depth._replace(arrival=arrival) if depth is not None else None
        cf = Frame(color.data, *self._stamps(color))
        df = Frame(self._depth_mm(depth.data), *self._stamps(depth)) if depth is not None else None
        return cf, df

    def _slots(self) -> tuple[str, str]:
        assert self.reg is not None
        return self.reg.rgb_slots[0], next(iter(self.reg.depth_slots))

    def _next(self, timeout: float) -> _RsFrame | None | Literal[False]:
        """The next queued frame, None when the recording played to its end, False on a timeout."""
        try:
            return self._q.get(timeout=timeout)
        except queue.Empty:
            if self.file is not None and self._playback_done():
                try:
                    return self._q.get_nowait()
                except queue.Empty:
                    return None
            return False

    def _run(self, stop: threading.Event) -> None:
        rgb_slot, depth_slot = self._slots()
        self._start_sensors()
        while not stop.is_set():
            f = self._next(0.1)
            if f is False:
                continue
            for color, depth in self._pair(f):
                cf, df = self._frames_of(color, depth)
                self.delivered()
                rec = self._rec
                if rec is not None:
                    self._push_pair(rec, (rgb_slot, depth_slot), cf, df, self._pairer.unpaired_depth)
                else:  # between episodes: what is lost there belongs to no episode
                    self._reported_depth = self._pairer.unpaired_depth
            if f is None:
                rec = self._rec
                if rec is not None:
                    self._report_depth(rec, depth_slot, self._pairer.unpaired_depth)
                return  # the recording played to its end

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
        as the frame queue allows and waits for the recorder otherwise, so no frame is lost.
        """
        rgb_slot, depth_slot = self._slots()
        self._start_sensors()

        def host(dev_ns: int) -> int:
            if self._vt0 is None:  # half a period inside the window: rounding never moves a frame to the next tick
                self._vt0 = (t1 - int(5e8 / (self.device.fps or 30.0)), dev_ns)
            return self._vt0[0] + (dev_ns - self._vt0[1])

        def wanted() -> bool:  # more frames before t1? (the clock starts at the first frame: the pairer
            if not self._virtual:  # hands its first frames over together)
                return True
            host(self._virtual[0][0])
            return host(self._virtual[-1][0]) <= t1

        while not self._exhausted and wanted():
            f = self._next(2.0)
            if f is False:
                continue
            if f is None:
                self._exhausted = True
                self._state = "ended"
            for color, depth in self._pair(f):
                self._virtual.append((int(round(color.ts_ms * 1e6)), color, depth, self._pairer.unpaired_depth))
        while self._virtual and host(self._virtual[0][0]) <= t1:
            dev_ns, color, depth, given_up = self._virtual.popleft()
            cf, df = self._frames_of(color, depth, host(dev_ns))
            self.delivered()
            self._push_pair(rec, (rgb_slot, depth_slot), cf, df, given_up)
        if self._exhausted and not self._virtual:
            self._report_depth(rec, depth_slot, self._pairer.unpaired_depth)

    def restart_clock(self) -> None:
        """The next :meth:`feed` window starts a new virtual clock: the recording goes on from its next
        frame at the start of the next episode (``record --fast`` with several episodes)."""
        self._vt0 = None

    def duration(self) -> float | None:
        """Length of a recording in seconds (None for a live camera)."""
        if self.file is None or self._device is None:
            return None
        return float(self._device.as_playback().get_duration().total_seconds())

    @property
    def exhausted(self) -> bool:
        """Virtual-clock playback delivered its last frame."""
        return self._exhausted and not self._virtual

    def _close(self) -> None:
        self._closing.set()  # an SDK callback waiting for room in the queue gives up: stop() waits for it
        for sensor in self._sensors:
            for op in (sensor.stop, sensor.close):
                try:
                    op()
                except RuntimeError:  # not started / already closed
                    pass
        self._sensors = []
        self._device = None
