"""One-request reads of an object: a ranged GET returns the bytes and the object's size together (issue 24).

pyarrow.fs opens an object with a HEAD (for its size) before any GET, so reading a small parquet cost a
HEAD, a GET of its last 8 bytes, a GET of its footer and a GET of its columns, and opening a video a HEAD
and a GET. A GET with a ``Range`` header answers with ``Content-Range: bytes A-B/SIZE``: one request gives
the object's size and the bytes a reader needs first, so (docs/decisions.md O26):

* a parquet is opened with one GET of its last :data:`FOOTER_READ` bytes (:func:`get_tail`): the whole
  file when it is smaller (a ``meta/episodes`` row, a short episode's data), else the 8-byte tail and the
  footer; the column chunks are then ranged GETs (:class:`RangeFile`), coalesced by pyarrow's
  ``pre_buffer``;
* a video is opened with one GET of its first :data:`~egopool.storage.READ_BUFFER` bytes
  (:func:`get_head`): the whole file when it is smaller, else the first buffer of a reader whose refills
  are ranged GETs.

These need boto3 (the ``s3`` extra; :func:`~egopool.storage.s3_client`). Without it :func:`available` is
False and the readers keep pyarrow.fs's HEAD-then-GET path. Errors are those of the pyarrow path:
``FileNotFoundError`` for no object, :class:`~egopool.errors.ObjectStoreError` naming the URI for the store.
"""

from __future__ import annotations

import io
import re
from typing import Any

from ..errors import EgopoolError
from ._path import ObjectPath
from ._s3 import s3_client, translate_s3_error

__all__ = ["FOOTER_READ", "RangeFile", "available", "get_head", "get_range", "get_tail"]

#: Bytes of a parquet's end fetched by its first GET (pyarrow's own default footer read size).
FOOTER_READ = 64 << 10

_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


def available(path: ObjectPath) -> bool:
    """True when one-request reads are possible (boto3 installed and usable for ``path``'s settings)."""
    return s3_client(path.settings) is not None


def _get(path: ObjectPath, byte_range: str) -> tuple[bytes, int, int]:
    """One GET of ``byte_range``: ``(bytes, offset of the first byte, size of the object)``.

    Raises
    ------
    FileNotFoundError
        No such object.
    ObjectStoreError
        The store failed (the message names the URI and the fix, as for pyarrow.fs's errors).
    """
    client = s3_client(path.settings)
    if client is None:
        raise RuntimeError("one-request reads need boto3: check available() first")
    errors = __import__("botocore.exceptions", fromlist=["ClientError"])
    try:
        r = client.get_object(Bucket=path.bucket, Key=path.key, Range=byte_range)
        data = bytes(r["Body"].read())
    except errors.ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404", "NotFound"):
            raise FileNotFoundError(2, "No such object", str(path)) from exc
        if code == "InvalidRange":  # an empty object: no byte to return
            return b"", 0, 0
        raise translate_s3_error(exc, str(path), path.settings) from exc
    except EgopoolError:
        raise
    except Exception as exc:  # botocore's connection and timeout errors: one boundary
        raise translate_s3_error(exc, str(path), path.settings) from exc
    m = _RANGE.match(str(r.get("ContentRange") or ""))
    if m is None:  # the store ignored the Range header and sent the whole object
        return data, 0, len(data)
    return data, int(m.group(1)), int(m.group(3))


def get_tail(path: ObjectPath, length: int) -> tuple[bytes, int]:
    """The last ``min(length, size)`` bytes of the object and its size, in one GET (``Range: bytes=-length``)."""
    data, start, size = _get(path, f"bytes=-{length}")
    if start == 0 and len(data) > length:  # a whole object sent for a suffix range
        data = data[-length:]
    return data, size


def get_head(path: ObjectPath, length: int) -> tuple[bytes, int]:
    """The first ``min(length, size)`` bytes of the object and its size, in one GET."""
    data, _, size = _get(path, f"bytes=0-{length - 1}")
    return data[:length], size


def get_range(path: ObjectPath, start: int, length: int) -> bytes:
    """``length`` bytes from ``start`` (fewer at the object's end), in one GET."""
    if length <= 0:
        return b""
    data, got, _ = _get(path, f"bytes={start}-{start + length - 1}")
    return data[start - got:start - got + length] if got != start else data


class RangeFile(io.RawIOBase):
    """A seekable raw reader of an object of known ``size``: ``known`` (offset -> bytes, e.g. the first GET's
    bytes) is served from memory, every other read is one ranged GET of what is asked for."""

    def __init__(self, path: ObjectPath, size: int, known: dict[int, bytes] | None = None) -> None:
        super().__init__()
        self.path, self.size = path, size
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
            data = get_range(self.path, self._pos, n)
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
            data = get_range(self.path, self._pos, n)
        self._pos += len(data)
        return data

    def _cached(self, start: int, n: int) -> bytes | None:
        for off, chunk in self._known.items():
            if off <= start and start + n <= off + len(chunk):
                return chunk[start - off:start - off + n]
        return None
