"""``Store``: the one storage interface every part of egopool writes and reads tasks through (issue 24).

A store is a flat namespace of objects under a root: a local directory (:class:`DirectoryStore`)
or an ``s3://bucket/prefix`` (:class:`S3Store`). Keys are ``/``-separated, relative to the root,
never start with ``/`` and have no empty, ``.`` or ``..`` component. The operations are exactly
what the format needs (file_format.md §1, §2, §9; docs/decisions.md O32):

- reads: :meth:`Store.get` (whole small object with its version), :meth:`Store.get_range`
  (ranged read), :meth:`Store.open_input` (a seekable binary reader), :meth:`Store.head`;
- listing: :meth:`Store.list` (every object under a prefix, ascending) and
  :meth:`Store.list_dir` (one level: sub-prefixes and objects);
- writes, each atomic per object (a reader sees the old object or the new one, never a part):
  :meth:`Store.put` and :meth:`Store.put_file` with a :class:`PutMode`:
  ``OVERWRITE``; ``CREATE`` (put if absent: the commit of an episode's row, the claim of an N);
  ``UPDATE`` (put if the object is still at ``version``: ``info.json`` / ``stats.json`` merges);
  :meth:`Store.delete`;
- stage-then-commit: :meth:`Store.staged` gives a local file to fill; leaving the block puts it
  under its key with the mode asked for (the directory's rename, the bucket's PUT / multipart).

The directory gets these semantics from the file system (temp file + ``fsync`` + ``link``/``rename``,
``flock`` for compare-and-swap); the bucket from conditional requests (``If-None-Match: *``,
``If-Match: ETAG``). A lost condition raises :class:`PreconditionFailed`, having written nothing.

::

    from egopool.storage import open_store, PutMode

    store = open_store("s3://lab-data/pooled/pick_cup")     # or open_store("/data/pooled/pick_cup")
    doc, version = store.get("meta/info.json")
    store.put("meta/info.json", new_doc, mode=PutMode.UPDATE, version=version)
"""

from __future__ import annotations

import builtins
import contextlib
import enum
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import EgopoolError, FormatError, OperationError

__all__ = ["ObjectMeta", "PreconditionFailed", "PutMode", "Store", "check_key", "join_key"]

#: The largest object :meth:`Store.get` reads into memory by default (bytes): the readers' JSON limit.
MAX_GET_BYTES = 256 << 20


class PreconditionFailed(EgopoolError):
    """A conditional write lost (HTTP 412/409 on a bucket; an existing file or another version on a
    directory): the object exists (``CREATE``) or changed since it was read (``UPDATE``). Nothing was written."""


class PutMode(enum.Enum):
    """How :meth:`Store.put` treats an object that is already there."""

    #: replace whatever is there
    OVERWRITE = "overwrite"
    #: write only if no object has the key (S3 ``If-None-Match: *``; a directory's ``link``)
    CREATE = "create"
    #: write only if the object is still at the ``version`` given (S3 ``If-Match``; a directory's ``flock`` + check)
    UPDATE = "update"


@dataclass(frozen=True)
class ObjectMeta:
    """One object: ``key`` relative to the store's root, ``size`` in bytes, ``version`` (opaque: an S3 ETag, a
    directory file's inode/mtime_ns/size), ``sha256`` (hex) when the store recorded it at write time, else None."""

    key: str
    size: int
    version: str
    sha256: str | None = None


def check_key(key: str, *, allow_empty: bool = False) -> str:
    """``key`` if it is a relative ``/``-separated key with no empty, ``.`` or ``..`` component.

    Raises
    ------
    FormatError
        An absolute key or a bad component (nothing may leave the store's root).
    """
    if not key:
        if allow_empty:
            return key
        raise FormatError("an empty object key", hint="name the object, e.g. meta/info.json")
    if key.startswith("/") or any(part in ("", ".", "..") for part in key.split("/")):
        raise FormatError(f"{key!r} is not a key of a store (absolute, or an empty, '.' or '..' component)",
                          hint="keys are relative: data/chunk-000/episode_000001.parquet")
    return key


def join_key(*parts: str) -> str:
    """``a/b/c`` of non-empty parts (each stripped of ``/`` at its ends)."""
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


class Store(ABC):
    """Objects under one root, a directory or a bucket prefix (module docstring).

    Attributes
    ----------
    uri:
        The root: an absolute directory path, or ``s3://bucket/prefix``.
    conditional_writes:
        False for a store that cannot honour ``CREATE`` / ``UPDATE`` atomically (a bucket gateway without
        conditional requests): the commands that need them refuse it in one line naming why.
    """

    uri: str

    @property
    def conditional_writes(self) -> bool:
        """True when ``CREATE`` and ``UPDATE`` are atomic here (a directory always; a bucket probes once)."""
        return True

    # -- naming ------------------------------------------------------------------------------------
    @abstractmethod
    def child(self, prefix: str) -> Store:
        """The store rooted at ``prefix`` below this root (e.g. one task of a server's store)."""

    def url(self, key: str) -> str:
        """Where ``key`` is, for messages: ``/abs/dir/key`` or ``s3://bucket/prefix/key``."""
        return f"{self.uri.rstrip('/')}/{key}" if key else self.uri

    def local_path(self, key: str) -> Path | None:
        """The local file of ``key`` when the store is a directory (tools that need a file name), else None."""
        return None

    # -- reads -------------------------------------------------------------------------------------
    @abstractmethod
    def get(self, key: str, *, limit: int = MAX_GET_BYTES) -> tuple[bytes, str] | None:
        """``(bytes, version)`` of object ``key``, or None when there is none.

        Raises
        ------
        FormatError
            The object is larger than ``limit`` bytes (refused before its body is read).
        StorageError
            The store failed (``ObjectStoreError`` for a bucket: network, permissions).
        """

    @abstractmethod
    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes of ``key`` from byte ``start`` (fewer at the end of the object).

        Raises
        ------
        FileNotFoundError
            No such object.
        """

    @abstractmethod
    def open_input(self, key: str) -> BinaryIO:
        """A seekable binary reader of ``key`` (a bucket: ranged GETs through a bounded buffer).

        Raises
        ------
        FileNotFoundError
            No such object.
        """

    @abstractmethod
    def head(self, key: str) -> ObjectMeta | None:
        """Size, version and recorded sha256 of ``key``; None when there is no such object."""

    def exists(self, key: str) -> bool:
        """True when object ``key`` exists."""
        return self.head(key) is not None

    # -- listing -----------------------------------------------------------------------------------
    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        """Every object whose key starts with ``prefix`` (a ``/``-ended prefix for a "directory"), ascending
        by key. Dot-named temporaries of the directory backend's own writes are not listed."""

    @abstractmethod
    def list_dir(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[ObjectMeta]]:
        """One level below ``prefix`` (``""`` or ending in ``/``): ``(sub-prefixes ending in /, objects)``, sorted."""

    # -- writes ------------------------------------------------------------------------------------
    @abstractmethod
    def put(self, key: str, data: bytes, *, mode: PutMode = PutMode.OVERWRITE, version: str | None = None,
            sha256: str | None = None) -> str:
        """Write ``data`` as object ``key`` atomically; returns its new version.

        Parameters
        ----------
        mode:
            :class:`PutMode`; ``UPDATE`` needs ``version`` (from :meth:`get` / :meth:`head`).
        sha256:
            Recorded with the object (a bucket's ``x-amz-meta-sha256``; a directory: not stored).

        Raises
        ------
        PreconditionFailed
            The condition of ``mode`` failed: nothing was written.
        """

    @abstractmethod
    def put_file(self, key: str, path: Path, *, mode: PutMode = PutMode.OVERWRITE, sha256: str | None = None,
                 move: bool = False, synced: bool = False) -> str:
        """Write local file ``path`` as object ``key`` atomically (``CREATE`` or ``OVERWRITE``); returns its version.

        ``move=True`` lets a directory store rename ``path`` into place when it is on the same file system
        (the file is consumed); a bucket uploads it (multipart above 64 MiB, invisible until complete).
        ``synced=True``: the caller has fsynced ``path`` already, so a directory store moving it does not
        again (the pooling server syncs an upload's videos while they are validated, docs/decisions.md U13).

        Raises
        ------
        PreconditionFailed
            ``CREATE`` and the object exists: nothing was written.
        """

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Delete the objects (a missing one is no error)."""

    @contextlib.contextmanager
    def staged(self, key: str, *, mode: PutMode = PutMode.OVERWRITE, suffix: str = "") -> Iterator[Path]:
        """Stage-then-commit: yields a new empty local file; on a normal exit it is put as ``key`` (atomically,
        with ``mode``), on an exception it is removed and nothing is written under ``key``.

        Raises
        ------
        PreconditionFailed
            ``CREATE`` and ``key`` appeared meanwhile.
        """
        directory = self._staging_dir(key)
        fd, name = tempfile.mkstemp(prefix=".egopool-stage-", suffix=suffix, dir=directory)
        os.close(fd)
        tmp = Path(name)
        try:
            yield tmp
            self.put_file(key, tmp, mode=mode, move=True)
        finally:
            tmp.unlink(missing_ok=True)

    def _staging_dir(self, key: str) -> str | None:
        """Where :meth:`staged` creates its file (None: the system's temp directory)."""
        return None

    # -- helpers -----------------------------------------------------------------------------------
    def get_json_bytes(self, key: str) -> bytes | None:
        """The bytes of ``key`` or None (:meth:`get` without the version)."""
        got = self.get(key)
        return None if got is None else got[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"



def require_conditional_writes(store: Store, what: str) -> None:
    """Refuse a store whose ``CREATE`` / ``UPDATE`` are not atomic, for the command ``what`` (issue 24).

    Raises
    ------
    OperationError
        One line naming the store and why: without ``If-None-Match`` / ``If-Match`` two writers overwrite
        each other (two publishes take the same N; a compare-and-swap loses an update).
    """
    if not store.conditional_writes:
        raise OperationError(
            f"{store.uri}: this S3 server ignores conditional writes (If-None-Match / If-Match), which {what} "
            "relies on: two writers could take the same episode number or lose each other's update",
            hint="use an S3 server that honours them (AWS S3, MinIO, SeaweedFS, Ceph RGW); gateways such as "
                 "`rclone serve s3` do not")
