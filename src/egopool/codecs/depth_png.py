"""Legacy PNG16 depth: a sequence of single-frame 16-bit PNGs (file_format.md §8, read-only).

Apps v1.0.12 and earlier stored depth as one 16-bit grayscale PNG per frame
(uint16 mm, 0 = no depth). The spec does not spell out the on-disk shape; egopool
reads (docs/decisions.md "PNG16 depth sequences"):

* a directory at the stream's place, ``videos/chunk-NNN/<key>/episode-NNN/`` (or the
  template path itself, ``episode-NNN.png/``), with ``video_extensions[<key>] = "png"``;
* every non-dot ``*.png`` file in it is one frame, ordered by the last integer in its
  name (``frame-000012.png`` → 12; ties and names without digits by name);
* a single ``.png`` file is a one-frame sequence.

Pixels are decoded with PyAV (FFmpeg's PNG decoder) and must be 16-bit gray; an
8-bit PNG is not millimetres and is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import av
import numpy as np

from ..errors import CodecError
from ..storage import ObjectPath, TaskPath, TaskPathLike, as_path
from .video import open_media, stream_codec

__all__ = ["PNG_EXT", "encode_png16", "png16_frame_paths", "read_png16_frame", "read_png16_frames"]

PNG_EXT = "png"
_DIGITS = re.compile(r"(\d+)")


def _frame_key(p: TaskPath) -> tuple[int, int, str, str]:
    """Order by the last integer in the name, compared as digits (a 400-digit frame number
    would overflow a float and exceed int()'s digit limit); names without digits last."""
    nums = _DIGITS.findall(p.stem)
    if not nums:
        return (1, 0, "", p.name)
    digits = nums[-1].lstrip("0") or "0"
    return (0, len(digits), digits, p.name)


def png16_frame_paths(path: TaskPathLike) -> list[TaskPath]:
    """The frame files of a PNG16 sequence, in frame order.

    Raises
    ------
    CodecError
        ``path`` is missing, or a directory without ``*.png`` files.
    """
    p = as_path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise CodecError("PNG16 depth sequence not found", path=p)
    found: list[TaskPath]
    if isinstance(p, ObjectPath):  # one LIST gives every frame's kind: no HEAD per frame
        found = [e.path for e in p.scandir() if e.is_file() and not e.name.startswith(".")
                 and e.path.suffix.lower() == ".png"]
    else:
        found = [f for f in p.iterdir() if f.is_file() and not f.name.startswith(".") and f.suffix.lower() == ".png"]
    frames = sorted(found, key=_frame_key)
    if not frames:
        raise CodecError("directory holds no .png depth frames", path=p,
                         hint="a PNG16 depth stream is a directory of 16-bit grayscale PNGs")
    return frames


def read_png16_frame(path: TaskPathLike) -> np.ndarray:
    """Decode one 16-bit grayscale PNG to uint16 ``(H, W)`` mm (0 = hole).

    Raises
    ------
    CodecError
        Unreadable file, not a PNG, or not 16-bit gray.
    """
    p = as_path(path)
    try:
        with open_media(p, "PNG depth frame") as container:
            if not container.streams.video:
                raise CodecError("no image in file", path=p)
            stream = container.streams.video[0]
            name, pix = stream_codec(stream)
            if name != "png" or pix not in ("gray16be", "gray16le"):
                raise CodecError(f"not a 16-bit grayscale PNG (codec {name}, pixels {pix})", path=p,
                                 hint="legacy PNG depth frames hold uint16 millimetres")
            frame = next(iter(container.decode(stream)))
            return np.ascontiguousarray(frame.to_ndarray(format="gray16le"))
    except CodecError:
        raise
    except (av.error.FFmpegError, StopIteration, OSError, ValueError) as exc:
        raise CodecError(f"cannot decode PNG depth frame: {exc}", path=p) from exc


def read_png16_frames(path: TaskPathLike) -> Iterator[np.ndarray]:
    """Decode a PNG16 sequence (directory or single file) to uint16 mm frames ``(H, W)``.

    Raises
    ------
    CodecError
        No frames, a frame that is not 16-bit gray, or frames of different sizes.
    """
    shape: tuple[int, ...] | None = None
    for f in png16_frame_paths(path):
        img = read_png16_frame(f)
        if shape is not None and img.shape != shape:
            raise CodecError(f"frame size {img.shape} differs from the sequence's {shape}", path=f)
        shape = img.shape
        yield img


def encode_png16(depth_mm: np.ndarray) -> bytes:
    """Encode uint16 mm ``(H, W)`` as a 16-bit grayscale PNG (lossless), for fixtures and migration.

    Raises
    ------
    CodecError
        Not a 2-D uint16 array.
    """
    d = np.asarray(depth_mm)
    if d.dtype != np.uint16 or d.ndim != 2:
        raise CodecError(f"PNG16 depth frames must be 2-D uint16 mm, got {d.dtype} {d.shape}")
    ctx = av.CodecContext.create("png", "w")
    ctx.width, ctx.height, ctx.pix_fmt = d.shape[1], d.shape[0], "gray16be"
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(d), format="gray16le").reformat(format="gray16be")
    packets = list(ctx.encode(frame)) + list(ctx.encode(None))
    return b"".join(bytes(p) for p in packets)
