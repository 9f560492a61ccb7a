"""The write path: a task writer allocates N and owns the task's metadata, an episode writer
streams one episode's rows and videos to temp files and publishes them (DESIGN §1, §5).

Imports run one way: ``task_writer`` -> ``episode_writer`` -> ``episode_video`` / ``streams`` /
``row_values`` / ``declarations`` / ``task_meta`` / ``recovery`` -> ``checks``; nothing here imports
the read path.
"""

from __future__ import annotations

from .episode_writer import EpisodeResult, EpisodeWriter, StreamSpec
from .task_writer import TaskWriter

__all__ = ["EpisodeResult", "EpisodeWriter", "StreamSpec", "TaskWriter"]
