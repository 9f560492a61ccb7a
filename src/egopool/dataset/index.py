"""The frame-level index of a dataset: item ``i`` -> (task, episode N, frame_index).

Built once per task from the parquet footers (row counts, no data read) and cached on disk as
JSON under ``cache_dir`` (default ``$EGOPOOL_CACHE`` or ``~/.cache/egopool``, ``dataset_index/``),
keyed by the task's resolved path. The cache is used only while its fingerprint still matches:
size and mtime (ns) of ``meta/info.json`` and of every file under ``data/`` and
``meta/episodes/`` (a ``stat`` each, no file opened). An episode added, deleted or rewritten
changes the fingerprint and the index is rebuilt. The task directory itself is never written.
"""

from __future__ import annotations

import hashlib
import json
import os
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._atomic import atomic_write_json
from ..read.reader import open_task

__all__ = ["FrameIndex", "TaskEntry", "default_cache_dir", "task_fingerprint", "task_entry"]

_VERSION = 1


def default_cache_dir() -> Path:
    """``$EGOPOOL_CACHE`` or ``~/.cache/egopool`` (``$XDG_CACHE_HOME/egopool``)."""
    env = os.environ.get("EGOPOOL_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "egopool"


def task_fingerprint(task_dir: Path) -> str:
    """sha256 over (relative path, size, mtime_ns) of ``meta/info.json`` and every file under
    ``data/`` and ``meta/episodes/`` (stat only)."""
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


@dataclass(frozen=True)
class TaskEntry:
    """One task of the index.

    Attributes
    ----------
    path:
        The task directory (resolved).
    fps:
        ``info.fps`` (frames/s): the time base of ``delta_timestamps``.
    episodes, lengths:
        ``(E,)`` int64 global N ascending and ``(E,)`` int64 rows of each.
    """

    path: Path
    fps: float
    episodes: np.ndarray
    lengths: np.ndarray


def _build(task_dir: Path) -> TaskEntry:
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
    return TaskEntry(task_dir, float(fps), np.asarray(eps, np.int64), np.asarray(lens, np.int64))


def task_entry(task_dir: str | Path, cache_dir: str | Path | None = None) -> TaskEntry:
    """The task's index, from the cache when its fingerprint matches, else built and cached.

    ``cache_dir=False``-like empty string disables the cache. A cache that cannot be written
    (read-only home) is skipped silently: the index is then built per dataset, never wrong.

    Raises
    ------
    FormatError
        The task cannot be opened (no ``meta/info.json``...), or a data parquet footer is unreadable.
    ValueError
        ``info.fps`` is not a number > 0.
    """
    path = Path(task_dir).resolve()
    fp = task_fingerprint(path)
    cache = None
    if cache_dir != "":
        base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        cache = base / "dataset_index" / (hashlib.sha256(str(path).encode()).hexdigest()[:24] + ".json")
        try:
            doc = json.loads(cache.read_text(encoding="utf-8"))
            if doc.get("version") == _VERSION and doc.get("fingerprint") == fp and doc.get("path") == str(path):
                return TaskEntry(path, float(doc["fps"]), np.asarray(doc["episodes"], np.int64),
                                 np.asarray(doc["lengths"], np.int64))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    entry = _build(path)
    if cache is not None:
        doc = {"version": _VERSION, "path": str(path), "fingerprint": fp, "fps": entry.fps,
               "episodes": entry.episodes.tolist(), "lengths": entry.lengths.tolist()}
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
