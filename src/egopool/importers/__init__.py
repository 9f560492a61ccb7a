"""Importers: bring users' own recordings into a ``pooled_episodes_v1`` task.

One module per source layout; each library function returns an
:class:`ImportResult` holding the written :class:`~egopool.write.task_writer.EpisodeResult`.
Input is checked before anything is written; a failure mid-way aborts the episode
(no partial file stays on disk, file_format.md §7.5).
"""

from __future__ import annotations

from ._common import ImportResult, quaternion_to_rotation, rotation_to_quaternion
from .euroc import import_euroc
from .rgbd_frames import import_rgbd_frames
from .tum import import_tum, read_tum

__all__ = ["ImportResult", "import_euroc", "import_rgbd_frames", "import_tum", "quaternion_to_rotation",
           "read_tum", "rotation_to_quaternion"]
