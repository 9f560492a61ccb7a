"""The one exception hierarchy of egopool (STYLE habit 1).

::

    EgopoolError                     root; the CLI prints its one-line message
    ├── FormatError                  a task directory / meta file is not what the spec says
    │   └── LegacyLayoutError        v1.0 per-session layout (file_format.md §1), not readable
    ├── LayoutError                  paths, numbering, enumeration (file_format.md §2)
    │   └── EpisodeNotFoundError     no episode N in a task (also a FileNotFoundError)
    ├── SchemaError                  column names, declarations, row values (multi_device_storage.md §2.4, §6)
    ├── CodecError                   video / depth / force-matrix encode or decode failed
    ├── ConflictError                devices that cannot be recorded together (§5.1)
    ├── DeviceError                  a camera / RealSense / device spec could not be opened or failed while recording
    ├── LockError                    the task lock could not be taken
    ├── RegistryError                the local registry pipeline.db could not be read or written
    ├── OperationError               a maintenance operation (delete, migrate, repair) could not complete
    ├── StorageError                 the operating system refused a write (disk full, read-only, not a directory)
    │   └── ObjectStoreError         an object store (s3://) refused or did not answer: endpoint, credentials, bucket
    ├── MetaUpdateError              an episode was saved but info.json / stats.json could not be updated
    ├── TransferError                packing or uploading an episode failed (network, server answer)
    └── UploadRejectedError          the pooling server refused an upload (HTTP status, reason, findings)

    ValueChangedWarning (a RuntimeWarning, not an error): a value was stored otherwise than
    given because the format cannot hold it (rejected sample, saturated force cell, clipped
    depth); the episode's ``drop_stats`` counts it (egopool.meta.drop_stats)

Every error composes its own message from structured fields, names the file or
column at fault and, where there is one, says what to do about it.
"""

from __future__ import annotations

import contextlib
import errno as _errno
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, TypeAlias

__all__ = [
    "CodecError",
    "ConflictError",
    "DeviceError",
    "EgopoolError",
    "EpisodeNotFoundError",
    "FormatError",
    "LayoutError",
    "LegacyLayoutError",
    "LockError",
    "MetaUpdateError",
    "ObjectStoreError",
    "OperationError",
    "RegistryError",
    "SchemaError",
    "StorageError",
    "TransferError",
    "UploadRejectedError",
    "ValueChangedWarning",
    "ErrorPath",
    "ObjectLocation",
]


class ObjectLocation(Protocol):
    """A place in an object store, named by its URI (:class:`egopool.storage.ObjectPath` is one).

    It is not ``os.PathLike`` on purpose: an error keeps it as given and names it by its URI,
    never folding ``s3://bucket/key`` into a local path (``s3:/bucket/key``).
    """

    @property
    def uri(self) -> str: ...


#: What an error can name as its file: a local path (text or path-like), an ``s3://`` URI as
#: text, or an :class:`ObjectLocation` (egopool.storage's ``ObjectPath``).
ErrorPath: TypeAlias = str | os.PathLike[str] | ObjectLocation


class EgopoolError(Exception):
    """Root of every error egopool raises on purpose.

    Parameters
    ----------
    message:
        What went wrong, in one line.
    path:
        The file or directory at fault, if any.
    hint:
        What the user can do about it, if anything.
    """

    def __init__(self, message: str, *, path: ErrorPath | None = None, hint: str | None = None) -> None:
        self.message = message
        self.path: Path | str | ObjectLocation | None = _as_path(path)
        self.hint = hint
        super().__init__(self.one_line())

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle without calling ``__init__`` again (subclasses take other arguments).

        A unit that raises on a Ray worker comes back to the driver pickled; without this an
        :class:`EpisodeNotFoundError` (``__init__(task_dir, index)``) could not be rebuilt and
        the driver saw Ray's "failed to deserialize exception" instead of the error.
        """
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))

    def one_line(self) -> str:
        """The message as the CLI prints it: ``<path>: <message> (<hint>)``."""
        text = self.message
        if self.path is not None:
            text = f"{self.path}: {text}"
        if self.hint:
            text = f"{text} ({self.hint})"
        return text


def _as_path(path: ErrorPath | None) -> Path | str | ObjectLocation | None:
    """``path`` as a :class:`Path`; an object-store location (``s3://...`` text or an
    ``egopool.storage.ObjectPath``, which has no ``__fspath__``) is kept as given, so it is named
    as such and not folded into a local path (``s3:/bucket``)."""
    if path is None:
        return None
    if isinstance(path, str):
        return path if "://" in path else Path(path)
    if isinstance(path, os.PathLike):
        return Path(path)
    return path


def _rebuild(cls: type[EgopoolError], args: tuple[Any, ...], state: dict[str, Any]) -> EgopoolError:
    """Unpickle an :class:`EgopoolError`: the same class, ``args`` and attributes, ``__init__`` not called."""
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class FormatError(EgopoolError):
    """A task directory or meta file does not follow file_format.md (unknown ``format``, bad JSON...)."""


class LegacyLayoutError(FormatError):
    """The directory is the v1.0 per-session layout (``<task>_NNNNNN`` subdirectories, no ``format``).

    The spec does not define its contents (DESIGN §7), so egopool refuses to guess.
    """


class LayoutError(EgopoolError):
    """Paths or numbering are inconsistent (file_format.md §2)."""


class EpisodeNotFoundError(LayoutError, FileNotFoundError):
    """There is no episode with global index N in the task."""

    def __init__(self, task_dir: ErrorPath, index: int) -> None:
        self.index = index
        super().__init__(f"no episode {index} in task", path=task_dir, hint="run `egopool ls TASK` to list episodes")


class SchemaError(EgopoolError):
    """A column name, declaration or value breaks multi_device_storage.md §2.4 / §6."""

    def __init__(self, message: str, *, column: str | None = None, path: ErrorPath | None = None,
                 hint: str | None = None) -> None:
        self.column = column
        if column is not None:
            message = f"column {column!r}: {message}"
        super().__init__(message, path=path, hint=hint)


class CodecError(EgopoolError):
    """A video, depth or force-matrix stream could not be encoded or decoded."""


class ConflictError(EgopoolError):
    """Devices that the conflict matrix (multi_device_storage.md §5.1) forbids together."""


class DeviceError(EgopoolError):
    """A device could not be found, opened or read: a ``--device`` spec, an FFmpeg input device,
    a RealSense camera or recording. The message names the device (and the file for a recording)."""


class LockError(EgopoolError):
    """The task lock (DESIGN §5) could not be taken."""


class RegistryError(EgopoolError):
    """The local registry ``pipeline.db`` (SQLite, DESIGN §1) could not be opened, read or written."""


class OperationError(EgopoolError):
    """A maintenance operation (delete, migrate, repair) failed part-way; says exactly what is where.

    Parameters
    ----------
    message:
        What failed and what state the task was left in, in one line.
    details:
        One entry per file that could not be removed or restored (also in the message).
    """

    def __init__(self, message: str, *, details: list[str] | None = None, path: ErrorPath | None = None,
                 hint: str | None = None) -> None:
        self.details = list(details or [])
        super().__init__(message, path=path, hint=hint)


_TEMP_NAME_RE = re.compile(r"^\.(?P<final>.+)\.[0-9a-f]{8}\.tmp$")

#: errno -> what the user can do about it.
_OS_HINTS = {
    _errno.ENOSPC: "free disk space or choose another location, then run it again",
    _errno.EDQUOT: "free disk space within your quota and run it again",
    _errno.EROFS: "choose a location on a writable file system",
    _errno.EACCES: "choose a location you can write to, or get write permission for it",
    _errno.EPERM: "choose a location you can write to, or get write permission for it",
    _errno.ENOTDIR: "one of its folders is a file; choose another path",
    _errno.EISDIR: "move that directory away or choose another path",
    _errno.EFBIG: "a file size limit was reached (ulimit -f, or the file system's largest file)",
}


class StorageError(EgopoolError):
    """The operating system refused to write a file: disk full, read-only, no permission, not a directory.

    Attributes
    ----------
    errno:
        The ``errno`` of the underlying :class:`OSError` (None when it had none).
    """

    def __init__(self, message: str, *, path: ErrorPath | None = None, hint: str | None = None,
                 errno: int | None = None) -> None:
        self.errno = errno
        super().__init__(message, path=path, hint=hint)

    @classmethod
    def from_os_error(cls, exc: OSError, path: ErrorPath | None = None, *, action: str = "cannot write",
                      hint: str | None = None) -> StorageError:
        """Translate an :class:`OSError` (also PyAV's ``av.error.OSError``) into one line naming the path.

        ``path`` is used when the exception does not name a file itself. A local path is looked
        at (a dot-temp is named as the file it becomes, a file standing where a directory belongs
        is named); an object-store location (an ``s3://`` text or ``ObjectPath``) is named as given.
        """
        code = exc.errno if isinstance(exc.errno, int) else None
        reason = exc.strerror or (os.strerror(code) if code else None) or str(exc) or type(exc).__name__
        named = _as_path(exc.filename if isinstance(exc.filename, (str, Path)) and str(exc.filename) else path)
        if isinstance(named, Path):  # a dot-temp being written (_atomic.temp_path_for): name the file it becomes
            m = _TEMP_NAME_RE.match(named.name)
            named = named.with_name(m["final"]) if m else named
            if code == _errno.ENOTDIR:
                blocker = next((p for p in (named, *named.parents) if p.exists() and not p.is_dir()), None)
                if blocker is not None:
                    return cls(f"{action}: this is a file, where a directory is needed", path=blocker,
                               hint=hint or "choose a directory or a path that does not exist yet", errno=code)
        return cls(f"{action}: {reason}", path=named, hint=hint or _OS_HINTS.get(code or -1), errno=code)

    @classmethod
    @contextlib.contextmanager
    def guard(cls, path: ErrorPath | None = None, *, action: str = "cannot write") -> Iterator[None]:
        """Context manager: an :class:`OSError` inside becomes a :class:`StorageError` naming ``path``.

        An :class:`EgopoolError` passes unchanged (``EpisodeNotFoundError`` is also a
        ``FileNotFoundError``).
        """
        try:
            yield
        except EgopoolError:
            raise
        except OSError as exc:
            raise cls.from_os_error(exc, path, action=action) from exc


class ObjectStoreError(StorageError):
    """An object store (``s3://bucket/key``) refused a request or did not answer in time.

    The message names the URI and the cause (no such bucket, access denied, endpoint
    unreachable, timed out) and the hint names the environment variable that fixes it.

    Attributes
    ----------
    uri:
        The ``s3://`` location of the request.
    cause:
        ``"no_bucket"``, ``"denied"``, ``"unreachable"``, ``"timeout"``, ``"interrupted"`` (the connection ended
        mid-answer) or ``"error"``.
    """

    def __init__(self, message: str, *, uri: str, cause: str = "error", hint: str | None = None) -> None:
        self.uri = uri
        self.cause = cause
        super().__init__(message, path=uri, hint=hint)


class MetaUpdateError(EgopoolError):
    """Episode N is saved (data, videos and its ``meta/episodes`` row), but a task meta file was not updated.

    The episode stands (its row is the commit record, decisions.md #5); what is stale is
    named in the message with the command that brings it up to date.

    Attributes
    ----------
    index:
        Global N of the saved episode.
    result:
        What :meth:`~egopool.write.episode_writer.EpisodeWriter.finish` published (an
        ``EpisodeResult``: N, rows, paths), so a caller can go on; None where no episode object exists.
    """

    def __init__(self, index: int, message: str, *, path: ErrorPath | None = None,
                 hint: str | None = None) -> None:
        self.index = index
        self.result: Any = None
        super().__init__(f"episode {index} was saved, but {message}", path=path, hint=hint)


class ValueChangedWarning(RuntimeWarning):
    """Values of an episode were stored otherwise than given (DESIGN §8: never without a trace).

    Raised as a warning by :meth:`egopool.writer.EpisodeWriter.finish` and the recorder, one
    per kind of change; the counts are in the episode's ``drop_stats``
    (:mod:`egopool.meta.drop_stats`) and ``egopool validate`` reports them.
    """
class TransferError(EgopoolError):
    """Packing or uploading an episode failed (file_format.md §9): the network, the server's answer.

    Attributes
    ----------
    status:
        The HTTP status the server answered (None for a network failure or a local problem).
    """

    def __init__(self, message: str, *, status: int | None = None, path: ErrorPath | None = None,
                 hint: str | None = None) -> None:
        self.status = status
        super().__init__(message, path=path, hint=hint)


class UploadRejectedError(EgopoolError):
    """The pooling server refuses an upload; the HTTP answer is built from these fields.

    Attributes
    ----------
    status:
        HTTP status: 400 malformed or hostile zip, 401/403 token, 409 conflict, 413 too large,
        422 the slice breaks the format (``findings`` holds the validator's findings), 507 disk full.
    reason:
        A short machine-readable code (``path_traversal``, ``manifest_mismatch``, ``validation``...).
    findings:
        Validator findings as dicts (``rule``, ``severity``, ``path``, ``message``), when any.
    """

    def __init__(self, status: int, reason: str, message: str, *, findings: list[dict[str, str]] | None = None,
                 hint: str | None = None) -> None:
        self.status = int(status)
        self.reason = reason
        self.findings = list(findings or [])
        super().__init__(message, hint=hint)

    def to_dict(self) -> dict[str, object]:
        """The JSON body of the HTTP answer: ``{"error", "message", "findings"}``."""
        return {"error": self.reason, "message": self.one_line(), "findings": self.findings}


def install_hint(extra: str, venv: str | None = None) -> str:
    """How to get the optional extra ``extra``, in README's words first: ``EGOPOOL_EXTRAS=NAME ./run ...`` in a
    checkout (``EGOPOOL_VENV`` too when the extra needs a venv of its own), else ``pip install 'egopool[NAME]'``."""
    own = f"EGOPOOL_VENV={venv} " if venv else ""
    return f"{own}EGOPOOL_EXTRAS={extra} ./run ... in a checkout, or pip install 'egopool[{extra}]'"
