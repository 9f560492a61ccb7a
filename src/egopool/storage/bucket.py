"""One S3 bucket prefix, through boto3: the writes pyarrow.fs cannot send (docs/decisions.md O10).

The pooling server's bucket store and ``egopool sync`` need, besides PUT/GET/LIST/DELETE,
the conditional writes that make publishing safe without rename or locks:

- ``If-None-Match: *`` (create only): the ``meta/episodes`` row (the commit point) and the
  N claim (the publish journal);
- ``If-Match: <ETag>`` (replace only what was read): ``info.json`` and ``stats.json``;
- listing and aborting incomplete multipart uploads (the start-up sweep).

SeaweedFS (the tests' real server) honours all three, atomically under concurrent writers
(measured: 16 racing creates of one key, one winner; 8 writers x 5 read-modify-writes of
one object with If-Match, 40 of 40 kept). Credentials and endpoint come from boto3's usual
settings the readers use (:class:`~egopool.storage.S3Settings`: ``AWS_ENDPOINT_URL(_S3)``,
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` or boto3's own chain (``AWS_PROFILE``),
``AWS_REGION``, ``EGOPOOL_S3_CONNECT_TIMEOUT``/``EGOPOOL_S3_REQUEST_TIMEOUT``, ``AWS_MAX_ATTEMPTS``):
every request has timeouts. Errors are :class:`~egopool.errors.ObjectStoreError`.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EgopoolError, FormatError, ObjectStoreError, install_hint
from ._path import _split
from ._s3 import S3Settings, translate_s3_error
from .store import MAX_GET_BYTES as MAX_JSON_BYTES  # the readers' JSON limit (_safe_read imports storage)
from .store import PreconditionFailed

__all__ = ["Bucket", "Conflict", "ObjectInfo", "is_bucket_uri", "parse_bucket_uri"]

#: the largest object :meth:`Bucket.get` reads into memory (bytes): the readers' JSON limit
MAX_GET_BYTES = MAX_JSON_BYTES
#: objects above this size go up as a multipart upload (boto3's transfer manager), the rest in one PUT
MULTIPART_THRESHOLD = 64 << 20


class Conflict(PreconditionFailed):
    """A conditional write lost: the object exists (``If-None-Match``) or changed (``If-Match``): HTTP 412/409."""


def is_bucket_uri(text: str | os.PathLike[str]) -> bool:
    """True for ``s3://...``."""
    return str(text).startswith("s3://")


def parse_bucket_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix")`` (prefix without slashes at its ends).

    Raises
    ------
    EgopoolError
        Not ``s3://`` or no bucket name (S3 names have >= 3 characters); a ``FormatError`` for an
        empty, ``.`` or ``..`` path component.
    """
    if not is_bucket_uri(uri):
        raise EgopoolError(f"{uri!r} is not an s3:// URI", hint="write s3://bucket/prefix")
    rest = uri[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    if len(bucket) < 3:
        raise EgopoolError(f"{uri!r} names no bucket (a bucket name has 3 to 63 characters)",
                           hint="write s3://bucket/prefix")
    _split(uri)  # an empty / . / .. component: refused as the readers refuse it (docs/decisions.md O22)
    return bucket, prefix.strip("/")


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: key relative to the bucket prefix, size (bytes), ETag (quoted, as S3 sends it)."""

    key: str
    size: int
    etag: str


class Bucket:
    """Objects under ``s3://bucket/prefix``; every key argument is relative to the prefix.

    Parameters
    ----------
    uri:
        ``s3://bucket/prefix``.
    settings:
        The connection (None: :meth:`S3Settings.from_env <egopool.storage.S3Settings.from_env>`).

    Raises
    ------
    EgopoolError
        boto3 is not installed (``pip install 'egopool[s3]'``) or the URI is malformed.
    """

    def __init__(self, uri: str, *, settings: S3Settings | None = None) -> None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise EgopoolError("s3:// stores need boto3", hint=install_hint("s3")) from exc
        self.uri = uri.rstrip("/")
        self.name, self.prefix = parse_bucket_uri(uri)
        try:
            st = settings or S3Settings.from_env()
        except EgopoolError as exc:  # name the URI that needed the setting
            raise EgopoolError(exc.message, path=self.uri, hint=exc.hint) from exc
        cfg = Config(connect_timeout=st.connect_timeout, read_timeout=st.request_timeout,
                     retries={"max_attempts": st.max_attempts, "mode": "standard"}, max_pool_connections=32)
        endpoint = f"{st.scheme}://{st.endpoint}" if st.endpoint else None
        self._settings = st
        self._errors: Any = __import__("botocore.exceptions", fromlist=["ClientError"])
        try:
            self.client: Any = boto3.session.Session().client(
                "s3", endpoint_url=endpoint, region_name=st.region or "us-east-1", config=cfg,
                aws_access_key_id=st.access_key, aws_secret_access_key=st.secret_key,
                aws_session_token=st.session_token)
        except self._errors.BotoCoreError as exc:  # a broken ~/.aws file, a profile the SDK cannot use
            raise ObjectStoreError(f"cannot set up the S3 client: {exc}", uri=self.uri, cause="config",
                                   hint="fix AWS_PROFILE / ~/.aws/config, or set AWS_ACCESS_KEY_ID and "
                                        "AWS_SECRET_ACCESS_KEY") from exc

    # -- keys --------------------------------------------------------------------------------------
    def key(self, rel: str) -> str:
        """The full object key of ``rel``."""
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def url(self, rel: str) -> str:
        """``s3://bucket/prefix/rel`` (for messages)."""
        return f"s3://{self.name}/{self.key(rel)}"

    def _fail(self, exc: Exception, rel: str, what: str) -> EgopoolError:
        code, status = "", 0
        if isinstance(exc, self._errors.ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
            return Conflict(f"{what} {self.url(rel)}: the object exists or changed meanwhile ({code or status})")
        uri = self.url(rel) if rel else f"s3://{self.name}"  # a bucket's own request names the bucket alone
        text = f"{code} HTTP response code: {status} {exc}" if status else str(exc)
        # the readers' one-line translation (denied, no bucket, timeout, unreachable: each with its fix), e.g. a
        # wrong secret key is "access denied by ..." here too, not botocore's SignatureDoesNotMatch paragraph
        known = translate_s3_error(RuntimeError(text), uri, self._settings, action=f"{what} failed")
        if isinstance(known, ObjectStoreError) and known.cause != "error":
            return known
        cause = {403: "denied", 404: "no_bucket"}.get(status, "unreachable" if not status else "error")
        return ObjectStoreError(f"{what} {uri} failed: {' '.join(str(exc).split())[:240]}", uri=uri, cause=cause,
                                hint="check the bucket, the endpoint (AWS_ENDPOINT_URL) and the credentials "
                                     "(AWS_ACCESS_KEY_ID / AWS_PROFILE)")

    # -- reads -------------------------------------------------------------------------------------
    def get(self, rel: str, *, limit: int = MAX_GET_BYTES) -> tuple[bytes, str] | None:
        """``(bytes, ETag)`` of object ``rel`` (a JSON document: ``info.json``, ``stats.json``, a journal),
        or None when it does not exist.

        Parameters
        ----------
        limit:
            Largest object read into memory, in bytes (default 256 MiB, the readers' JSON limit); a larger
            one is refused from its ``Content-Length`` before its body is read: memory stays bounded.

        Raises
        ------
        FormatError
            The object is larger than ``limit``.
        ObjectStoreError
            Any other failure (network, permissions).
        """
        try:
            r = self.client.get_object(Bucket=self.name, Key=self.key(rel))
            size = int(r.get("ContentLength") or 0)
            if size > limit:
                r["Body"].close()
                raise FormatError(f"the object is {size} bytes, more than the {limit} egopool reads",
                                  path=self.url(rel), hint="this is not the object the format expects; restore it")
            return r["Body"].read(limit + 1), str(r["ETag"])
        except self._errors.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise self._fail(exc, rel, "GET") from exc
        except self._errors.BotoCoreError as exc:
            raise self._fail(exc, rel, "GET") from exc

    def exists(self, rel: str) -> bool:
        """HEAD: True when object ``rel`` exists (strongly consistent after a PUT)."""
        try:
            self.client.head_object(Bucket=self.name, Key=self.key(rel))
            return True
        except self._errors.ClientError as exc:
            if int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0) == 404:
                return False
            raise self._fail(exc, rel, "HEAD") from exc
        except self._errors.BotoCoreError as exc:
            raise self._fail(exc, rel, "HEAD") from exc

    def head(self, rel: str) -> tuple[int, str, str | None] | None:
        """HEAD: ``(size, ETag, recorded sha256 or None)`` of object ``rel``, None when it does not exist."""
        try:
            r = self.client.head_object(Bucket=self.name, Key=self.key(rel))
        except self._errors.ClientError as exc:
            if int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0) == 404:
                return None
            raise self._fail(exc, rel, "HEAD") from exc
        except self._errors.BotoCoreError as exc:
            raise self._fail(exc, rel, "HEAD") from exc
        sha = (r.get("Metadata") or {}).get("sha256")
        return int(r.get("ContentLength") or 0), str(r["ETag"]), str(sha) if sha else None

    def get_range(self, rel: str, start: int, length: int) -> bytes:
        """Bytes ``start`` .. ``start + length - 1`` of object ``rel`` (one ranged GET; fewer at its end).

        Raises
        ------
        FileNotFoundError
            No such object.
        ObjectStoreError
            Any other failure.
        """
        try:
            r = self.client.get_object(Bucket=self.name, Key=self.key(rel), Range=f"bytes={start}-{start + length - 1}")
            return bytes(r["Body"].read())
        except self._errors.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404", "NotFound"):
                raise FileNotFoundError(self.url(rel)) from exc
            if code == "InvalidRange":
                return b""
            raise self._fail(exc, rel, "GET") from exc
        except self._errors.BotoCoreError as exc:
            raise self._fail(exc, rel, "GET") from exc

    def sha256_of(self, rel: str) -> str | None:
        """The sha256 egopool recorded in object ``rel``'s metadata (None: absent object or no record)."""
        try:
            r = self.client.head_object(Bucket=self.name, Key=self.key(rel))
        except self._errors.ClientError as exc:
            if int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0) == 404:
                return None
            raise self._fail(exc, rel, "HEAD") from exc
        except self._errors.BotoCoreError as exc:
            raise self._fail(exc, rel, "HEAD") from exc
        v = (r.get("Metadata") or {}).get("sha256")
        return str(v) if v else None

    def download(self, rel: str, dest: Path) -> None:
        """Copy object ``rel`` into local file ``dest`` (ranged parts for large objects)."""
        try:
            self.client.download_file(self.name, self.key(rel), str(dest))
        except (self._errors.ClientError, self._errors.BotoCoreError) as exc:
            raise self._fail(exc, rel, "GET") from exc

    def stream(self, rel: str) -> Iterator[bytes]:
        """Object ``rel`` in 1 MiB pieces (the read API's downloads).

        Raises
        ------
        ObjectStoreError
            The object cannot be read.
        """
        try:
            body = self.client.get_object(Bucket=self.name, Key=self.key(rel))["Body"]
        except (self._errors.ClientError, self._errors.BotoCoreError) as exc:
            raise self._fail(exc, rel, "GET") from exc
        yield from body.iter_chunks(1 << 20)

    def list(self, rel_prefix: str, *, delimiter: str | None = None) -> Iterator[ObjectInfo | str]:
        """Objects whose key starts with ``rel_prefix`` (LIST, 1000 keys per request), ascending; with
        ``delimiter``, the common prefixes (relative, ending in the delimiter) are yielded as ``str``."""
        kw: dict[str, Any] = {"Bucket": self.name, "Prefix": self.key(rel_prefix)}
        if delimiter:
            kw["Delimiter"] = delimiter
        cut = len(self.key(""))
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**kw):
                for cp in page.get("CommonPrefixes", []) or []:
                    yield str(cp["Prefix"])[cut:]
                for o in page.get("Contents", []) or []:
                    yield ObjectInfo(str(o["Key"])[cut:], int(o["Size"]), str(o.get("ETag", "")))
        except (self._errors.ClientError, self._errors.BotoCoreError) as exc:
            raise self._fail(exc, rel_prefix, "LIST") from exc

    def list_objects(self, rel_prefix: str) -> builtins.list[ObjectInfo]:
        """:meth:`list` without delimiter, as a list."""
        return [o for o in self.list(rel_prefix) if isinstance(o, ObjectInfo)]

    # -- writes ------------------------------------------------------------------------------------
    def put(self, rel: str, body: bytes, *, if_none_match: bool = False, if_match: str | None = None,
            sha256: str | None = None) -> str:
        """PUT ``body`` as object ``rel``; returns its ETag.

        Parameters
        ----------
        sha256:
            Stored as the object's ``x-amz-meta-sha256`` (:meth:`sha256_of`).
        if_none_match:
            Create only (``If-None-Match: *``).
        if_match:
            Replace only the version with this ETag.

        Raises
        ------
        Conflict
            The condition failed (412/409): nothing was written.
        ObjectStoreError
            Any other failure.
        """
        kw: dict[str, Any] = {}
        if if_none_match:
            kw["IfNoneMatch"] = "*"
        if if_match is not None:
            kw["IfMatch"] = if_match
        if sha256 is not None:
            kw["Metadata"] = {"sha256": sha256}
        try:
            return str(self.client.put_object(Bucket=self.name, Key=self.key(rel), Body=body, **kw)["ETag"])
        except (self._errors.ClientError, self._errors.BotoCoreError) as exc:
            raise self._fail(exc, rel, "PUT") from exc

    def upload(self, path: Path, rel: str, *, sha256: str | None = None) -> None:
        """Upload local file ``path`` as object ``rel`` (multipart above 64 MiB: invisible until complete);
        ``sha256``: as in :meth:`put`."""
        from boto3.s3.transfer import TransferConfig
        cfg = TransferConfig(multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=MULTIPART_THRESHOLD)
        extra = {"Metadata": {"sha256": sha256}} if sha256 else None
        from boto3.exceptions import S3UploadFailedError  # the transfer manager wraps a failed PUT in it

        try:
            self.client.upload_file(str(path), self.name, self.key(rel), Config=cfg, ExtraArgs=extra)
        except (self._errors.ClientError, self._errors.BotoCoreError, S3UploadFailedError, OSError) as exc:
            raise self._fail(exc, rel, "PUT") from exc

    def delete(self, rels: builtins.list[str]) -> None:
        """Delete objects (missing ones are no error), 1000 per request."""
        for i in range(0, len(rels), 1000):
            objs = [{"Key": self.key(r)} for r in rels[i:i + 1000]]
            try:
                self.client.delete_objects(Bucket=self.name, Delete={"Objects": objs, "Quiet": True})
            except (self._errors.ClientError, self._errors.BotoCoreError) as exc:
                raise self._fail(exc, rels[i], "DELETE") from exc

    def incomplete_uploads(self, rel_prefix: str) -> builtins.list[tuple[str, str, float]]:
        """Multipart uploads started under ``rel_prefix`` and never completed: ``(rel key, upload id,
        initiated at (s since the epoch))``."""
        cut = len(self.key(""))
        out: builtins.list[tuple[str, str, float]] = []
        try:
            for page in self.client.get_paginator("list_multipart_uploads").paginate(
                    Bucket=self.name, Prefix=self.key(rel_prefix)):
                for u in page.get("Uploads", []) or []:
                    out.append((str(u["Key"])[cut:], str(u["UploadId"]), u["Initiated"].timestamp()))
        except (self._errors.ClientError, self._errors.BotoCoreError) as exc:
            raise self._fail(exc, rel_prefix, "LIST uploads") from exc
        return out

    def abort_upload(self, rel: str, upload_id: str) -> None:
        """Abort one incomplete multipart upload (its parts are freed)."""
        try:
            self.client.abort_multipart_upload(Bucket=self.name, Key=self.key(rel), UploadId=upload_id)
        except (self._errors.ClientError, self._errors.BotoCoreError) as exc:
            raise self._fail(exc, rel, "abort upload") from exc

    def ensure_bucket(self) -> None:
        """Create the bucket when it does not exist (a store's first start)."""
        try:
            self.client.head_bucket(Bucket=self.name)
            return
        except self._errors.ClientError as exc:
            if int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0) != 404:
                raise self._fail(exc, "", "HEAD bucket") from exc  # 403: keys refused; never a create attempt
        except self._errors.BotoCoreError as exc:
            raise self._fail(exc, "", "HEAD bucket") from exc
        try:
            self.client.create_bucket(Bucket=self.name)
        except self._errors.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise self._fail(exc, "", "create bucket") from exc
