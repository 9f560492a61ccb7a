"""What the read API and the HTML page show: tasks, their episodes, who uploaded them (docs/decisions.md U5, O13).

One implementation over the store's :class:`~egopool.storage.Store` (a directory or a bucket): an episode is
listed from its ``meta/episodes`` row on (the commit object), so an episode being published is never listed
and a listed one is never rolled back. The episodes of a task are the rows of one listing of
``<task>/meta/episodes/`` (a bucket: 1 LIST request per 1000 episodes), their files the keys under ``data/``
and ``videos/`` with the same chunk and file numbers (rows first: a file listed later belongs to a committed
N). They are joined with ``server.db`` (who uploaded an episode, its client N, the validator's verdict), or
with the publish journal for an episode that committed a moment before its database row. An episode the
server did not import itself (a task copied into the store) is listed too, with ``uploaded_by: null``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import EgopoolError, UploadRejectedError
from ..layout import TaskLayout
from ..meta.episodes import read_episode_row
from ..publish import committed_rows, journals
from .db import EpisodeRow
from .store import ServerStore, episode_row

__all__ = ["committed_unrecorded", "episode_entries", "episode_entry", "episode_file", "pending_rows",
           "task_detail", "task_summaries"]

_DATA = re.compile(r"chunk-(\d+)/episode-(\d+)\.parquet\Z")
_VIDEO = re.compile(r"chunk-(\d+)/([^/]+)/episode-(\d+)\.([A-Za-z0-9]+)\Z")


def _info(store: ServerStore, task: str) -> tuple[dict[str, Any], TaskLayout]:
    info = store.task_info(task) if store.has_task(task) else None
    if info is None:
        raise EgopoolError(f"no task {task!r} in {store.uri}")
    return info, TaskLayout.from_info(Path(task), info)


def _files(store: ServerStore, task: str, layout: TaskLayout, prefix: str = "") -> dict[int, list[str]]:
    """N -> task-relative keys of its data parquet and videos (rows not included); ``prefix``: one chunk's."""
    out: dict[int, list[str]] = {}
    for o in store.objects.list(f"{task}/data/{prefix}"):
        m = _DATA.search(o.key)
        if m:
            out.setdefault(layout.index_of(int(m.group(1)), int(m.group(2))), []).append(o.key[len(task) + 1:])
    for o in store.objects.list(f"{task}/videos/{prefix}"):
        m = _VIDEO.search(o.key)
        if m:
            out.setdefault(layout.index_of(int(m.group(1)), int(m.group(3))), []).append(o.key[len(task) + 1:])
    return out


def committed_unrecorded(store: ServerStore, task: str) -> dict[int, EpisodeRow]:
    """Episodes of ``task`` that committed but are not yet in ``server.db``, from their journals.

    Between the commit and the database transaction (and after a kill there, until the recovery) the journal
    holds what the ``episodes`` row will say; the catalog shows it, so an episode is listed the same way from
    its commit on. Read the store first, then this, then ``server.db``: a journal goes only after its row is
    recorded.
    """
    out: dict[int, EpisodeRow] = {}
    for _, doc in journals(store.objects, task):
        ep = doc.get("episode")
        if isinstance(ep, dict) and store.objects.exists(str(doc["commit"])):
            out[int(doc["index"])] = episode_row(ep)
    return out


def pending_rows(store: ServerStore, task: str | None = None) -> dict[tuple[str, int], EpisodeRow]:
    """:func:`committed_unrecorded` of ``task`` (None: of every task), keyed ``(task, N)``: what the search
    adds to ``server.db``'s rows (read this first, then the database)."""
    out: dict[tuple[str, int], EpisodeRow] = {}
    for _, doc in journals(store.objects, task):
        ep = doc.get("episode")
        if isinstance(ep, dict) and store.objects.exists(str(doc["commit"])):
            out[(str(doc["task"]), int(doc["index"]))] = episode_row(ep)
    return out


def task_summaries(store: ServerStore) -> list[dict[str, Any]]:
    """One entry per task: name, committed episodes, ``total_episodes``, fps, streams, last upload time."""
    last: dict[str, float] = {}
    for u in store.db.uploads(limit=10_000):
        if u.task and u.outcome == "imported":
            last.setdefault(u.task, u.finished_at or u.received_at)
    out: list[dict[str, Any]] = []
    for name in store.tasks():
        try:
            info, layout = _info(store, name)
            count = len(committed_rows(store.objects, name, layout))
        except EgopoolError as exc:
            out.append({"name": name, "error": exc.one_line()})
            continue
        out.append({"name": name, "episodes": count, "total_episodes": info.get("total_episodes"),
                    "fps": info.get("fps"), "streams": sorted((info.get("video_extensions") or {}).keys()),
                    "last_upload_at": last.get(name)})
    return out


def task_detail(store: ServerStore, task: str) -> dict[str, Any]:
    """A task's ``info.json`` and its committed episode count.

    Raises
    ------
    EgopoolError
        No such task (the caller answers 404).
    """
    info, layout = _info(store, task)
    return {"name": task, "episodes": len(committed_rows(store.objects, task, layout)), "info": info}


def _entry(task: str, layout: TaskLayout, n: int, row_key: str, own: list[str], row: EpisodeRow | None,
           store: ServerStore) -> dict[str, Any]:
    c, f = layout.chunk_file(n)
    own = sorted(own)
    entry: dict[str, Any] = {"episode_index": n, "chunk": c, "file": f,
                             "complete": any(k.startswith("data/") for k in own),
                             "streams": sorted({k.split("/")[2] for k in own if k.startswith("videos/")}),
                             "files": [*own, row_key[len(task) + 1:]]}
    if row is not None:
        entry.update(length=row.length, validation=row.validation,
                     uploaded_by={"client_host_id": row.client_host_id, "client_hostname": row.client_hostname,
                                  "client_episode_index": row.client_episode_index, "token_id": row.token_id,
                                  "upload_id": row.upload_id, "imported_at": row.imported_at})
    else:
        entry.update(length=_row_length(store, row_key, n), validation=None, uploaded_by=None)
    return entry


def _row_length(store: ServerStore, key: str, n: int) -> int | None:
    """``length`` of an episode the server did not import (its row read; None when it does not read)."""
    try:
        value = read_episode_row(store.objects.url(key), n).get("length")
    except (EgopoolError, OSError):
        return None
    return int(value) if isinstance(value, int) else None


def episode_entries(store: ServerStore, task: str) -> list[dict[str, Any]]:
    """Every committed episode of a task, ascending N, with length, streams, files, uploader and validation.

    Raises
    ------
    EgopoolError
        No such task.
    """
    _, layout = _info(store, task)
    rows = committed_rows(store.objects, task, layout)  # the store, journals, database: in this order (U5)
    files = _files(store, task, layout)
    db = committed_unrecorded(store, task) if rows else {}
    db.update(store.db.episodes(task))
    return [_entry(task, layout, n, rows[n], files.get(n, []), db.get(n), store) for n in sorted(rows)]


def episode_entry(store: ServerStore, task: str, index: int) -> dict[str, Any] | None:
    """Episode N's entry as :func:`episode_entries` gives it, from N's own chunk (the cost does not grow with
    the task's chunks); None when the task has no committed episode N.

    Raises
    ------
    EgopoolError
        No such task.
    """
    _, layout = _info(store, task)
    if index < 1:
        return None
    row_key = layout.episodes_file(index).as_posix()
    if not store.objects.exists(row_key):
        return None
    c, _ = layout.chunk_file(index)
    files = _files(store, task, layout, f"chunk-{c:03d}/").get(index, [])
    # the store first, then database, journal, database again: the journal goes only after the row is recorded
    row = store.db.episode(task, index) or committed_unrecorded(store, task).get(index) or \
        store.db.episode(task, index)
    return _entry(task, layout, index, row_key, files, row, store)


def episode_file(store: ServerStore, task: str, index: int, rel: str) -> str:
    """The key (relative to the store root) of one file of committed episode N, if ``rel`` is one of its files
    (never anything else).

    Raises
    ------
    UploadRejectedError
        404: no committed episode N, or ``rel`` is not one of its files.
    """
    _, layout = _info(store, task)
    if index < 1 or not store.objects.exists(layout.episodes_file(index).as_posix()):
        raise UploadRejectedError(404, "not_found", f"no episode {index} in task {task!r}")
    c, f = layout.chunk_file(index)
    mine = {layout.data_file(index).as_posix(), layout.episodes_file(index).as_posix()}
    m = _VIDEO.fullmatch(rel[len("videos/"):]) if rel.startswith("videos/") else None
    if m and (int(m.group(1)), int(m.group(3))) == (c, f):
        mine.add(f"{task}/{rel}")
    key = f"{task}/{rel}"
    if key in mine and store.objects.exists(key):
        return key
    raise UploadRejectedError(404, "not_found", f"episode {index} of task {task!r} has no file {rel!r}; the "
                                                "episode's entry in the read API lists its files")
