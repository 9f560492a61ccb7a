"""``pipeline.db`` kept in step by an edit of a directory task (docs/decisions.md E48-E50), as ``delete``,
``compress`` and the repairs keep it (the registry beside the task, :func:`egopool.ops._common.open_registry`;
a bucket has none):

- an in-place edit refreshes each changed episode's file list (:meth:`~egopool.registry.Registry.refresh_files`:
  the rewritten files hashed again, a moved video under its new path, a removed one dropped); an episode the
  registry never knew stays unknown;
- a merge or split records every episode it copied into a directory target
  (:func:`~egopool.registry.record_episode`, as the writer does after ``finish``), before its journal is removed;
- a directory rename moves the task's rows to the new name (:meth:`~egopool.registry.Registry.rename_task`).

A registry that cannot be written does not undo the edit: a ``RuntimeWarning`` names it (the writer's rule).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

from ..errors import RegistryError
from ..ops._common import open_registry
from ..ops._store_task import StoreTask
from ..registry import Registry, record_episode, task_key

__all__ = ["record_copied", "refresh_episode", "rename_registered", "task_registry"]


def task_registry(t: StoreTask) -> Registry | None:
    """The registry beside a directory task (None: a bucket)."""
    return open_registry(t.local, True) if t.local is not None else None


def _warn(what: str, exc: RegistryError) -> None:
    warnings.warn(f"{what}: pipeline.db not updated ({exc.one_line()})", RuntimeWarning, stacklevel=3)


def refresh_episode(t: StoreTask, index: int, written: Iterable[str], gone: Iterable[str]) -> None:
    """N's registry record after an in-place edit rewrote ``written`` and removed ``gone`` (task-relative keys)."""
    reg = task_registry(t)
    if reg is None or t.local is None:
        return
    try:
        reg.refresh_files(t.local, index, written=list(written), gone=list(gone))
    except RegistryError as exc:
        _warn(f"episode {index} of {t.uri} was edited", exc)


def record_copied(t: StoreTask, episodes: Iterable[tuple[int, list[str]]]) -> None:
    """Record each ``(N, task-relative keys of its files)`` a merge or split copied into the directory ``t`` (those
    recorded already, by an earlier run, are left)."""
    reg = task_registry(t)
    if reg is None or t.local is None:
        return
    root: Path = t.local
    try:
        known = {r.episode_index for r in reg.recordings(task_key(root))}
        for n, keys in episodes:
            if n not in known and (root / keys[-1]).is_file():
                record_episode(root, n, [root / k for k in keys], registry=reg)
    except RegistryError as exc:
        _warn(f"the episodes copied into {t.uri}", exc)


def rename_registered(old: Path, new: Path) -> None:
    """Move the registry rows of the directory task ``old`` to its new name ``new`` (a sibling: one registry)."""
    try:
        Registry.for_task(new).rename_task(task_key(old), task_key(new))
    except RegistryError as exc:
        _warn(f"{old} was renamed to {new}", exc)
