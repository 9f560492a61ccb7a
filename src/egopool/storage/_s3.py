"""The S3 connection: settings from the AWS environment, one ``pyarrow.fs.S3FileSystem`` per setting,
and the one boundary where its errors become :class:`~egopool.errors.EgopoolError` (docs/decisions.md O2, O3).

Settings (read when an ``s3://`` location is first used in a process; Ray workers read their own):

* ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``: an S3-compatible endpoint
  (``http://127.0.0.1:8333``); the scheme picks http or https. Unset: AWS itself.
* ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (/ ``AWS_SESSION_TOKEN``); unset: the AWS
  SDK's default chain (``AWS_PROFILE`` in ``~/.aws/credentials``, instance roles...).
* ``AWS_REGION``, else ``AWS_DEFAULT_REGION``.
* ``AWS_PROFILE`` (or ``AWS_DEFAULT_PROFILE``) must name a section of ``~/.aws/credentials`` or
  ``~/.aws/config`` (``AWS_SHARED_CREDENTIALS_FILE`` / ``AWS_CONFIG_FILE``): a missing one is
  refused here in one line (docs/decisions.md O21) rather than left to the SDKs (boto3 raises, pyarrow
  goes on unsigned and is refused as "access denied").
* ``EGOPOOL_S3_CONNECT_TIMEOUT`` (s, default 10), ``EGOPOOL_S3_REQUEST_TIMEOUT`` (s, default 60:
  a request that receives nothing for that long fails) and ``AWS_MAX_ATTEMPTS`` (default 3,
  the AWS standard retry strategy): a stalled connection cannot hang a reader.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..errors import EgopoolError, FormatError, ObjectStoreError

__all__ = ["S3Settings", "s3_filesystem", "translate_s3_error"]

_DEFAULT_CONNECT_TIMEOUT = 10.0
_DEFAULT_REQUEST_TIMEOUT = 60.0
_DEFAULT_ATTEMPTS = 3


def _check_profile(env: dict[str, str]) -> None:
    """Raise when ``AWS_PROFILE`` names no profile of the shared credentials / config files (O21)."""
    import configparser

    name = (env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "").strip()
    if not name:
        return
    var = "AWS_PROFILE" if env.get("AWS_PROFILE", "").strip() else "AWS_DEFAULT_PROFILE"
    home = os.path.expanduser("~")
    creds = env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(home, ".aws", "credentials")
    config = env.get("AWS_CONFIG_FILE") or os.path.join(home, ".aws", "config")
    for path, section in ((creds, name), (config, name if name == "default" else f"profile {name}")):
        parser = configparser.RawConfigParser()
        try:
            parser.read(os.path.expanduser(path), encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError, OSError):
            continue  # the SDK reports a broken file itself
        if parser.has_section(section):
            return
    raise FormatError(f"{var}={name!r} is not a profile of {creds} or {config}",
                      hint=f"unset {var}, add [{name}] to {creds}, or set AWS_ACCESS_KEY_ID and "
                           "AWS_SECRET_ACCESS_KEY")


def _float_env(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise FormatError(f"{name}={raw!r} is not a positive number of seconds", hint=f"unset {name} or give e.g. 30")
    return value


@dataclass(frozen=True)
class S3Settings:
    """How to reach S3: endpoint, credentials, region, timeouts (from the environment, :meth:`from_env`).

    Attributes
    ----------
    endpoint:
        ``host:port`` of an S3-compatible service, or None for AWS.
    scheme:
        ``"http"`` or ``"https"``.
    region, access_key, secret_key, session_token:
        As given by the environment (None: the AWS SDK's default chain).
    connect_timeout, request_timeout:
        Seconds.
    max_attempts:
        Tries per request (AWS standard retry strategy).
    """

    endpoint: str | None = None
    scheme: str = "https"
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    connect_timeout: float = _DEFAULT_CONNECT_TIMEOUT
    request_timeout: float = _DEFAULT_REQUEST_TIMEOUT
    max_attempts: int = _DEFAULT_ATTEMPTS

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> S3Settings:
        """Read the settings from ``env`` (default ``os.environ``).

        Raises
        ------
        FormatError
            A malformed endpoint URL, timeout or ``AWS_MAX_ATTEMPTS``; an ``AWS_PROFILE`` that names no
            profile.
        """
        env = dict(os.environ if env is None else env)
        _check_profile(env)
        url = (env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or "").strip()
        endpoint, scheme = None, "https"
        if url:
            parts = urlsplit(url if "://" in url else f"https://{url}")
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise FormatError(f"AWS_ENDPOINT_URL={url!r} is not an http(s) URL",
                                  hint="give the S3 endpoint as e.g. http://127.0.0.1:8333")
            endpoint, scheme = parts.netloc, parts.scheme
        attempts_raw = env.get("AWS_MAX_ATTEMPTS", "").strip()
        try:
            attempts = int(attempts_raw) if attempts_raw else _DEFAULT_ATTEMPTS
        except ValueError:
            attempts = 0
        if attempts < 1:
            raise FormatError(f"AWS_MAX_ATTEMPTS={attempts_raw!r} is not a positive integer",
                              hint="unset it or give e.g. 3")
        return cls(endpoint=endpoint, scheme=scheme,
                   region=(env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "").strip() or None,
                   access_key=env.get("AWS_ACCESS_KEY_ID") or None, secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
                   session_token=env.get("AWS_SESSION_TOKEN") or None,
                   connect_timeout=_float_env(env, "EGOPOOL_S3_CONNECT_TIMEOUT", _DEFAULT_CONNECT_TIMEOUT),
                   request_timeout=_float_env(env, "EGOPOOL_S3_REQUEST_TIMEOUT", _DEFAULT_REQUEST_TIMEOUT),
                   max_attempts=attempts)

    def describe(self) -> str:
        """Where requests go, for messages (``http://127.0.0.1:8333`` or ``AWS``)."""
        return f"{self.scheme}://{self.endpoint}" if self.endpoint else "AWS"


_lock = threading.Lock()
_cache: dict[S3Settings, Any] = {}


def _forget_clients_after_fork() -> None:
    """A forked child makes its own S3 client: the parent's keeps open connections, which two children would
    otherwise share (their answers interleave: one child read an empty info.json, issue 24)."""
    global _lock
    _lock = threading.Lock()
    _cache.clear()


os.register_at_fork(after_in_child=_forget_clients_after_fork)


def s3_filesystem(settings: S3Settings) -> Any:
    """The process's ``pyarrow.fs.S3FileSystem`` for ``settings`` (one per distinct setting, made on first use).

    Buckets are never created or deleted through it (``allow_bucket_creation=False``).
    """
    with _lock:
        fs = _cache.get(settings)
        if fs is None:
            from pyarrow import fs as pafs

            opts: dict[str, Any] = dict(region=settings.region, scheme=settings.scheme,
                                        connect_timeout=settings.connect_timeout,
                                        request_timeout=settings.request_timeout,
                                        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=settings.max_attempts))
            if settings.endpoint:
                opts["endpoint_override"] = settings.endpoint
            if settings.access_key and settings.secret_key:
                opts.update(access_key=settings.access_key, secret_key=settings.secret_key,
                            session_token=settings.session_token)
            fs = _cache[settings] = pafs.S3FileSystem(**{k: v for k, v in opts.items() if v is not None})
            note_client_made()
        return fs



_made = False


def clients_made() -> bool:
    """True once this process made a native S3 client (pyarrow.fs here, obstore in :mod:`.s3_store`)."""
    return _made


def note_client_made() -> None:
    """Record that a native S3 client exists (:func:`clients_made`)."""
    global _made
    _made = True


_DENIED = re.compile(r"ACCESS_DENIED|AccessDenied|INVALID_ACCESS_KEY_ID|InvalidAccessKeyId|SIGNATURE_DOES_NOT_MATCH|"
                     r"SignatureDoesNotMatch|UNRECOGNIZED_CLIENT|MISSING_AUTHENTICATION_TOKEN|INVALID_CLIENT_TOKEN_ID|"
                     r"No response body\.?$|HTTP response code: 403|Forbidden")
_NO_BUCKET = re.compile(r"NO_SUCH_BUCKET|NoSuchBucket|[Bb]ucket '[^']*' not found|does not exist")
_TIMEOUT = re.compile(r"[Tt]imed? ?out|REQUEST_TIMEOUT|curlCode: 28")
_UNREACHABLE = re.compile(r"curlCode: (6|7)\b|Couldn't connect|Could not connect|Could not resolve|Connection refused|Failed to connect")
#: the endpoint answered, then the connection ended mid-answer (curl 52 empty reply, 56 receive failure, 18 partial)
_CUT = re.compile(r"curlCode: (18|52|56)\b|Recv failure|Connection reset|Empty reply|transfer closed|"
                  r"connection closed|IncompleteRead|Partial file")


def translate_s3_error(exc: BaseException, uri: str, settings: S3Settings, action: str = "cannot read") -> EgopoolError:
    """One line naming ``uri``, the cause and the fix, for an error pyarrow.fs raised on an S3 request.

    Returns (never raises) an :class:`~egopool.errors.ObjectStoreError`; an ``EgopoolError`` is returned as is.
    """
    if isinstance(exc, EgopoolError):
        return exc
    text = " ".join(str(exc).split()) or type(exc).__name__
    where = settings.describe()
    if _NO_BUCKET.search(text):
        return ObjectStoreError(f"{action}: the bucket does not exist at {where}", uri=uri, cause="no_bucket",
                                hint="check the bucket name, and AWS_ENDPOINT_URL / AWS_REGION for where it is")
    if _DENIED.search(text) and "NETWORK" not in text:
        return ObjectStoreError(f"{action}: access denied by {where}", uri=uri, cause="denied",
                                hint="set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) to keys "
                                     "that may read this bucket")
    if _TIMEOUT.search(text):
        return ObjectStoreError(f"{action}: {where} did not answer in time ({text[:160]})", uri=uri, cause="timeout",
                                hint="check the network; EGOPOOL_S3_REQUEST_TIMEOUT / AWS_MAX_ATTEMPTS set how "
                                     "long to wait")
    if _CUT.search(text):
        return ObjectStoreError(f"{action}: {where} closed the connection mid-answer ({text[:160]})", uri=uri,
                                cause="interrupted",
                                hint="run the command again; a store that keeps doing it is overloaded or failing "
                                     "(AWS_MAX_ATTEMPTS sets how often a request is tried)")
    if _UNREACHABLE.search(text) or "NETWORK_CONNECTION" in text:
        return ObjectStoreError(f"{action}: cannot reach the S3 endpoint {where}", uri=uri, cause="unreachable",
                                hint="set AWS_ENDPOINT_URL to a running S3 service (e.g. http://127.0.0.1:8333)")
    return ObjectStoreError(f"{action}: {text[:240]}", uri=uri,
                            hint=f"the S3 service at {where} refused the request")
