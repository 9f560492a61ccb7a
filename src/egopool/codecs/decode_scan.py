"""Decode every frame of a stream to find where a reader would fail (file_format.md §8, §7.3).

A file whose packets are all present can still hold a packet whose payload is junk:
demuxing (counting packets) says nothing is wrong, but a reader decoding the stream
stops with an error at that frame. :func:`scan_stream` decodes every packet the way the
readers do (:func:`~egopool.codecs.video.read_rgb_frames`,
:func:`~egopool.codecs.depth.read_depth_frames`: FFmpeg through PyAV, or one 16-bit PNG
per frame for a legacy PNG16 directory), but keeps going after a failure so it can say
which frames fail and how many frames a reader gets before the first error.

Frame ``i`` of a stream belongs to data row ``i`` (one frame per row, §7.3), so the
frame number is the row number. A failed packet's frame number is its rank in
presentation order (by ``pts``), not its decode order, so B-frame reordering does not
shift it. Pixel-format conversion (``to_ndarray``) is not done: it cannot fail on a
frame the decoder produced in the stream's own format, and it is a large part of the cost.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

import av

from ..errors import CodecError
from ..storage import ObjectPath, TaskPath, TaskPathLike, as_path
from .video import open_media

__all__ = ["SINGLE_THREAD_PIXELS", "StreamScan", "scan_opened", "scan_stream"]


@dataclass(frozen=True)
class StreamScan:
    """What decoding a whole stream found.

    Attributes
    ----------
    packets:
        Frames stored (packets with a payload; for a PNG16 directory, its frame files).
    decoded:
        Frames the decoder produced in total.
    failed_frames:
        Frame numbers (= data rows) whose packet failed to decode, ascending.
    before_error:
        Frames a reader gets before its first error (all ``decoded`` when nothing failed).
    error:
        The first error's text (first line), or ``""``.
    """

    packets: int
    decoded: int
    failed_frames: tuple[int, ...] = ()
    before_error: int = 0
    error: str = ""

    @property
    def ok(self) -> bool:
        """True when every packet decoded and the decoder produced one frame per packet."""
        return not self.failed_frames and not self.error and self.decoded == self.packets

    @property
    def first_bad_frame(self) -> int | None:
        """Frame number (= data row) of the first frame that fails, else None."""
        return self.failed_frames[0] if self.failed_frames else None


def _first_line(exc: BaseException) -> str:
    """FFmpeg's message without PyAV's ``[Errno -1094995529]`` prefix (a code, not words)."""
    text = str(exc).strip().splitlines()
    return re.sub(r"^\[Errno -?\d+\]\s*", "", text[0]) if text else type(exc).__name__


def _scan_png16(path: TaskPath) -> StreamScan:
    from .depth_png import png16_frame_paths, read_png16_frame

    frames = png16_frame_paths(path)
    failed: list[int] = []
    error, shape = "", None
    decoded = 0
    for i, f in enumerate(frames):
        try:
            img = read_png16_frame(f)
            if shape is not None and img.shape != shape:
                raise CodecError(f"frame size {img.shape} differs from the sequence's {shape}", path=f)
        except CodecError as exc:
            failed.append(i)
            error = error or exc.one_line()
            continue
        shape = shape or img.shape
        decoded += 1
    before = failed[0] if failed else decoded
    return StreamScan(len(frames), decoded, tuple(failed), before, error)


def scan_stream(path: TaskPathLike, stream_index: int | None = None) -> StreamScan:
    """Decode every frame of one video stream (or PNG16 directory) and report what fails.

    Parameters
    ----------
    path:
        A video file (MP4/MKV/...) or a legacy PNG16 depth directory.
    stream_index:
        Index of the stream among all streams of the container (as
        :class:`~egopool.codecs.depth.DepthProbe` gives it); None = the first video
        stream (what the RGB reader decodes). Ignored for a PNG16 directory.

    Returns
    -------
    StreamScan

    Raises
    ------
    CodecError
        The file cannot be opened at all, or has no such video stream.
    """
    path = as_path(path)
    if path.is_dir():
        return _scan_png16(path)
    if isinstance(path, ObjectPath):
        container = open_media(path)
    else:
        try:
            container = av.open(str(path))
        except Exception as exc:
            raise CodecError(f"cannot open video: {exc}", path=path, hint="the file is missing or corrupt") from exc
    with container:
        return scan_opened(container, path, stream_index)


#: Frames up to this many pixels decode in the calling thread: FFmpeg's slice threads (PyAV's default,
#: docs/decisions.md U13) cost more CPU to start than such a frame takes to decode (U20).
SINGLE_THREAD_PIXELS = 320 * 240

_ONE_THREAD = False


def decode_in_one_thread(on: bool = True) -> None:
    """Decode every frame of this process in the calling thread, whatever its size (the scans of
    :func:`scan_stream` / :func:`scan_opened`). For a process that is one of as many as there are cores
    (the pooling server's verification workers, docs/decisions.md U34): the processes use the cores, and
    FFmpeg's slice threads would only add their own cost and take a core another process needs. The frames
    decoded are the same (the decoders are bit-exact whatever the thread mode)."""
    global _ONE_THREAD
    _ONE_THREAD = bool(on)


def decodes_in_one_thread() -> bool:
    """Whether :func:`decode_in_one_thread` is on in this process."""
    return _ONE_THREAD


def scan_opened(container: Any, path: TaskPathLike, stream_index: int | None = None) -> StreamScan:
    """:func:`scan_stream` of a container the caller opened (and closes), nothing demuxed from it yet: a
    probe of its header (:func:`~egopool.codecs.video.container_info`) may come first, so one open serves
    both (docs/decisions.md U20).

    Raises
    ------
    CodecError
        No such video stream.
    """
    if stream_index is None:
        if not container.streams.video:
            raise CodecError("no video stream", path=path)
        stream = container.streams.video[0]
    else:
        try:
            stream = container.streams[stream_index]
        except IndexError:
            raise CodecError(f"no stream #{stream_index}", path=path) from None
    return _scan_container(container, stream)


def _scan_container(container: Any, stream: Any) -> StreamScan:
    cc = getattr(stream, "codec_context", None)
    if cc is not None and (_ONE_THREAD or 0 < (getattr(cc, "width", 0) or 0) * (getattr(cc, "height", 0) or 0)
                           <= SINGLE_THREAD_PIXELS):
        with contextlib.suppress(Exception):  # an opened codec keeps its threads: only the cost differs
            cc.thread_type, cc.thread_count = "NONE", 1  # the same frames, decoded without starting threads
    stamps: list[int | None] = []  # pts of every payload packet, in decode order
    failed: list[int] = []  # positions in ``stamps`` of packets that failed
    decoded = 0
    before: int | None = None
    error = ""
    try:
        for packet in container.demux(stream):
            if packet.size:
                stamps.append(packet.pts)
            try:
                decoded += len(packet.decode())  # a size-0 packet at the end flushes the decoder
            except av.error.FFmpegError as exc:
                if before is None:
                    before, error = decoded, _first_line(exc)
                failed.append(len(stamps) - 1 if packet.size else len(stamps))
    except av.error.FFmpegError as exc:  # demuxing itself stopped (a damaged container)
        if before is None:
            before, error = decoded, f"demuxing stopped after {len(stamps)} packets: {_first_line(exc)}"
        failed.append(len(stamps))
    return StreamScan(len(stamps), decoded, tuple(_presentation_ranks(stamps, failed)),
                      decoded if before is None else before, error)


def _presentation_ranks(stamps: list[int | None], positions: list[int]) -> list[int]:
    """Frame numbers of the packets at decode-order ``positions``: their rank by ``pts``."""
    if all(s is not None for s in stamps):
        order = sorted(range(len(stamps)), key=lambda i: (stamps[i], i))
        rank = {pos: r for r, pos in enumerate(order)}
    else:  # no presentation stamps: decode order is all there is
        rank = {}
    return sorted({rank.get(p, p) for p in positions})
