"""``meta/recycled_episode.json``: the abort marker (file_format.md §7.5) and N reservations.

The marker is ``{"episode_index": N, "freed_at": "<ISO>"}``, written atomically when a
recording is aborted so that the next recording reuses N. Reservations
(``meta/.reserved-<N>``, dotfiles, ignored by every reader) let two recorders on one
task take distinct N; a reservation whose process is gone is stale and ignored.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
from collections.abc import Iterator
from pathlib import Path
from typing import overload

from .._atomic import atomic_write_json
from .._holders import pid_alive
from .._safe_read import read_json, read_text
from ..errors import EgopoolError
from ..storage import TaskPath, TaskPathLike, as_local_path, as_path

__all__ = ["clear_recycled", "live_reservations", "pid_alive", "read_recycled", "release", "reserve", "stale_reservations",
           "write_recycled"]


@overload
def _marker(task_dir: Path) -> Path: ...
@overload
def _marker(task_dir: TaskPathLike) -> TaskPath: ...
def _marker(task_dir: TaskPathLike) -> TaskPath:
    return as_path(task_dir) / "meta" / "recycled_episode.json"


def _local(task_dir: str | os.PathLike[str]) -> Path:
    """The local task directory a marker or reservation is written in (FormatError for ``s3://``)."""
    return as_local_path(task_dir, what="writing a meta/ marker")


def read_recycled(task_dir: TaskPathLike) -> int | None:
    """N named by a valid marker, else None (a corrupt marker is ignored, §7.5)."""
    marker = _marker(task_dir)
    if not marker.exists():
        return None
    try:
        n = read_json(marker, what="recycled_episode.json", limit=1 << 20)["episode_index"]
    except (EgopoolError, KeyError, TypeError, IndexError):
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


def write_recycled(task_dir: str | os.PathLike[str], index: int) -> None:
    """Atomically mark N as freed by an abort (a local task: FormatError for ``s3://``)."""
    freed = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    atomic_write_json(_marker(_local(task_dir)), {"episode_index": index, "freed_at": freed}, indent=None)


def clear_recycled(task_dir: str | os.PathLike[str], index: int | None = None) -> None:
    """Remove the marker (only if it names ``index`` when given; a local task: FormatError for ``s3://``)."""
    root = _local(task_dir)
    if index is not None and read_recycled(root) not in (index, None):
        return
    with contextlib.suppress(FileNotFoundError):
        _marker(root).unlink()


def _reservation(task_dir: str | os.PathLike[str], index: int) -> Path:
    return _local(task_dir) / "meta" / f".reserved-{index}"


def _reservations(task_dir: TaskPathLike) -> Iterator[tuple[int, TaskPath, int | None]]:
    """``(N, file, pid)`` of every ``meta/.reserved-<N>``; pid None when the file cannot be read."""
    meta = as_path(task_dir) / "meta"
    for p in meta.glob(".reserved-*") if meta.is_dir() else ():
        try:
            n = int(p.name.rsplit("-", 1)[1])
        except ValueError:
            continue
        try:
            pid: int | None = int(read_text(p, what="reservation", limit=64).strip() or 0)
        except (ValueError, EgopoolError):  # not a regular file (a FIFO is never opened), not a pid
            pid = None
        yield n, p, pid


def live_reservations(task_dir: TaskPathLike, *, prune: bool = True) -> set[int]:
    """N reserved by a live process; stale reservations are removed (``prune``, the caller holds the task
    lock) or left alone (``prune=False``: a read-only look, e.g. ``egopool validate``)."""
    out: set[int] = set()
    for n, p, pid in _reservations(task_dir):
        if pid is None:
            continue
        if pid and pid_alive(pid):
            out.add(n)
        elif prune:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    return out


def stale_reservations(task_dir: TaskPathLike) -> list[int]:
    """N reserved by a process that no longer runs (killed recorders), ascending; files are kept.

    A file that cannot be read counts as stale (written but not yet filled when its process
    died). Caller holds the task lock and decides what to do with each N (egopool.write.recovery).
    """
    return sorted(n for n, _, pid in _reservations(task_dir) if not (pid and pid_alive(pid)))


def reserve(task_dir: str | os.PathLike[str], index: int) -> None:
    """Record that this process is recording N. Caller holds the task lock."""
    p = _reservation(task_dir, index)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(str(os.getpid()))


def release(task_dir: str | os.PathLike[str], index: int) -> None:
    """Drop this process's reservation of N."""
    with contextlib.suppress(FileNotFoundError):
        _reservation(task_dir, index).unlink()
