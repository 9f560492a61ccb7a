"""Browser previews of one stream: a JPEG thumbnail and a small H.264 proxy (docs/decisions.md Q2).

Chromium plays neither HEVC nor 12-bit gray, so every stream gets an H.264 yuv420p proxy
(``+faststart``: the index first, so a browser seeks before it has the whole file), at most
:data:`MAX_WIDTH` px wide with even dimensions, one proxy frame per stream frame at the
task's row rate (a pooled stream holds one frame per data row, file_format.md §8), so proxies
of one episode play in sync frame for frame. A depth stream is decoded through egopool's own
depth reader (uint16 mm, :func:`egopool.codecs.depth.read_depth_frames`) and colour-mapped
(turbo over :data:`DEPTH_RANGE_MM`, holes black).

While an RGB stream is re-encoded, sampled frames are measured (sharpness as the variance of
the Laplacian, mean brightness and clipped fraction) for :mod:`egopool.curation.quality`.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
from PIL import Image

from .._atomic import atomic_write_bytes
from ..codecs.depth import read_depth_frames
from ..codecs.video import DtsGuard, encoding_errors, flush_and_close, mux_frame, open_media, rgb_stream
from ..errors import CodecError
from ..storage import ObjectPath, TaskPathLike, as_path

__all__ = ["DEPTH_RANGE_MM", "HELD_DEPTH_MM", "HELD_LUMA", "MAX_WIDTH", "FrameStats", "StreamPreview", "depth_proxy",
           "held_ranges", "proxy_size", "rgb_proxy", "turbo"]

#: Widest proxy, px.
MAX_WIDTH = 480
#: Depth mapped onto the colour map: (near, far) mm; nearer is clamped to the first colour, farther to the last.
DEPTH_RANGE_MM = (200.0, 6000.0)
#: Frames measured per stream for the image statistics (evenly spread).
STAT_SAMPLES = 300
_THUMB_WIDTH = 320
_CRF = 28
#: A frame is held (the stream repeated its previous frame) when no pixel of its coarse luma (every 4th
#: pixel of the proxy, full range) differs from the previous frame's by more than this many levels (the
#: codec's noise on a repeated picture; a small moving hand changes some pixel by tens) and it is not
#: uniform (standard deviation over 2 levels: a covered lens is an exposure fact); depth: mm.
HELD_LUMA = 4.0
HELD_DEPTH_MM = 2.0


def held_ranges(held: list[bool], min_run: int = 1) -> list[list[int]]:
    """``[start, stop)`` runs of at least ``min_run`` held frames (frame i repeats frame i - 1) of one stream.
    The proxies ask for half a second of rows: a slower camera's frames shown on 2-3 rows each, or a
    hand still for a moment, are not a frozen camera (docs/decisions.md P7)."""
    out: list[list[int]] = []
    for i, h in enumerate(held):
        if h and out and out[-1][1] == i:
            out[-1][1] = i + 1
        elif h:
            out.append([i, i + 1])
    return [r for r in out if r[1] - r[0] >= min_run]


def _min_run(fps: float) -> int:
    return max(2, round(float(fps) / 2))


@dataclass
class FrameStats:
    """Image statistics of the sampled frames of one RGB stream, measured on the proxy's luma.

    Attributes
    ----------
    rows:
        ``(S,)`` int64 frame (= data row) of each sample.
    sharpness:
        ``(S,)`` float64 variance of the 4-neighbour Laplacian of the luma (0..255 units²).
    brightness:
        ``(S,)`` float64 mean luma, full range (0 black .. 255 white).
    clipped:
        ``(S,)`` float64 fraction of luma pixels at ≤ 2 or ≥ 253 (full range).
    """

    rows: np.ndarray
    sharpness: np.ndarray
    brightness: np.ndarray
    clipped: np.ndarray


@dataclass
class StreamPreview:
    """What was made for one stream.

    Attributes
    ----------
    key:
        image_key.
    kind:
        ``"rgb"`` or ``"depth"``.
    video, thumbnail:
        File names (in the preview directory) of the proxy and the JPEG (None when not made).
    width, height:
        Proxy size, px (even, width ≤ :data:`MAX_WIDTH`).
    fps:
        Proxy frame rate (the task's row rate).
    frames:
        Frames in the proxy (= frames decoded from the stream).
    stats:
        RGB only: the sampled frames' :class:`FrameStats`.
    held:
        ``[start, stop)`` runs of frames that repeat the frame before (a frozen camera, the writer's
        ``<key>_repeated_count``), measured on the decoded frames (:data:`HELD_LUMA`, :data:`HELD_DEPTH_MM`).
    """

    key: str
    kind: str
    video: str
    thumbnail: str | None
    width: int
    height: int
    fps: float
    frames: int
    stats: FrameStats | None = field(default=None, repr=False)
    held: list[list[int]] = field(default_factory=list)

    @property
    def held_frames(self) -> int:
        """Frames that repeat the frame before."""
        return sum(b - a for a, b in self.held)

    @property
    def moves(self) -> bool:
        """Fewer than half of the frames are held: a camera that shows motion (ego, thumbnail, master clock)."""
        return self.held_frames * 2 < self.frames

    def to_dict(self) -> dict[str, Any]:
        """JSON form (without the statistics)."""
        return {"key": self.key, "kind": self.kind, "video": self.video, "thumbnail": self.thumbnail,
                "width": self.width, "height": self.height, "fps": self.fps, "frames": self.frames,
                "held_frames": self.held_frames, "moves": self.moves}


def proxy_size(width: int, height: int, max_width: int = MAX_WIDTH) -> tuple[int, int]:
    """Proxy ``(width, height)`` for a ``width`` × ``height`` stream: at most ``max_width`` wide, the
    aspect kept, both even (4:2:0), at least 2."""
    w = min(int(width), int(max_width))
    h = int(round(height * w / width)) if width else int(height)
    return max(2, w - w % 2), max(2, h - h % 2)


def turbo(x: np.ndarray) -> np.ndarray:
    """The turbo colour map (polynomial approximation) of ``x`` in [0, 1]: ``x.shape + (3,)`` uint8 RGB."""
    x = np.clip(np.asarray(x, np.float64), 0.0, 1.0)
    r = 0.13572138 + x * (4.61539260 + x * (-42.66032258 + x * (132.13108234 + x * (-152.94239396 + x * 59.28637943))))
    g = 0.09140261 + x * (2.19418839 + x * (4.84296658 + x * (-14.18503333 + x * (4.27729857 + x * 2.82956604))))
    b = 0.10667330 + x * (12.64194608 + x * (-60.58204836 + x * (110.36276771 + x * (-89.90310912
                                                                                        + x * 27.34824973))))
    return (np.clip(np.stack([r, g, b], axis=-1), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


_LUT = turbo(np.linspace(0.0, 1.0, 256))


def colorize_depth(mm: np.ndarray, depth_range: tuple[float, float] = DEPTH_RANGE_MM) -> np.ndarray:
    """uint16 mm ``(H, W)`` -> uint8 RGB ``(H, W, 3)``: turbo over ``depth_range``, holes (0) black."""
    lo, hi = depth_range
    idx = np.clip((mm.astype(np.float32) - lo) * (255.0 / (hi - lo)), 0, 255).astype(np.uint8)
    out = _LUT[idx]
    out[mm == 0] = 0
    return out


class _Proxy:
    """An H.264 yuv420p MP4 with ``+faststart``, frame i at pts i in 1/fps."""

    def __init__(self, path: Path, width: int, height: int, fps: float) -> None:
        self.path, self.width, self.height = path, width, height
        rate = Fraction(fps).limit_denominator(1001)
        self._tb = 1 / rate
        self._guard = DtsGuard()
        with encoding_errors(path, "cannot create the preview"):
            self._out = av.open(str(path), "w", format="mp4", options={"movflags": "+faststart"})
            self._stream = self._out.add_stream("libx264", rate=rate)
        self._stream.width, self._stream.height, self._stream.pix_fmt = width, height, "yuv420p"
        self._stream.options = {"crf": str(_CRF), "preset": "veryfast", "g": str(max(1, int(round(fps))))}
        self.frames = 0

    def encode(self, frame: av.VideoFrame) -> None:
        frame.time_base = self._tb
        frame.pts = self.frames
        mux_frame(self._out, self._stream, self._guard, frame, self.path)
        self.frames += 1

    def close(self) -> None:
        flush_and_close(self._out, self._stream, self._guard, self.path)

    def abort(self) -> None:
        try:
            self._out.close()
        except Exception:  # noqa: BLE001 - an abandoned temp file
            pass


def _laplacian_var(y: np.ndarray) -> float:
    f = y.astype(np.float32)
    lap = f[1:-1, :-2] + f[1:-1, 2:] + f[:-2, 1:-1] + f[2:, 1:-1] - 4.0 * f[1:-1, 1:-1]
    return float(lap.var()) if lap.size else 0.0


def _jpeg(rgb: np.ndarray, path: Path) -> None:
    img = Image.fromarray(rgb)
    w, h = img.size
    if w > _THUMB_WIDTH:
        img = img.resize((_THUMB_WIDTH, max(1, int(round(h * _THUMB_WIDTH / w)))), Image.Resampling.BILINEAR)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=85)
    atomic_write_bytes(path, buf.getvalue())


def _sample_every(rows: int | None) -> int:
    return max(1, -(-int(rows) // STAT_SAMPLES)) if rows else 1


def rgb_proxy(src: str | Path | ObjectPath, out_dir: Path, key: str, fps: float, *, rows: int | None = None,
              max_width: int = MAX_WIDTH) -> StreamPreview:
    """Proxy and thumbnail of one RGB stream, with the sampled frames' statistics.

    Parameters
    ----------
    src:
        The stream's video file (H.264 / HEVC, §8): a path, or an ``s3://`` object (ranged GETs).
    out_dir:
        Preview directory; writes ``<key>.mp4`` and ``<key>.jpg`` (the frame in the middle).
    fps:
        Row rate of the task (frames/s): the proxy's rate.
    rows:
        Data rows of the episode (spreads the samples and picks the thumbnail; None: frame 0).

    Raises
    ------
    CodecError
        The stream cannot be opened or decoded, or the encoder fails (names the file).
    StorageError
        The preview cannot be written.
    """
    src = as_path(src)
    every = _sample_every(rows)
    thumb_at = (int(rows) // 2) if rows else 0
    video, thumb = out_dir / f"{key}.mp4", out_dir / f"{key}.jpg"
    s_rows: list[int] = []
    sharp: list[float] = []
    bright: list[float] = []
    clip: list[float] = []
    thumb_rgb: np.ndarray | None = None
    proxy: _Proxy | None = None
    held: list[bool] = []
    prev: np.ndarray | None = None
    with open_media(src) as container:
        stream = rgb_stream(container, src)
        try:
            for i, frame in enumerate(container.decode(stream)):
                if proxy is None:
                    w, h = proxy_size(frame.width, frame.height, max_width)
                    proxy = _Proxy(video, w, h, fps)
                small = frame.reformat(width=proxy.width, height=proxy.height, format="yuv420p")
                coarse = small.to_ndarray()[: proxy.height: 4, ::4].astype(np.float32)
                # a uniform frame (lens covered, dark, blown out) is an exposure fact, not a frozen camera
                held.append(prev is not None and float(coarse.std()) * (255.0 / 219.0) > 2.0
                            and float(np.abs(coarse - prev).max()) * (255.0 / 219.0) <= HELD_LUMA)
                prev = coarse
                if i % every == 0:
                    # limited-range luma (16..235) -> 0..255, so black is 0 and white 255
                    y = np.clip((small.to_ndarray()[: proxy.height].astype(np.float32) - 16.0) * (255.0 / 219.0),
                                0.0, 255.0)
                    s_rows.append(i)
                    sharp.append(_laplacian_var(y))
                    bright.append(float(y.mean()))
                    clip.append(float(np.count_nonzero((y <= 2) | (y >= 253)) / y.size))
                if i == thumb_at or thumb_rgb is None:
                    thumb_rgb = frame.to_ndarray(format="rgb24")
                proxy.encode(small)
        except (av.error.FFmpegError, ValueError) as exc:
            if proxy is not None:
                proxy.abort()
            raise CodecError(f"cannot decode stream {key!r} for its preview: {exc}", path=src) from exc
        except BaseException:
            if proxy is not None:
                proxy.abort()
            raise
    if proxy is None or thumb_rgb is None:
        raise CodecError(f"stream {key!r} has no frame to preview", path=src)
    proxy.close()
    _jpeg(thumb_rgb, thumb)
    stats = FrameStats(np.asarray(s_rows, np.int64), np.asarray(sharp), np.asarray(bright), np.asarray(clip))
    return StreamPreview(key, "rgb", video.name, thumb.name, proxy.width, proxy.height, float(fps), proxy.frames, stats,
                         held_ranges(held, _min_run(fps)))


def depth_proxy(src: TaskPathLike, out_dir: Path, key: str, fps: float, *, params: Mapping[str, Any] | None = None,
                ext: str | None = None, rows: int | None = None, max_width: int = MAX_WIDTH,
                depth_range: tuple[float, float] = DEPTH_RANGE_MM) -> StreamPreview:
    """Colour-mapped proxy and thumbnail of one depth stream (turbo over ``depth_range`` mm, holes black).

    ``params`` / ``ext``: the episode's ``video_codec`` entry and ``video_extensions`` value, as
    :func:`egopool.codecs.depth.read_depth_frames` takes them. Writes ``<key>.mp4`` and ``<key>.jpg``.

    Raises
    ------
    CodecError
        The stream cannot be decoded as depth, or the encoder fails.
    StorageError
        The preview cannot be written.
    """
    video, thumb = out_dir / f"{key}.mp4", out_dir / f"{key}.jpg"
    thumb_at = (int(rows) // 2) if rows else 0
    proxy: _Proxy | None = None
    thumb_rgb: np.ndarray | None = None
    held: list[bool] = []
    prev: np.ndarray | None = None
    frames: Iterator[np.ndarray] = read_depth_frames(src, params, ext=ext)
    try:
        for i, mm in enumerate(frames):
            coarse = np.asarray(mm[::4, ::4], np.float32)
            held.append(prev is not None and prev.shape == coarse.shape
                        and float(np.abs(coarse - prev).max()) <= HELD_DEPTH_MM)
            prev = coarse
            rgb = colorize_depth(mm, depth_range)
            if proxy is None:
                w, h = proxy_size(rgb.shape[1], rgb.shape[0], max_width)
                proxy = _Proxy(video, w, h, fps)
            if i == thumb_at or thumb_rgb is None:
                thumb_rgb = rgb
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            proxy.encode(frame.reformat(width=proxy.width, height=proxy.height, format="yuv420p"))
    except BaseException:
        if proxy is not None:
            proxy.abort()
        raise
    if proxy is None or thumb_rgb is None:
        raise CodecError(f"depth stream {key!r} has no frame to preview", path=src)
    proxy.close()
    _jpeg(thumb_rgb, thumb)
    return StreamPreview(key, "depth", video.name, thumb.name, proxy.width, proxy.height, float(fps), proxy.frames,
                         held=held_ranges(held, _min_run(fps)))
