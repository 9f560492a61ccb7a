"""Read a ``pooled_episodes_v1`` task (file_format.md §1–§8, multi_device_storage.md §8.2).

::

    task = egopool.open_task("data/recordings/pick_cup")
    for ep in task.episodes():
        table = ep.table                       # the episode's own schema decides the columns (§6.7)
        traj = ep.trajectory("observation.ego_slam_trajectory")
        traj.points, traj.host_ns, traj.frame  # (K, 8) float64, (K,) int64, frame id

A :class:`Task` lists and finds its episodes; one :class:`~egopool.read.episode.Episode` reads
its files (:mod:`egopool.read.episode`), a :class:`~egopool.read.trajectory.Trajectory` is one
decoded SLAM column. Every file is opened afresh on access (meta rows may be replaced atomically
at any time, §6.1). Errors from pyarrow / PyAV are translated to :class:`EgopoolError`
subclasses naming the file.
"""

from __future__ import annotations

import numbers
from functools import cached_property
from typing import Any

from ..errors import EpisodeNotFoundError, LayoutError
from ..layout import EpisodeFiles, TaskLayout, find_episode_files, list_task_episodes
from ..meta.info import read_info
from ..storage import TaskPath, TaskPathLike, as_path
from .episode import Episode
from .trajectory import Trajectory

__all__ = ["Episode", "Task", "Trajectory", "open_task"]


class Task:
    """A ``pooled_episodes_v1`` task directory. Get one from :func:`open_task`."""

    def __init__(self, path: TaskPathLike, info: dict[str, Any] | None = None) -> None:
        self.path = as_path(path)
        self._info = read_info(self.path) if info is None else info
        self.layout = TaskLayout.from_info(self.path, self._info)

    def __repr__(self) -> str:
        return f"Task({str(self.path)!r})"

    @property
    def info(self) -> dict[str, Any]:
        """``meta/info.json`` as loaded when the task was opened."""
        return self._info

    @property
    def name(self) -> str:
        """``task_name`` from info.json (falls back to the directory name)."""
        return str(self._info.get("task_name") or self.path.name)

    def episode_files(self, *, uncommitted: bool = False) -> list[EpisodeFiles[TaskPath]]:
        """Every committed episode's file group, ascending N (:func:`list_task_episodes`).

        An episode exists from its commit on: its ``meta/episodes`` row, which every writer
        places after the episode's videos and data parquet (docs/decisions.md #5, U5). So an
        episode a recorder or the pooling server is still publishing is not listed, and a
        listed one is never rolled back. ``uncommitted=True`` also lists the groups without a
        row (an episode being published, or what a crash left): for ``ls`` and diagnostics.
        """
        return list_task_episodes(self.path, self.layout, committed_only=not uncommitted)

    def episodes(self, *, uncommitted: bool = False) -> list[Episode]:
        """Every committed episode, ascending N (``uncommitted``: as :meth:`episode_files`)."""
        return [Episode(self, g) for g in self.episode_files(uncommitted=uncommitted)]

    def episode(self, index: int, *, uncommitted: bool = False) -> Episode:
        """Episode with global N = ``index``, found from N's own paths (checklist §12.2).

        The paths come from the templates; only legacy layouts are scanned, and only in N's
        own chunk (:func:`~egopool.layout.find_episode_files`), so the cost does not grow
        with the number of episodes in the task.

        Raises
        ------
        LayoutError
            ``index`` is not an integer >= 1 (``"1"`` and ``True`` are refused).
        EpisodeNotFoundError
            Episode N is not committed (no ``meta/episodes`` row: :meth:`episode_files`), or,
            with ``uncommitted=True``, no file of it exists.
        """
        if isinstance(index, bool) or not isinstance(index, numbers.Integral) or index < 1:
            raise LayoutError(f"episode index must be an integer >= 1, got {type(index).__name__} {index!r}",
                              hint="global N is 1-based: episode-000 is N=1")
        index = int(index)
        g = find_episode_files(self.path, self.layout, index, self._info.get("video_extensions"))
        if g is None or not (g.committed or uncommitted):
            raise EpisodeNotFoundError(self.path, index)
        return Episode(self, g)

    @cached_property
    def tasks(self) -> list[dict[str, Any]]:
        """``tasks.jsonl`` lines."""
        from ..meta.tasks import read_tasks

        return read_tasks(self.path)


def open_task(path: TaskPathLike, info: dict[str, Any] | None = None) -> Task:
    """Open a task directory, or a task in object storage (``s3://bucket/prefix/task``).

    ``info``: its ``meta/info.json`` as :func:`~egopool.meta.info.read_info` returned it earlier (a dataset's
    index keeps it): not read again, nothing checked again.

    A ``s3://`` task is read in place: parquet footers and the columns asked for by ranged
    GETs, videos through a seekable buffered reader, the connection from the AWS environment
    variables (:class:`~egopool.storage.S3Settings`, README "Tasks in object storage").

    Raises
    ------
    FormatError
        ``meta/info.json`` missing or unreadable, or ``format`` missing/unknown.
    LegacyLayoutError
        The v1.0 per-session layout (named as such).
    ObjectStoreError
        ``s3://``: no such bucket, access denied, or the endpoint did not answer in time.
    """
    return Task(path, info)
