"""Depth video: 12-bit gray HEVC log code, FFV1 gray16le fallback (file_format.md §8, DESIGN §3).

Log code (12 bits): code 0 = no depth; valid depth ``d`` mm, clipped to
``[d_min, d_max]``, maps to ``512 + round(3583 * ln(d/d_min) / ln(d_max/d_min))``;
decode inverts and rounds to uint16 mm; codes < 256 decode to 0 (hole). The
512/256 gap absorbs codec ringing at hole edges so holes survive exactly.

Writing: libx265 ``gray12le``, qp=6, full range, tag hvc1, in MP4; the codec
parameters go into the container ``comment`` and the episode's ``video_codec``
JSON. When libx265 lacks gray12le: FFV1 ``gray16le`` MKV (lossless uint16 mm).
Reading decides by probing the stream, never by file extension: a gray12le HEVC
stream is log-decoded with the parameters the file names; an FFV1 gray16le stream
(searched among all streams, so the v1.0.14 dual-stream MKV works) is returned raw;
a directory of 16-bit PNGs is the legacy PNG16 sequence (``depth_png``).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from .._safe_read import loads_json
from ..errors import CodecError, FormatError, StorageError
from ..storage import TaskPath, TaskPathLike, as_path
from .video import DtsGuard, flush_and_close, mux_frame, open_media, stream_codec

__all__ = ["DEPTH_CODECS", "DepthEncoder", "DepthProbe", "LogDepthCodec", "check_depth_codec", "depth_stream_decoder", "hevc12_available",
           "probe_depth", "read_depth_frames"]

_CODE_MIN, _CODE_MAX, _HOLE_BELOW = 512, 4095, 256
#: Depth codecs a writer offers: the 12-bit log code (lossy, clips to [d_min, d_max]) and FFV1 (lossless).
DEPTH_CODECS = ("hevc12", "ffv1")


def check_depth_codec(codec: str) -> str:
    """``codec`` when it is one of :data:`DEPTH_CODECS`.

    Raises
    ------
    CodecError
        Naming the codec and the choices.
    """
    if codec not in DEPTH_CODECS:
        raise CodecError(f"unknown depth codec {codec!r}", hint="use hevc12 (12-bit log code, lossy, "
                         "100..20000 mm) or ffv1 (lossless uint16 mm)")
    return codec


@dataclass(frozen=True)
class LogDepthCodec:
    """The 12-bit log depth code of DESIGN §3.

    Attributes
    ----------
    d_min, d_max:
        Depth range in mm; valid depths are clipped into it. Relative step is
        ``ln(d_max/d_min) / 3583`` (0.15 % with the defaults 100..20000 mm).
    """

    d_min: float = 100.0
    d_max: float = 20000.0

    def __post_init__(self) -> None:
        if not 0 < self.d_min < self.d_max:
            raise CodecError(f"depth range must satisfy 0 < d_min < d_max, got {self.d_min}..{self.d_max}")

    @property
    def _k(self) -> float:
        return (_CODE_MAX - _CODE_MIN) / float(np.log(self.d_max / self.d_min))

    def encode(self, depth_mm: np.ndarray) -> np.ndarray:
        """uint16 mm ``(H, W)`` -> uint16 codes in ``{0} ∪ [512, 4095]`` (0 stays 0).

        One lookup in the 65536-entry table of :meth:`encode_exact` (3 ms instead of 10 ms for a
        1280×800 frame: the table holds exactly what the formula gives, for every uint16)."""
        d = np.asarray(depth_mm)
        if d.dtype != np.uint16:
            raise CodecError(f"depth frames must be uint16 mm, got {d.dtype}")
        lut: np.ndarray = _code_table(self.d_min, self.d_max)
        return lut[d]

    def encode_exact(self, depth_mm: np.ndarray) -> np.ndarray:
        """:meth:`encode` by the formula itself (float64 log per pixel; fills the lookup table)."""
        d = np.asarray(depth_mm)
        valid = d > 0
        x = np.clip(d.astype(np.float64), self.d_min, self.d_max)
        code = _CODE_MIN + np.rint(self._k * np.log(x / self.d_min))
        return np.where(valid, code, 0).astype(np.uint16)

    def out_of_range(self, depth_mm: np.ndarray) -> int:
        """Valid pixels (> 0) of a uint16 mm frame outside ``[d_min, d_max]``: :meth:`encode` clips them.

        A 30,000 mm reading comes back as ``d_max`` (20,000 mm by default) and a 50 mm one as
        ``d_min``; the count is the trace DESIGN §8 asks for. FFV1 stores them unchanged.
        """
        d = np.asarray(depth_mm)
        high = int(np.count_nonzero(d > self.d_max)) if d.size and d.max() > self.d_max else 0
        if d.dtype != np.uint16:
            return high + int(np.count_nonzero((d > 0) & (d < self.d_min)))
        # 0 < d < d_min in two passes instead of three: d - 1 wraps a hole (0) to 65535 (issue 20)
        below = math.ceil(self.d_min) - 1  # an integer d is < d_min exactly when d <= ceil(d_min) - 1
        return high + (int(np.count_nonzero((d - np.uint16(1)) < np.uint16(below))) if below > 0 else 0)

    def decode(self, code: np.ndarray) -> np.ndarray:
        """uint16 codes ``(H, W)`` -> uint16 mm; codes < 256 are holes (0)."""
        c = np.asarray(code).astype(np.float64)
        mm = self.d_min * np.exp((np.maximum(c, _CODE_MIN) - _CODE_MIN) / self._k)
        return np.where(c >= _HOLE_BELOW, np.rint(np.minimum(mm, 65535)), 0).astype(np.uint16)

    def to_dict(self) -> dict[str, Any]:
        """Parameters as stored in ``video_codec`` / the container comment."""
        return {"depth_codec": "log12", "d_min": self.d_min, "d_max": self.d_max,
                "code_min": _CODE_MIN, "code_max": _CODE_MAX, "hole_below": _HOLE_BELOW}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LogDepthCodec:
        """Inverse of :meth:`to_dict` (unknown keys ignored)."""
        return cls(float(d.get("d_min", 100.0)), float(d.get("d_max", 20000.0)))


@functools.lru_cache(maxsize=8)
def _code_table(d_min: float, d_max: float) -> np.ndarray:
    """Log code of every uint16 mm value (read-only, 128 KB), per depth range."""
    table = LogDepthCodec(d_min, d_max).encode_exact(np.arange(65536, dtype=np.uint16))
    table.setflags(write=False)
    return table


def hevc12_available() -> bool:
    """True when this PyAV's libx265 can encode ``gray12le``."""
    try:
        codec = av.codec.Codec("libx265", "w")
    except Exception:  # noqa: BLE001 - encoder missing from this build
        return False
    return any(f.name == "gray12le" for f in (codec.video_formats or ()))


class DepthEncoder:
    """Stream uint16 mm depth frames ``(H, W)`` into a depth video.

    Parameters
    ----------
    path:
        Output file (dot-temp; the writer publishes it). Its extension is decided by
        :attr:`ext` (``mp4`` for HEVC, ``mkv`` for FFV1); pass the path after asking.
    codec:
        ``"hevc12"`` (default, lossy log code) or ``"ffv1"`` (lossless).
    qp, preset:
        x265 quantiser (6, DESIGN §3) and speed preset (``veryfast``, docs/decisions.md #11).
    """

    def __init__(self, path: str | Path, width: int, height: int, fps: float, *, codec: str = "hevc12",
                 params: LogDepthCodec | None = None, qp: int = 6, preset: str = "veryfast") -> None:
        check_depth_codec(codec)
        self.path, self.codec, self.width, self.height = Path(path), codec, int(width), int(height)
        self.params = params or LogDepthCodec()
        self.frames, self.qp, self.preset = 0, qp, preset
        #: Valid pixels the log code clipped into ``[d_min, d_max]`` so far (0 for FFV1).
        self.clipped = 0
        self._guard = DtsGuard()
        rate = Fraction(fps).limit_denominator(1001)
        try:
            if codec == "hevc12":
                self._out = av.open(str(self.path), "w", format="mp4")
                self._out.metadata["comment"] = json.dumps(self.params.to_dict())
                s = self._out.add_stream("libx265", rate=rate)
                s.pix_fmt = "gray12le"
                s.codec_context.color_range = 2  # full (JPEG) range
                # preset: docs/decisions.md #11 (veryfast keeps up with 30 fps on 2 cores; +4 % size)
                s.options = {"preset": preset, "x265-params": f"qp={qp}:log-level=error"}
                s.codec_tag = "hvc1"
            else:
                self._out = av.open(str(self.path), "w", format="matroska")
                s = self._out.add_stream("ffv1", rate=rate)
                s.pix_fmt = "gray16le"
        except OSError as exc:  # read-only, not a directory (av.error.OSError too)
            raise StorageError.from_os_error(exc, path, action="cannot create video") from exc
        except Exception as exc:
            raise CodecError(f"cannot open depth encoder {codec}: {exc}", path=path) from exc
        s.width, s.height = self.width, self.height
        self._stream = s

    @staticmethod
    def ext_for(codec: str) -> str:
        """``video_extensions`` value of a depth codec: ``mp4`` (hevc12) or ``mkv`` (ffv1)."""
        return "mp4" if codec == "hevc12" else "mkv"

    def check(self, depth_mm: np.ndarray) -> np.ndarray:
        """Validate one frame without encoding it; returns it as a contiguous uint16 ``(H, W)`` array.

        Raises
        ------
        CodecError
            Not uint16, or not the declared size.
        """
        d = np.asarray(depth_mm)
        if d.shape != (self.height, self.width):
            raise CodecError(f"depth frame shape {d.shape} != declared {(self.height, self.width)}", path=self.path)
        if d.dtype != np.uint16:
            raise CodecError(f"depth frames must be uint16 mm, got {d.dtype}", path=self.path)
        return np.ascontiguousarray(d)

    def encode(self, depth_mm: np.ndarray) -> None:
        """Append one uint16 mm frame ``(H, W)``; 0 = no depth.

        ``hevc12`` clips valid depth into the log code's range and counts those pixels in
        :attr:`clipped`; ``ffv1`` stores every uint16 value as it is.

        Raises
        ------
        CodecError
            See :meth:`check`.
        StorageError
            The file could not be written (disk full, read-only file system).
        """
        d = self.check(depth_mm)
        # handed to FFmpeg without a copy (the codes are this call's own array; a source's frame is not
        # changed after it was handed over, stream_encoder.py): the copy from_ndarray made was spent twice
        if self.codec == "hevc12":
            frame = _frame_of(self.params.encode(d), "gray12le")
            self.clipped += self.params.out_of_range(d)
        else:
            frame = _frame_of(d, "gray16le")
        frame.pts = self.frames
        mux_frame(self._out, self._stream, self._guard, frame, self.path)
        self.frames += 1

    def close(self) -> dict[str, Any]:
        """Flush and close; returns this stream's ``video_codec`` description.

        Raises
        ------
        StorageError
            The file could not be written (disk full...).
        """
        flush_and_close(self._out, self._stream, self._guard, self.path)
        desc: dict[str, Any] = {"codec": self.codec, "width": self.width, "height": self.height,
                                "frames": self.frames}
        if self.codec == "hevc12":
            desc.update({"encoder": "libx265", "pix_fmt": "gray12le", "qp": self.qp, "preset": self.preset,
                         "range": "full",
                         "tag": "hvc1", **self.params.to_dict()})
        else:
            desc.update({"encoder": "ffv1", "pix_fmt": "gray16le", "lossless": True})
        return desc

    def abort(self) -> None:
        """Close without caring about the output."""
        try:
            self._out.close()
        except Exception:  # noqa: BLE001
            pass


def _frame_of(arr: np.ndarray, fmt: str) -> av.VideoFrame:
    """A VideoFrame wrapping ``arr`` without a copy, or a copy where PyAV cannot wrap its strides."""
    try:
        return av.VideoFrame.from_numpy_buffer(arr, format=fmt)
    except ValueError:
        return av.VideoFrame.from_ndarray(arr, format=fmt)


@dataclass(frozen=True)
class DepthProbe:
    """What :func:`probe_depth` found in a depth file.

    Attributes
    ----------
    kind:
        ``"hevc12"`` (12-bit gray HEVC log code), ``"ffv1"`` (gray16le mm) or ``"png16"``
        (one 16-bit PNG frame; a directory of them is a sequence).
    stream_index:
        Index of the depth stream among all streams of the container (0 for PNG).
    codec, pix_fmt:
        As FFmpeg reports them (the codec is the one ``kind`` names: ``ffv1``, ``hevc``, ``png``).
    streams:
        ``(codec, pix_fmt)`` of every video stream, in file order (None where FFmpeg has no decoder).
    """

    kind: str
    stream_index: int
    codec: str
    pix_fmt: str | None
    streams: tuple[tuple[str | None, str | None], ...]


#: The FFmpeg codec name each depth kind is found by (:func:`_depth_stream_kind`).
_KIND_CODEC = {"ffv1": "ffv1", "hevc12": "hevc", "png16": "png"}


def _depth_stream_kind(name: str | None, pix: str | None) -> str | None:
    if name == "ffv1" and pix in ("gray16le", "gray16be"):
        return "ffv1"
    if name == "hevc" and pix is not None and pix.startswith("gray1"):
        return "hevc12"
    if name == "png" and pix in ("gray16be", "gray16le"):
        return "png16"
    return None


def _pick_depth_stream(container: Any, path: TaskPath) -> tuple[Any, str]:
    """Find the depth stream by probing codec and pixel format (never by index or extension).

    FFV1 gray16 wins over HEVC gray12 (it is lossless); the v1.0.14 dual-stream MKV's
    H.264 heatmap is never a depth stream, whatever its position.
    """
    found = [(s, _depth_stream_kind(*stream_codec(s))) for s in container.streams.video]
    for want in ("ffv1", "hevc12", "png16"):
        for s, kind in found:
            if kind == want:
                return s, kind
    listed = [stream_codec(s) for s, _ in found]
    raise CodecError(f"no depth stream (FFV1 gray16le, HEVC gray12le or PNG gray16) among video streams {listed}",
                     path=path)


def _open_container(path: TaskPath) -> Any:
    if not path.exists() and not path.is_symlink():
        raise CodecError("depth stream not found", path=path)
    return open_media(path, "depth video")


def probe_depth(path: TaskPathLike) -> DepthProbe:
    """Say which depth layout a file holds, by probing its streams (file_format.md §8, §12.6).

    A directory is a PNG16 sequence (its first frame is probed).

    Raises
    ------
    CodecError
        Missing/unreadable file or no depth stream in it.
    """
    path = as_path(path)
    if path.is_dir():
        from .depth_png import png16_frame_paths

        path = png16_frame_paths(path)[0]
    with _open_container(path) as container:
        stream, kind = _pick_depth_stream(container, path)
        streams = tuple(stream_codec(s) for s in container.streams.video)
        return DepthProbe(kind, int(stream.index), _KIND_CODEC[kind], stream_codec(stream)[1], streams)


def _log_params(container: Any, params: Mapping[str, Any] | None, path: TaskPath) -> LogDepthCodec:
    """Log-code parameters of an HEVC depth file: its own container comment when that is a JSON
    object describing the log code (``depth_codec`` or ``d_min``/``d_max``, as DepthEncoder writes
    it), else ``params`` (the episode's ``video_codec`` entry), else the defaults. A comment
    written by another tool is ignored."""
    meta: Any = params if isinstance(params, Mapping) else {}
    comment = container.metadata.get("comment") or container.metadata.get("COMMENT")
    if comment:
        try:
            own = loads_json(comment, what="container comment")
        except FormatError:
            own = None
        if isinstance(own, Mapping) and ("depth_codec" in own or "d_min" in own or "d_max" in own):
            meta = own
    try:
        return LogDepthCodec(float(meta.get("d_min", 100.0)), float(meta.get("d_max", 20000.0)))
    except (TypeError, ValueError, CodecError) as exc:
        detail = exc.message if isinstance(exc, CodecError) else str(exc)
        raise CodecError(f"unusable log depth parameters d_min={meta.get('d_min')!r}, d_max={meta.get('d_max')!r}: "
                         f"{detail}", path=path,
                         hint="fix d_min/d_max in the episode's video_codec entry (mm, 0 < d_min < d_max)") from exc


def read_depth_frames(path: TaskPathLike, params: Mapping[str, Any] | None = None,
                      ext: str | None = None) -> Iterator[np.ndarray]:
    """Decode a depth stream to uint16 mm frames ``(H, W)``, holes = 0 (file_format.md §8).

    The decoder is chosen by probing the content, never by the file name: a 12-bit
    gray HEVC stream is log-decoded, an FFV1 gray16 stream (searched among all
    streams, so the v1.0.14 dual-stream MKV works with the depth stream first or
    second) is returned as is, a directory (or ``ext == "png"``) is a legacy PNG16
    sequence. So a ``.mp4`` holding FFV1 or a ``.mkv`` holding HEVC gray12 decodes right.

    Parameters
    ----------
    path:
        The stream's file (or PNG16 directory), located through ``video_extensions``.
    params:
        Log-code parameters (e.g. the episode's ``video_codec`` entry); the container's
        own comment wins when present, since the file says what it is (DESIGN §3).
    ext:
        ``video_extensions[<key>]``. A directory is always a PNG16 sequence; a file is always
        probed, so a declaration that contradicts the file (``png`` on an MP4) does not stop it
        from being read.

    Raises
    ------
    CodecError
        Missing file, no depth stream, unusable log-code parameters, or the file cannot be decoded.
    """
    path = as_path(path)
    if path.is_dir() or (ext or "").lower() == "png" and not path.is_file():
        from .depth_png import read_png16_frames

        yield from read_png16_frames(path)
        return
    container = _open_container(path)
    with container:
        stream, to_mm = depth_stream_decoder(container, path, params)
        try:
            for frame in container.decode(stream):
                yield to_mm(frame)
        except (av.error.FFmpegError, ValueError) as exc:
            raise CodecError(f"cannot decode depth video: {exc}", path=path) from exc


def depth_stream_decoder(container: Any, path: TaskPathLike,
                         params: Mapping[str, Any] | None = None) -> tuple[Any, Callable[[Any], np.ndarray]]:
    """The depth stream of an open container and the function turning one of its decoded frames
    into uint16 mm ``(H, W)`` (holes 0): what :func:`read_depth_frames` does per frame, for a
    caller that seeks (``egopool.dataset``). Stream and log-code parameters are found as there.

    Raises
    ------
    CodecError
        No depth stream in the container, or unusable log-code parameters.
    """
    path = as_path(path)
    stream, kind = _pick_depth_stream(container, path)
    if kind in ("ffv1", "png16"):
        return stream, lambda frame: frame.to_ndarray(format="gray16le")
    codec = _log_params(container, params, path)

    def to_mm(frame: Any) -> np.ndarray:
        raw = frame.to_ndarray() if frame.format.name == "gray12le" else frame.to_ndarray(format="gray12le")
        return codec.decode(raw)

    return stream, to_mm
