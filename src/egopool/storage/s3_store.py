"""``S3Store``: the :class:`~egopool.storage.store.Store` interface on ``s3://bucket/prefix``.

Requests go through :class:`~egopool.storage.bucket.Bucket` (boto3: the conditional writes
``If-None-Match: *`` and ``If-Match: ETAG`` that pyarrow.fs cannot send; docs/decisions.md O9, O24);
the seekable reader is pyarrow.fs's ranged reads behind a bounded buffer
(:func:`~egopool.storage.seekable_reader`, O6). A version is the object's ETag.
"""

from __future__ import annotations

import builtins

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, cast

from ..errors import FormatError
from .bucket import Bucket, ObjectInfo
from .store import MAX_GET_BYTES, ObjectMeta, PreconditionFailed, PutMode, Store, check_key, join_key

__all__ = ["S3Store"]


class S3Store(Store):
    """Objects under ``s3://bucket/prefix`` (the bucket must exist; :meth:`ensure_bucket` creates it).

    Parameters
    ----------
    uri:
        ``s3://bucket/prefix``; the connection comes from the AWS environment (:class:`~egopool.storage.S3Settings`).

    Raises
    ------
    EgopoolError
        boto3 missing (``pip install 'egopool[s3]'``) or a malformed URI.
    """

    def __init__(self, uri: str, *, bucket: Bucket | None = None) -> None:
        self.bucket = bucket or Bucket(uri)
        self.uri = self.bucket.uri

    def child(self, prefix: str) -> S3Store:
        b = Bucket.__new__(Bucket)
        b.__dict__.update(self.bucket.__dict__)
        b.prefix = join_key(self.bucket.prefix, check_key(prefix))
        b.uri = f"s3://{b.name}/{b.prefix}"
        return S3Store(b.uri, bucket=b)

    def ensure_bucket(self) -> None:
        """Create the bucket when it does not exist."""
        self.bucket.ensure_bucket()

    # -- reads -------------------------------------------------------------------------------------
    def get(self, key: str, *, limit: int = MAX_GET_BYTES) -> tuple[bytes, str] | None:
        return self.bucket.get(check_key(key), limit=limit)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        return self.bucket.get_range(check_key(key), start, length)

    def open_input(self, key: str) -> BinaryIO:
        from ._path import ObjectPath, seekable_reader

        native = ObjectPath(self.url(check_key(key))).open_input()
        return cast(BinaryIO, seekable_reader(native))

    def head(self, key: str) -> ObjectMeta | None:
        h = self.bucket.head(check_key(key))
        if h is None:
            return None
        size, etag, sha = h
        return ObjectMeta(key, size, etag, sha)

    # -- listing -----------------------------------------------------------------------------------
    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        for o in self.bucket.list(prefix):
            if isinstance(o, ObjectInfo):
                yield ObjectMeta(o.key, o.size, o.etag)

    def list_dir(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[ObjectMeta]]:
        if prefix and not prefix.endswith("/"):
            raise FormatError(f"list_dir takes a prefix ending in '/', not {prefix!r}")
        dirs: builtins.list[str] = []
        objs: builtins.list[ObjectMeta] = []
        for o in self.bucket.list(prefix, delimiter="/"):
            if isinstance(o, ObjectInfo):
                objs.append(ObjectMeta(o.key, o.size, o.etag))
            else:
                dirs.append(o)
        return sorted(dirs), sorted(objs, key=lambda m: m.key)

    # -- writes ------------------------------------------------------------------------------------
    def put(self, key: str, data: bytes, *, mode: PutMode = PutMode.OVERWRITE, version: str | None = None,
            sha256: str | None = None) -> str:
        if mode is PutMode.UPDATE and version is None:
            raise ValueError("PutMode.UPDATE needs the version read")
        return self.bucket.put(check_key(key), data, if_none_match=mode is PutMode.CREATE,
                               if_match=version if mode is PutMode.UPDATE else None, sha256=sha256)

    def put_file(self, key: str, path: Path, *, mode: PutMode = PutMode.OVERWRITE, sha256: str | None = None,
                 move: bool = False, synced: bool = False) -> str:
        check_key(key)
        if mode is PutMode.UPDATE:
            raise ValueError("put_file takes CREATE or OVERWRITE; UPDATE is for put()")
        if mode is PutMode.CREATE:
            # one conditional PUT (a multipart upload cannot be conditional on every S3): small objects only
            if Path(path).stat().st_size > (64 << 20):
                if self.bucket.exists(key):
                    raise PreconditionFailed(f"{self.url(key)} exists already", path=self.url(key))
                self.bucket.upload(Path(path), key, sha256=sha256)
                return self._etag(key)
            return self.bucket.put(key, Path(path).read_bytes(), if_none_match=True, sha256=sha256)
        self.bucket.upload(Path(path), key, sha256=sha256)
        if move:
            Path(path).unlink(missing_ok=True)
        return self._etag(key)

    def _etag(self, key: str) -> str:
        h = self.bucket.head(key)
        return "" if h is None else h[1]

    def delete(self, keys: Iterable[str]) -> None:
        self.bucket.delete([check_key(k) for k in keys])


