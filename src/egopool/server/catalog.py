"""What the read API and the HTML page show: tasks, their episodes, who uploaded them.

Episodes are enumerated on disk with the one authoritative enumerator
(:func:`egopool.layout.list_task_episodes`), committed ones only: an episode exists for
every reader (this API, the page, downloads) from its commit object on, its
``meta/episodes`` row (docs/decisions.md U5), so an episode being published is never
listed and a listed one is never rolled back. They are joined with ``server.db`` (who
uploaded an episode, its client N, the validator's verdict on the uploaded slice), or with
the publish journal for an episode that committed a moment before its database row. An
episode the server did not import itself (a task copied into the store) is listed too,
with ``uploaded_by: null``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import EgopoolError, UploadRejectedError
from ..layout import EpisodeFiles, TaskLayout, find_episode_files, list_task_episodes
from ..meta.episodes import read_episode_row
from ..meta.info import read_info
from .publish import committed_unrecorded
from .store import Store

__all__ = ["episode_entries", "episode_entry", "episode_file", "task_detail", "task_summaries"]


def _layout(store: Store, task: str) -> tuple[Path, dict[str, Any], TaskLayout]:
    root = store.root / task
    info = read_info(root)
    return root, info, TaskLayout.from_info(root, info)


def task_summaries(store: Store) -> list[dict[str, Any]]:
    """One entry per task: name, episodes on disk, ``total_episodes``, fps, streams, last upload time."""
    if store.bucket is not None:  # a bucket store (docs/decisions.md O13)
        from . import bucket_catalog
        return bucket_catalog.task_summaries(store)  # type: ignore[arg-type]
    out: list[dict[str, Any]] = []
    last: dict[str, float] = {}
    for u in store.db.uploads(limit=10_000):
        if u.task and u.outcome == "imported":
            last.setdefault(u.task, u.finished_at or u.received_at)
    for name in store.tasks():
        try:
            root, info, layout = _layout(store, name)
            groups = list_task_episodes(root, layout, committed_only=True)
        except EgopoolError as exc:
            out.append({"name": name, "error": exc.one_line()})
            continue
        out.append({"name": name, "episodes": len(groups), "total_episodes": info.get("total_episodes"),
                    "fps": info.get("fps"), "streams": sorted((info.get("video_extensions") or {}).keys()),
                    "last_upload_at": last.get(name)})
    return out


def task_detail(store: Store, task: str) -> dict[str, Any]:
    """A task's ``info.json`` and its episode count.

    Raises
    ------
    EgopoolError
        No such task (the caller answers 404).
    """
    if store.bucket is not None:  # a bucket store (docs/decisions.md O13)
        from . import bucket_catalog
        return bucket_catalog.task_detail(store, task)  # type: ignore[arg-type]
    root, info, layout = _layout(store, task)
    return {"name": task, "episodes": len(list_task_episodes(root, layout, committed_only=True)), "info": info}


def _entry(root: Path, g: EpisodeFiles, row: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"episode_index": g.index, "chunk": g.chunk, "file": g.file, "complete": g.complete,
                             "streams": sorted(g.videos), "files": [p.relative_to(root).as_posix() for p in g.paths()]}
    if row is not None:
        entry.update(length=row.length, validation=row.validation,
                     uploaded_by={"client_host_id": row.client_host_id, "client_hostname": row.client_hostname,
                                  "client_episode_index": row.client_episode_index, "token_id": row.token_id,
                                  "upload_id": row.upload_id, "imported_at": row.imported_at})
    else:
        length = None
        if g.meta is not None:
            try:
                length = read_episode_row(g.meta, g.index).get("length")
            except EgopoolError:
                length = None
        entry.update(length=length, validation=None, uploaded_by=None)
    return entry


def episode_entries(store: Store, task: str) -> list[dict[str, Any]]:
    """Every episode of a task, ascending N, with length, streams, files, uploader and validation.

    Raises
    ------
    EgopoolError
        No such task.
    """
    if store.bucket is not None:  # a bucket store (docs/decisions.md O13)
        from . import bucket_catalog
        return bucket_catalog.episode_entries(store, task)  # type: ignore[arg-type]
    root, _, layout = _layout(store, task)
    groups = list_task_episodes(root, layout, committed_only=True)  # disk, journals, database: in this order
    rows = committed_unrecorded(store, task) if groups else {}
    rows.update(store.db.episodes(task))
    return [_entry(root, g, rows.get(g.index)) for g in groups]


def episode_file(store: Store, task: str, index: int, rel: str) -> Path | str:
    """The path of one file of episode N, if ``rel`` is one of its files (never anything else); in a bucket
    store its object key (a ``str``).

    Raises
    ------
    UploadRejectedError
        404 no committed episode N, or ``rel`` is not one of its files (said apart: the read API's
        answer, not the CLI's).
    """
    if store.bucket is not None:  # a bucket store (docs/decisions.md O13)
        from . import bucket_catalog
        return bucket_catalog.episode_file(store, task, index, rel)  # type: ignore[arg-type]
    root, info, layout = _layout(store, task)
    g = find_episode_files(root, layout, index, info.get("video_extensions")) if index >= 1 else None
    if g is None or not g.committed:
        raise UploadRejectedError(404, "not_found", f"no episode {index} in task {task!r}")
    for p in g.paths():
        if p.relative_to(root).as_posix() == rel and p.is_file():
            return p
    raise UploadRejectedError(404, "not_found", f"episode {index} of task {task!r} has no file {rel!r}; the "
                                                "episode's entry in the read API lists its files")


def episode_entry(store: Store, task: str, index: int) -> dict[str, Any] | None:
    """Episode N's entry as :func:`episode_entries` gives it, from N's own paths (the cost does not grow
    with the task's episodes); None when the task has no committed episode N.

    Raises
    ------
    EgopoolError
        No such task.
    """
    if store.bucket is not None:  # a bucket store (docs/decisions.md O13): its entries come from one LIST
        return next((e for e in episode_entries(store, task) if e.get("episode_index") == index), None)
    root, info, layout = _layout(store, task)
    g = find_episode_files(root, layout, index, info.get("video_extensions")) if index >= 1 else None
    if g is None or not g.committed:
        return None
    # disk first, then database, journal, database again: the journal goes only after the row is recorded (U5)
    row = store.db.episode(task, index) or committed_unrecorded(store, task).get(index)
    if row is None:
        row = store.db.episode(task, index)
    return _entry(root, g, row)
