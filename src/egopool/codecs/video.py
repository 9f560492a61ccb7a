"""RGB video per image_key via PyAV (file_format.md §8): H.264 or HEVC in MP4.

One encoded frame per data row of the stream's master slot; the writer guarantees
the count, this module only encodes and decodes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from .._safe_read import loads_json, regular_file_size
from ..errors import CodecError, EgopoolError, FormatError, StorageError
from ..storage import ObjectPath, TaskPathLike

__all__ = ["RGB_CODECS", "DtsGuard", "RgbEncoder", "container_info", "count_video_frames", "encoding_errors",
           "open_media", "read_rgb_frames", "reencode_rgb", "rgb_array", "rgb_stream", "stream_codec", "video_info"]

#: codec name in ``video_codec`` JSON -> PyAV encoder name.
RGB_CODECS = {"h264": "libx264", "hevc": "libx265"}
#: Hint of a video that opens but does not decode.
_DAMAGED = "the video is damaged or truncated: restore it from a backup (`egopool validate TASK` finds them)"


@contextlib.contextmanager
def encoding_errors(path: Path, action: str) -> Iterator[None]:
    """PyAV failures while writing ``path``: OS refusals (disk full, read-only) -> StorageError,
    other FFmpeg errors -> CodecError; both name the file."""
    try:
        yield
    except EgopoolError:
        raise
    except OSError as exc:  # av.error.OSError is an OSError too
        raise StorageError.from_os_error(exc, path, action=action) from exc
    except av.error.FFmpegError as exc:
        raise CodecError(f"{action}: {exc}", path=path) from exc


class DtsGuard:
    """Mux packets, repairing a decode stamp the encoder left undefined.

    libx265 can return a lone frame (a one-row episode) with ``pts = 0`` and an
    uninitialised ``dts`` (seen: ``-433791697259``); the MP4 muxer then refuses the
    packet ("pts/dts pair unsupported"). A ``dts`` after its ``pts`` or more than 2^31
    ticks before it cannot be right: it is replaced by ``pts`` (or the previous
    ``dts`` + 1, so decode order stays increasing). Sane stamps pass untouched.
    """

    def __init__(self) -> None:
        self._last: int | None = None

    def mux(self, container: Any, packet: Any) -> None:
        """Mux one packet into ``container`` (an output opened with PyAV)."""
        pts, dts = packet.pts, packet.dts
        if pts is not None and dts is not None and (dts > pts or pts - dts >= 1 << 31):
            dts = pts if self._last is None or self._last < pts else self._last + 1
            packet.dts = dts
        if dts is not None:
            self._last = int(dts)
        container.mux(packet)


def mux_frame(out: Any, stream: Any, guard: DtsGuard, frame: Any, path: Path) -> None:
    """Encode one frame on ``stream`` and mux its packets into ``out`` (errors name ``path``)."""
    with encoding_errors(path, "cannot write video"):
        for packet in stream.encode(frame):
            guard.mux(out, packet)


def flush_and_close(out: Any, stream: Any, guard: DtsGuard, path: Path) -> None:
    """Drain the encoder, mux the last packets and close the container (errors name ``path``)."""
    with encoding_errors(path, "cannot write video"):
        for packet in stream.encode():
            guard.mux(out, packet)
        out.close()


def _rate(fps: float) -> Fraction:
    return Fraction(fps).limit_denominator(1001)


class RgbEncoder:
    """Stream RGB uint8 frames ``(H, W, 3)`` (or gray ``(H, W)``) into an MP4.

    Parameters
    ----------
    path:
        Output file (the writer passes a dot-temp path and publishes it on finish).
    width, height:
        Frame size in pixels. Odd sizes are encoded as yuv444p (4:2:0 needs even sizes).
    fps:
        Nominal frame rate of the stream (frames/s).
    codec:
        ``"h264"`` (libx264) or ``"hevc"`` (libx265, tag hvc1).
    crf:
        Constant rate factor (lower = better quality, larger files).
    params:
        Extra encoder parameters, ``key=value:key=value`` (``x264-params`` / ``x265-params``),
        e.g. ``"mbtree=0"``: x264's macroblock-tree rate control makes the same frames encode
        to different bytes from run to run (decision K8); an export that must be reproducible
        turns it off.

    Raises
    ------
    CodecError
        Unknown codec, or a frame of the wrong size or dtype.
    StorageError
        The file cannot be created or written (read-only, disk full, not a directory).
    """

    def __init__(self, path: str | Path, width: int, height: int, fps: float, *, codec: str = "h264",
                 crf: int = 23, preset: str = "veryfast", params: str | None = None) -> None:
        if codec not in RGB_CODECS:
            raise CodecError(f"unknown RGB codec {codec!r}", hint=f"use one of {sorted(RGB_CODECS)}")
        self.path = Path(path)
        self.width, self.height, self.codec, self.crf = int(width), int(height), codec, int(crf)
        self.preset = preset
        self.frames = 0
        self._tb = 1 / _rate(fps)  # pts = frame index in this base (a decoded frame may bring another)
        self._guard = DtsGuard()
        pix = "yuv420p" if self.width % 2 == 0 and self.height % 2 == 0 else "yuv444p"
        try:
            with encoding_errors(self.path, "cannot create video"):
                self._out = av.open(str(self.path), "w", format="mp4")
                stream = self._out.add_stream(RGB_CODECS[codec], rate=_rate(fps))
            if not isinstance(stream, av.video.stream.VideoStream):  # an FFmpeg without this video encoder
                self._out.close()
                raise CodecError(f"{RGB_CODECS[codec]} is not a video encoder of this FFmpeg", path=path)
            self._stream = stream
        except EgopoolError:
            raise
        except Exception as exc:
            raise CodecError(f"cannot open RGB encoder {RGB_CODECS[codec]}: {exc}", path=path) from exc
        self._stream.width, self._stream.height, self._stream.pix_fmt = self.width, self.height, pix
        if codec == "hevc":
            x265 = "log-level=error" + (f":{params}" if params else "")
            self._stream.options = {"crf": str(crf), "preset": preset, "x265-params": x265}
            self._stream.codec_tag = "hvc1"
        else:
            self._stream.options = {"crf": str(crf), "preset": preset, **({"x264-params": params} if params else {})}
        self.pix_fmt = pix

    def check(self, image: np.ndarray | av.VideoFrame) -> np.ndarray | av.VideoFrame:
        """Validate one frame without encoding it; returns what :meth:`encode` takes.

        ``image`` is uint8 ``(H, W, 3)`` RGB (returned C-contiguous), gray ``(H, W)`` /
        ``(H, W, 1)`` (replicated to RGB), or a decoded :class:`av.VideoFrame` of the declared
        size in any pixel format (returned as is: no conversion, no copy; the encoder converts
        it once). Lets a caller feeding several streams refuse a row before any stream got its frame.

        Raises
        ------
        CodecError
            Not uint8, or not the declared size.
        """
        if isinstance(image, av.VideoFrame):
            if (image.width, image.height) != (self.width, self.height):
                raise CodecError(f"frame size {image.width}x{image.height} != declared {self.width}x{self.height}",
                                 path=self.path)
            return image
        img = np.asarray(image)
        if img.dtype != np.uint8:
            raise CodecError(f"RGB frames must be uint8, got {img.dtype}", path=self.path)
        if img.ndim == 3 and img.shape[2] == 1:
            img = img[:, :, 0]
        if img.ndim == 2:
            img = np.repeat(img[:, :, None], 3, axis=2)
        if img.shape != (self.height, self.width, 3):
            raise CodecError(f"frame shape {img.shape} != declared {(self.height, self.width, 3)}", path=self.path)
        return np.ascontiguousarray(img)

    def encode(self, image: np.ndarray | av.VideoFrame) -> None:
        """Append one frame (see :meth:`check` for what it may be).

        An RGB array is wrapped without a copy (``VideoFrame.from_numpy_buffer``); the caller
        must not change it until the encoder has taken it. A :class:`av.VideoFrame` gets this
        stream's pts set on it, so one frame object must not feed two streams at once.

        Raises
        ------
        CodecError
            See :meth:`check`; or FFmpeg refused the frame.
        StorageError
            The file could not be written (disk full, read-only file system).
        """
        img = self.check(image)
        if isinstance(img, av.VideoFrame):
            frame = img
        else:
            try:
                frame = av.VideoFrame.from_numpy_buffer(img, format="rgb24")
            except ValueError:  # a row stride PyAV cannot wrap: copy once
                frame = av.VideoFrame.from_ndarray(img, format="rgb24")
        # PyAV rescales pts from the frame's time base to the encoder's: a camera frame keeps its
        # device base (v4l2 1/1000000, MPEG-TS 1/90000), which would turn the frame index into 0
        frame.time_base = self._tb
        frame.pts = self.frames
        mux_frame(self._out, self._stream, self._guard, frame, self.path)
        self.frames += 1

    def close(self) -> dict[str, Any]:
        """Flush and close; returns the ``video_codec`` description of this stream.

        Raises
        ------
        StorageError
            The file could not be written (disk full...).
        """
        flush_and_close(self._out, self._stream, self._guard, self.path)
        return {"encoder": RGB_CODECS[self.codec], "codec": self.codec, "crf": self.crf, "preset": self.preset,
                "pix_fmt": self.pix_fmt, "width": self.width, "height": self.height, "frames": self.frames}

    def abort(self) -> None:
        """Close without caring about the output (the caller deletes the temp file)."""
        try:
            self._out.close()
        except Exception:  # noqa: BLE001 - best effort on an abandoned temp file
            pass


def open_media(path: TaskPathLike, what: str = "video") -> Any:
    """Open a media file for reading with PyAV: regular files only (a FIFO would block in FFmpeg).

    Raises
    ------
    CodecError
        Missing, not a regular file (directory, FIFO, symlink loop), or FFmpeg cannot open it.
    """
    if isinstance(path, ObjectPath):
        return _open_object(path, what)
    try:
        regular_file_size(path, what=what)
    except FormatError as exc:
        raise CodecError(exc.message, path=path, hint=exc.hint or "the file is missing or corrupt") from None
    try:
        return av.open(str(path))
    except Exception as exc:
        raise CodecError(f"cannot open {what}: {exc}", path=path, hint="the file is missing or corrupt") from exc


def _open_object(path: ObjectPath, what: str) -> Any:
    """PyAV on a seekable, buffered file object over ranged GETs (docs/decisions.md O6); the
    container closes it (``container.close`` leaves a Python file object open, so it is chained)."""
    from .._safe_read import open_regular

    try:
        fh = open_regular(path, what=what)
    except FormatError as exc:
        raise CodecError(exc.message, path=path, hint=exc.hint or "the file is missing or corrupt") from None
    try:
        container = av.open(fh, buffer_size=1 << 16)
    except Exception as exc:
        fh.close()
        if isinstance(exc, OSError) and "AWS Error" in str(exc):
            raise path._error(exc) from exc
        raise CodecError(f"cannot open {what}: {exc}", path=path, hint="the file is missing or corrupt") from exc
    return _ClosingContainer(container, fh)


class _ClosingContainer:
    """A PyAV input container that also closes the object's file object (attribute access passes through)."""

    def __init__(self, container: Any, fh: Any) -> None:
        self._container, self._fh = container, fh

    def __getattr__(self, name: str) -> Any:
        return getattr(self._container, name)

    def close(self) -> None:
        try:
            self._container.close()
        finally:
            self._fh.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open(path: TaskPathLike) -> Any:
    return open_media(path, "video")


def stream_codec(stream: Any) -> tuple[str | None, str | None]:
    """``(codec name, pixel format)`` of a PyAV stream; ``(None, None)`` when FFmpeg found no decoder
    for it (a damaged header leaves the stream without a codec context)."""
    ctx = getattr(stream, "codec_context", None)
    if ctx is None:
        return None, None
    return getattr(ctx, "name", None), getattr(ctx, "pix_fmt", None)


def video_info(path: TaskPathLike) -> dict[str, Any]:
    """Probe: codec, pix_fmt, width, height, stream count, container comment (parsed JSON when possible).

    Raises
    ------
    CodecError
        Not a readable media file, no video stream, or a first stream without a decoder.
    """
    with _open(path) as c:
        return container_info(c, path)


def container_info(c: Any, path: TaskPathLike) -> dict[str, Any]:
    """:func:`video_info` of a container the caller opened (:func:`open_media`); reads its header only, so
    its packets can still be demuxed from the first one (the validator probes and decodes with one open).

    Raises
    ------
    CodecError
        No video stream, or a first stream without a decoder.
    """
    if not c.streams.video:
        raise CodecError("no video stream", path=path)
    s = c.streams.video[0]
    name, pix_fmt = stream_codec(s)
    if name is None:
        raise CodecError("the video stream has no codec FFmpeg can decode (damaged header)", path=path,
                         hint="the file is corrupt; restore it from a backup")
    comment = c.metadata.get("comment")
    try:
        meta = loads_json(comment, what="container comment") if comment else {}
    except FormatError:
        meta = {}
    return {"codec": name, "pix_fmt": pix_fmt, "width": s.codec_context.width,
            "height": s.codec_context.height, "video_streams": len(c.streams.video), "metadata": meta}


def count_video_frames(path: TaskPathLike, stream_index: int = 0) -> int:
    """Number of frames in video stream ``stream_index``, counted by demuxing (no decode)."""
    with _open(path) as c:
        try:
            stream = c.streams.video[stream_index]
            return sum(1 for p in c.demux(stream) if p.size)
        except Exception as exc:
            raise CodecError(f"cannot demux video: {exc}", path=path) from exc


def rgb_stream(container: Any, path: TaskPathLike) -> Any:
    """The stream :func:`read_rgb_frames` decodes (the first video stream) of an open container.

    Raises
    ------
    CodecError
        No video stream, or one without a decoder (damaged header).
    """
    if not container.streams.video:
        raise CodecError("no video stream", path=path)
    stream = container.streams.video[0]
    if stream_codec(stream)[0] is None:
        raise CodecError("the video stream has no codec FFmpeg can decode (damaged header)", path=path)
    return stream


def rgb_array(frame: Any) -> np.ndarray:
    """One decoded frame as :func:`read_rgb_frames` yields it: uint8 ``(H, W, 3)`` RGB."""
    return frame.to_ndarray(format="rgb24")


def read_rgb_frames(path: TaskPathLike) -> Iterator[np.ndarray]:
    """Decode the first video stream as RGB uint8 frames of shape ``(H, W, 3)``."""
    with _open(path) as c:
        stream = rgb_stream(c, path)
        try:
            for frame in c.decode(stream):
                yield rgb_array(frame)
        except (av.error.FFmpegError, ValueError) as exc:
            raise CodecError(f"cannot decode video: {exc}", path=path, hint=_DAMAGED) from exc


def reencode_rgb(src: str | Path, dst: str | Path, *, codec: str = "hevc", crf: int = 30,
                 preset: str = "veryfast") -> dict[str, Any]:
    """Re-encode an RGB video frame by frame (file_format.md §9 "HEVC 预压缩": hvc1, CRF 30).

    Frames are decoded one at a time and fed to an :class:`RgbEncoder` (bounded memory);
    the frame count, size and nominal rate are kept, so the stream still holds one frame
    per data row. The caller writes ``dst`` as a temp file and publishes it.

    Parameters
    ----------
    src:
        The recorded MP4 (any codec PyAV decodes).
    dst:
        Output MP4.
    codec, crf, preset:
        Passed to :class:`RgbEncoder` (default HEVC, tag hvc1, CRF 30).

    Returns
    -------
    dict
        The encoder's description (``encoder``, ``codec``, ``crf``, ``frames``...).

    Raises
    ------
    CodecError
        ``src`` cannot be decoded or has no video stream.
    StorageError
        ``dst`` cannot be written.
    """
    with _open(src) as c:
        if not c.streams.video:
            raise CodecError("no video stream", path=src)
        s = c.streams.video[0]
        rate = s.average_rate or s.guessed_rate or s.base_rate
        fps = float(rate) if rate else 30.0
        enc = RgbEncoder(dst, s.codec_context.width, s.codec_context.height, fps, codec=codec, crf=crf,
                         preset=preset)
        try:
            for frame in c.decode(s):
                enc.encode(frame.to_ndarray(format="rgb24"))
        except av.error.FFmpegError as exc:
            enc.abort()
            raise CodecError(f"cannot decode video: {exc}", path=src, hint=_DAMAGED) from exc
        except BaseException:
            enc.abort()
            raise
        return enc.close()
