"""Rewriting an episode's ``meta/episodes`` row in place, on a directory or in a bucket (``repair checksums``,
``repair force-scale``; docs/decisions.md E20): one opening of the task and one write of a row for both commands.

- a directory: under the task ``flock`` (a shared one for a dry run), migrations refused, the old row copied to
  ``<task>/.egopool_backup/<name>-<time>/`` first, the new row written atomically, ``pipeline.db``'s hash of the
  row file updated;
- a bucket: under N's claim (:mod:`egopool.ops.task_store`), the old row put under the backup prefix first, the
  new row put with ``PutMode.UPDATE`` on the version read, the claim released last; a killed run's claims of the
  same command are released when the next run opens the task (its row PUT was atomic: that is its roll-forward).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._atomic import atomic_write_bytes, task_lock, task_read_lock
from ..layout import TaskLayout
from ..meta.info import read_info
from ..registry import Registry
from ..storage import ObjectPath, PreconditionFailed, PutMode, is_object_uri
from ._common import BACKUP_DIR, backup_copy, new_backup_dir, open_registry, rel, timestamp
from .migrate import refuse_during_migration
from .task_store import BucketTask, open_task_store, pause, take_claim, task_claims

__all__ = ["RowTask", "open_row_task", "rewrite_local_row", "rewrite_row_under_claim"]


@dataclass
class RowTask:
    """A task opened to rewrite rows: ``bt`` for a bucket (else None), ``local`` for a directory (else None),
    ``where`` / ``root`` to list and read it, its ``layout``, ``reg`` (a directory's registry, None in a dry run),
    and :meth:`hold` (the lock for the run)."""

    bt: BucketTask | None
    local: Path | None
    where: str | Path
    root: Path | ObjectPath
    layout: TaskLayout
    reg: Registry | None
    lock: AbstractContextManager[Any]

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """The run's lock (a directory: its ``flock``; migrations refused) — nothing for a bucket.

        Raises
        ------
        LockError, OperationError
            Another writer holds the task; a migration is under way.
        """
        with self.lock:
            if self.local is not None:
                refuse_during_migration(self.local, "repair episode rows")
            yield


def open_row_task(task_dir: str | Path, command: str, op: str, *, dry_run: bool,
                  registry: bool | str | Path | Registry | None) -> RowTask:
    """Open ``task_dir`` (a directory or ``s3://bucket/prefix/task``) for ``command`` (e.g. ``"repair checksums"``),
    whose bucket claims are ``op`` (module docstring).

    Raises
    ------
    FormatError
        ``info.json`` cannot be read (not a task).
    ObjectStoreError, OperationError
        The bucket cannot be reached or cannot write conditionally.
    """
    if is_object_uri(task_dir):
        bt = open_task_store(str(task_dir), command)
        if not dry_run:
            bt.parent.delete([c.key for c in task_claims(bt) if c.op == op])
        return RowTask(bt, None, bt.uri, bt.path, bt.layout, None, contextlib.nullcontext())
    local = Path(task_dir)
    layout = TaskLayout.from_info(local, read_info(local))
    reg = open_registry(local, registry) if not dry_run else None
    lock = task_read_lock(local) if dry_run else task_lock(local)  # a dry run writes nothing (decisions.md #24)
    return RowTask(None, local, local, local, layout, reg, lock)


def rewrite_local_row(root: Path, index: int, meta: Path, op: str, backup: Path | None, backup_name: str,
                      change: Callable[[], bytes], reg: Registry | None) -> Path:
    """Rewrite the row file ``meta`` of N in the task directory ``root`` (module docstring): backed up under
    ``backup`` (created as ``<root>/.egopool_backup/<backup_name>-<time>`` when None), replaced by ``change()``
    atomically, the registry's record of the file updated. Crash seams ``pause(op, "backup")``, ``pause(op,
    "row")``. Returns the backup folder.

    Raises
    ------
    OSError, FormatError
        The row cannot be read or written (the old row stays, or is in the backup).
    """
    if backup is None:
        backup = new_backup_dir(root, backup_name)
    backup_copy(root, meta, backup)
    pause(op, "backup")
    atomic_write_bytes(meta, change())
    pause(op, "row")
    if reg is not None:
        reg.refresh_files(root, index, written=[meta.relative_to(root).as_posix()])
    return backup


def rewrite_row_under_claim(bt: BucketTask, index: int, op: str, backup: ObjectPath | None, backup_name: str,
                            change: Callable[[bytes], bytes]) -> tuple[str | None, ObjectPath | None]:
    """Rewrite N's ``meta/episodes`` row in a bucket under N's claim (``repair force-scale``, ``repair
    checksums``): claim N (:func:`take_claim`), put the old row under ``backup`` (created as
    ``<task>/<BACKUP_DIR>/<backup_name>-<time>`` when None), put ``change(old bytes)`` with ``PutMode.UPDATE`` on the
    version read (its sha256 recorded), release the claim last. Crash seams ``pause(op, "backup")`` and
    ``pause(op, "row")``. A run killed anywhere leaves the old or the new row (one PUT) and at most its claim.

    Returns
    -------
    tuple
        ``(reason, backup)``: why the row was left as it is (deleted or changed meanwhile) or None when rewritten;
        the backup folder (created here or the one given).

    Raises
    ------
    OperationError
        Another writer holds N (nothing written).
    """
    key = bt.row_key(index)
    claim = take_claim(bt, index, op, [])
    try:
        got = bt.store.get(key)
        if got is None:
            return "the row was deleted meanwhile", backup
        if backup is None:
            backup = bt.path / BACKUP_DIR / f"{backup_name}-{timestamp()}"
        bt.store.put(f"{rel(bt.path, backup)}/{key}", got[0])
        pause(op, "backup")
        body = change(got[0])
        try:
            bt.store.put(key, body, mode=PutMode.UPDATE, version=got[1], sha256=hashlib.sha256(body).hexdigest())
        except PreconditionFailed:
            return "the row changed meanwhile; run the repair again", backup
        pause(op, "row")
        return None, backup
    finally:
        bt.parent.delete([claim.key])
