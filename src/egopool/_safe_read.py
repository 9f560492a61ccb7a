"""The one place egopool reads a file it did not just write: bounded, regular files only.

Every reader of task files (``info.json``, ``stats.json``, ``tasks.jsonl``, ``meta/episodes``
and data parquets, markers, journals) and of import inputs goes through these helpers, so a
damaged input gives a one-line :class:`~egopool.errors.FormatError` naming the file, in
bounded time and memory (issue 12 D):

* only regular files are opened: a FIFO would block forever, a directory or a symlink loop
  raises an ``OSError`` deep inside a library; the file is opened ``O_NONBLOCK`` and checked
  with ``fstat`` on the open descriptor, so a FIFO swapped in after a check cannot block;
* text and JSON files are read up to a size limit and decoded as UTF-8 with the offending
  line named; a UTF-8 byte order mark is accepted;
* JSON is parsed with a nesting limit (:data:`MAX_JSON_DEPTH`): a document nested deeper
  than any ``pooled_episodes_v1`` file is refused instead of raising ``RecursionError`` in
  the parser or in a later ``json.dumps`` / Rich print;
* a parquet's footer length (its last 8 bytes) is checked against the file size and
  :data:`MAX_PARQUET_FOOTER` before pyarrow reads it, so a corrupt length cannot make
  pyarrow allocate gigabytes.

An object in a bucket (an :class:`~egopool.storage.ObjectPath`, ``s3://...``) takes the same
checks through the store's own requests (docs/decisions.md O4): an object is always a "regular
file" (a prefix is refused as a directory), its size comes from a HEAD, limits are checked
before the GET, and a parquet is read through a random-access file (ranged GETs of the footer
and of the columns asked for). With the ``s3`` extra (obstore) a parquet or a video is opened with
no HEAD: one ranged GET returns its end (the footer; the whole of a small parquet) or its start
(the whole of a small video) together with its size (docs/decisions.md O33). Failures of the store itself (no bucket, access denied, no answer
in time) become an :class:`~egopool.errors.ObjectStoreError` naming the URI.
"""

from __future__ import annotations

import io
import json
import os
import stat
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from .errors import EgopoolError, FormatError, ObjectStoreError
from .storage import ObjectPath, TaskPath, TaskPathLike, as_path

_T = TypeVar("_T")

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_JSON_BYTES",
    "MAX_PARQUET_FOOTER",
    "check_parquet",
    "loads_json",
    "open_regular",
    "open_parquet",
    "read_bytes",
    "read_json",
    "read_parquet",
    "read_parquet_schema",
    "read_text",
    "regular_file_size",
    "require_directory",
]

#: Deepest JSON nesting accepted. The deepest document of the format (a calibration entry
#: in info.json) nests about 6 levels; 64 leaves room without letting a hostile file
#: exhaust the recursion of ``json`` or of code that walks the result.
MAX_JSON_DEPTH = 64
#: Largest JSON / text meta file read (info.json of a 1000-device rig is well below 1 MiB).
MAX_JSON_BYTES = 256 * 1024 * 1024
#: Largest parquet footer (file metadata) accepted. egopool's own footers are a few KiB; a
#: legacy shard of 1000 rows or a data parquet of thousands of row groups stays far below.
MAX_PARQUET_FOOTER = 64 * 1024 * 1024

_PARQUET_MAGIC = b"PAR1"


def _kind(mode: int) -> str:
    """What a file is, for messages ("a FIFO")."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _not_regular(path: Path, what: str, mode: int) -> FormatError:
    return FormatError(f"{what} is {_kind(mode)}, not a regular file; egopool does not open it", path=path,
                       hint="replace it with the regular file the format expects")


def _open_failed(path: Path, what: str, exc: OSError) -> FormatError:
    """Why ``os.open`` refused: a socket (ENXIO) or a directory is named as such, as is a FIFO or
    file standing where a parent directory belongs (ENOTDIR); anything else keeps the OS's words."""
    try:
        mode: int | None = os.stat(path).st_mode  # stat never blocks, not even on a FIFO
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        return _not_regular(path, what, mode)
    if isinstance(exc, NotADirectoryError):
        for parent in path.parents:
            try:
                pmode = os.stat(parent).st_mode
            except OSError:
                continue
            if not stat.S_ISDIR(pmode):
                return FormatError(f"{what} cannot be opened: its folder {parent} is {_kind(pmode)}, not a directory",
                                   path=path, hint="restore the folder the format expects")
    return FormatError(f"cannot open {what}: {exc.strerror or exc}", path=path,
                       hint="a symlink loop or an unreadable path; restore the file")


def _open_regular(path: Path, what: str) -> tuple[int, os.stat_result]:
    """An O_RDONLY|O_NONBLOCK descriptor of ``path`` after ``fstat`` says it is a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FormatError(f"{what} is missing", path=path) from None
    except OSError as exc:
        raise _open_failed(path, what, exc) from exc
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise FormatError(f"cannot stat {what}: {exc.strerror or exc}", path=path) from exc
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _not_regular(path, what, st.st_mode)
    return fd, st


def _object_open(path: ObjectPath, what: str) -> Any:
    """The object's random-access file (its HEAD gives the size); a missing key or a prefix is a
    FormatError like a missing file or a directory on disk."""
    from pyarrow import fs as pafs

    try:
        return path.open_input()
    except FileNotFoundError:
        if path.info().type == pafs.FileType.Directory:
            raise FormatError(f"{what} is a prefix (a directory), not an object; egopool does not open it",
                              path=path, hint="replace it with the object the format expects") from None
        raise FormatError(f"{what} is missing", path=path) from None


def _object_size(path: ObjectPath, what: str) -> int:
    """Size of the object at ``path`` (one HEAD), checked as :func:`_object_open` does."""
    with _object_open(path, what) as f:
        return int(f.size())


def _object_read(path: ObjectPath, what: str, limit: int) -> bytes:
    with _object_open(path, what) as f:
        size = int(f.size())
        if size > limit:
            raise FormatError(f"{what} is {size} bytes, more than the {limit} egopool reads", path=path,
                              hint="this is not the file the format expects; restore it")
        try:
            data = f.read()
        except Exception as exc:  # the AWS SDK's OSError: one boundary
            raise path._error(exc) from exc
    if len(data) > limit:  # replaced by a larger object between HEAD and GET
        raise FormatError(f"{what} grew beyond {limit} bytes while being read", path=path)
    return bytes(data)


def require_directory(path: TaskPathLike, *, what: str = "directory",
                      hint: str | None = None) -> TaskPath:
    """``path`` when it is a directory (a symlink to one is fine), checked with ``stat`` (never blocks).

    In a bucket: a prefix that holds objects.

    Raises
    ------
    FormatError
        Missing, or a regular file, FIFO, socket or device (named: "is a FIFO, not a directory").
    ObjectStoreError
        In a bucket: the bucket does not exist, access denied, no answer in time.
    """
    path = as_path(path)
    if isinstance(path, ObjectPath):
        from pyarrow import fs as pafs

        from .storage import require_bucket

        kind = path.info().type
        if kind == pafs.FileType.NotFound:
            require_bucket(path)
            raise FormatError(f"{what} is missing", path=path, hint=hint)
        if kind != pafs.FileType.Directory:
            raise FormatError(f"{what} is an object, not a prefix (directory)", path=path, hint=hint)
        return path
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FormatError(f"{what} is missing", path=path, hint=hint) from None
    except OSError as exc:
        raise FormatError(f"cannot open {what}: {exc.strerror or exc}", path=path, hint=hint) from exc
    if not stat.S_ISDIR(mode):
        raise FormatError(f"{what} is {_kind(mode)}, not a directory", path=path, hint=hint)
    return path


def regular_file_size(path: TaskPathLike, *, what: str = "file") -> int:
    """Size in bytes of ``path`` when it is a regular file (a symlink to one is fine).

    Raises
    ------
    FormatError
        Missing, a directory, FIFO, socket or device, a symlink loop, or unreadable.
    """
    path = as_path(path)
    if isinstance(path, ObjectPath):
        return _object_size(path, what)
    fd, st = _open_regular(path, what)
    os.close(fd)
    return int(st.st_size)


def open_regular(path: TaskPathLike, *, what: str = "file") -> BinaryIO:
    """A binary file object for reading ``path``, opened only after ``fstat`` says it is a regular file.

    For copying a file whole (e.g. into an upload zip) without ever blocking on a FIFO.

    Raises
    ------
    FormatError
        Missing, a directory, FIFO, socket or device, a symlink loop, or unreadable.
    """
    path = as_path(path)
    if isinstance(path, ObjectPath):
        from .storage import READ_BUFFER, _object_read, seekable_reader

        if _object_read.available(path):  # one GET: the first buffer and the size (decisions O33)
            head, size, etag = _object_call(path, what, lambda: _object_read.get_head(path, READ_BUFFER))
            if len(head) >= size:
                return io.BytesIO(head)
            return io.BufferedReader(_object_read.RangeFile(path, size, {0: head}, etag), buffer_size=READ_BUFFER)
        native = _object_open(path, what)
        try:
            return seekable_reader(native)
        except Exception as exc:  # the first GET failed (an object of at most 4 MiB is read at once)
            raise path._error(exc) from exc
    fd, _ = _open_regular(path, what)
    return os.fdopen(fd, "rb")


def read_bytes(path: TaskPathLike, *, what: str = "file", limit: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes.

    Raises
    ------
    FormatError
        Not a regular file (see :func:`regular_file_size`), larger than ``limit``, or a read error.
    """
    path = as_path(path)
    if isinstance(path, ObjectPath):
        return _object_read(path, what, limit)
    fd, st = _open_regular(path, what)
    try:
        if st.st_size > limit:
            raise FormatError(f"{what} is {st.st_size} bytes, more than the {limit} egopool reads", path=path,
                              hint="this is not the file the format expects; restore it")
        chunks = []
        total = 0
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            total += len(block)
            if total > limit:  # the file grew while being read
                raise FormatError(f"{what} grew beyond {limit} bytes while being read", path=path)
            chunks.append(block)
        return b"".join(chunks)
    except OSError as exc:
        raise FormatError(f"cannot read {what}: {exc.strerror or exc}", path=path) from exc
    finally:
        os.close(fd)


def read_text(path: TaskPathLike, *, what: str = "file", limit: int = MAX_JSON_BYTES) -> str:
    """A regular file as UTF-8 text; a leading byte order mark is dropped.

    Raises
    ------
    FormatError
        As :func:`read_bytes`, or bytes that are not UTF-8 (the message names the line).
    """
    raw = read_bytes(path, what=what, limit=limit)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise FormatError(f"line {line} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                          path=path, hint=f"{what} must be UTF-8; restore it or re-save it as UTF-8") from None


def _depth_exceeds(obj: Any, limit: int) -> bool:
    """True when ``obj`` nests lists/dicts deeper than ``limit`` (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        if any(issubclass(t, (dict, list)) for t in set(map(type, children))):  # a list of numbers: no walk (U20)
            stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def loads_json(text: str | bytes, *, path: TaskPathLike | None = None, what: str | None = None,
               hint: str | None = None, line: int | None = None) -> Any:
    """``json.loads`` that raises only :class:`FormatError` and refuses deep nesting.

    Parameters
    ----------
    text:
        The document (a ``str``, or UTF-8 ``bytes``).
    path, what, hint:
        Named in the error: the file, what part of it the text is (``"episodes column
        'drop_stats'"``; None for the whole file), what to do.
    line:
        1-based line of ``text`` in its file (for JSON Lines), named in the error.

    Raises
    ------
    FormatError
        Not JSON, not UTF-8, or nesting deeper than :data:`MAX_JSON_DEPTH` levels.
    """
    where = f"line {line}: " if line is not None else ""
    of = f" of {what}" if what else ""
    try:
        obj = json.loads(text)
    except RecursionError:
        obj = None
        deep = True
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        pos = f" (line {exc.lineno} column {exc.colno})" if isinstance(exc, json.JSONDecodeError) and line is None else ""
        text = f"{what} is not valid JSON: {msg}" if what else f"cannot parse JSON: {msg}{pos}"
        raise FormatError(where + text, path=path, hint=hint) from None
    except (ValueError, TypeError) as exc:  # e.g. an int of more than 4300 digits
        raise FormatError(f"{where}cannot parse JSON{of}: {exc}", path=path, hint=hint) from None
    else:
        deep = _depth_exceeds(obj, MAX_JSON_DEPTH)
    if deep:
        # no claim about what the document should be: this reads LeRobot, tokens and migration files too
        raise FormatError(f"{where}JSON{of} nests deeper than {MAX_JSON_DEPTH} levels, more than egopool reads: "
                          "the file is damaged", path=path, hint=hint)
    return obj


def read_json(path: TaskPathLike, *, what: str = "JSON file", hint: str | None = None,
              limit: int = MAX_JSON_BYTES) -> Any:
    """Read a regular UTF-8 JSON file with :func:`read_text` and :func:`loads_json`.

    Raises
    ------
    FormatError
        Missing, not a regular file, too large, not UTF-8, not JSON, or nested too deep.
    """
    text = read_text(path, what=what, limit=limit)
    return loads_json(text, path=path, hint=hint)


def check_parquet(path: TaskPathLike, *, what: str = "parquet file") -> int:
    """Check a parquet file's envelope before pyarrow reads it; return its size in bytes.

    The last 8 bytes of a parquet file are the footer length (uint32 little endian) and the
    magic ``PAR1``. The footer must fit in the file after the leading magic and be at most
    :data:`MAX_PARQUET_FOOTER` bytes.

    Raises
    ------
    FormatError
        Not a regular file, too short, no ``PAR1`` magic, or an impossible footer length.
    """
    path = as_path(path)
    if isinstance(path, ObjectPath):
        with _check_object_parquet(path, what) as f:
            return int(f.size())
    fd, st = _open_regular(path, what)
    try:
        size = int(st.st_size)
        if size < 12:
            raise FormatError(f"{what} is {size} bytes, too short for a parquet file (truncated)", path=path,
                              hint="restore it from a backup")
        tail = os.pread(fd, 8, size - 8)
    except OSError as exc:
        raise FormatError(f"cannot read {what}: {exc.strerror or exc}", path=path) from exc
    finally:
        os.close(fd)
    _check_parquet_tail(tail, size, path, what)
    return size


def _check_object_parquet(path: ObjectPath, what: str) -> Any:
    """:func:`check_parquet` of an object (a HEAD and a ranged GET of its last 8 bytes); returns the
    open random-access file, for pyarrow to read the footer and columns from."""
    f = _object_open(path, what)
    try:
        size = int(f.size())
        if size < 12:
            raise FormatError(f"{what} is {size} bytes, too short for a parquet file (truncated)", path=path,
                              hint="restore it from a backup")
        tail = f.read_at(8, size - 8)
        _check_parquet_tail(bytes(tail), size, path, what)
    except EgopoolError:
        f.close()
        raise
    except Exception as exc:
        f.close()
        raise path._error(exc) from exc
    return f


def _check_parquet_tail(tail: bytes, size: int, path: TaskPath, what: str) -> None:
    if len(tail) != 8 or tail[4:] != _PARQUET_MAGIC:
        raise FormatError(f"{what} does not end in the parquet magic PAR1 (truncated or not parquet)", path=path,
                          hint="restore it from a backup")
    (footer,) = struct.unpack("<I", tail[:4])
    if footer > size - 12:
        raise FormatError(f"{what} claims a {footer}-byte footer in a {size}-byte file (corrupt)", path=path,
                          hint="restore it from a backup")
    if footer > MAX_PARQUET_FOOTER:
        raise FormatError(f"{what} claims a {footer}-byte footer, more than the {MAX_PARQUET_FOOTER} egopool reads "
                          "(corrupt)", path=path, hint="restore it from a backup")


def _object_call(path: ObjectPath, what: str, fn: Callable[[], _T]) -> _T:
    """``fn()``, a one-request read of ``path``; no object is a FormatError as in :func:`_object_open`."""
    from pyarrow import fs as pafs

    try:
        return fn()
    except FileNotFoundError:
        if path.info().type == pafs.FileType.Directory:
            raise FormatError(f"{what} is a prefix (a directory), not an object; egopool does not open it",
                              path=path, hint="replace it with the object the format expects") from None
        raise FormatError(f"{what} is missing", path=path) from None


def _direct_object_parquet(path: ObjectPath, what: str) -> Any:
    """:func:`check_parquet` of an object from one GET of its end (decisions O33): the whole object as a
    buffer when it is at most :data:`~egopool.storage._object_read.FOOTER_READ` bytes, else a file whose
    tail (the footer) is in memory and whose column chunks are ranged GETs."""
    import pyarrow as pa

    from .storage import _object_read

    tail, size, etag = _object_call(path, what, lambda: _object_read.get_tail(path, _object_read.FOOTER_READ))
    if size < 12:
        raise FormatError(f"{what} is {size} bytes, too short for a parquet file (truncated)", path=path,
                          hint="restore it from a backup")
    _check_parquet_tail(tail[-8:], size, path, what)
    if len(tail) >= size:
        from ._parquet_memory import arrow_owned

        return pa.BufferReader(arrow_owned(tail))  # no Python buffer for the pre-buffering threads to drop (A1)
    (footer,) = struct.unpack("<I", tail[-8:-4])
    if footer + 8 > len(tail):  # a footer larger than the first read: one more GET for the rest of it
        tail = _object_read.get_range(path, size - footer - 8, footer + 8 - len(tail), etag) + tail
    return pa.PythonFile(_object_read.RangeFile(path, size, {size - len(tail): tail}, etag), mode="r")


def _parquet_source(path: TaskPath, what: str) -> Any:
    """What pyarrow opens after :func:`check_parquet`: the local path as text, or the object's
    random-access file (the same one the check read from, so no second HEAD; with obstore no HEAD at all,
    :func:`_direct_object_parquet`)."""
    if isinstance(path, ObjectPath):
        from .storage import _object_read

        if _object_read.available(path):
            return _direct_object_parquet(path, what)
        return _check_object_parquet(path, what)
    check_parquet(path, what=what)
    return str(path)


def _parquet_error(exc: BaseException, path: TaskPath, what: str, hint: str | None) -> EgopoolError:
    if isinstance(exc, ObjectStoreError):  # a ranged GET of a one-request read failed inside pyarrow (O33)
        return exc
    if isinstance(path, ObjectPath) and isinstance(exc, OSError) and "AWS Error" in str(exc):
        return path._error(exc)  # the store failed, not the file: say which and how to fix it
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return FormatError(f"cannot read {what}: {text}", path=path,
                       hint=hint or "the file is truncated or corrupt; run `egopool validate TASK`")


def open_parquet(path: TaskPathLike, *, what: str = "parquet file", hint: str | None = None) -> Any:
    """A ``pyarrow.parquet.ParquetFile`` after :func:`check_parquet`; errors become FormatError."""
    import pyarrow.parquet as pq

    path = as_path(path)
    source = _parquet_source(path, what)
    try:
        return pq.ParquetFile(source, pre_buffer=isinstance(path, ObjectPath))  # bucket: coalesced ranged GETs
    except EgopoolError:
        raise
    except Exception as exc:  # ArrowInvalid, OSError, ...: one boundary
        raise _parquet_error(exc, path, what, hint) from exc


def read_parquet(path: TaskPathLike, columns: list[str] | None = None, *, what: str = "parquet file",
                 hint: str | None = None) -> Any:
    """The file's table (``columns`` in the order given) after :func:`check_parquet`; errors become FormatError.

    Read with ``pyarrow.parquet.ParquetFile``, not ``read_table``: one file needs no dataset
    machinery, and ``pyarrow.dataset`` imports pandas (a third of a second of every ``egopool ls``).
    A column the file does not have is an error, as with ``read_table``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = as_path(path)
    source = _parquet_source(path, what)
    try:
        with pq.ParquetFile(source, pre_buffer=isinstance(path, ObjectPath)) as pf:
            if columns is None:
                return pf.read()
            missing = [c for c in columns if c not in pf.schema_arrow.names]
            if missing:
                raise pa.ArrowInvalid(f"No match for FieldRef.Name({missing[0]}) in the file's columns")
            return pf.read(columns=list(dict.fromkeys(columns))).select(list(columns))
    except Exception as exc:
        raise _parquet_error(exc, path, what, hint) from exc


def read_parquet_schema(path: TaskPathLike, *, what: str = "parquet file", hint: str | None = None) -> Any:
    """``pyarrow.parquet.read_schema`` after :func:`check_parquet`; errors become FormatError."""
    import pyarrow.parquet as pq

    path = as_path(path)
    source = _parquet_source(path, what)
    try:
        return pq.read_schema(source)
    except Exception as exc:
        raise _parquet_error(exc, path, what, hint) from exc
