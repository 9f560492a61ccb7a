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
docs/decisions.md O32). obstore's runtime does not survive a fork (O41): a process forked after its parent used
obstore (a DataLoader's worker) sends the same ranged GETs through a boto3 client of its own, made after the fork
(:class:`~egopool.storage.bucket.Bucket`'s client: the same timeouts and retries, thread-safe), so a forked worker
also opens an object with one GET and pins its later GETs to the first one's ETag (docs/decisions.md B8). Without
the extra :func:`available` is False and the readers keep pyarrow.fs's HEAD-then-GET path. Errors are those of
the pyarrow path: ``FileNotFoundError`` for no object, :class:`~egopool.errors.ObjectStoreError` naming the URI and
the fix for the store (``S3Store``'s translation).

:class:`ObjectVersion` is the one reader of one version of an object the loader's block cache
(:mod:`egopool.dataset.object_cache`) and :class:`RangeFile` build on; :class:`SizedRaw` is the seekable raw
file over an object of known size that they share.
"""

from __future__ import annotations

import io
import os
import threading
from typing import TYPE_CHECKING, Any

from ..errors import EgopoolError
from ._path import ObjectPath

if TYPE_CHECKING:
    from obstore import GetOptions, SuffixRange

__all__ = ["FOOTER_READ", "ObjectVersion", "RangeFile", "SizedRaw", "available", "changed_error", "count_request",
           "get_head", "get_range", "get_tail", "request_counts"]

#: Bytes of a parquet's end fetched by its first GET (pyarrow's own default footer read size).
FOOTER_READ = 64 << 10

#: Requests and bytes this process has fetched from object stores by the read path (:func:`request_counts`).
_COUNTS = {"GET": 0, "bytes": 0}
_COUNTS_LOCK = threading.Lock()


def request_counts() -> dict[str, int]:
    """``{"GET": requests, "bytes": bytes received}`` of this process's object reads so far: every ranged GET of
    this module and of the dataset's block cache (:mod:`egopool.dataset.object_cache`), whichever client made it.
    Per process: a DataLoader worker counts its own (docs/decisions.md B3)."""
    return dict(_COUNTS)


def count_request(nbytes: int) -> None:
    """Count one GET of ``nbytes`` bytes in :func:`request_counts`."""
    with _COUNTS_LOCK:  # a worker's I/O threads count concurrently
        _COUNTS["GET"] += 1
        _COUNTS["bytes"] += int(nbytes)


def changed_error(path: ObjectPath, version: str | None) -> EgopoolError:
    """The one-line error of an object that changed while being read (its ETag is no longer ``version``)."""
    from ..errors import ObjectStoreError

    return ObjectStoreError(f"changed while being read (it was version {version}); its bytes are not mixed with the "
                            "new version's", uri=str(path), cause="changed",
                            hint="the task was rewritten under a running reader: make the dataset again")


def available(path: ObjectPath) -> bool:
    """True when one-request reads are possible: the ``s3`` extra is installed (obstore, and boto3 for a process
    forked after its parent used obstore, whose runtime does not survive a fork)."""
    try:
        import boto3  # noqa: F401
        import obstore  # noqa: F401
    except ImportError:
        return False
    return True


#: A forked process's boto3 clients by (settings, bucket), made after the fork (pid-checked, thread-safe).
_FORKED: dict[tuple[Any, str], Any] = {}
_FORKED_PID = [0]
_FORKED_LOCK = threading.Lock()


def _forked_bucket(path: ObjectPath) -> Any:
    """This process's :class:`~egopool.storage.bucket.Bucket` of ``path``'s bucket (boto3; made in this process)."""
    from .bucket import Bucket

    with _FORKED_LOCK:
        if _FORKED_PID[0] != os.getpid():  # a fork of a process that had some: never use the parent's sockets
            _FORKED.clear()
            _FORKED_PID[0] = os.getpid()
        b = _FORKED.get((path.settings, path.bucket))
        if b is None:
            b = _FORKED[(path.settings, path.bucket)] = Bucket(f"s3://{path.bucket}", settings=path.settings)
        return b


def _get_forked(path: ObjectPath, byte_range: SuffixRange | tuple[int, int],
                if_match: str | None) -> tuple[bytes, int, int, str | None]:
    """:func:`_get` through boto3 (a forked process: obstore's runtime did not survive the fork)."""
    b = _forked_bucket(path)
    rng = (f"bytes=-{byte_range['suffix']}" if isinstance(byte_range, dict)
           else f"bytes={byte_range[0]}-{byte_range[1] - 1}")
    kw: dict[str, Any] = {"Bucket": path.bucket, "Key": path.key, "Range": rng}
    if if_match is not None:
        kw["IfMatch"] = if_match
    errors = b._errors
    try:
        r = b.client.get_object(**kw)
        data = bytes(r["Body"].read())
    except errors.ClientError as exc:
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in ("NoSuchKey", "NotFound") or status == 404:
            raise FileNotFoundError(2, "No such object", str(path)) from exc
        if code == "PreconditionFailed" or status == 412:
            raise changed_error(path, if_match) from exc
        if code == "InvalidRange" or status == 416:  # an empty object has no byte to return
            return b"", 0, 0, None
        raise b._fail(exc, path.key, "GET") from exc  # the store's one-line translation, naming the URI
    except errors.BotoCoreError as exc:
        raise b._fail(exc, path.key, "GET") from exc
    count_request(len(data))
    total = str(r.get("ContentRange") or "").rpartition("/")[2]
    size = int(total) if total.isdigit() else len(data)
    start = int(str(r.get("ContentRange") or "bytes 0-").split()[-1].split("-")[0] or 0)
    return data, start, size, r.get("ETag")


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

    from .s3_store import S3Store, _client, obstore_usable

    if not obstore_usable():
        return _get_forked(path, byte_range, if_match)
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


class SizedRaw(io.RawIOBase):
    """A seekable, read-only raw file of ``size`` bytes: position bookkeeping only (subclasses read)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = int(size)
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


class ObjectVersion:
    """One version of one object: its size, its version, its first bytes, and ranged reads of that version only.

    ``ObjectVersion(path, first)`` opens it with one GET of its first ``first`` bytes (:func:`get_head`: the size
    and ETag come with them); :meth:`fetch` is one ranged GET carrying ``If-Match`` with that ETag, so a rewrite
    is :func:`changed_error`, never mixed bytes. Without the ``s3`` extra (:func:`available` False): a HEAD
    (size and mtime: the version) and pyarrow.fs ``read_at`` (a rewrite is then seen at the next open only).
    Thread-safe: fetches of one version may run concurrently. Every GET is counted (:func:`request_counts`).

    Attributes
    ----------
    size:
        Bytes.
    version:
        The ETag (``"size=N mtime=NS"`` on the pyarrow path; ``""`` when the store gave none).
    first:
        The object's first ``min(first, size)`` bytes (``b""`` on the pyarrow path).

    Raises
    ------
    FileNotFoundError
        No such object.
    ObjectStoreError
        The store failed (names the URI, the cause and the fix).
    """

    def __init__(self, path: ObjectPath, first: int) -> None:
        self.path = path
        self.first = b""
        self._native: Any = None
        if available(path):
            self.first, self.size, etag = get_head(path, first)
            self.version = etag or ""
            return
        from pyarrow import fs as pafs

        try:
            info = path.filesystem.get_file_info(path.fs_path)
            if info.type != pafs.FileType.File:
                raise FileNotFoundError(2, "No such object", str(path))
            self._native = path.filesystem.open_input_file(path.fs_path)
        except (FileNotFoundError, EgopoolError):
            raise
        except Exception as exc:  # the AWS SDK's OSError: one boundary
            raise path._error(exc) from exc
        self.size = int(info.size or 0)
        self.version = f"size={self.size} mtime={info.mtime_ns}"

    def fetch(self, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer at the end) of this version, in one GET."""
        if self._native is None:
            return get_range(self.path, start, length, self.version or None)
        try:
            data = self._native.read_at(length, start)
        except Exception as exc:
            raise self.path._error(exc) from exc
        count_request(len(data))
        return bytes(data)

    def close(self) -> None:
        if self._native is not None:
            self._native.close()
            self._native = None


class RangeFile(SizedRaw):
    """A seekable raw reader of an object of known ``size``: ``known`` (offset -> bytes, e.g. the first GET's
    bytes) is served from memory, every other read is one ranged GET of what is asked for, of version
    ``version`` only (the first GET's ETag: an object rewritten meanwhile is an error, never mixed bytes)."""

    def __init__(self, path: ObjectPath, size: int, known: dict[int, bytes] | None = None,
                 version: str | None = None) -> None:
        super().__init__(size)
        self.path, self.version = path, version
        self._known = dict(known or {})

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
