"""Helpers shared by the maintenance operations: progress callbacks, backups, registry choice, paths."""

from __future__ import annotations

import datetime as _dt
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from .._atomic import fsync_dir, temp_path_for
from ..registry import Registry

__all__ = ["BACKUP_DIR", "Progress", "backup_copy", "new_backup_dir", "open_registry", "rel", "timestamp"]

#: ``progress(done, total, what)``: called after each unit of work (an episode, a step).
Progress = Callable[[int, int, str], None]

#: Backups of delete / recalc / repair live in this dot directory of the task (dotfiles are
#: ignored by every reader and never uploaded, file_format.md §11, checklist §12.8).
BACKUP_DIR = ".egopool_backup"


def timestamp() -> str:
    """UTC ``YYYYmmddTHHMMSSffffffZ`` for backup directory names (sortable, unique per µs)."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def new_backup_dir(task_dir: Path, op: str) -> Path:
    """A fresh, empty ``<task>/.egopool_backup/<op>-<timestamp>/`` (created)."""
    d = Path(task_dir) / BACKUP_DIR / f"{op}-{timestamp()}"
    d.mkdir(parents=True, exist_ok=False)
    return d


def backup_copy(task_dir: Path, src: Path, backup_dir: Path) -> Path:
    """Copy ``src`` (a file inside ``task_dir``) to the same relative path under ``backup_dir``.

    The copy is written to a dot-temp and renamed into place, so a backup that exists
    is complete. An existing complete backup is kept (idempotent). Returns its path.
    """
    dst = backup_dir / Path(src).relative_to(task_dir)
    if dst.exists():
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path_for(dst)
    try:
        shutil.copy2(src, tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(dst.parent)
    return dst


def open_registry(task_dir: Path, registry: bool | str | Path | Registry | None) -> Registry | None:
    """Resolve the ``registry`` argument of an operation: True = beside the task, False/None = none."""
    if isinstance(registry, Registry):
        return registry
    if registry is True:
        return Registry.for_task(task_dir)
    if registry:
        return Registry(registry)
    return None


def rel(task_dir: Path, path: Path) -> str:
    """POSIX path of ``path`` relative to the task directory (for reports and journals)."""
    return Path(path).relative_to(task_dir).as_posix()
