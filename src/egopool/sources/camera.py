"""Cameras through FFmpeg input devices via PyAV: UVC on every OS (multi_device_storage.md §4.2).

``v4l2`` on Linux, ``avfoundation`` on macOS, ``dshow`` on Windows; ``lavfi`` (FFmpeg's
filter sources, e.g. ``testsrc2=size=1280x720:rate=30``) and plain files go through the very
same code, only the input format differs::

    cam = CameraSource("/dev/video0", width=1280, height=720, fps=30, pixel_format="mjpeg")
    cam = CameraSource("testsrc2=size=1280x720:rate=30", input_format="lavfi")

Each frame is stamped at arrival with the host monotonic clock (``hardware_ns``: UVC is a
host-clock chain, file_format.md §7.3) and keeps the device's own pts in ``raw_hw_ns``
(``pts × time_base`` in ns, the stamp before any normalisation, §7.1). Frames are handed to
the recorder as decoded: the :class:`av.VideoFrame` in the device's own pixel format, with no
conversion and no copy; the encoder converts once (docs/decisions.md R10).

Inputs that are not capture devices (``lavfi``, files) deliver as fast as they can decode, so
they are paced by their pts (``pace=True``, the default for them) and arrive like a camera's.
A paced input that stalls (a FIFO whose writer paused) resumes at its own rate from the next
frame: what arrives after the stall is not replayed in a burst, as a camera would not.
"""

from __future__ import annotations

import dataclasses
import errno
import sys
import threading
import time
from fractions import Fraction
from typing import Any

import av

from ..devices.kinds import Device
from ..errors import DeviceError
from ..recorder import Frame
from .base import Source

__all__ = ["CAPTURE_FORMATS", "CameraSource", "default_input_format"]

#: A paced input more than this far behind its pts clock (s) stalled; pacing restarts from that frame.
_RESYNC_S = 0.5

#: FFmpeg input formats that are live capture devices (they pace themselves).
CAPTURE_FORMATS = ("v4l2", "video4linux2", "avfoundation", "dshow", "x11grab", "gdigrab", "kmsgrab")


def default_input_format() -> str:
    """The camera input format of this OS: ``v4l2`` (Linux), ``avfoundation`` (macOS), ``dshow`` (Windows)."""
    if sys.platform == "darwin":
        return "avfoundation"
    if sys.platform.startswith("win"):
        return "dshow"
    return "v4l2"


def _open_options(fmt: str | None, width: int | None, height: int | None, fps: float | None,
                  pixel_format: str | None) -> dict[str, str]:
    """FFmpeg demuxer options for the requested mode (names differ per input format)."""
    opts: dict[str, str] = {}
    if fmt == "lavfi":
        return opts  # the filter graph itself says size and rate
    if width and height:
        opts["video_size"] = f"{width}x{height}"
    if fps:
        opts["framerate"] = str(fps)
    if pixel_format:
        if fmt in ("v4l2", "video4linux2"):
            opts["input_format"] = pixel_format  # mjpeg, yuyv422, nv12...
        elif fmt == "dshow" and pixel_format in ("mjpeg", "h264"):
            opts["vcodec"] = pixel_format
        else:
            opts["pixel_format"] = pixel_format
    return opts


class CameraSource(Source):
    """One FFmpeg input device (or lavfi source / file) as a UVC camera of the rig.

    Parameters
    ----------
    target:
        What FFmpeg opens: ``/dev/video0`` (v4l2), ``"0"`` or ``"FaceTime HD Camera"``
        (avfoundation), ``video=Integrated Camera`` (dshow), a lavfi graph, a file.
    input_format:
        FFmpeg input format; default: :func:`default_input_format` for a device path,
        None (probe) for anything else.
    width, height, fps, pixel_format:
        Requested mode (px, frames/s, FFmpeg pixel format or ``mjpeg``); None = the device's default.
        The mode the device actually delivers is what the rig declares.
    key, name, role:
        Device key (default ``uvc:<target>``), user name (``device_names``), ``"ego"`` or None.
    pace:
        Deliver frames at their pts rate (default: True unless the input is a capture device).
    options:
        Extra FFmpeg demuxer options.

    Raises
    ------
    DeviceError
        (from :meth:`open`) The input cannot be opened or has no video stream.
    """

    #: Seconds :meth:`open` waits for the device to open and deliver its first data.
    open_timeout = 10.0

    def __init__(self, target: str, *, input_format: str | None = None, width: int | None = None,
                 height: int | None = None, fps: float | None = None, pixel_format: str | None = None,
                 key: str | None = None, name: str | None = None, role: str | None = None,
                 pace: bool | None = None, options: dict[str, str] | None = None, label: str | None = None) -> None:
        if input_format is None and target.startswith("/dev/"):
            input_format = default_input_format()
        self.target, self.input_format = target, input_format
        self.req = (width, height, fps, pixel_format)
        self.pace = (input_format not in CAPTURE_FORMATS) if pace is None else bool(pace)
        self.options = dict(options or {})
        dev = Device("uvc", key or f"uvc:{target}", name, width or 640, height or 480, fps)
        super().__init__(dev, role, label or f"uvc:{target}")
        self._container: Any = None
        self._stream: Any = None
        self.pix_fmt: str | None = None
        self.codec: str | None = None

    def _open(self) -> Device:
        width, height, fps, pix = self.req
        opts = _open_options(self.input_format, width, height, fps, pix)
        opts.update(self.options)
        try:
            container = self._open_container(opts)
        except DeviceError:
            raise
        except Exception as exc:  # av.error.* and OSError: the one boundary of this source
            if getattr(exc, "errno", None) == errno.EINTR:  # Ctrl-C while the device was opening
                raise KeyboardInterrupt from exc
            raise DeviceError(f"cannot open camera {self.target!r} (format {self.input_format or 'probe'}): {exc}",
                              hint="list cameras with `egopool devices`") from exc
        if not container.streams.video:
            container.close()
            raise DeviceError(f"{self.target!r} has no video stream", hint="is it a camera?")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"  # MJPEG decoding on every core
        cc = stream.codec_context
        rate = stream.average_rate or stream.guessed_rate or (Fraction(fps).limit_denominator(1001) if fps else None)
        actual_fps = float(rate) if rate else fps
        if (width and cc.width != width) or (height and cc.height != height):
            container.close()
            raise DeviceError(f"camera {self.target!r} delivers {cc.width}x{cc.height}, not the requested "
                              f"{width}x{height}", hint="choose a mode `egopool devices` lists")
        self._container, self._stream = container, stream
        self.pix_fmt, self.codec = cc.pix_fmt, cc.name
        return dataclasses.replace(self.device, width=int(cc.width), height=int(cc.height),
                                   fps=actual_fps if actual_fps and actual_fps > 0 else None)

    def _open_container(self, opts: dict[str, str]) -> Any:
        """``av.open`` on a helper thread, waited for here: FFmpeg retries a device read interrupted
        by a signal, so a camera that opens but never delivers (a stalled device, a silent FIFO)
        would hold the caller past Ctrl-C and past av.open's own timeout. After :attr:`open_timeout`
        seconds, or on Ctrl-C, the open is given up; the helper closes what it opens after that."""
        lock = threading.Lock()
        out: dict[str, Any] = {}
        given_up = False

        def opener() -> None:
            try:
                c = av.open(self.target, format=self.input_format, options=opts, timeout=self.open_timeout)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                out["error"] = exc
                return
            with lock:
                if given_up:
                    c.close()
                else:
                    out["container"] = c

        helper = threading.Thread(target=opener, name="src-uvc-open", daemon=True)
        helper.start()
        deadline = time.monotonic() + self.open_timeout
        try:
            while helper.is_alive():
                helper.join(0.1)
                if helper.is_alive() and time.monotonic() > deadline:
                    raise DeviceError(f"camera {self.target!r} opened but delivered nothing within "
                                      f"{self.open_timeout:g} s", hint="is it connected and streaming? list cameras "
                                      "with `egopool devices`")
        except BaseException:
            with lock:
                given_up = True
                late = out.pop("container", None)
            if late is not None:
                late.close()
            raise
        if "error" in out:
            raise out["error"]
        return out["container"]

    @property
    def mode(self) -> dict[str, Any]:
        """What the open device delivers: width, height, fps, pix_fmt, codec."""
        return {"width": self.device.width, "height": self.device.height, "fps": self.device.fps,
                "pix_fmt": self.pix_fmt, "codec": self.codec}

    def _run(self, stop: threading.Event) -> None:
        assert self.reg is not None and self._container is not None
        slot = self.reg.rgb_slots[0]
        stream = self._stream
        tb = float(stream.time_base) if stream.time_base else 0.0
        t0_wall: float | None = None
        pts0 = 0.0
        try:
            for packet in self._container.demux(stream):
                if stop.is_set():
                    return
                arrival = time.monotonic_ns()
                for frame in packet.decode():
                    pts_s = float(frame.pts * tb) if frame.pts is not None and tb else None
                    if self.pace and pts_s is not None:
                        if t0_wall is None:
                            t0_wall, pts0 = time.monotonic(), pts_s
                        delay = t0_wall + (pts_s - pts0) - time.monotonic()
                        if delay < -_RESYNC_S:  # the input stalled: resume at its own rate, not in a burst
                            t0_wall, delay = t0_wall - delay, 0.0
                        if delay > 0 and stop.wait(delay):
                            return
                        arrival = time.monotonic_ns()
                    raw = int(round(pts_s * 1e9)) if pts_s is not None else 0
                    self.delivered()
                    self.push_frame(slot, Frame(frame, hardware_ns=arrival, raw_hw_ns=raw))
        except av.error.EOFError:
            return
        except av.error.FFmpegError as exc:
            if stop.is_set():
                return
            raise DeviceError(f"camera {self.target!r} stopped delivering: {exc}") from exc

    def _close(self) -> None:
        if self._container is not None:
            try:
                self._container.close()
            except Exception:  # noqa: BLE001 - closing a device that already failed
                pass
            self._container = None
