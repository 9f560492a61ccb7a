"""The read API over a bucket store: what :mod:`egopool.server.catalog` shows, from LIST requests (decision O13).

An episode is listed from its ``meta/episodes`` row on (the commit object, O11): the
episodes of a task are the rows of one LIST of ``<task>/meta/episodes/`` (1 request per
1000 episodes), their files the keys of LISTs of ``data/`` and ``videos/`` with the same
chunk and file numbers. Objects without a row (a publish in progress, or a killed one's
leftovers before the start-up sweep) are never shown nor served.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..errors import EgopoolError, FormatError, UploadRejectedError
from ..layout import TaskLayout
from .bucket_publish import committed_rows
from .bucket_store import BucketStore

__all__ = ["episode_entries", "episode_file", "task_detail", "task_summaries"]

_DATA = re.compile(r"chunk-(\d+)/episode-(\d+)\.parquet\Z")
_VIDEO = re.compile(r"chunk-(\d+)/([^/]+)/episode-(\d+)\.([A-Za-z0-9]+)\Z")


def _info(store: BucketStore, task: str) -> tuple[dict[str, Any], TaskLayout]:
    got = store.bucket.get(f"{task}/meta/info.json")
    if got is None:
        raise EgopoolError(f"no task {task!r} in {store.uri}")
    try:
        info = json.loads(got[0].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormatError(f"{store.bucket.url(task + '/meta/info.json')} is not JSON ({exc})") from exc
    if not isinstance(info, dict):
        raise FormatError(f"{store.bucket.url(task + '/meta/info.json')} is not a JSON object")
    return info, TaskLayout.from_info(Path(task), info)


def _files(store: BucketStore, task: str, layout: TaskLayout) -> dict[int, list[str]]:
    """N -> task-relative keys of its data parquet and videos (rows not included)."""
    out: dict[int, list[str]] = {}
    for o in store.bucket.list_objects(f"{task}/data/"):
        m = _DATA.search(o.key)
        if m:
            out.setdefault(layout.index_of(int(m.group(1)), int(m.group(2))), []).append(o.key[len(task) + 1:])
    for o in store.bucket.list_objects(f"{task}/videos/"):
        m = _VIDEO.search(o.key)
        if m:
            out.setdefault(layout.index_of(int(m.group(1)), int(m.group(3))), []).append(o.key[len(task) + 1:])
    return out


def task_summaries(store: BucketStore) -> list[dict[str, Any]]:
    """As :func:`egopool.server.catalog.task_summaries`: one entry per task."""
    last: dict[str, float] = {}
    for u in store.db.uploads(limit=10_000):
        if u.task and u.outcome == "imported":
            last.setdefault(u.task, u.finished_at or u.received_at)
    out: list[dict[str, Any]] = []
    for name in store.tasks():
        try:
            info, layout = _info(store, name)
            count = len(committed_rows(store.bucket, name, layout))
        except EgopoolError as exc:
            out.append({"name": name, "error": exc.one_line()})
            continue
        out.append({"name": name, "episodes": count, "total_episodes": info.get("total_episodes"),
                    "fps": info.get("fps"), "streams": sorted((info.get("video_extensions") or {}).keys()),
                    "last_upload_at": last.get(name)})
    return out


def task_detail(store: BucketStore, task: str) -> dict[str, Any]:
    """A task's ``info.json`` and its committed episode count.

    Raises
    ------
    EgopoolError
        No such task.
    """
    info, layout = _info(store, task)
    return {"name": task, "episodes": len(committed_rows(store.bucket, task, layout)), "info": info}


def episode_entries(store: BucketStore, task: str) -> list[dict[str, Any]]:
    """Every committed episode of a task, ascending N (fields of :func:`egopool.server.catalog.episode_entries`).

    Raises
    ------
    EgopoolError
        No such task.
    """
    info, layout = _info(store, task)
    rows = committed_rows(store.bucket, task, layout)  # rows first: a file listed later belongs to a committed N
    files = _files(store, task, layout)
    db = store.db.episodes(task)
    out = []
    for n in sorted(rows):
        c, f = layout.chunk_file(n)
        own = sorted(files.get(n, []))
        videos = sorted({k.split("/")[2] for k in own if k.startswith("videos/")})
        entry: dict[str, Any] = {"episode_index": n, "chunk": c, "file": f,
                                 "complete": any(k.startswith("data/") for k in own), "streams": videos,
                                 "files": [*own, rows[n][len(task) + 1:]]}
        row = db.get(n)
        if row is not None:
            entry.update(length=row.length, validation=row.validation,
                         uploaded_by={"client_host_id": row.client_host_id, "client_hostname": row.client_hostname,
                                      "client_episode_index": row.client_episode_index, "token_id": row.token_id,
                                      "upload_id": row.upload_id, "imported_at": row.imported_at})
        else:
            entry.update(length=None, validation=None, uploaded_by=None)
        out.append(entry)
    return out


def episode_file(store: BucketStore, task: str, index: int, rel: str) -> str:
    """The object key (relative to the store prefix) of one file of committed episode N.

    Raises
    ------
    UploadRejectedError
        404: no committed episode N, or ``rel`` is not one of its files.
    """
    info, layout = _info(store, task)
    if index < 1 or not store.bucket.exists(layout.episodes_file(index).as_posix()):
        raise UploadRejectedError(404, "not_found", f"no episode {index} in task {task!r}")
    c, f = layout.chunk_file(index)
    mine = {layout.data_file(index).as_posix(), layout.episodes_file(index).as_posix()}
    m = _VIDEO.fullmatch(rel[len("videos/"):]) if rel.startswith("videos/") else None
    if m and (int(m.group(1)), int(m.group(3))) == (c, f):
        mine.add(f"{task}/{rel}")
    key = f"{task}/{rel}"
    if key in mine and store.bucket.exists(key):
        return key
    raise UploadRejectedError(404, "not_found", f"episode {index} of task {task!r} has no file {rel!r}; the "
                                                "episode's entry in the read API lists its files")
