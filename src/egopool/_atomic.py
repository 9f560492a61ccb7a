"""Atomic file writes and the task lock (DESIGN §5, file_format.md §6.1, §7.4).

Every file egopool writes goes through :func:`atomic_write_bytes` (or a helper on
top of it): a dot-prefixed temp file in the same directory, ``fsync``, ``os.replace``
onto the final name, then an ``fsync`` of the directory. A crash at any point leaves
either the old file or the new one, never a half-written one; readers ignore the
dot temp (file_format.md §11).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import FormatError, LockError

__all__ = [
    "atomic_write_bytes",
    "atomic_write_json",
    "exclusive_lock",
    "fsync_dir",
    "fsync_file",
    "publish",
    "task_lock",
    "task_read_lock",
    "temp_path_for",
]


def temp_path_for(path: Path) -> Path:
    """A unique dot-temp name beside ``path`` (``.{name}.{uuid}.tmp``), ignored by readers (§11)."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")


def fsync_dir(directory: Path) -> None:
    """fsync a directory so a rename inside it survives power loss."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def fsync_file(path: str | Path) -> None:
    """fsync a file's bytes (opened read-only: the file is not changed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(temp: Path, final: Path) -> None:
    """fsync ``temp`` and move it onto ``final`` with ``os.replace`` (atomic on POSIX)."""
    with open(temp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(temp, final)
    fsync_dir(final.parent)


def atomic_write_bytes(path: str | Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (temp + fsync + os.replace + dir fsync).

    The parent directory is created if needed. On any exception the temp file is
    removed and ``path`` is untouched. ``sync_dir=False`` leaves the directory fsync to
    the caller (several renames in one directory, one fsync after the last).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path_for(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        if sync_dir:
            fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_write_json(path: str | Path, obj: Any, *, indent: int | None = 2, sync_dir: bool = True) -> None:
    """Serialise ``obj`` as UTF-8 standard JSON (non-ASCII kept) and write it atomically
    (``sync_dir``: :func:`atomic_write_bytes`).

    Raises
    ------
    FormatError
        ``obj`` holds NaN or Infinity (not JSON, file_format.md §3/§4); nothing is written.
    """
    try:
        text = json.dumps(obj, ensure_ascii=False, indent=indent, allow_nan=False)
    except ValueError as exc:
        raise FormatError(f"refusing to write NaN/Infinity into JSON ({exc})", path=path,
                          hint="the value came from the caller; pass finite numbers") from exc
    atomic_write_bytes(path, (text + "\n").encode("utf-8"), sync_dir=sync_dir)


@contextlib.contextmanager
def task_read_lock(task_dir: str | Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold the task lock shared, for work that only reads (every ``--dry-run``; docs/decisions.md #24).

    ``flock(LOCK_SH)`` on ``meta/episodes/.lock`` opened read-only: it waits for a writer that holds
    the lock (:func:`task_lock`) and keeps writers out while held, yet needs no write access, so a
    read-only task (a read-only mount, files of another user) can be planned. Without an anchor (a task
    nobody ever wrote with egopool's lock) nothing is locked and nothing is created. Yields True while
    held; with ``wait=False`` it yields False at once when a writer holds the lock.
    """
    anchor = Path(task_dir) / "meta" / "episodes" / ".lock"
    try:
        fd = os.open(anchor, os.O_RDONLY)
    except OSError:  # missing (or unreadable: then nothing of the task can be read either)
        yield True
        return
    try:
        try:
            _flock(fd, fcntl.LOCK_SH, wait=wait, on_wait=lambda: say_waiting(task_dir))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _flock(fd: int, kind: int, *, wait: bool, on_wait: Callable[[], None] | None) -> None:
    """``flock(fd, kind)``: at once when free; else ``BlockingIOError`` (``wait=False``) or ``on_wait()`` once,
    then wait."""
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        if not wait:
            raise
        if on_wait is not None:
            on_wait()
        fcntl.flock(fd, kind)


def say_waiting(task_dir: str | Path) -> None:
    """One line on stderr when a command must wait for the lock of ``task_dir`` (docs/decisions.md E46): who
    holds it when the task says so (an edit's journal or a merge's hold of its source, ``meta/.edit.json``)."""
    from ._holders import lock_holder

    line = f"egopool: waiting for {lock_holder(Path(task_dir))} on {task_dir} to finish; Ctrl-C to stop\n"
    if line in _SAID:  # a recorder takes the lock for every episode: the same holder is named once
        return
    _SAID.add(line)
    sys.stderr.write(line)
    sys.stderr.flush()


_SAID: set[str] = set()


@contextlib.contextmanager
def exclusive_lock(anchor: str | Path, *, wait: bool = True,
                   on_wait: Callable[[], None] | None = None, moved: Callable[[], LockError] | None = None
                   ) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``anchor`` (created empty if missing); blocks until free.

    The lock sits on the open file description, so it serialises threads of one process as well
    as processes, and it is released when the holder dies. ``wait=False``: raise
    :class:`~egopool.errors.LockError` at once when another holder has it. ``moved``: once locked, the
    anchor's path must still name the locked file, else ``moved()`` is raised (the directory was renamed or
    removed by the holder this call waited for: the lock no longer guards that path, docs/decisions.md E62).
    """
    fd = os.open(anchor, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            _flock(fd, fcntl.LOCK_EX, wait=wait, on_wait=on_wait)
        except BlockingIOError:
            raise LockError("the task is locked by another egopool process (a recorder or a maintenance "
                            "command)", path=anchor, hint="run it again when that process has finished") from None
        if moved is not None and not _same_file(fd, anchor):
            raise moved()
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextlib.contextmanager
def task_lock(task_dir: str | Path, *, wait: bool = True) -> Iterator[None]:
    """Hold the exclusive task lock: ``flock`` on ``meta/episodes/.lock`` (DESIGN §5, §7.4).

    The anchor is an empty file whose path never changes, so the lock survives the
    ``os.replace`` of every meta file it guards. Blocks until the lock is free, saying so once on stderr
    (:func:`say_waiting`); ``wait=False`` raises :class:`~egopool.errors.LockError` instead. A ``task_dir``
    that is not a directory raises :class:`~egopool.errors.FormatError` and creates nothing: a recorder idle
    between two episodes of a task renamed meanwhile does not re-create the old path (docs/decisions.md E81).
    """
    root = Path(task_dir)
    anchor = root / "meta" / "episodes" / ".lock"
    if not root.is_dir():  # never re-create a task renamed or removed under a writer that had it open (E81)
        raise FormatError("the task directory is gone (renamed or removed since it was opened)",
                          path=task_dir, hint="open the task at its new path (`egopool ls`); nothing was written")
    anchor.parent.mkdir(parents=True, exist_ok=True)
    def moved() -> LockError:
        return LockError("the task was renamed or removed while this command waited for its lock", path=task_dir,
                         hint="run the command again on the task's new path (`egopool ls`); nothing was written")

    with exclusive_lock(anchor, wait=wait, on_wait=lambda: say_waiting(task_dir), moved=moved):
        yield


def _same_file(fd: int, path: Path | str) -> bool:
    """Whether ``path`` still names the file open at ``fd`` (not renamed away, removed or replaced)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)
