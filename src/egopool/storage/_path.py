"""``ObjectPath``: an ``s3://bucket/key`` location with the part of ``pathlib.Path``'s interface the
readers use (docs/decisions.md O1).

The read path (layout, meta, ``_safe_read``, codecs, validate) takes :data:`TaskPath`
(``Path | ObjectPath``) or :data:`TaskPathLike` and calls :func:`as_path` where it called
``Path(...)``; a local path stays a ``pathlib.Path`` and takes the very same code as before. An
``ObjectPath`` has no ``__fspath__`` on purpose: handing one to ``open()`` / ``os.*`` raises
``TypeError`` instead of touching a local file named ``s3:``.

Object stores have no directories: a "directory" is a key prefix that some object has
(``is_dir``), ``mkdir`` does nothing, and listing a prefix is one LIST request per 1000 keys.
"""

from __future__ import annotations

import fnmatch
import io
import os
import stat as _stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple, TypeAlias

from ..errors import EgopoolError, FormatError, ObjectStoreError
from ._reader import READ_BUFFER, seekable_reader
from ._s3 import S3Settings, s3_filesystem, translate_s3_error

__all__ = ["ObjectEntry", "ObjectPath", "ObjectStat", "TaskPath", "TaskPathLike", "as_local_path", "as_path",
           "is_object_uri", "require_bucket", "seekable_reader", "store_failure", "READ_BUFFER"]

_SCHEMES = ("s3://",)


def is_object_uri(value: object) -> bool:
    """True for an :class:`ObjectPath` or text starting with ``s3://``."""
    return isinstance(value, ObjectPath) or isinstance(value, str) and value.startswith(_SCHEMES)


def refuse_near_uri(text: str) -> None:
    """Refuse text that was meant as an S3 URI but is not one (``s3:/b/t``, ``S3://b/t``, ``s3//b/t``): taken as a local path it
    would create a folder named ``s3:`` (issue 24 review).

    Raises
    ------
    FormatError
        One line naming the text and the spelling of an S3 location.
    """
    if (text[:3].lower() == "s3:" and not text.startswith("s3://")) or text[:4].lower() == "s3//":
        raise FormatError("not an S3 URI: an S3 location is written s3://BUCKET/PREFIX (lower-case, two slashes)",
                          path=text, hint=f"write s3://{text[3:].lstrip('/')}; a local folder of that name: ./{text}")


def as_path(value: TaskPathLike) -> TaskPath:
    """``value`` as a location: an :class:`ObjectPath` for ``s3://...`` (or an ObjectPath), else ``Path(value)``.

    Raises
    ------
    FormatError
        An ``s3://`` URI without a bucket, or with an empty / ``.`` / ``..`` path component; text that looks
        like a misspelt S3 URI (:func:`refuse_near_uri`).
    """
    if isinstance(value, ObjectPath):
        return value
    refuse_near_uri(os.fspath(value))
    if isinstance(value, Path):  # a Path is returned as it is (immutable; no re-parse, U20)
        return value
    if isinstance(value, str) and value.startswith(_SCHEMES):
        return ObjectPath(value)
    return Path(value)


def as_local_path(value: TaskPathLike, *, what: str = "this operation") -> Path:
    """``value`` as a local ``Path``, for what only a local directory has (atomic rename, fsync, locks, pids).

    Raises
    ------
    FormatError
        ``value`` is an object-store location (``s3://...`` or an :class:`ObjectPath`): named, with
        the way to write there (the pooling server's :class:`~egopool.storage.Store`).
    """
    path = as_path(value)
    if isinstance(path, ObjectPath):
        raise FormatError(f"{what} needs a local directory, not an object store", path=path,
                          hint="write a local task, or pool it into a bucket with the server (egopool.storage.Store)")
    return path


def require_bucket(path: ObjectPath) -> None:
    """Raise when the bucket of ``path`` does not exist (one HEAD request on the bucket).

    Raises
    ------
    ObjectStoreError
        ``cause="no_bucket"``: the message names the URI, the endpoint and the fix.
    """
    if not ObjectPath._make(path.bucket, "", path.settings).exists():
        raise ObjectStoreError(f"the bucket {path.bucket!r} does not exist at {path.settings.describe()}",
                               uri=str(path), cause="no_bucket",
                               hint="check the bucket name, and AWS_ENDPOINT_URL / AWS_REGION for where it is")


def store_failure(exc: BaseException, path: object) -> ObjectStoreError | None:
    """The store's error when ``exc`` (raised by pyarrow or PyAV while reading ``path``) is a failure of the
    object store, not of the file: a request that timed out, was refused or ended mid-answer. None for a local
    path or a damaged file. A checker calls it before reporting an unreadable file as damaged (O3, issue 24).
    """
    if isinstance(exc, ObjectStoreError):
        return exc
    if isinstance(path, ObjectPath) and isinstance(exc, OSError) and "AWS Error" in str(exc):
        err = path._error(exc)
        return err if isinstance(err, ObjectStoreError) else None
    return None


class ObjectStat(NamedTuple):
    """What ``os.stat_result`` fields the readers use, for an object or prefix."""

    st_mode: int
    st_size: int
    st_mtime: float


class ObjectEntry:
    """One child of a prefix, shaped like ``os.DirEntry`` (``name``, ``path``, ``is_dir``, ``is_file``, ``stat``)."""

    __slots__ = ("_path", "_dir", "_size", "_mtime")

    def __init__(self, path: ObjectPath, is_dir: bool, size: int, mtime: float) -> None:
        self._path, self._dir, self._size, self._mtime = path, is_dir, size, mtime

    @property
    def name(self) -> str:
        """The last key component (the bucket's name at its root), as ``Path.name``."""
        return self._path.name

    @property
    def path(self) -> ObjectPath:
        return self._path

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._dir

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return not self._dir

    def is_symlink(self) -> bool:
        """False: an object store has no symlinks."""
        return False

    def stat(self, *, follow_symlinks: bool = True) -> ObjectStat:
        return ObjectStat(_stat.S_IFDIR | 0o755 if self._dir else _stat.S_IFREG | 0o644, self._size, self._mtime)


def _split(uri: str) -> tuple[str, str]:
    rest = uri[len("s3://"):]
    bucket, _, key = rest.partition("/")
    key = key.rstrip("/")  # a trailing / is a folder; a leading one (s3://b//t) is an empty component
    if not bucket:
        raise FormatError(f"{uri!r} names no bucket", hint="write s3://BUCKET/PREFIX/TASK")
    if key and any(part in ("", ".", "..") for part in key.split("/")):
        raise FormatError(f"{uri!r} has an empty, '.' or '..' path component", hint="write s3://BUCKET/PREFIX/TASK")
    return bucket, key


class ObjectPath:
    """An ``s3://bucket/key`` location (a pure value: no request until a method asks the store).

    Parameters
    ----------
    uri:
        ``s3://bucket`` or ``s3://bucket/prefix/...`` (trailing ``/`` ignored).
    settings:
        How to reach the store; default: :meth:`S3Settings.from_env` at construction.
        Joined and parent paths share their parent's settings.

    Raises
    ------
    FormatError
        A URI without a bucket or with an empty / ``.`` / ``..`` component.
    """

    __slots__ = ("bucket", "key", "settings", "_info")

    def __init__(self, uri: str, settings: S3Settings | None = None) -> None:
        self.bucket, self.key = _split(uri)
        if settings is None:
            try:
                settings = S3Settings.from_env()
            except FormatError as exc:  # name the URI that needed the setting
                raise FormatError(exc.message, path=uri, hint=exc.hint) from exc
        self.settings = settings
        self._info: Any = None

    @classmethod
    def _make(cls, bucket: str, key: str, settings: S3Settings) -> ObjectPath:
        p = cls.__new__(cls)
        p.bucket, p.key, p.settings, p._info = bucket, key, settings, None
        return p

    def _seen(self, info: Any) -> ObjectPath:
        """This path remembering ``info`` of an object (what a listing saw), as ``os.DirEntry`` caches its stat."""
        from pyarrow import fs as pafs

        if info.type == pafs.FileType.File:
            self._info = info
        return self

    # -- pure path operations ----------------------------------------------------------------------
    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}" if self.key else f"s3://{self.bucket}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # the URI only: a Ray worker or subprocess reaches the store with its own environment
        return (ObjectPath, (str(self),))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and (self.bucket, self.key) == (other.bucket, other.key)

    def __hash__(self) -> int:
        return hash(("s3", self.bucket, self.key))

    def __lt__(self, other: ObjectPath) -> bool:
        return str(self) < str(other)

    def __truediv__(self, other: str | os.PathLike[str]) -> ObjectPath:
        return self.joinpath(other)

    def joinpath(self, *others: str | os.PathLike[str]) -> ObjectPath:
        """``self / a / b``; a relative ``Path`` or ``a/b`` text adds several components.

        Raises
        ------
        FormatError
            An absolute path, or an empty / ``.`` / ``..`` component (nothing leaves the prefix).
        """
        key = self.key
        for other in others:
            text = os.fspath(other)
            if text.startswith("/"):
                raise FormatError(f"cannot join the absolute path {text!r} to {self}")
            parts = [p for p in text.split("/") if p not in ("", ".")]
            if ".." in parts:
                raise FormatError(f"'..' in {text!r}: an object path is joined downwards only", path=str(self))
            if parts:
                key = "/".join(([key] if key else []) + parts)
        return ObjectPath._make(self.bucket, key, self.settings)

    @property
    def uri(self) -> str:
        """``s3://bucket/key``."""
        return str(self)

    @property
    def fs_path(self) -> str:
        """``bucket/key``, the path ``pyarrow.fs.S3FileSystem`` takes."""
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1] if self.key else self.bucket

    @property
    def suffix(self) -> str:
        """``.parquet`` of ``episode-000.parquet``, as ``Path.suffix``."""
        return PurePosixPath(self.name).suffix

    @property
    def suffixes(self) -> list[str]:
        """Every suffix of the name, as ``Path.suffixes``."""
        return PurePosixPath(self.name).suffixes

    @property
    def stem(self) -> str:
        """The name without its suffix, as ``Path.stem``."""
        return PurePosixPath(self.name).stem

    @property
    def parent(self) -> ObjectPath:
        """The prefix one component up (the bucket root is its own parent)."""
        if not self.key:
            return self
        return ObjectPath._make(self.bucket, self.key.rpartition("/")[0], self.settings)

    @property
    def parents(self) -> list[ObjectPath]:
        """Every prefix above, nearest first, down to the bucket root."""
        out, p = [], self
        while p.key:
            p = p.parent
            out.append(p)
        return out

    @property
    def parts(self) -> tuple[str, ...]:
        """``("s3://bucket", "prefix", ..., "name")``."""
        return (f"s3://{self.bucket}", *([p for p in self.key.split("/")] if self.key else []))

    def with_name(self, name: str) -> ObjectPath:
        """The sibling called ``name``; ValueError at the bucket root."""
        if not self.key:
            raise ValueError(f"{self} has an empty name")
        return self.parent / name

    def with_suffix(self, suffix: str) -> ObjectPath:
        """The sibling with ``suffix`` in place of this one's."""
        return self.with_name(str(PurePosixPath(self.name).with_suffix(suffix)))

    def relative_to(self, other: ObjectPath | str) -> PurePosixPath:
        """The key below ``other`` as a relative POSIX path (``data/chunk-000/episode-000.parquet``).

        Raises
        ------
        ValueError
            ``self`` is not ``other`` or below it.
        """
        o = as_path(other) if isinstance(other, str) else other
        if not isinstance(o, ObjectPath) or o.bucket != self.bucket or not (
                not o.key or self.key == o.key or self.key.startswith(o.key + "/")):
            raise ValueError(f"{self} is not in the subpath of {other}")
        return PurePosixPath(self.key[len(o.key):].lstrip("/") or ".")

    def is_relative_to(self, other: ObjectPath | str) -> bool:
        """True when this path is ``other`` or below it."""
        try:
            self.relative_to(other)
        except ValueError:
            return False
        return True

    def as_posix(self) -> str:
        """The URI (``s3://bucket/key``)."""
        return str(self)

    def resolve(self, strict: bool = False) -> ObjectPath:
        """Itself: a URI is absolute and has no links."""
        return self

    def absolute(self) -> ObjectPath:
        """Itself: a URI is absolute."""
        return self

    def expanduser(self) -> ObjectPath:
        """Itself: a URI has no ``~``."""
        return self

    def is_absolute(self) -> bool:
        """True: a URI is absolute."""
        return True

    # -- requests -----------------------------------------------------------------------------------
    @property
    def filesystem(self) -> Any:
        """The ``pyarrow.fs.S3FileSystem`` of this location's settings."""
        return s3_filesystem(self.settings)

    def _error(self, exc: BaseException, action: str = "cannot read") -> EgopoolError:
        return translate_s3_error(exc, str(self), self.settings, action)

    def info(self) -> Any:
        """``pyarrow.fs.FileInfo`` of this key (a HEAD request; a LIST when it is no object).

        An object's size and kind are remembered by this path object once seen (by this HEAD or
        by the listing that made it, :meth:`walk_objects`, :meth:`scandir`), as ``os.DirEntry``
        keeps its stat: ``exists``, ``is_file`` and ``stat`` then cost no request. "No such object"
        and prefixes are asked again each time; opening and reading always ask the store afresh
        (:meth:`open_input`), and writing or deleting through this path forgets what it knew.

        Raises
        ------
        ObjectStoreError
            The bucket is missing, access is denied, the endpoint does not answer in time.
        """
        try:
            if self._info is not None:
                return self._info
            from pyarrow import fs as pafs

            info = self.filesystem.get_file_info(self.fs_path)
            if info.type == pafs.FileType.File:  # an object seen stays known; "no object" is asked again
                self._info = info
            return info
        except Exception as exc:  # OSError from the AWS SDK: one boundary
            raise self._error(exc) from exc

    def stat(self, *, follow_symlinks: bool = True) -> ObjectStat:
        """Size and kind of the object (or ``S_IFDIR`` for a prefix that holds objects).

        Raises
        ------
        FileNotFoundError
            Neither an object nor a prefix of one.
        ObjectStoreError
            See :meth:`info`.
        """
        from pyarrow import fs as pafs

        info = self.info()
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(2, "No such object", str(self))
        mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
        if info.type == pafs.FileType.Directory:
            return ObjectStat(_stat.S_IFDIR | 0o755, 0, mtime)
        return ObjectStat(_stat.S_IFREG | 0o644, int(info.size or 0), mtime)

    def lstat(self) -> ObjectStat:
        """:meth:`stat` (an object store has no symlinks)."""
        return self.stat()

    def exists(self, *, follow_symlinks: bool = True) -> bool:
        """True for an object or a prefix holding objects (see :meth:`info`)."""
        from pyarrow import fs as pafs

        return self.info().type != pafs.FileType.NotFound

    def is_file(self) -> bool:
        """True for an object (see :meth:`info`)."""
        from pyarrow import fs as pafs

        return self.info().type == pafs.FileType.File

    def is_dir(self) -> bool:
        """True for a prefix that holds objects (see :meth:`info`)."""
        from pyarrow import fs as pafs

        return self.info().type == pafs.FileType.Directory

    def is_symlink(self) -> bool:
        return False

    def scandir(self) -> list[ObjectEntry]:
        """The children of this prefix (one LIST request with delimiter ``/`` per 1000 keys); [] when none.

        Raises
        ------
        ObjectStoreError
            See :meth:`info`.
        """
        from pyarrow import fs as pafs

        try:
            infos = self.filesystem.get_file_info(pafs.FileSelector(self.fs_path, recursive=False,
                                                                    allow_not_found=True))
        except Exception as exc:
            raise self._error(exc, "cannot list") from exc
        out = []
        for i in infos:
            name = i.path.rstrip("/").rsplit("/", 1)[-1]
            if not name:
                continue
            mtime = i.mtime.timestamp() if i.mtime is not None else 0.0
            out.append(ObjectEntry((self / name)._seen(i), i.type == pafs.FileType.Directory, int(i.size or 0),
                                   mtime))
        return out

    def iterdir(self) -> Iterator[ObjectPath]:
        """The children of this prefix (:meth:`scandir`)."""
        return iter([e.path for e in self.scandir()])

    def glob(self, pattern: str) -> Iterator[ObjectPath]:
        """Children whose name matches ``pattern`` (one component: ``*`` and ``?``, no ``**``)."""
        if "/" in pattern:
            raise ValueError("ObjectPath.glob matches one path component")
        return iter([e.path for e in self.scandir() if fnmatch.fnmatchcase(e.name, pattern)])

    def walk_objects(self) -> list[tuple[str, ObjectPath]]:
        """Every object below this prefix as ``(relative key, path)``, sorted; each path knows its size
        and kind from the listing (:meth:`info`). One recursive LIST as :meth:`walk_files`."""
        from pyarrow import fs as pafs

        try:
            infos = self.filesystem.get_file_info(pafs.FileSelector(self.fs_path, recursive=True,
                                                                    allow_not_found=True))
        except Exception as exc:
            raise self._error(exc, "cannot list") from exc
        base = len(self.fs_path) + 1
        return sorted((i.path[base:], ObjectPath._make(self.bucket, i.path[len(self.bucket) + 1:], self.settings)._seen(i))
                      for i in infos if i.type == pafs.FileType.File)

    def walk_files(self) -> list[tuple[str, int]]:
        """Every object below this prefix as ``(relative key, size in bytes)``, sorted by key.

        One recursive LIST (ListObjectsV2 without delimiter: one request per 1000 keys), so
        enumerating a chunk prefix costs its key count / 1000 requests, not one per file.

        Raises
        ------
        ObjectStoreError
            See :meth:`info`.
        """
        return [(rel, int(p._info.size or 0)) for rel, p in self.walk_objects()]

    def open_input(self) -> Any:
        """A ``pyarrow.NativeFile`` (random access: one HEAD to open, then each ``read_at`` is one ranged GET).

        Raises
        ------
        FileNotFoundError
            No such object.
        ObjectStoreError
            See :meth:`info`.
        """
        try:
            return self.filesystem.open_input_file(self.fs_path)
        except FileNotFoundError:
            raise
        except Exception as exc:
            text = str(exc)
            if "NOT_FOUND" in text or "Path does not exist" in text or "NoSuchKey" in text:
                raise FileNotFoundError(2, "No such object", str(self)) from exc
            raise self._error(exc) from exc

    def open(self, mode: str = "rb", buffering: int = -1, encoding: str | None = None) -> Any:
        """A file object: ``"rb"`` seekable and buffered (:data:`READ_BUFFER` bytes a GET), ``"r"`` text,
        ``"wb"`` an output stream (the object appears when it is closed)."""
        if mode in ("rb", "r"):
            buf = seekable_reader(self.open_input(), buffering if buffering > 0 else READ_BUFFER)
            return buf if mode == "rb" else io.TextIOWrapper(buf, encoding=encoding or "utf-8")
        if mode == "wb":
            self._info = None
            try:
                return self.filesystem.open_output_stream(self.fs_path)
            except Exception as exc:
                raise self._error(exc, "cannot write") from exc
        raise ValueError(f"ObjectPath.open supports 'rb', 'r' and 'wb', not {mode!r}")

    def read_bytes(self) -> bytes:
        """The whole object (a HEAD and one GET); FileNotFoundError / ObjectStoreError as :meth:`open_input`."""
        with self.open_input() as f:
            try:
                return f.read()
            except Exception as exc:
                raise self._error(exc) from exc

    def read_text(self, encoding: str = "utf-8") -> str:
        """The whole object decoded (:meth:`read_bytes`)."""
        return self.read_bytes().decode(encoding)

    def write_bytes(self, data: bytes) -> int:
        """Put the object whole (one PUT; pyarrow switches to a multipart upload past its part size).

        Raises
        ------
        ObjectStoreError
            The store refused or did not answer.
        """
        self._info = None
        try:
            with self.filesystem.open_output_stream(self.fs_path) as out:
                out.write(data)
        except Exception as exc:
            raise self._error(exc, "cannot write") from exc
        return len(data)

    def write_text(self, text: str, encoding: str = "utf-8") -> int:
        """Put ``text`` encoded (:meth:`write_bytes`)."""
        return self.write_bytes(text.encode(encoding))

    def unlink(self, missing_ok: bool = False) -> None:
        """Delete the object (S3 deletes are idempotent: a missing key raises only without ``missing_ok``)."""
        if not missing_ok and not self.is_file():
            raise FileNotFoundError(2, "No such object", str(self))
        self._info = None
        try:
            self.filesystem.delete_file(self.fs_path)
        except FileNotFoundError:
            if not missing_ok:
                raise
        except Exception as exc:
            raise self._error(exc, "cannot delete") from exc

    def mkdir(self, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing: an object store has no directories (a prefix exists once an object has it)."""


#: A location the read path reads (a task directory, a meta file, a data parquet, a video): a local
#: ``pathlib.Path`` or an :class:`ObjectPath` in a bucket. The two share the part of ``pathlib.Path``
#: the readers use (``/``, ``name``, ``parent``, ``exists``, ``is_dir``, ``stat``, ``iterdir``,
#: ``open``, ``read_bytes``...); what only a local file has (``os.*``, ``open()`` by name, PyAV by
#: file name) is reached after an ``isinstance(p, ObjectPath)`` test, or through the object's own
#: ``open`` / ``open_input`` (docs/decisions.md O1).
TaskPath: TypeAlias = Path | ObjectPath

#: What :func:`as_path` accepts and turns into a :data:`TaskPath`: text (a local path or an
#: ``s3://`` URI), any ``os.PathLike``, or an :class:`ObjectPath`.
TaskPathLike: TypeAlias = str | os.PathLike[str] | ObjectPath
