"""Stream copy of encoded video (file_format.md §8): packets move, pixels are never decoded.

Used where a recording already holds H.264 / HEVC that the target can decode: a LeRobot
dataset imported into a task (each episode's segment of LeRobot's multi-episode MP4 becomes
the episode's own file) and the LeRobot export (a task's MP4 is the episode's video file).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np

from ..errors import CodecError
from ..storage import TaskPath, TaskPathLike, as_path
from .video import DtsGuard, encoding_errors, open_media

__all__ = ["COPYABLE_CODECS", "VideoCopy", "VideoSource", "check_copy_frames", "check_segment", "packet_times",
           "remux_segment"]

#: Codecs a stream copy may carry into a task (file_format.md §8: RGB = HEVC/h264 in MP4).
COPYABLE_CODECS = ("h264", "hevc")


@dataclass(frozen=True)
class VideoSource:
    """An encoded video (or a time segment of it) to copy as one stream of an episode.

    Attributes
    ----------
    path:
        The source file (MP4/MKV) whose first video stream is copied.
    start_s, end_s:
        Presentation-time window in seconds, ``[start_s, end_s)``; None = from the start /
        to the end. A frame belongs to the window when its pts is at or after ``start_s`` minus
        half a frame and before ``end_s`` minus half a frame, so stamps rounded by the
        container's time base still land in the right window.
    """

    path: Path
    start_s: float | None = None
    end_s: float | None = None


def _open(path: TaskPath) -> Any:
    return open_media(path)  # regular files only: a FIFO would block inside FFmpeg


def packet_times(path: TaskPathLike) -> tuple[np.ndarray, dict[str, Any]]:
    """Presentation times of every frame of the first video stream, by demuxing (no decode).

    Returns
    -------
    (times, info):
        ``(F,)`` float64 seconds, ascending; ``info`` = codec, pix_fmt, width, height, fps
        (the stream's average rate, or None).

    Raises
    ------
    CodecError
        No video stream, or the file cannot be demuxed.
    """
    path = as_path(path)
    with _open(path) as c:
        if not c.streams.video:
            raise CodecError("no video stream", path=path)
        s = c.streams.video[0]
        tb = s.time_base
        try:
            pts = [p.pts for p in c.demux(s) if p.size and p.pts is not None]
        except av.error.FFmpegError as exc:
            raise CodecError(f"cannot demux video: {exc}", path=path) from exc
        rate = s.average_rate
        info = {"codec": s.codec_context.name, "pix_fmt": s.codec_context.pix_fmt, "width": s.codec_context.width,
                "height": s.codec_context.height, "fps": float(rate) if rate else None}
    times = np.sort(np.asarray(pts, dtype=np.float64) * float(tb)) if pts else np.zeros(0)
    return times, info


def _window_packets(inp: Any, ist: Any, source: VideoSource, fps: float | None) -> Iterator[Any]:
    """The packets of ``source``'s window in demux order (no decode).

    Raises CodecError when a packet of the window follows one after it (a group of pictures
    cut at the window's end), or FFmpeg cannot demux.
    """
    tb = ist.time_base
    rate = float(fps or (ist.average_rate or 0)) or 30.0
    half = 0.5 / rate
    lo = -math.inf if source.start_s is None else source.start_s - half
    hi = math.inf if source.end_s is None else source.end_s - half
    outside_after = False  # a packet after the window was demuxed (decode order)
    try:
        for pkt in inp.demux(ist):
            if pkt.pts is None or not pkt.size:
                continue
            t = float(pkt.pts * tb)
            if t >= hi:
                outside_after = True
                continue
            if t < lo:
                continue
            if outside_after:  # decoded after a later frame: it may reference it
                raise CodecError(f"the segment [{source.start_s}, {source.end_s}) s does not end on a "
                                 "group of pictures: its frames reference frames after it", path=source.path,
                                 hint="decode and re-encode it")
            yield pkt
    except av.error.FFmpegError as exc:
        raise CodecError(f"cannot demux video: {exc}", path=source.path) from exc


def _copyable_stream(inp: Any, src: TaskPath) -> Any:
    if not inp.streams.video:
        raise CodecError("no video stream", path=src)
    ist = inp.streams.video[0]
    codec = ist.codec_context.name
    if codec not in COPYABLE_CODECS:
        raise CodecError(f"cannot stream-copy {codec} into a task (RGB streams are {list(COPYABLE_CODECS)})",
                         path=src, hint="decode and re-encode it")
    return ist


def _check_segment(source: VideoSource, frames: int, first_key: bool | None) -> None:
    if frames == 0:
        raise CodecError(f"no frame in [{source.start_s}, {source.end_s}) s", path=source.path)
    if not first_key:
        raise CodecError(f"the segment starting at {source.start_s} s does not start on a key frame, so it "
                         "cannot be copied without re-encoding", path=source.path, hint="decode and re-encode it")


def check_segment(source: VideoSource, fps: float | None = None) -> int:
    """Check, by demuxing alone, that :func:`remux_segment` can copy ``source``; return its frame count.

    The same checks as :func:`remux_segment` (codec, a frame in the window, a key frame first,
    no group of pictures cut at the end), without writing anything. It does not decode: a
    damaged payload passes (decode the window to find that).

    Raises
    ------
    CodecError
        As :func:`remux_segment`.
    """
    src = as_path(source.path)
    frames = 0
    first_key: bool | None = None
    with _open(src) as inp:
        ist = _copyable_stream(inp, src)
        for pkt in _window_packets(inp, ist, source, fps):
            if first_key is None:
                first_key = bool(pkt.is_keyframe)
            frames += 1
    _check_segment(source, frames, first_key)
    return frames


def remux_segment(source: VideoSource, dst: str | Path, fps: float | None = None) -> dict[str, Any]:
    """Copy the packets of ``source``'s window into a new MP4 at ``dst``, timestamps shifted to start at 0.

    Parameters
    ----------
    source:
        File and window to copy: the window must start on a key frame and no frame in it may
        depend on a frame after it (LeRobot encodes each episode separately, so both hold).
    dst:
        Output MP4 (created or replaced; the caller passes a dot-temp and publishes it).
    fps:
        Frame rate used for the half-frame window tolerance (default: the stream's rate).

    Returns
    -------
    dict
        ``{"codec", "pix_fmt", "width", "height", "frames"}`` of the copy.

    Raises
    ------
    CodecError
        The codec is not one a task may hold (:data:`COPYABLE_CODECS`), the window holds no
        frame, does not start on a key frame or cuts a group of pictures at its end, or FFmpeg
        refused a packet (the partial ``dst`` is removed).
    StorageError
        ``dst`` cannot be written.
    """
    src = as_path(source.path)
    dst = Path(dst)
    with _open(src) as inp:
        ist = _copyable_stream(inp, src)
        tb = ist.time_base
        shift = 0 if source.start_s is None else int(round(source.start_s / float(tb)))
        frames = 0
        first_key: bool | None = None
        with encoding_errors(dst, "cannot write video"):
            out = av.open(str(dst), "w", format="mp4")
            ok = False
            try:
                ost = out.add_stream_from_template(ist)
                guard = DtsGuard()
                for pkt in _window_packets(inp, ist, source, fps):
                    if first_key is None:
                        first_key = bool(pkt.is_keyframe)
                    pkt.pts -= shift
                    if pkt.dts is not None:
                        pkt.dts -= shift
                    pkt.stream = ost
                    guard.mux(out, pkt)
                    frames += 1
                ok = True
            finally:
                out.close()
                if not ok:
                    dst.unlink(missing_ok=True)
        info = {"codec": ist.codec_context.name, "pix_fmt": ist.codec_context.pix_fmt,
                "width": ist.codec_context.width, "height": ist.codec_context.height, "frames": frames}
    _check_segment(source, frames, first_key)
    return info


class VideoCopy:
    """A stream of an episode whose frames are copied from an encoded file (no frames are passed).

    Has the encoder interface the episode writer drives (``check``/``encode`` refuse frames,
    ``close`` describes the copy, ``abort`` does nothing); the copy is made when the object
    is created, so a bad source fails before any row is written.

    Parameters
    ----------
    path:
        Output MP4 (the writer's dot-temp).
    source:
        What to copy.
    fps:
        Task frame rate (window tolerance).

    Raises
    ------
    CodecError, StorageError
        See :func:`remux_segment`.
    """

    def __init__(self, path: str | Path, source: VideoSource, fps: float) -> None:
        self.path = Path(path)
        self.source = source
        self._info = remux_segment(source, self.path, fps)
        self.frames = int(self._info["frames"])
        self.pix_fmt = str(self._info["pix_fmt"])

    def check(self, image: np.ndarray) -> np.ndarray:
        """Always refuses: the stream's frames come from its source file."""
        raise CodecError(f"this stream is copied from {self.source.path}; pass no frames for it", path=self.path)

    def encode(self, image: np.ndarray) -> None:
        """Always refuses (see :meth:`check`)."""
        self.check(image)

    def close(self) -> dict[str, Any]:
        """The ``video_codec`` description of the copied stream."""
        return {"encoder": "copy", **self._info, "source": str(self.source.path),
                "source_window_s": [self.source.start_s, self.source.end_s]}

    def abort(self) -> None:
        """Nothing to release (the copy was closed when it was made)."""


def check_copy_frames(key: str, copy: VideoCopy, rows: int) -> None:
    """Raise CodecError unless the copied stream holds exactly one frame per data row (§7.3)."""
    if copy.frames != rows:
        raise CodecError(f"stream {key!r} copied from {copy.source.path} holds {copy.frames} frames for "
                           f"{rows} data rows (one frame per row, file_format.md §7.3)",
                           hint="the source window and the rows must cover the same frames")
