"""One-request reads of an object: a ranged GET returns the bytes and the object's size together (issue 24).

pyarrow.fs opens an object with a HEAD (for its size) before any GET, so reading a small parquet cost a
HEAD, a GET of its last 8 bytes, a GET of its footer and a GET of its columns, and opening a video a HEAD
and a GET. A GET with a ``Range`` header answers with ``Content-Range: bytes A-B/SIZE``: one request gives
the object's size and the bytes a reader needs first, so (docs/decisions.md O33):

* a parquet is opened with one GET of its last :data:`FOOTER_READ` bytes (:func:`get_tail`): the whole
  file when it is smaller (a ``meta/episodes`` row, a short episode's data), else the 8-byte tail and the
  footer; the column chunks are then ranged GETs (:class:`RangeFile`), coalesced by pyarrow's
  ``pre_buffer``;
* a video is opened with one GET of its first :data:`~egopool.storage.READ_BUFFER` bytes
  (:func:`get_head`): the whole file when it is smaller, else the first buffer of a reader whose refills
  are ranged GETs.

These go through obstore, the client of :class:`~egopool.storage.s3_store.S3Store` (the ``s3`` extra,
docs/decisions.md O32). Without it :func:`available` is False and the readers keep pyarrow.fs's HEAD-then-GET
path. Errors are those of the pyarrow path: ``FileNotFoundError`` for no object,
:class:`~egopool.errors.ObjectStoreError` naming the URI and the fix for the store (``S3Store``'s translation).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from ..errors import EgopoolError
from ._path import ObjectPath

if TYPE_CHECKING:
    from obstore import GetOptions, SuffixRange

__all__ = ["FOOTER_READ", "RangeFile", "available", "changed_error", "count_request", "get_head", "get_range",
           "get_tail", "request_counts"]

#: Bytes of a parquet's end fetched by its first GET (pyarrow's own default footer read size).
FOOTER_READ = 64 << 10

#: Requests and bytes this process has fetched from object stores by the read path (:func:`request_counts`).
_COUNTS = {"GET": 0, "bytes": 0}


def request_counts() -> dict[str, int]:
    """``{"GET": requests, "bytes": bytes received}`` of this process's object reads so far: every ranged GET of
    this module and of the dataset's block cache (:mod:`egopool.dataset.object_cache`), whichever client made it.
    Per process: a DataLoader worker counts its own (docs/decisions.md B3)."""
    return dict(_COUNTS)


def count_request(nbytes: int) -> None:
    """Count one GET of ``nbytes`` bytes in :func:`request_counts`."""
    _COUNTS["GET"] += 1
    _COUNTS["bytes"] += int(nbytes)


def changed_error(path: ObjectPath, version: str | None) -> EgopoolError:
    """The one-line error of an object that changed while being read (its ETag is no longer ``version``)."""
    from ..errors import ObjectStoreError

    return ObjectStoreError(f"changed while being read (it was version {version}); its bytes are not mixed with the "
                            "new version's", uri=str(path), cause="changed",
                            hint="the task was rewritten under a running reader: make the dataset again")


def available(path: ObjectPath) -> bool:
    """True when one-request reads are possible: obstore (the ``s3`` extra) is installed and usable in this
    process. obstore's runtime does not survive a fork (a forked DataLoader worker's request hangs): a process
    forked after its parent used obstore reads through pyarrow.fs, as without the extra."""
    try:
        import obstore  # noqa: F401
    except ImportError:
        return False
    from .s3_store import obstore_usable

    return obstore_usable()


def _get(path: ObjectPath, byte_range: SuffixRange | tuple[int, int],
         if_match: str | None = None) -> tuple[bytes, int, int, str | None]:
    """One GET of ``byte_range`` (obstore's ``{"suffix": n}`` or ``(start, stop)``): ``(bytes, offset of the
    first byte, size of the object, its ETag)``; with ``if_match`` only of that version of the object.

    Raises
    ------
    FileNotFoundError
        No such object.
    ObjectStoreError
        The store failed (the message names the URI and the fix); ``cause="changed"``: the object is no longer
        version ``if_match``.
    """
    import obstore

    from .s3_store import S3Store, _client

    client = _client(path.settings, path.bucket)
    options: GetOptions = {"range": byte_range}
    if if_match is not None:
        options["if_match"] = if_match
    try:
        r = obstore.get(client, path.key, options=options)
        data = bytes(r.bytes())
        count_request(len(data))
        return data, int(r.range[0]), int(r.meta["size"]), r.meta.get("e_tag")
    except (FileNotFoundError, obstore.exceptions.NotFoundError) as exc:
        raise FileNotFoundError(2, "No such object", str(path)) from exc
    except obstore.exceptions.PreconditionError as exc:
        raise changed_error(path, if_match) from exc
    except EgopoolError:
        raise
    except Exception as exc:  # obstore's errors: S3Store's one boundary
        try:  # an empty object has no byte to return: a range of it is refused
            if int(obstore.head(client, path.key)["size"]) == 0:
                return b"", 0, 0, None
        except Exception:  # noqa: BLE001 - the GET's own failure is the one to report
            pass
        raise S3Store(f"s3://{path.bucket}", settings=path.settings)._fail(exc, path.key, "GET") from exc


def get_tail(path: ObjectPath, length: int) -> tuple[bytes, int, str | None]:
    """The last ``min(length, size)`` bytes of the object, its size and its ETag, in one GET (a suffix range)."""
    data, _, size, etag = _get(path, {"suffix": length})
    return data, size, etag


def get_head(path: ObjectPath, length: int) -> tuple[bytes, int, str | None]:
    """The first ``min(length, size)`` bytes of the object, its size and its ETag, in one GET."""
    data, _, size, etag = _get(path, (0, length))
    return data, size, etag


def get_range(path: ObjectPath, start: int, length: int, if_match: str | None = None) -> bytes:
    """``length`` bytes from ``start`` (fewer at the object's end), in one GET; with ``if_match`` only of that
    version (else ``ObjectStoreError`` with ``cause="changed"``)."""
    if length <= 0:
        return b""
    return _get(path, (start, start + length), if_match)[0]


class RangeFile(io.RawIOBase):
    """A seekable raw reader of an object of known ``size``: ``known`` (offset -> bytes, e.g. the first GET's
    bytes) is served from memory, every other read is one ranged GET of what is asked for, of version
    ``version`` only (the first GET's ETag: an object rewritten meanwhile is an error, never mixed bytes)."""

    def __init__(self, path: ObjectPath, size: int, known: dict[int, bytes] | None = None,
                 version: str | None = None) -> None:
        super().__init__()
        self.path, self.size, self.version = path, size, version
        self._known = dict(known or {})
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        n = min(len(view), max(0, self.size - self._pos))
        if n == 0:
            return 0
        data = self._cached(self._pos, n)
        if data is None:
            data = get_range(self.path, self._pos, n, self.version)
        view[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def readall(self) -> bytes:
        """The rest of the object in one GET (``io.RawIOBase.readall`` would read it 8 KiB a request)."""
        n = max(0, self.size - self._pos)
        if n == 0:
            return b""
        data = self._cached(self._pos, n)
        if data is None:
            data = get_range(self.path, self._pos, n, self.version)
        self._pos += len(data)
        return data

    def _cached(self, start: int, n: int) -> bytes | None:
        for off, chunk in self._known.items():
            if off <= start and start + n <= off + len(chunk):
                return chunk[start - off:start - off + n]
        return None
