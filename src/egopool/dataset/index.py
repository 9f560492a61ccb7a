"""The frame-level index of a dataset: item ``i`` -> (task, episode N, frame_index).

Built once per task from the parquet footers (row counts, no data read) and cached on disk as
JSON under ``cache_dir`` (default ``$EGOPOOL_CACHE`` or ``~/.cache/egopool``, ``dataset_index/``),
keyed by the task's location: its resolved path for a directory, ``S3 endpoint + s3://bucket/key``
for a task in a bucket (the two never collide: a path starts with ``/``, a URI with ``s3://``).
The cache is used only while its fingerprint still matches. A directory: size and mtime (ns) of
``meta/info.json`` and of every file under ``data/`` and ``meta/episodes/`` (a ``stat`` each, no
file opened). A bucket: key, size and ETag of the same objects, from one LIST of ``data/`` and one
of ``meta/episodes/`` (one request per 1000 keys; videos are not listed) and one HEAD of
``meta/info.json`` (docs/decisions.md O41). An episode added, deleted or rewritten changes the
fingerprint and the index is rebuilt. The task itself is never written.
"""

from __future__ import annotations

import hashlib
import json
import os
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import atomic_write_json
from ..read.reader import open_task
from ..storage import ObjectPath, TaskPath, TaskPathLike, as_path, open_store

__all__ = ["FrameIndex", "TaskEntry", "cache_key", "default_cache_dir", "task_fingerprint", "task_entry"]

_VERSION = 2  # 2: the task's info.json is kept with its index


def default_cache_dir() -> Path:
    """``$EGOPOOL_CACHE`` or ``~/.cache/egopool`` (``$XDG_CACHE_HOME/egopool``)."""
    env = os.environ.get("EGOPOOL_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "egopool"


def task_fingerprint(task_dir: TaskPath) -> str:
    """sha256 over what identifies the task's episodes and rows, read without opening a file.

    A directory: (relative path, size, mtime_ns) of ``meta/info.json`` and every file under
    ``data/`` and ``meta/episodes/`` (stat only). A bucket: (key, size, ETag) of the same objects
    (one LIST of each prefix per 1000 keys, one HEAD of ``meta/info.json``; nothing downloaded).

    Raises
    ------
    ObjectStoreError
        A bucket that cannot be listed (missing, denied, no answer in time).
    """
    if isinstance(task_dir, ObjectPath):
        return _bucket_fingerprint(task_dir)
    h = hashlib.sha256()
    files: list[tuple[str, int, int]] = []
    info = task_dir / "meta" / "info.json"
    for top in (task_dir / "data", task_dir / "meta" / "episodes"):
        for root, dirs, names in os.walk(top):
            dirs.sort()
            for name in names:
                p = Path(root) / name
                st = p.stat()
                files.append((p.relative_to(task_dir).as_posix(), st.st_size, st.st_mtime_ns))
    if info.exists():
        st = info.stat()
        files.append(("meta/info.json", st.st_size, st.st_mtime_ns))
    for row in sorted(files):
        h.update(repr(row).encode())
    return h.hexdigest()


def _bucket_fingerprint(task: ObjectPath) -> str:
    """The bucket side of :func:`task_fingerprint`: ETags from the store's listing (:class:`~egopool.storage.Store`)."""
    store = open_store(task.uri)
    rows: list[tuple[str, int, str]] = []
    for prefix in ("data/", "meta/episodes/"):
        rows += [(m.key, m.size, m.version) for m in store.list(prefix)]
    info = store.head("meta/info.json")
    if info is not None:
        rows.append((info.key, info.size, info.version))
    h = hashlib.sha256()
    for row in sorted(rows):
        h.update(repr(row).encode())
    return h.hexdigest()


def cache_key(task_dir: TaskPath) -> str:
    """What names a task in the cache: the resolved directory (``/...``), or ``s3://bucket/key`` after the S3
    endpoint it was read from (``http://host:port s3://...``; the same bucket name on two endpoints is two tasks)."""
    if isinstance(task_dir, ObjectPath):
        s = task_dir.settings
        where = f"{s.scheme}://{s.endpoint}" if s.endpoint else f"aws:{s.region or ''}"
        return f"{where} {task_dir.uri}"
    return str(task_dir)


@dataclass(frozen=True)
class TaskEntry:
    """One task of the index.

    Attributes
    ----------
    path:
        The task directory (resolved), or its ``s3://`` location.
    fps:
        ``info.fps`` (frames/s): the time base of ``delta_timestamps``.
    episodes, lengths:
        ``(E,)`` int64 global N ascending and ``(E,)`` int64 rows of each.
    info:
        ``meta/info.json`` as the index was built from it (the fingerprint covers it): a worker opens the task
        with it instead of reading it again (three round trips in a bucket; docs/decisions.md B14).
    """

    path: TaskPath
    fps: float
    episodes: np.ndarray
    lengths: np.ndarray
    info: dict[str, Any]


def _build(task_dir: TaskPath) -> TaskEntry:
    task = open_task(task_dir)
    fps = task.info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
        raise ValueError(f"{task_dir / 'meta' / 'info.json'}: fps is {fps!r}, not a number > 0; "
                         "delta_timestamps need it (fix info.json's fps)")
    eps, lens = [], []
    for ep in task.episodes():
        if ep.files.data is None:
            continue
        eps.append(ep.index)
        lens.append(ep.length)
    return TaskEntry(task_dir, float(fps), np.asarray(eps, np.int64), np.asarray(lens, np.int64), task.info)


def task_entry(task_dir: TaskPathLike, cache_dir: str | Path | None = None) -> TaskEntry:
    """The task's index, from the cache when its fingerprint matches, else built and cached.

    ``cache_dir=False``-like empty string disables the cache. A cache that cannot be written
    (read-only home) is skipped silently: the index is then built per dataset, never wrong.

    Raises
    ------
    FormatError
        The task cannot be opened (no ``meta/info.json``...), or a data parquet footer is unreadable.
    ObjectStoreError
        A task in a bucket that cannot be listed or read (missing bucket, denied, no answer).
    ValueError
        ``info.fps`` is not a number > 0.
    """
    path = as_path(task_dir).resolve()
    fp = task_fingerprint(path)
    key = cache_key(path)
    cache = None
    if cache_dir != "":
        base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        cache = base / "dataset_index" / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")
        try:
            doc = json.loads(cache.read_text(encoding="utf-8"))
            if doc.get("version") == _VERSION and doc.get("fingerprint") == fp and doc.get("path") == key:
                info = doc["info"]
                if isinstance(info, dict):
                    return TaskEntry(path, float(doc["fps"]), np.asarray(doc["episodes"], np.int64),
                                     np.asarray(doc["lengths"], np.int64), info)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    entry = _build(path)
    if cache is not None:
        doc = {"version": _VERSION, "path": key, "fingerprint": fp, "fps": entry.fps,
               "episodes": entry.episodes.tolist(), "lengths": entry.lengths.tolist(), "info": entry.info}
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(cache, doc, indent=None)
        except OSError:
            pass
    return entry


class FrameIndex:
    """Items of a dataset over tasks, after the episode filter.

    Item ``i`` is row ``frame_index`` of episode ``N`` of ``tasks[task]``; items run task by
    task, episode by episode (ascending N), row by row. Lookup is one ``bisect`` over the
    episodes' first items.
    """

    def __init__(self, tasks: Sequence[TaskEntry], keep: Iterable[tuple[int, int]] | None = None) -> None:
        self.tasks = list(tasks)
        wanted = set(keep) if keep is not None else None
        self.episodes: list[tuple[int, int, int]] = []  # (task, N, length)
        for t, entry in enumerate(self.tasks):
            for n, length in zip(entry.episodes.tolist(), entry.lengths.tolist(), strict=True):
                if length > 0 and (wanted is None or (t, n) in wanted):
                    self.episodes.append((t, n, length))
        self.starts = np.concatenate([[0], np.cumsum([e[2] for e in self.episodes], dtype=np.int64)]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def locate(self, i: int) -> tuple[int, int, int, int]:
        """``(task, N, frame_index, episode position)`` of item ``i`` (negative ``i`` counts from the end).

        Raises
        ------
        IndexError
            ``i`` outside ``[-len, len)``.
        """
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"item {i} outside the dataset's {n} items")
        e = bisect_right(self.starts, i) - 1
        t, ep, _ = self.episodes[e]
        return t, ep, int(i - self.starts[e]), e

    def episode_items(self, e: int) -> range:
        """Items of the ``e``-th episode of the index."""
        return range(int(self.starts[e]), int(self.starts[e + 1]))
