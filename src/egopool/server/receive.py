"""Receiving an upload request body: streaming ``multipart/form-data`` into a spool file.

The body is parsed as it arrives (python-multipart's push parser): text fields (``name``,
``episode_index``, anything else, each at most 64 KiB) are kept in memory, the one file
part is written to a spool file in the store's state directory and hashed on the way.
Nothing is ever held whole in memory, and the request's size limit is enforced on the
bytes actually received (a ``Content-Length`` above it is refused before reading).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import IO

from python_multipart.multipart import MultipartParser, parse_options_header

from ..errors import UploadRejectedError
from .zipcheck import too_large

__all__ = ["MultipartSpool"]

_FIELD_LIMIT = 64 << 10
_MAX_PARTS = 16  # name, episode_index, the zip, and room for a client's extras


class MultipartSpool:
    """Push parser for one upload body (§9: ``name``, ``episode_index``, the zip as a file part).

    Parameters
    ----------
    content_type:
        The request's ``Content-Type`` (must be ``multipart/form-data`` with a boundary).
    spool:
        Where the file part goes (created on its first byte).
    max_bytes:
        Limit of the whole body.

    Raises
    ------
    UploadRejectedError
        400 not multipart, a malformed body, several file parts, a field over 64 KiB, more than
        16 parts (python-multipart bounds each header);
        413 the body exceeds ``max_bytes``.
    """

    def __init__(self, content_type: str | None, spool: Path, max_bytes: int) -> None:
        ctype, params = parse_options_header(content_type or "")
        boundary = params.get(b"boundary")
        if ctype != b"multipart/form-data" or not boundary:
            raise UploadRejectedError(400, "bad_request", "the upload must be multipart/form-data with a boundary "
                                                          "(fields name, episode_index and the zip file)")
        self.spool = spool
        self.max_bytes = int(max_bytes)
        self.fields: dict[str, str] = {}
        self.received = 0
        self.file_bytes = 0
        self.file_parts = 0
        self.parts = 0
        self.ended = False
        self._hash = hashlib.sha256()
        self._fh: IO[bytes] | None = None
        self._pending = bytearray()
        self._hname = bytearray()
        self._hvalue = bytearray()
        self._headers: dict[str, bytes] = {}
        self._part_name: str | None = None
        self._part_is_file = False
        self._part_text = bytearray()
        self._parser = MultipartParser(boundary, {
            "on_part_begin": self._part_begin, "on_part_data": self._part_data, "on_part_end": self._part_end,
            "on_header_field": self._header_field, "on_header_value": self._header_value,
            "on_header_end": self._header_end, "on_headers_finished": self._headers_finished, "on_end": self._end})

    # -- parser callbacks ------------------------------------------------------------------------
    def _part_begin(self) -> None:
        self.parts += 1
        if self.parts > _MAX_PARTS:
            raise UploadRejectedError(400, "bad_request", f"the upload has more than {_MAX_PARTS} form parts; §9 "
                                                          "needs name, episode_index and the zip")
        self._headers, self._part_name, self._part_is_file = {}, None, False
        self._part_text = bytearray()

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._hname += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._hvalue += data[start:end]

    def _header_end(self) -> None:
        self._headers[bytes(self._hname).decode("latin-1").lower()] = bytes(self._hvalue)
        self._hname, self._hvalue = bytearray(), bytearray()

    def _headers_finished(self) -> None:
        _, params = parse_options_header(self._headers.get("content-disposition", b""))
        name = params.get(b"name", b"").decode("utf-8", "replace")
        self._part_name = name
        self._part_is_file = b"filename" in params or name == "file"
        if self._part_is_file:
            self.file_parts += 1
            if self.file_parts > 1:
                raise UploadRejectedError(400, "bad_request", "the upload holds more than one file part; send one "
                                                              "zip per request (§9)")

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._part_is_file:
            self._pending += data[start:end]
        else:
            self._part_text += data[start:end]
            if len(self._part_text) > _FIELD_LIMIT:
                raise UploadRejectedError(400, "bad_request", f"form field {self._part_name!r} is over 64 KiB")

    def _part_end(self) -> None:
        if not self._part_is_file and self._part_name:
            self.fields[self._part_name] = self._part_text.decode("utf-8", "replace")

    def _end(self) -> None:
        self.ended = True

    # -- driving ---------------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> None:
        """Parse the next piece of the body (fast: file bytes are only buffered, see :meth:`take`)."""
        self.received += len(chunk)
        if self.received > self.max_bytes:
            raise too_large("too_large", f"the request body exceeds the limit of {self.max_bytes} bytes",
                            "max_request_bytes")
        try:
            self._parser.write(chunk)
        except UploadRejectedError:
            raise
        except Exception as exc:  # python-multipart's MultipartParseError and friends
            raise UploadRejectedError(400, "bad_request", f"malformed multipart body ({exc})") from exc

    @property
    def buffered(self) -> int:
        """File bytes parsed but not yet written."""
        return len(self._pending)

    def take(self) -> bytes:
        """The buffered file bytes (the caller writes them with :meth:`write`, off the event loop)."""
        out = bytes(self._pending)
        self._pending.clear()
        return out

    def write(self, data: bytes) -> None:
        """Append file bytes to the spool file and the running sha256."""
        if not data:
            return
        if self._fh is None:
            self._fh = open(self.spool, "wb")
        self._fh.write(data)
        self._hash.update(data)
        self.file_bytes += len(data)

    def finish(self) -> str:
        """Flush and close the spool file; returns its sha256.

        Raises
        ------
        UploadRejectedError
            400 the body ended before the closing boundary, or had no file part.
        """
        self.write(self.take())
        self.close()
        if not self.ended:
            raise UploadRejectedError(400, "bad_request", "the multipart body ended early (no closing boundary)")
        if self.file_parts == 0:
            raise UploadRejectedError(400, "bad_request", "the upload has no file part (the episode zip)")
        return self._hash.hexdigest()

    def close(self) -> None:
        """Close the spool file (idempotent)."""
        if self._fh is not None:
            self._fh.flush()
            self._fh.close()
            self._fh = None
