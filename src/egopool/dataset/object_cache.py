"""Reads of videos in a bucket planned for an object store: blocks, coalesced ranged GETs, read-ahead, a bound.

A :class:`BlockCache` belongs to one process (a DataLoader worker builds its own on its first item). It
holds the bytes of objects as blocks of ``block_size`` bytes keyed by ``(URI, version, block)``, least
recently used evicted first, and never more than ``max_bytes`` once a read returns (:attr:`BlockCache.held`).
A read that misses fetches every missing block it needs plus up to ``read_ahead`` blocks after them, as
runs of consecutive missing blocks, one ranged GET per run: decoding forward from a keyframe reads the next
bytes from memory, and a window of 8 frames costs one GET, not one per 64 KiB PyAV asks.

Which version: the first GET of an object gives its size and ETag; every later GET carries ``If-Match`` with
that ETag, so an object rewritten under a running dataset is an :class:`~egopool.errors.ObjectStoreError` with
``cause="changed"`` naming it, never old and new bytes mixed. The reads are
:class:`~egopool.storage._object_read.ObjectVersion`'s, the read path's one reader (obstore; in a forked worker, a
boto3 client made after the fork: docs/decisions.md B8). The cache is thread-safe: a worker's I/O threads read
different objects through it at once (:class:`~egopool.dataset.PooledDataset`'s ``io_threads``).

:func:`mp4_packet_index` demuxes an MP4 without downloading its samples: FFmpeg takes each packet's pts and
keyframe flag from the ``moov`` box's sample tables, so the ``mdat`` box is served as zeros there. Nothing
downloads a whole video first; a task is never downloaded whole.

Every GET is counted in :func:`egopool.storage._object_read.request_counts` (per process).
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from typing import Any

import av

from ..errors import CodecError, EgopoolError, FormatError
from ..storage import ObjectPath
from ..storage import _object_read as objread

__all__ = ["BlockCache", "CachedObjectFile", "mp4_packet_index", "open_cached_container"]


class _Source:
    """One version of one object read through a cache: :class:`~egopool.storage._object_read.ObjectVersion`
    (the read path's one reader), its first GET's bytes kept as the cache's first blocks."""

    def __init__(self, path: ObjectPath, cache: BlockCache) -> None:
        self.path = path
        try:
            self._obj = objread.ObjectVersion(path, cache.block_size * cache.read_ahead)
        except FileNotFoundError:
            raise CodecError("cannot open video: the object is missing", path=path,
                             hint="run `egopool validate TASK` to see what is missing") from None
        self.size, self.version = self._obj.size, self._obj.version
        self.key = (path.uri, self.version)
        if self._obj.first:
            cache.put_run(self.key, 0, self._obj.first)
            self._obj.first = b""  # held by the cache now (and counted in its bound)

    def fetch(self, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` of this version, in one GET."""
        return self._obj.fetch(start, length)

    def close(self) -> None:
        self._obj.close()


class BlockCache:
    """A process's cache of object blocks (see the module docstring).

    Parameters
    ----------
    max_bytes:
        Bytes of blocks held at most once a read returns (a read larger than that is returned and only its
        last blocks kept). Default 64 MiB.
    block_size:
        Bytes per block (default 256 KiB): the unit of caching and of eviction.
    read_ahead:
        Blocks fetched after a miss beyond the ones a read needs (default 8: 2 MiB by default), in the
        same GET. The first GET of an object fetches ``read_ahead`` blocks from its start (its header and
        index, for most MP4 written by egopool, and the first frames).
    """

    def __init__(self, max_bytes: int = 64 << 20, block_size: int = 256 << 10, read_ahead: int = 8) -> None:
        if block_size < 4096 or max_bytes < block_size or read_ahead < 1:
            raise ValueError(f"block cache: block_size {block_size} >= 4096, max_bytes {max_bytes} >= block_size, "
                             f"read_ahead {read_ahead} >= 1")
        self.max_bytes, self.block_size, self.read_ahead = int(max_bytes), int(block_size), int(read_ahead)
        self._blocks: OrderedDict[tuple[str, str, int], bytes] = OrderedDict()
        self._lock = threading.Lock()
        #: Bytes held now (<= max_bytes after every read).
        self.held = 0
        #: The largest ``held`` ever seen after a read returned.
        self.peak = 0
        #: GETs made and bytes received through this cache (opening GETs included).
        self.gets = self.fetched = 0

    def open(self, path: ObjectPath) -> CachedObjectFile:
        """A seekable binary file over ``path`` reading through this cache (one GET opens it).

        Raises
        ------
        CodecError
            No such object.
        ObjectStoreError
            The store failed (names the URI, the cause and the fix).
        """
        return CachedObjectFile(_Source(path, self), self)

    def put_run(self, key: tuple[str, str], start: int, data: bytes) -> None:
        """Keep the blocks of ``data`` fetched at ``start`` (a block boundary), then evict to the bound."""
        bs = self.block_size
        with self._lock:
            self.gets += 1
            self.fetched += len(data)
            for off in range(0, len(data), bs):
                k = (key[0], key[1], (start + off) // bs)
                chunk = data[off:off + bs]
                old = self._blocks.pop(k, None)
                self.held += len(chunk) - (len(old) if old is not None else 0)
                self._blocks[k] = chunk
            self._evict()

    def _evict(self) -> None:
        while self.held > self.max_bytes and self._blocks:
            _, chunk = self._blocks.popitem(last=False)
            self.held -= len(chunk)
        self.peak = max(self.peak, self.held)

    def read(self, src: _Source, start: int, n: int) -> bytes:
        """``n`` bytes of ``src`` from ``start`` (fewer at its end): cached blocks from memory, missing ones
        fetched as runs of consecutive blocks, one GET each, with ``read_ahead`` blocks after the last."""
        n = max(0, min(n, src.size - start))
        if n == 0:
            return b""
        bs = self.block_size
        first, last = start // bs, (start + n - 1) // bs
        nblocks = (src.size + bs - 1) // bs
        got: dict[int, bytes] = {}
        missing: list[int] = []
        with self._lock:
            for b in range(first, last + 1):
                chunk = self._blocks.get((*src.key, b))
                if chunk is None:
                    missing.append(b)
                else:
                    self._blocks.move_to_end((*src.key, b))
                    got[b] = chunk
        if missing:
            ahead = last + 1
            with self._lock:  # read-ahead: the blocks after the read, up to the first cached one
                while (ahead < nblocks and ahead - last <= self.read_ahead
                       and (*src.key, ahead) not in self._blocks):
                    ahead += 1
            missing += list(range(last + 1, ahead))
            for run_start, run_end in _runs(missing):
                data = src.fetch(run_start * bs, min((run_end + 1) * bs, src.size) - run_start * bs)
                for b in range(run_start, run_end + 1):
                    got[b] = data[(b - run_start) * bs:(b - run_start + 1) * bs]
                self.put_run(src.key, run_start * bs, data)
        out = b"".join(got[b] for b in range(first, last + 1))
        return out[start - first * bs:start - first * bs + n]


def _runs(blocks: list[int]) -> list[tuple[int, int]]:
    """Maximal runs ``(first, last)`` of consecutive block numbers."""
    out: list[tuple[int, int]] = []
    for b in sorted(set(blocks)):
        if out and b == out[-1][1] + 1:
            out[-1] = (out[-1][0], b)
        else:
            out.append((b, b))
    return out


class CachedObjectFile(objread.SizedRaw):
    """A seekable raw reader of one version of an object through a :class:`BlockCache`."""

    def __init__(self, src: _Source, cache: BlockCache) -> None:
        super().__init__(src.size)
        self.src, self.cache = src, cache

    def pread(self, start: int, n: int) -> bytes:
        """``n`` bytes from ``start`` without moving this file's position (another reader of the same object)."""
        return self.cache.read(self.src, start, n)

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        data = self.cache.read(self.src, self._pos, len(view))
        view[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def close(self) -> None:
        self.src.close()
        super().close()


class _SparseMdat(objread.SizedRaw):
    """An MP4 file object whose ``mdat`` boxes read as zeros (no GET): what a demux of the sample tables needs.
    It reads ``f`` by offset (:meth:`CachedObjectFile.pread`): the container reading ``f`` keeps its position."""

    def __init__(self, f: CachedObjectFile) -> None:
        super().__init__(f.size)
        self.f = f
        self.holes = _mdat_ranges(f)

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        n = max(0, min(len(view), self.size - self._pos))
        pos, end, i = self._pos, self._pos + n, 0
        while pos < end:
            hole = next(((a, z) for a, z in self.holes if a <= pos < z), None)
            if hole is not None:
                stop = min(end, hole[1])
                view[i:i + stop - pos] = bytes(stop - pos)
            else:
                stop = min([end, *(a for a, _ in self.holes if a > pos)])
                data = self.f.pread(pos, stop - pos)
                view[i:i + len(data)] = data
                stop = pos + len(data)
                if not data:
                    break
            i += stop - pos
            pos = stop
        self._pos = pos
        return i

    def close(self) -> None:
        super().close()


def _mdat_ranges(f: CachedObjectFile) -> list[tuple[int, int]]:
    """Payload ranges of the top-level ``mdat`` boxes (headers read through the cache)."""
    out: list[tuple[int, int]] = []
    pos = 0
    while pos + 8 <= f.size:
        head = f.pread(pos, 16)
        if len(head) < 8:
            break
        size, kind = struct.unpack(">I4s", head[:8])
        hdr = 8
        if size == 1 and len(head) >= 16:
            size, hdr = struct.unpack(">Q", head[8:16])[0], 16
        elif size == 0:
            size = f.size - pos
        if size < hdr:
            raise FormatError(f"MP4 box {kind!r} at byte {pos} has size {size}", path=f.src.path,
                              hint="the video is damaged or truncated (`egopool validate TASK` finds them)")
        if kind == b"mdat":
            out.append((pos + hdr, min(pos + size, f.size)))
        pos += size
    return out


def open_cached_container(path: ObjectPath, cache: BlockCache) -> tuple[Any, CachedObjectFile]:
    """PyAV over ``path`` through ``cache``: ``(container, file)``; closing the container leaves the file open.

    Raises
    ------
    CodecError
        FFmpeg cannot open it, or the object is missing (names the URI).
    ObjectStoreError
        The store failed.
    """
    f = cache.open(path)
    try:
        return av.open(f, buffer_size=min(cache.block_size, 1 << 16)), f
    except EgopoolError:
        f.close()
        raise
    except Exception as exc:
        f.close()
        raise CodecError(f"cannot open video: {exc}", path=path, hint="the file is missing or corrupt") from exc


def mp4_packet_index(path: ObjectPath, f: CachedObjectFile, stream: int) -> list[tuple[int | None, bool]] | None:
    """``(pts, keyframe)`` of every packet of stream ``stream`` (by its container index) in decode order, from the
    MP4's sample tables only: a demux over ``f`` whose ``mdat`` reads as zeros gives each packet's pts (from the
    time-to-sample and composition offsets), and the stream's index entries (the sync-sample table) say which are
    keyframes (a parser would look for them in the zeroed samples). None when this cannot be done (not an MP4,
    Matroska: its blocks carry the stamps; a table that does not cover every packet): demux the file instead."""
    if path.suffix.lower() not in (".mp4", ".mov", ".m4v"):
        return None
    sparse = _SparseMdat(f)
    if not sparse.holes:
        return None
    try:
        c = av.open(sparse, mode="r", buffer_size=min(f.cache.block_size, 1 << 16))
    except Exception:  # noqa: BLE001 - the real container reports what is wrong with the file
        return None
    try:
        s = c.streams[stream]
        entries = list(s.index_entries)
        keys = {e.timestamp for e in entries if e.is_keyframe}
        out = [(p.pts, p.dts in keys) for p in c.demux(s) if p.size]
    except av.error.FFmpegError:
        return None
    finally:
        c.close()
    if len(out) != len(entries) or not out or not out[0][1]:
        return None
    return out
