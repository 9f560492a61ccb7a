"""The read path: :func:`open_task` gives a :class:`Task`, whose :class:`Episode` reads the data
parquet, meta row, videos, depth, trajectories, IMU and force matrices of one episode.

Modules: ``reader`` (:class:`Task`, :func:`open_task`), ``episode`` (:class:`Episode`), ``trajectory``
(:class:`Trajectory`), ``forces`` (force matrices). Imports run one way: ``reader`` -> ``episode`` ->
``forces``, ``trajectory``; nothing here imports the write path.
"""

from __future__ import annotations

from .reader import Episode, Task, Trajectory, open_task

__all__ = ["Episode", "Task", "Trajectory", "open_task"]
