"""Hand keypoints: the mirror layout (file_format.md §10), MediaPipe extraction and the back-fill of
``observation.<side>_hand_pose`` (§7.2).

The mirror and the back-fill need only pyarrow/numpy; extraction needs the ``keypoints`` extra
(mediapipe, imported only when a detector is created).
"""

from __future__ import annotations

from .backfill import BackfillReport, EpisodeBackfill, backfill_hand_pose, hand_pose_values
from .extract import EpisodeExtraction, ExtractOptions, KeypointsExtractReport, choose_stream, extract_keypoints
from .mirror import (EpisodeKeypoints, HandPose2D, HandPose3D, default_mirror_root, episode_mirror_dir,
                     read_episode_keypoints, write_episode_keypoints)

__all__ = [
    "BackfillReport",
    "EpisodeBackfill",
    "EpisodeExtraction",
    "EpisodeKeypoints",
    "ExtractOptions",
    "HandPose2D",
    "HandPose3D",
    "KeypointsExtractReport",
    "backfill_hand_pose",
    "choose_stream",
    "default_mirror_root",
    "episode_mirror_dir",
    "extract_keypoints",
    "hand_pose_values",
    "read_episode_keypoints",
    "write_episode_keypoints",
]
