"""LeRobot 0.6 depth videos: its 12-bit quantisation, written and read with PyAV (no lerobot, no torch).

LeRobot ≥ 0.6 stores a depth camera as a video feature whose ``info`` carries ``is_depth_map: true``,
``depth_unit`` and ``video.depth_min/max/shift/use_log`` (metres): each frame is quantised to a 12-bit
code ``q = rint(4095 * (ln(d + shift) - ln(min + shift)) / (ln(max + shift) - ln(min + shift)))``
clipped to ``[0, 4095]`` (``use_log``; linear ``(d - min) / (max - min)`` otherwise), stored as a
``gray12le`` HEVC stream encoded losslessly by x265, and decoded by
``d = clip(exp(q * scale + ln(min + shift)) - shift, min, max)`` in float32 metres, rounded to mm
(lerobot 0.6.1 ``lerobot.datasets.depth_utils``). The same float32 steps are reproduced here, so
egopool's decode of a code is LeRobot's.

LeRobot has no hole value: a 0 mm input becomes code 0, which LeRobot reads as ``depth_min``
(10 mm by default). egopool's export keeps code 0 for holes alone (a valid pixel whose code would be
0, below ``depth_min`` + half a step, gets code 1 and is counted) so a hole is exactly "code 0" =
"depth_min" in LeRobot's items, and egopool's import turns code 0 back into a hole (0 mm).
docs/decisions.md I14.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np

from ..codecs.depth import _frame_of
from ..codecs.depth_error import DepthErrorTally
from ..codecs.video import open_media
from ..errors import CodecError, FormatError

__all__ = ["LeRobotDepthMap", "LeRobotDepthWriter", "depth_map_of_feature", "is_depth_feature",
           "read_lerobot_depth"]

QMAX = 4095
#: lerobot 0.6.1's ``DepthEncoderConfig`` defaults (metres).
DEFAULT_MIN, DEFAULT_MAX, DEFAULT_SHIFT = 0.01, 10.0, 3.5
#: Pixel formats whose first plane holds LeRobot's 12-bit codes.
_GRAY_FORMATS = ("gray12le", "gray12be", "gray16le", "gray16be", "gray10le")


@dataclass(frozen=True)
class LeRobotDepthMap:
    """LeRobot's depth quantiser (metres), as ``info.json`` names it (``video.depth_*``)."""

    depth_min: float = DEFAULT_MIN
    depth_max: float = DEFAULT_MAX
    shift: float = DEFAULT_SHIFT
    use_log: bool = True

    def __post_init__(self) -> None:
        ok = all(math.isfinite(v) for v in (self.depth_min, self.depth_max, self.shift))
        if not ok or not self.depth_min < self.depth_max or (self.use_log and self.depth_min + self.shift <= 0):
            raise CodecError(f"depth quantisation {self.to_info()} is not usable: needs finite "
                             "depth_min < depth_max and depth_min + shift > 0")

    def to_info(self) -> dict[str, Any]:
        """The ``video.depth_*`` keys of a feature's ``info``."""
        return {"video.depth_min": self.depth_min, "video.depth_max": self.depth_max, "video.shift": self.shift,
                "video.use_log": self.use_log}

    def _mm(self) -> tuple[np.float32, np.float32, np.float32]:
        return np.float32(self.depth_min * 1000.0), np.float32(self.depth_max * 1000.0), np.float32(self.shift * 1000.0)

    def quantize(self, depth_mm: np.ndarray) -> np.ndarray:
        """uint16 mm ``(H, W)`` -> uint16 codes ``0..4095``, lerobot 0.6.1's float32 steps; code 0 only for holes."""
        d = np.asarray(depth_mm)
        lo, hi, sh = self._mm()
        df = d.astype(np.float32)
        if self.use_log:
            log_min, log_max = math.log(float(lo + sh)), math.log(float(hi + sh))
            norm = (np.log(df + sh) - log_min) / (log_max - log_min)
        else:
            norm = (df - lo) / (hi - lo)
        q = np.rint(norm * QMAX).clip(0, QMAX).astype(np.uint16)
        q[(q == 0) & (d > 0)] = 1
        return q

    def dequantize(self, codes: np.ndarray) -> np.ndarray:
        """uint16 codes -> float32 mm as LeRobot's reader returns them (rounded; code 0 = ``depth_min``)."""
        lo, hi, sh = self.depth_min, self.depth_max, self.shift
        if self.use_log:
            log_min, log_max = math.log(lo + sh), math.log(hi + sh)
            scale, offset = (log_max - log_min) / QMAX, log_min
        else:
            scale, offset = (hi - lo) / QMAX, lo
        buf = np.asarray(codes).astype(np.float32) * np.float32(scale) + np.float32(offset)
        if self.use_log:
            buf = np.exp(buf) - np.float32(sh)
        buf = np.clip(buf, np.float32(lo), np.float32(hi)) * np.float32(1000.0)
        return np.clip(np.rint(buf), 0.0, 65535.0).astype(np.float32)

    def to_mm(self, codes: np.ndarray) -> np.ndarray:
        """uint16 codes -> egopool's uint16 mm: LeRobot's value, code 0 a hole (0)."""
        c = np.asarray(codes)
        return np.where(c == 0, 0, self.dequantize(c)).astype(np.uint16)

    def step_mm(self, depth_mm: float) -> float:
        """The code step (mm) at a depth: an in-range value comes back within half of it (+ 0.5 mm rounding)."""
        lo, hi, sh = (v * 1000.0 for v in (self.depth_min, self.depth_max, self.shift))
        if not self.use_log:
            return (hi - lo) / QMAX
        return (depth_mm + sh) * (math.exp(math.log((hi + sh) / (lo + sh)) / QMAX) - 1.0)


class LeRobotDepthWriter:
    """One episode's depth stream as LeRobot 0.6's depth video: x265 lossless ``gray12le`` HEVC in MP4.

    Parameters
    ----------
    path:
        The ``.mp4`` to write.
    width, height, fps:
        Frame size and rate (frame i at ``i / fps``).
    depth_map:
        The quantiser (LeRobot's defaults unless given).
    gop:
        Key frame interval (LeRobot's writer uses 2).
    """

    def __init__(self, path: Path, width: int, height: int, fps: int, depth_map: LeRobotDepthMap, *,
                 gop: int = 2) -> None:
        self.depth_map = depth_map
        self.errors = DepthErrorTally()
        self._lo, self._hi = depth_map.depth_min * 1000.0, depth_map.depth_max * 1000.0
        self._out = av.open(str(path), "w")
        s = self._out.add_stream("libx265", rate=fps)
        s.width, s.height, s.pix_fmt = width, height, "gray12le"
        s.options = {"g": str(gop), "x265-params": "lossless=1:log-level=error"}
        s.codec_tag = "hvc1"
        self._stream = s
        self._n = 0

    def encode(self, depth_mm: np.ndarray) -> None:
        """Quantise and encode one uint16 mm ``(H, W)`` frame (errors accounted in :attr:`errors`)."""
        codes = self.depth_map.quantize(depth_mm)
        self.errors.add(depth_mm, self.depth_map.dequantize(codes), self._lo, self._hi)
        frame = _frame_of(codes, "gray12le")
        frame.pts = self._n
        self._n += 1
        for pkt in self._stream.encode(frame):
            self._out.mux(pkt)

    def close(self) -> None:
        """Flush and close the file."""
        for pkt in self._stream.encode(None):
            self._out.mux(pkt)
        self._out.close()

    def abort(self) -> None:
        """Close without flushing (the caller removes the file)."""
        try:
            self._out.close()
        except Exception:  # noqa: BLE001 - already failing
            pass


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def is_depth_feature(feature: Mapping[str, Any]) -> bool:
    """True for a LeRobot depth-map feature, whichever release's key marks it (0.6 ``info.is_depth_map``,
    0.4's ``info.video.is_depth_map``, or ``video_info.video.is_depth_map``)."""
    info = _mapping(feature.get("info"))
    vinfo = _mapping(feature.get("video_info"))
    return bool(info.get("is_depth_map") or info.get("video.is_depth_map") or vinfo.get("video.is_depth_map"))


def depth_map_of_feature(name: str, feature: Mapping[str, Any], path: Path) -> LeRobotDepthMap:
    """The quantiser a depth video feature declares (LeRobot's defaults for keys it leaves out, as lerobot does).

    Raises
    ------
    FormatError
        A depth feature egopool cannot decode: not a video, a pixel format whose plane is not LeRobot's
        12-bit code, or depth parameters that are not numbers / a bool (one line naming the feature).
    """
    info = _mapping(feature.get("info"))
    pix = info.get("video.pix_fmt")
    if feature.get("dtype") != "video" or (pix is not None and pix not in _GRAY_FORMATS):
        stored = " ".join(str(x) for x in (feature.get("dtype"), pix) if x is not None)
        raise FormatError(f"feature {name!r} is a depth map stored as {stored}: an encoding egopool does not know "
                          "(it reads LeRobot's 12-bit gray depth videos)", path=path,
                          hint="import without it: pass a dataset without the feature, or convert it with lerobot")
    vals: dict[str, Any] = {}
    for key, default in (("depth_min", DEFAULT_MIN), ("depth_max", DEFAULT_MAX), ("shift", DEFAULT_SHIFT)):
        v = info.get(f"video.{key}", default)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise FormatError(f"feature {name!r}: video.{key} is {v!r}, not a number (metres)", path=path)
        vals[key] = float(v)
    use_log = info.get("video.use_log", True)
    if not isinstance(use_log, bool):
        raise FormatError(f"feature {name!r}: video.use_log is {use_log!r}, not true/false", path=path)
    try:
        return LeRobotDepthMap(vals["depth_min"], vals["depth_max"], vals["shift"], use_log)
    except CodecError as exc:
        raise FormatError(f"feature {name!r}: {exc.message}", path=path) from None


def read_lerobot_depth(frames: Iterator[Any], depth_map: LeRobotDepthMap) -> Iterator[np.ndarray]:
    """Decoded ``av.VideoFrame`` s of a LeRobot depth video -> uint16 mm ``(H, W)`` (code 0 a hole)."""
    for frame in frames:
        codes = frame.to_ndarray(format="gray12le") if frame.format.name != "gray12le" else frame.to_ndarray()
        yield depth_map.to_mm(codes)


def probe_codes(path: Path) -> np.ndarray:
    """Every frame's codes of a depth video ``(F, H, W)`` uint16 (tests and tools)."""
    with open_media(path) as c:
        return np.stack([f.to_ndarray(format="gray12le") for f in c.decode(video=0)])
