"""RGB frames through torchcodec, the decoder LeRobot 0.6 uses (``PooledDataset(decoder="torchcodec")``, issue 25).

:class:`TorchcodecStream` has :class:`~egopool.dataset.decode.StreamDecoder`'s interface (``frames``, ``close``,
``kind``, ``frame_count``) for an RGB video: frame ``j`` is the ``j``-th frame in presentation order, uint8
``(H, W, 3)``, equal bit for bit to :func:`egopool.codecs.video.rgb_array` (what the reader yields; tested on
H.264 and HEVC, 4:2:0). torchcodec converts to RGB inside FFmpeg's scaler as PyAV's ``to_ndarray("rgb24")``
does, and in one C++ call per request, which is what makes it faster (benchmarks/README.md "bench_loader.py").

Depth stays on egopool's own decoder (:func:`egopool.codecs.depth.depth_stream_decoder`): its 12-bit HEVC log
code and FFV1 gray16 conversions are egopool's, not torchcodec's (docs/decisions.md B10).

A video in a bucket is read through the worker's :class:`~egopool.dataset.object_cache.BlockCache` (torchcodec
takes a file object); its frame index comes from the MP4's sample tables
(:func:`~egopool.dataset.object_cache.mp4_packet_index`, passed as torchcodec's ``custom_frame_mappings``), so
torchcodec's exact seek mode does not scan (download) the whole video first.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CodecError
from ..storage import ObjectPath, TaskPath
from ..codecs.video import rgb_stream
from .decode import DepthParams, check_frames
from .object_cache import BlockCache, CachedObjectFile, mp4_packet_index, open_cached_container

if TYPE_CHECKING:
    from .decode import StreamDecoder

__all__ = ["TorchcodecStream", "open_stream", "torchcodec_available"]


def torchcodec_available() -> bool:
    """True when ``torchcodec.decoders`` imports (it needs torch and FFmpeg's shared libraries)."""
    try:
        from torchcodec.decoders import VideoDecoder  # noqa: F401
    except Exception:  # noqa: BLE001 - ImportError, or an OSError of a missing FFmpeg / CUDA library
        return False
    return True


def _frame_mappings(table: list[tuple[int | None, bool]]) -> str | None:
    """torchcodec's ``custom_frame_mappings`` JSON of ``(pts, keyframe)`` packets, or None (a packet without pts)."""
    stamped = sorted((p, k) for p, k in table if p is not None)
    if len(stamped) != len(table) or not stamped:
        return None
    pts = [p for p, _ in stamped]
    steps = [b - a for a, b in zip(pts, pts[1:], strict=False)] or [1]
    frames = [{"pts": p, "duration": steps[min(i, len(steps) - 1)], "key_frame": int(k)}
              for i, (p, k) in enumerate(stamped)]
    return json.dumps({"frames": frames})


class TorchcodecStream:
    """One RGB video decoded by torchcodec (see the module docstring).

    Parameters
    ----------
    path:
        The video (a local file, or an object in a bucket read through ``file``).
    file:
        For an object in a bucket: an open :class:`~egopool.dataset.object_cache.CachedObjectFile` of it (closed
        with this decoder). None: ``path`` is a local file.
    stream:
        The container's index of the RGB stream.
    max_frames:
        Converted frames kept for later requests (memory ``max_frames × H × W × 3`` bytes).

    Raises
    ------
    CodecError
        torchcodec cannot open the file (names it).
    """

    kind = "rgb"

    def __init__(self, path: TaskPath, *, file: CachedObjectFile | None = None, stream: int = 0,
                 max_frames: int = 32) -> None:
        from torchcodec.decoders import VideoDecoder

        self.path, self._file = path, file
        self._d: Any = None
        self.max_frames = max(1, int(max_frames))
        self._frames: OrderedDict[int, np.ndarray] = OrderedDict()
        source: Any = str(path)
        kw: dict[str, Any] = {}
        if file is not None:
            table = mp4_packet_index(path, file, stream) if isinstance(path, ObjectPath) else None
            mappings = _frame_mappings(table) if table is not None else None
            if mappings is not None:
                kw["custom_frame_mappings"] = mappings
            file.seek(0)
            source = file
        try:
            self._d = VideoDecoder(source, stream_index=stream, dimension_order="NHWC", **kw)
        except Exception as exc:  # torchcodec's RuntimeError / ValueError: one boundary
            self.close()
            raise CodecError(f"torchcodec cannot open the video: {' '.join(str(exc).split())[:200]}", path=path,
                             hint="the file is missing or corrupt (`egopool validate TASK`), or use decoder='pyav'"
                             ) from exc
        self.frame_count = int(self._d.metadata.num_frames or 0)

    def frames(self, wanted: Sequence[int]) -> dict[int, np.ndarray]:
        """Frames ``wanted`` (0-based, any order, repeats allowed) as ``{index: (H, W, 3) uint8}``.

        Raises
        ------
        CodecError
            An index outside ``[0, frame_count)``, or the file cannot be decoded (names the file).
        """
        need = sorted(set(int(j) for j in wanted))
        check_frames(need, self.frame_count, self.path)
        out = {j: self._frames[j] for j in need if j in self._frames}
        missing = [j for j in need if j not in out]
        if missing:
            try:
                data = self._d.get_frames_at(missing).data.numpy()
            except Exception as exc:  # noqa: BLE001 - torchcodec's RuntimeError: one boundary
                raise CodecError(f"cannot decode video: {' '.join(str(exc).split())[:200]}", path=self.path,
                                 hint="the video is damaged or truncated (`egopool validate TASK` finds them)"
                                 ) from exc
            for j, arr in zip(missing, data, strict=True):
                out[j] = arr  # a view of the request's array; the kept ones are copies (not the whole array)
            for j in missing[-self.max_frames:]:
                self._frames[j] = out[j].copy()
        for j in need:
            if j in self._frames:
                self._frames.move_to_end(j)
        while len(self._frames) > self.max_frames:
            self._frames.popitem(last=False)
        return out

    def close(self) -> None:
        """Close the file (the decoder is unusable afterwards)."""
        self._frames.clear()
        self._d = None
        if self._file is not None:
            self._file.close()
            self._file = None


def open_stream(path: TaskPath, kind: str, params: DepthParams, cache: BlockCache | None,
                max_frames: int) -> TorchcodecStream | StreamDecoder:
    """The decoder of stream ``path`` with ``decoder="torchcodec"``: torchcodec for RGB, egopool's own
    :class:`~egopool.dataset.decode.StreamDecoder` for depth (``params``: the depth log-code parameters).

    ``kind`` ``"rgb"`` / ``"depth"`` is known (a local task); ``"stream"`` (a bucket) is probed on the container's
    header read through ``cache`` (:func:`~egopool.dataset.decode.probe_kind`), and that open container serves
    the decoder chosen: one opening GET per stream either way.

    Raises
    ------
    CodecError
        The file cannot be opened or decoded (names it).
    """
    from .decode import StreamDecoder, probe_kind

    if not isinstance(path, ObjectPath) or cache is None:
        if kind == "rgb":
            return TorchcodecStream(path, max_frames=max_frames)
        return StreamDecoder(path, "auto" if kind == "stream" else kind, params, max_frames=max_frames, cache=cache)
    c, f = open_cached_container(path, cache)
    try:
        kind = probe_kind(c) if kind == "stream" else kind
        if kind != "rgb":  # depth: egopool's decoder on this very container
            return StreamDecoder(path, kind, params, max_frames=max_frames, opened=(c, f))
        stream = rgb_stream(c, path).index
    except BaseException:
        c.close()
        f.close()
        raise
    c.close()  # the file stays open: torchcodec reads it (its blocks are in the cache already)
    return TorchcodecStream(path, file=f, stream=stream, max_frames=max_frames)
