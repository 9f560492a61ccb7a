"""A video stream of an episode: its declaration (:class:`StreamSpec`, file_format.md §8) and, while
the episode is written, its encoder and files (:class:`EpisodeStream`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import checks
from ..codecs.depth import DepthEncoder, LogDepthCodec, check_depth_codec, hevc12_available
from ..codecs.video import RgbEncoder
from ..codecs.video_copy import VideoCopy, VideoSource
from ..errors import CodecError, SchemaError
from ..schema import check_slot_name
from .stream_encoder import EncoderThread

if TYPE_CHECKING:
    import av

__all__ = ["EpisodeStream", "StreamSpec"]


@dataclass(frozen=True)
class StreamSpec:
    """One video stream of an episode (file_format.md §8, multi_device_storage.md §4.8).

    Attributes
    ----------
    image_key:
        Slot name, the directory under ``videos/chunk-NNN/``.
    kind:
        ``"rgb"`` (uint8 ``(H, W, 3)`` or gray ``(H, W)``) or ``"depth"`` (uint16 mm ``(H, W)``).
    width, height:
        Frame size in pixels.
    fps:
        Stream rate when it differs from the task fps (written into ``cameras``, §6.3).
    codec:
        RGB: ``"h264"`` (default) or ``"hevc"``. Depth: ``"hevc12"`` (default; falls back
        to ``"ffv1"`` when libx265 lacks gray12le) or ``"ffv1"`` (lossless).
    master_slot:
        Depth only: the RGB slot it follows (informational; one frame per row either way).
    depth_params:
        Log-code range for ``hevc12`` (default 100..20000 mm).
    preset:
        x264 / x265 speed preset (None: the encoder's default, docs/decisions.md #11, R12);
        recorded in the episode's ``video_codec``.
    source:
        RGB only: copy this encoded H.264/HEVC video (or a time window of it) as the stream
        instead of encoding frames (stream copy, :mod:`egopool.codecs.video_copy`). Rows pass
        no image for it; at finish it must hold exactly one frame per row.
    """

    image_key: str
    kind: str
    width: int
    height: int
    fps: float | None = None
    codec: str | None = None
    master_slot: str | None = None
    depth_params: LogDepthCodec | None = None
    preset: str | None = None
    source: VideoSource | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("rgb", "depth"):
            raise SchemaError(f"stream {self.image_key!r}: kind must be 'rgb' or 'depth', got {self.kind!r}")
        check_slot_name(self.image_key)
        if self.width <= 0 or self.height <= 0:
            raise SchemaError(f"stream {self.image_key!r}: size must be positive, got {self.width}x{self.height}")
        if self.fps is not None:
            checks.check_positive_number(self.fps, f"stream {self.image_key!r}: fps")
        if self.kind == "depth" and self.codec is not None:
            check_depth_codec(self.codec)
        if self.source is not None and self.kind != "rgb":
            raise SchemaError(f"stream {self.image_key!r}: only RGB streams can be copied from a source video")

    def codec_ext(self) -> tuple[str, str]:
        """``(codec, file extension)`` this stream is written with (hevc12 depth falls back to ffv1/mkv
        when libx265 lacks gray12le)."""
        if self.kind == "rgb":
            return ("copy" if self.source is not None else self.codec or "h264"), "mp4"
        codec = self.codec or "hevc12"
        if codec == "hevc12" and not hevc12_available():
            codec = "ffv1"
        return codec, DepthEncoder.ext_for(codec)

    def encoder(self, path: Path, fps: float) -> RgbEncoder | DepthEncoder:
        """A new encoder of this stream writing ``path`` at ``fps`` (frames/s), with :meth:`codec_ext`'s codec.

        A copied stream (``source``) has no encoder: :class:`~egopool.codecs.video_copy.VideoCopy` writes it.
        """
        codec, _ = self.codec_ext()
        if self.kind == "rgb":
            if self.preset:
                return RgbEncoder(path, self.width, self.height, fps, codec=codec, preset=self.preset)
            return RgbEncoder(path, self.width, self.height, fps, codec=codec)
        if self.preset:
            return DepthEncoder(path, self.width, self.height, fps, codec=codec, params=self.depth_params,
                                preset=self.preset)
        return DepthEncoder(path, self.width, self.height, fps, codec=codec, params=self.depth_params)



@dataclass
class EpisodeStream:
    """A declared stream while its episode is written: its encoder (on an :class:`EncoderThread` or in the
    caller's thread), its dot-temp and final file, the last frame (repeated when a row has none)."""


    spec: StreamSpec
    encoder: RgbEncoder | DepthEncoder | VideoCopy
    temp: Path
    final: Path
    last: Any = None
    repeated: int = 0
    worker: EncoderThread | None = None

    def check(self, frame: np.ndarray | av.VideoFrame) -> np.ndarray | av.VideoFrame:
        """``frame`` as the encoder takes it (its ``check``); CodecError for a frame the stream cannot take."""
        enc = self.encoder
        if isinstance(enc, RgbEncoder):
            return enc.check(frame)
        if isinstance(frame, np.ndarray):
            return enc.check(frame)  # a copied stream refuses any
        what = ("it is copied from its source file and takes no frames" if isinstance(enc, VideoCopy)
                else "a depth stream takes uint16 mm (H, W) arrays")
        raise CodecError(f"stream {self.spec.image_key!r} got a {type(frame).__name__}: {what}", path=self.final)

    def encode(self, frame: Any) -> None:
        if self.worker is not None:
            self.worker.submit(frame)
        else:
            self.encoder.encode(frame)

    def close(self) -> dict[str, Any]:
        return self.worker.close() if self.worker is not None else self.encoder.close()

    def abort(self) -> None:
        if self.worker is not None:
            self.worker.abort()
        else:
            self.encoder.abort()
