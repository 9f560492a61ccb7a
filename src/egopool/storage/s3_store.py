"""``S3Store``: the :class:`~egopool.storage.store.Store` interface on ``s3://bucket/prefix``.

Requests go through obstore (the Python binding of arrow-rs ``object_store``): conditional puts
(``PutMode.CREATE`` is ``If-None-Match: *``, ``PutMode.UPDATE`` is ``If-Match: ETAG``), ranged and
coalesced reads, listing, multipart puts of large files, user metadata (``x-amz-meta-sha256``). It
answered 2-7x faster than boto3 per small request on SeaweedFS (docs/decisions.md O32,
benchmarks/bench_obstore.py). Bucket administration that object_store does not expose (create a
bucket, list and abort incomplete multipart uploads) stays in :class:`~egopool.storage.bucket.Bucket`
(boto3). A version is the object's ETag. Settings and timeouts are the readers'
(:class:`~egopool.storage.S3Settings`, O2): every request has a connect and a request timeout and
``AWS_MAX_ATTEMPTS`` tries; every failure is a one-line :class:`~egopool.errors.ObjectStoreError`
naming the URI and the fix (O3), a lost condition :class:`~egopool.storage.PreconditionFailed`.
"""

from __future__ import annotations

import builtins
import functools
import os
import threading
from datetime import timedelta
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from ..errors import EgopoolError, FormatError, ObjectStoreError, install_hint
from ._s3 import S3Settings, note_client_made, translate_s3_error
from .store import MAX_GET_BYTES, ObjectMeta, PreconditionFailed, PutMode, Store, check_key, join_key

if TYPE_CHECKING:
    from .bucket import Bucket

__all__ = ["S3Store"]

#: objects above this size are put as a multipart upload (invisible until complete)
MULTIPART_THRESHOLD = 64 << 20

#: (endpoint, bucket) -> whether the server honours conditional writes, probed once per process (issue 24)
_CONDITIONAL: dict[tuple[str, str], bool] = {}

#: what obstore raises for a missing object (a builtin FileNotFoundError; its NotFoundError class too)
_NOT_FOUND: tuple[type[BaseException], ...] = (FileNotFoundError,)

_clients: dict[tuple[S3Settings, str], Any] = {}
_clients_lock = threading.Lock()


def _obstore() -> Any:
    try:
        import obstore
    except ImportError as exc:
        raise EgopoolError("s3:// stores need obstore", hint=install_hint("s3")) from exc
    return obstore


#: the process that first made an obstore client (its runtime's threads live there only)
_runtime_pid: int | None = None


def obstore_usable() -> bool:
    """False in a process forked after its parent made an obstore client: obstore's runtime (its threads) does
    not survive a fork, and a request there waits forever."""
    return _runtime_pid is None or _runtime_pid == os.getpid()


def _client(settings: S3Settings, bucket: str) -> Any:
    """The process's obstore ``S3Store`` of ``bucket`` with ``settings`` (made once; thread-safe).

    Raises
    ------
    EgopoolError
        This process was forked after its parent used obstore (:func:`obstore_usable`): one line, not a hang.
    """
    global _runtime_pid
    if not obstore_usable():
        raise EgopoolError("this process was forked after its parent reached an s3:// store; the S3 client cannot "
                           "be used after a fork", hint="start worker processes with the 'spawn' method (e.g. "
                           "DataLoader(multiprocessing_context='spawn')), or open the store in the worker")
    with _clients_lock:
        if _runtime_pid is None:
            _runtime_pid = os.getpid()
        client = _clients.get((settings, bucket))
        if client is None:
            _obstore()
            from obstore.store import S3Store as ObS3Store

            kw: dict[str, Any] = {"region": settings.region or "us-east-1"}
            if settings.endpoint:
                kw["endpoint"] = f"{settings.scheme}://{settings.endpoint}"
            if settings.access_key and settings.secret_key:
                kw.update(access_key_id=settings.access_key, secret_access_key=settings.secret_key)
                if settings.session_token:
                    kw["session_token"] = settings.session_token
            else:  # the AWS SDK's chain (AWS_PROFILE, instance roles): boto3 finds the credentials
                from obstore.auth.boto3 import Boto3CredentialProvider

                import boto3

                try:
                    kw["credential_provider"] = Boto3CredentialProvider(boto3.session.Session())
                except ValueError:  # boto3 found none: "Received None from session.get_credentials" (a traceback)
                    raise ObjectStoreError("no S3 credentials found (environment, AWS profile or instance role)",
                                           uri=f"s3://{bucket}",
                                           cause="denied",
                                           hint="set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
                                           ) from None
            client = ObS3Store(
                bucket, **kw,
                client_options={"allow_http": settings.scheme == "http",
                                "connect_timeout": f"{settings.connect_timeout}s",
                                "timeout": f"{settings.request_timeout}s"},
                retry_config={"max_retries": max(0, settings.max_attempts - 1),
                              "retry_timeout": timedelta(seconds=settings.request_timeout * settings.max_attempts)})
            _clients[(settings, bucket)] = client
            note_client_made()
        return client


class S3Store(Store):
    """Objects under ``s3://bucket/prefix`` (:meth:`ensure_bucket` creates a missing bucket).

    Parameters
    ----------
    uri:
        ``s3://bucket/prefix``; the connection comes from the AWS environment (:class:`~egopool.storage.S3Settings`).
    settings:
        The connection (None: :meth:`S3Settings.from_env`).

    Raises
    ------
    EgopoolError
        obstore missing (``pip install 'egopool[s3]'``); FormatError: a malformed URI or setting.
    """

    def __init__(self, uri: str, *, settings: S3Settings | None = None) -> None:
        from .bucket import parse_bucket_uri

        self.name, self.prefix = parse_bucket_uri(uri)
        self.uri = f"s3://{self.name}/{self.prefix}" if self.prefix else f"s3://{self.name}"
        try:
            self.settings = settings or S3Settings.from_env()
        except EgopoolError as exc:  # name the URI that needed the setting
            raise FormatError(exc.message, path=self.uri, hint=exc.hint) from exc
        self._ob = _obstore()
        global _NOT_FOUND
        _NOT_FOUND = (FileNotFoundError, self._ob.exceptions.NotFoundError)
        self._store = _client(self.settings, self.name)

    def child(self, prefix: str) -> S3Store:
        return S3Store(f"s3://{self.name}/{join_key(self.prefix, check_key(prefix))}", settings=self.settings)

    def _path(self, key: str) -> str:
        return join_key(self.prefix, check_key(key))

    def _fail(self, exc: BaseException, key: str, action: str) -> EgopoolError:
        """One line naming the URI, the cause and the fix for what obstore raised (its debug dump names the
        kind of HTTP failure: ``Connect`` is an endpoint that refuses, ``Timeout`` one that does not answer)."""
        exceptions = self._ob.exceptions
        if isinstance(exc, (exceptions.AlreadyExistsError, exceptions.PreconditionError)):
            return PreconditionFailed(f"{action} {self.url(key)}: the object exists or changed meanwhile",
                                      path=self.url(key))
        text = str(exc)
        head = text.split("Debug source:")[0].strip()
        where = self.settings.describe()
        uri = self.url(key)
        if "kind: Connect" in text or "ConnectionRefused" in text or "dns error" in text:
            return ObjectStoreError(f"{action} failed: cannot reach the S3 endpoint {where}", uri=uri,
                                    cause="unreachable",
                                    hint="set AWS_ENDPOINT_URL to a running S3 service (e.g. http://127.0.0.1:8333)")
        if "kind: Timeout" in text or "TimedOut" in text:
            return ObjectStoreError(f"{action} failed: {where} did not answer in time", uri=uri, cause="timeout",
                                    hint="check the network; EGOPOOL_S3_REQUEST_TIMEOUT / AWS_MAX_ATTEMPTS set how "
                                         "long to wait")
        if "kind: Body" in text or "IncompleteMessage" in text or "connection closed" in text:
            return ObjectStoreError(f"{action} failed: {where} closed the connection mid-answer", uri=uri,
                                    cause="interrupted", hint="run the command again; a store that keeps doing it is "
                                                        "overloaded or failing")
        return translate_s3_error(RuntimeError(" ".join(head.split())), uri, self.settings, action=f"{action} failed")

    @functools.cached_property
    def bucket(self) -> Bucket:
        """The boto3 :class:`~egopool.storage.bucket.Bucket` of this prefix (bucket administration only:
        creating the bucket, incomplete multipart uploads)."""
        from .bucket import Bucket

        return Bucket(self.uri, settings=self.settings)

    @property
    def conditional_writes(self) -> bool:
        """Whether this S3 server honours ``If-None-Match: *`` and ``If-Match`` (asked once per endpoint and
        bucket in a process, and only by commands that write: 4 requests on a probe object
        ``.egopool/probe/<random>`` at the bucket's root, deleted at once). A gateway that ignores the headers
        (``rclone serve s3``) lets the second ``CREATE`` and a stale ``UPDATE`` succeed: False.

        Raises
        ------
        ObjectStoreError
            The bucket cannot be written at all (missing, unreachable, no permission).
        """
        where = (self.settings.describe(), self.name)
        known = _CONDITIONAL.get(where)
        if known is None:
            known = _CONDITIONAL[where] = self._probe_conditional_writes()
        return known

    def _probe_conditional_writes(self) -> bool:
        import uuid

        root = S3Store(f"s3://{self.name}", settings=self.settings)
        probe = f".egopool/probe/{uuid.uuid4().hex}"
        version = root.put(probe, b"1", mode=PutMode.CREATE)
        try:
            try:
                root.put(probe, b"2", mode=PutMode.CREATE)
                return False
            except PreconditionFailed:
                pass
            try:
                root.put(probe, b"3", mode=PutMode.UPDATE, version=f'"{version.strip(chr(34))}0"')
                return False
            except PreconditionFailed:
                return True
        finally:
            root.delete([probe])

    def require_bucket(self) -> None:
        """Raise when the bucket does not exist (one HEAD of the bucket). Some gateways (SeaweedFS) answer a
        GET in a missing bucket as a missing object and create the bucket on a PUT: a command that must not
        write into a mistyped bucket calls this first.

        Raises
        ------
        ObjectStoreError
            ``cause="no_bucket"``, naming the URI, the endpoint and the fix.
        """
        from ._path import ObjectPath, require_bucket

        require_bucket(ObjectPath(self.uri, self.settings))

    def ensure_bucket(self) -> None:
        """Create the bucket when it does not exist (boto3: object_store cannot create buckets)."""
        self.bucket.ensure_bucket()

    # -- reads -------------------------------------------------------------------------------------
    def get(self, key: str, *, limit: int = MAX_GET_BYTES) -> tuple[bytes, str] | None:
        path = self._path(key)
        try:
            r = self._ob.get(self._store, path)  # one GET: the size is known before the body is read
            if int(r.meta["size"]) > limit:
                raise FormatError(f"the object is {r.meta['size']} bytes, more than the {limit} egopool reads",
                                  path=self.url(key), hint="this is not the object the format expects; restore it")
            return bytes(r.bytes()), str(r.meta["e_tag"])
        except _NOT_FOUND:
            return None
        except EgopoolError:
            raise
        except Exception as exc:
            raise self._fail(exc, key, "GET") from exc

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        path = self._path(key)
        try:
            size = int(self._ob.head(self._store, path)["size"])
            end = min(start + length, size)
            if end <= start:
                return b""
            return bytes(self._ob.get_range(self._store, path, start=start, end=end))
        except _NOT_FOUND as exc:
            raise FileNotFoundError(self.url(key)) from exc
        except Exception as exc:
            raise self._fail(exc, key, "GET") from exc

    def get_ranges(self, key: str, ranges: builtins.list[tuple[int, int]]) -> builtins.list[bytes]:
        """Several ``(start, length)`` ranges of ``key`` in one call (object_store coalesces near ranges)."""
        try:
            got = self._ob.get_ranges(self._store, self._path(key), starts=[s for s, _ in ranges],
                                      ends=[s + n for s, n in ranges])
            return [bytes(g) for g in got]
        except _NOT_FOUND as exc:
            raise FileNotFoundError(self.url(key)) from exc
        except Exception as exc:
            raise self._fail(exc, key, "GET") from exc

    def open_input(self, key: str) -> BinaryIO:
        from ._path import ObjectPath, seekable_reader

        native = ObjectPath(self.url(check_key(key)), self.settings).open_input()
        return cast(BinaryIO, seekable_reader(native))

    def head(self, key: str) -> ObjectMeta | None:
        path = self._path(key)
        try:
            r = self._ob.get(self._store, path, options={"head": True})
        except _NOT_FOUND:
            return None
        except Exception as exc:
            raise self._fail(exc, key, "HEAD") from exc
        sha = (r.attributes or {}).get("sha256")
        return ObjectMeta(key, int(r.meta["size"]), str(r.meta["e_tag"]), str(sha) if sha else None)

    # -- listing -----------------------------------------------------------------------------------
    def _rel(self, path: str) -> str:
        return path[len(self.prefix) + 1:] if self.prefix else path

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        # object_store lists by path segments: list the directory part, filter the rest of the prefix
        base, _, _ = prefix.rpartition("/")
        root = join_key(self.prefix, base) if base else self.prefix
        try:
            batches = self._ob.list(self._store, root or None, chunk_size=1000)
            out = []
            for batch in batches:
                for m in batch:
                    key = self._rel(str(m["path"]))
                    if key.startswith(prefix):
                        out.append(ObjectMeta(key, int(m["size"]), str(m["e_tag"])))
        except Exception as exc:
            raise self._fail(exc, prefix, "LIST") from exc
        out.sort(key=lambda m: m.key)
        return iter(out)

    def list_dir(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[ObjectMeta]]:
        if prefix and not prefix.endswith("/"):
            raise FormatError(f"list_dir takes a prefix ending in '/', not {prefix!r}")
        root = join_key(self.prefix, prefix.rstrip("/")) if prefix else self.prefix
        try:
            r = self._ob.list_with_delimiter(self._store, root or None)
        except Exception as exc:
            raise self._fail(exc, prefix, "LIST") from exc
        dirs = sorted(self._rel(str(p)).rstrip("/") + "/" for p in r["common_prefixes"])
        objs = sorted((ObjectMeta(self._rel(str(m["path"])), int(m["size"]), str(m["e_tag"])) for m in r["objects"]),
                      key=lambda m: m.key)
        return dirs, objs

    # -- writes ------------------------------------------------------------------------------------
    def _mode(self, mode: PutMode, version: str | None) -> Any:
        if mode is PutMode.CREATE:
            return "create"
        if mode is PutMode.UPDATE:
            if version is None:
                raise ValueError("PutMode.UPDATE needs the version read")
            return {"e_tag": version}
        return "overwrite"

    def put(self, key: str, data: bytes, *, mode: PutMode = PutMode.OVERWRITE, version: str | None = None,
            sha256: str | None = None) -> str:
        ob_mode = self._mode(mode, version)
        path = self._path(key)
        try:
            r = self._ob.put(self._store, path, data, mode=ob_mode,
                             attributes={"sha256": sha256} if sha256 else None)
        except Exception as exc:
            if mode is PutMode.UPDATE and isinstance(exc, _NOT_FOUND):
                raise PreconditionFailed(f"PUT {self.url(key)}: the object is gone", path=self.url(key)) from exc
            raise self._fail(exc, key, "PUT") from exc
        return str(r["e_tag"])

    def put_file(self, key: str, path: Path, *, mode: PutMode = PutMode.OVERWRITE, sha256: str | None = None,
                 move: bool = False, synced: bool = False) -> str:
        if mode is PutMode.UPDATE:
            raise ValueError("put_file takes CREATE or OVERWRITE; UPDATE is for put()")
        check_key(key)
        size = Path(path).stat().st_size
        if mode is PutMode.CREATE or size <= MULTIPART_THRESHOLD:
            # one PUT (a multipart upload cannot carry If-None-Match everywhere): a conditional put is one request
            if mode is PutMode.CREATE and size > MULTIPART_THRESHOLD and self.exists(key):
                raise PreconditionFailed(f"{self.url(key)} exists already", path=self.url(key))
            if size <= MULTIPART_THRESHOLD:
                version = self.put(key, Path(path).read_bytes(), mode=mode, sha256=sha256)
                if move:
                    Path(path).unlink(missing_ok=True)
                return version
        try:
            self._ob.put(self._store, self._path(key), Path(path), chunk_size=MULTIPART_THRESHOLD,
                         attributes={"sha256": sha256} if sha256 else None)
        except Exception as exc:
            raise self._fail(exc, key, "PUT") from exc
        if move:
            Path(path).unlink(missing_ok=True)
        meta = self.head(key)
        return "" if meta is None else meta.version

    def delete(self, keys: Iterable[str]) -> None:
        paths = [self._path(k) for k in keys]
        for i in range(0, len(paths), 1000):
            try:
                self._ob.delete(self._store, paths[i:i + 1000])
            except _NOT_FOUND:
                continue
            except Exception as exc:
                raise self._fail(exc, paths[i], "DELETE") from exc
