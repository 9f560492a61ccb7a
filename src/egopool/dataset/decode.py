"""Random access to the frames of one stream: seek to a keyframe, decode forward once.

:class:`StreamDecoder` keeps one container open. On opening it demuxes the stream once (no
decoding) to learn every frame's pts and which frames are keyframes; frame ``j`` is the
``j``-th frame in presentation order, exactly what :meth:`egopool.Episode.video` /
:meth:`~egopool.Episode.depth` yield ``j``-th. A request for frames ``[a, ..., b]`` seeks to
the last keyframe at or before ``a`` and decodes forward to ``b`` once, converting only the
frames asked for (RGB through :func:`egopool.codecs.video.rgb_array`, depth through
:func:`egopool.codecs.depth.depth_stream_decoder`: the reader's own conversions, so values are
bit-exact), and, when requests advance one frame at a time (a sequential sampler), the
``max_frames`` frames before ``b`` too (the next item asks them). When the decoder already stands between that keyframe and ``a`` it continues without
seeking. At most ``max_frames`` converted frames are kept per stream (beyond the ones a request
holds), the newest ones. A stream whose packets carry no usable pts is decoded from its start
instead (never a wrong frame).

:class:`DecoderCache` bounds the open containers (least recently used closed first).
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import av
import numpy as np

from ..codecs.depth import depth_stream_decoder
from ..codecs.depth_png import png16_frame_paths, read_png16_frame
from ..codecs.video import open_media, rgb_array, rgb_stream, stream_codec
from ..errors import CodecError
from ..storage import ObjectPath, TaskPath, TaskPathLike, as_path
from .object_cache import BlockCache, CachedObjectFile, mp4_packet_index, open_cached_container

__all__ = ["DecoderCache", "DepthParams", "PngSequence", "StreamDecoder", "check_frames", "probe_kind"]

#: A depth stream's log-code parameters (the episode's ``video_codec`` entry), or a function reading them when needed.
DepthParams = Mapping[str, Any] | Callable[[], Mapping[str, Any] | None] | None


def check_frames(need: Sequence[int], frame_count: int, path: TaskPath) -> None:
    """Refuse a request for frames outside ``[0, frame_count)`` (``need`` sorted ascending).

    Raises
    ------
    CodecError
        Naming the frame asked, the stream's count and the file (the video is shorter than the episode's rows).
    """
    if need and (need[0] < 0 or need[-1] >= frame_count):
        raise CodecError(f"frame {need[-1] if need[-1] >= frame_count else need[0]} asked, the stream "
                         f"holds {frame_count}", path=path,
                         hint="the video is shorter than the episode's rows: run `egopool validate TASK`")


def probe_kind(container: Any) -> str:
    """``"depth"`` or ``"rgb"`` of an open container, by :meth:`egopool.Episode.stream_kind`'s rule: gray pixels or
    two video streams are depth."""
    vs = container.streams.video
    gray = bool(vs) and str(stream_codec(vs[0])[1] or "").startswith("gray")
    return "depth" if gray or len(vs) > 1 else "rgb"


class StreamDecoder:
    """One open RGB or depth video with seek-and-forward decoding.

    Parameters
    ----------
    path:
        The stream's file: a local path, or an object in a bucket (read through ranged GETs).
    kind:
        ``"rgb"`` (uint8 ``(H, W, 3)``), ``"depth"`` (uint16 mm ``(H, W)``), or ``"auto"``: probed on the
        container as :meth:`egopool.Episode.stream_kind` does (gray pixels or two video streams are depth).
    params:
        Depth log-code parameters (the episode's ``video_codec`` entry), or a function giving them, called only
        when the stream is depth (a bucket's ``"auto"`` stream: an RGB stream then costs no read of the row);
        ignored for RGB.
    max_frames:
        Converted frames kept for later requests (memory ``max_frames × H × W × 3`` bytes RGB,
        ``× 2`` bytes depth).
    cache:
        For an object in a bucket: the process's :class:`~egopool.dataset.object_cache.BlockCache` its bytes
        are read through (coalesced ranged GETs, read-ahead, bounded memory; an MP4's packet index is
        demuxed from its sample tables without downloading its samples). None: PyAV's buffered reader.
    opened:
        ``(container, file)`` of :func:`~egopool.dataset.object_cache.open_cached_container` already open on
        ``path`` (its header probed elsewhere): used instead of opening the object again; closed with this decoder.

    Raises
    ------
    CodecError
        The file cannot be opened or has no stream of that kind (names the file).
    """

    def __init__(self, path: TaskPathLike, kind: str, params: DepthParams = None, *,
                 max_frames: int = 32, cache: BlockCache | None = None,
                 opened: tuple[Any, CachedObjectFile] | None = None) -> None:
        self.path = as_path(path)
        self.max_frames = max(1, int(max_frames))
        self._file: Any = None
        if opened is not None:  # a container over the cache already open (torchcodec_decode probed it)
            self._c, self._file = opened
        elif isinstance(self.path, ObjectPath) and cache is not None:
            self._c, self._file = open_cached_container(self.path, cache)
        else:
            self._c = open_media(self.path, "video")
        try:
            if kind == "auto":  # Episode.stream_kind's probe, on this container (no second open of the object)
                kind = probe_kind(self._c)
            self.kind = kind
            if kind == "depth":
                got = params() if callable(params) else params
                self._s, self._convert = depth_stream_decoder(self._c, self.path, got)
            else:
                self._s, self._convert = rgb_stream(self._c, self.path), rgb_array
            self._index_packets()
        except BaseException:
            self._close_container()
            raise
        self._frames: OrderedDict[int, np.ndarray] = OrderedDict()
        self._iter: Any = None
        self._pos: int | None = None  # index of the next frame the decoder will output
        #: Seeks (decoder restarts) so far: a sequential sampler's items cost one per stream.
        self.seeks = 0
        self._last, self._ahead = -2, False

    def _index_packets(self) -> None:
        pts: list[int | None] = []
        key: list[bool] = []
        table = (mp4_packet_index(self.path, self._file, self._s.index)
                 if isinstance(self.path, ObjectPath) and self._file is not None else None)
        try:  # a bucket's MP4: pts and keyframe flags from its sample tables, its samples not downloaded
            if table is not None:
                pts, key = [p for p, _ in table], [k for _, k in table]
            else:
                for p in self._c.demux(self._s):
                    if p.size:
                        pts.append(p.pts)
                        key.append(bool(p.is_keyframe))
            self._c.seek(0, stream=self._s) if pts else None
        except av.error.FFmpegError as exc:
            raise CodecError(f"cannot demux video: {exc}", path=self.path) from exc
        self.frame_count = len(pts)
        stamped = [p for p in pts if p is not None]
        clean = len(stamped) == len(pts) and len(set(stamped)) == len(stamped)
        self._pts: list[int] = sorted(stamped) if clean else []
        self._index_of = {p: j for j, p in enumerate(self._pts)}
        keys = sorted(p for p, k in zip(stamped, key, strict=True) if k) if clean else []
        self._keys = [self._index_of[p] for p in keys]
        self.seekable = clean and bool(self._keys) and self._keys[0] == 0

    def close(self) -> None:
        """Close the container (the decoder is unusable afterwards)."""
        self._iter = None
        self._frames.clear()
        self._close_container()

    def _close_container(self) -> None:
        try:
            self._c.close()
        finally:
            if self._file is not None:
                self._file.close()

    def _restart(self, k: int) -> None:
        self.seeks += 1
        if self.seekable:
            self._c.seek(self._pts[k], stream=self._s, backward=True, any_frame=False)
        else:
            self._c.seek(0, stream=self._s)
            k = 0
        self._iter = self._c.decode(self._s)
        self._pos = None if self.seekable else 0

    def frames(self, wanted: Sequence[int]) -> dict[int, np.ndarray]:
        """Frames ``wanted`` (0-based, any order, repeats allowed) as ``{index: array}``.

        Raises
        ------
        CodecError
            An index outside ``[0, frame_count)`` (the stream is shorter than the episode's rows),
            or the file cannot be decoded (names the file).
        """
        need = sorted(set(int(j) for j in wanted))
        # a request ending one frame after the previous one: a sequential sampler; only then are the
        # frames before the window converted ahead (a shuffled sampler would pay for them in vain)
        self._ahead = bool(need) and need[-1] == self._last + 1
        self._last = need[-1] if need else self._last
        check_frames(need, self.frame_count, self.path)
        out = {j: self._frames[j] for j in need if j in self._frames}
        missing = [j for j in need if j not in out]
        if missing:
            self._decode(missing, out)
        if len(self._frames) > self.max_frames:  # keep the newest frames: a sequential sampler asks them next
            keep = set(need)
            for j in sorted(j for j in self._frames if j not in keep)[:len(self._frames) - self.max_frames]:
                del self._frames[j]
        return out

    def _decode(self, missing: list[int], out: dict[int, np.ndarray]) -> None:
        first, last = missing[0], missing[-1]
        todo = set(missing)
        k = self._keys[bisect.bisect_right(self._keys, first) - 1] if self.seekable else 0
        if self._iter is None or self._pos is None or not (k <= self._pos <= first):
            self._restart(k)
        try:
            count = self._pos if self._pos is not None else 0  # (seekable: each frame's pts says which it is)
            for frame in self._iter:
                if self.seekable:
                    at = self._index_of.get(frame.pts)
                    if at is None:
                        raise CodecError(f"decoded a frame with pts {frame.pts} the stream's packets do not hold",
                                         path=self.path)
                    j = at
                else:
                    j = count
                    count += 1
                self._pos = j + 1
                if j in todo:
                    out[j] = self._frames[j] = self._convert(frame)
                    todo.discard(j)
                elif self._ahead and j > last - self.max_frames and j not in self._frames:
                    self._frames[j] = self._convert(frame)  # the next window of a sequential sampler
                if j >= last or not todo:
                    break
        except (av.error.FFmpegError, ValueError) as exc:
            self._iter = None
            raise CodecError(f"cannot decode video: {exc}", path=self.path,
                             hint="the video is damaged or truncated (`egopool validate TASK` finds them)") from exc
        if todo:
            self._iter = None
            raise CodecError(f"frames {sorted(todo)[:3]} could not be decoded (the stream ended)", path=self.path,
                             hint="the video is damaged or truncated (`egopool validate TASK` finds them)")


class PngSequence:
    """A legacy PNG16 depth directory with the :class:`StreamDecoder` interface (one file per frame)."""

    def __init__(self, path: TaskPathLike, max_frames: int = 32) -> None:
        self.path = as_path(path)
        self._files = png16_frame_paths(self.path)
        self.frame_count = len(self._files)

    def frames(self, wanted: Sequence[int]) -> dict[int, np.ndarray]:
        """uint16 mm ``(H, W)`` frames by index. Raises CodecError for an index past the last file."""
        out = {}
        for j in sorted(set(int(j) for j in wanted)):
            if not 0 <= j < self.frame_count:
                raise CodecError(f"frame {j} asked, the sequence holds {self.frame_count}", path=self.path)
            out[j] = read_png16_frame(self._files[j])
        return out

    def close(self) -> None:
        """Nothing is held open."""


class DecoderCache:
    """At most ``max_open`` decoders, least recently used closed first.

    ``open(path, make)`` returns the decoder of ``path``, calling ``make()`` when there is none. Thread-safe:
    ``make()`` runs outside the lock (threads open different streams at once); a caller that uses at most
    ``max_open`` decoders at a time never has one closed under it (the one closed is the least recently
    opened, and every decoder in use was opened after it).
    """

    def __init__(self, max_open: int = 16) -> None:
        self.max_open = max(1, int(max_open))
        self._open: OrderedDict[TaskPath, Any] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, path: TaskPath, make: Callable[[], Any]) -> Any:
        """The cached decoder of ``path`` (made and cached when absent)."""
        with self._lock:
            dec = self._open.get(path)
            if dec is not None:
                self._open.move_to_end(path)
                return dec
        made = make()
        closing = []
        with self._lock:
            dec = self._open.setdefault(path, made)
            self._open.move_to_end(path)
            if dec is not made:  # another thread opened it meanwhile
                closing.append(made)
            while len(self._open) > self.max_open:
                closing.append(self._open.popitem(last=False)[1])
        for d in closing:
            d.close()
        return dec

    def close(self) -> None:
        """Close every decoder."""
        with self._lock:
            held = list(self._open.values())
            self._open.clear()
        for d in held:
            d.close()
