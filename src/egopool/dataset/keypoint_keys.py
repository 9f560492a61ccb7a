"""Dataset keys read from the hand-keypoints mirror (file_format.md §10, issue 18).

A key ``keypoints.<side>_<field>`` (``<side>`` = ``left`` / ``right``) names a column of the
mirror ``keypoints_output/<task>/episode_{N:06d}/`` that ``egopool keypoints extract`` writes
(:mod:`egopool.keypoints.mirror`), read through :meth:`egopool.Episode.keypoints`:

============================== =============== ================================================
key                            per row         from
============================== =============== ================================================
``keypoints.<side>_hand_2d``   (21, 2) float32 ``hand_pose/``: (u, v) pixels of the stored video
``keypoints.<side>_hand_z``    (21,) float32   ``hand_pose/``: MediaPipe relative depth (not metric)
``keypoints.<side>_score``     () float32      ``hand_pose/``: handedness confidence
``keypoints.<side>_hand_pose`` (21, 3) float32 ``hand_pose_3d/``: world landmarks, metres
``keypoints.<side>_present``   () bool         ``hand_pose/`` (else ``hand_pose_3d/``)
============================== =============== ================================================

As the mirror stores it, a hand not found in a frame is zeros with ``<side>_present`` false
(multi_device_storage.md §5.5): ask for ``keypoints.<side>_present`` to tell the two apart.
Mirror rows are matched to data rows by ``frame_index``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import FormatError, SchemaError
from ..keypoints.mirror import HAND_POSE_2D, HAND_POSE_3D, SIDES, EpisodeKeypoints, HandPose2D, HandPose3D
from ..storage import TaskPath

__all__ = ["KEYPOINT_PREFIX", "is_keypoint_key", "keypoint_rows", "missing_mirror_error"]

KEYPOINT_PREFIX = "keypoints."
_FIELDS = ("hand_2d", "hand_z", "score", "hand_pose", "present")


def _parse(key: str) -> tuple[str, str]:
    side, _, field = key[len(KEYPOINT_PREFIX):].partition("_")
    if side not in SIDES or field not in _FIELDS:
        raise ValueError(f"{key!r} is not a keypoints key: use keypoints.<left|right>_<{'|'.join(_FIELDS)}>")
    return side, field


def is_keypoint_key(key: str) -> bool:
    """True for ``keypoints.*`` keys; ValueError (one line) for a malformed one."""
    if not key.startswith(KEYPOINT_PREFIX):
        return False
    _parse(key)
    return True


def missing_mirror_error(key: str, task_dir: TaskPath, where: Path) -> SchemaError:
    """The one-line error for a key whose episode (or task) has no mirror at ``where``."""
    return SchemaError("needs the hand-keypoints mirror, which does not exist", column=key, path=where,
                       hint=f"run `egopool keypoints extract {task_dir}` (or pass mirror_root=)")


def _field_values(src: HandPose2D | HandPose3D, field: str, side: str) -> np.ndarray:
    """``side``'s values of ``field`` in the mirror file :func:`keypoint_rows` picked for it."""
    if isinstance(src, HandPose3D):  # hand_pose (world landmarks, m), or present without a 2-D file
        return src.world[side] if field == "hand_pose" else src.present[side]
    if field == "hand_2d":
        return src.pixels[side]
    if field == "hand_z":
        return src.z_rel[side]
    if field == "score":
        return src.score[side]
    return src.present[side]


def keypoint_rows(kp: EpisodeKeypoints, key: str, frame_index: np.ndarray, task_dir: TaskPath) -> np.ndarray:
    """``(R, ...)`` values of ``key`` for the data rows whose ``frame_index`` is given (table above).

    Raises
    ------
    SchemaError
        The episode's mirror lacks the file the key needs (hint: ``egopool keypoints extract``).
    FormatError
        A data row's ``frame_index`` is not in the mirror (the mirror is stale).
    """
    side, field = _parse(key)
    pose2d, pose3d = kp.hand_pose, kp.hand_pose_3d
    src: HandPose2D | HandPose3D | None
    if field == "hand_pose" or (field == "present" and pose2d is None):
        src, rel = pose3d, HAND_POSE_3D
    else:
        src, rel = pose2d, HAND_POSE_2D
    if src is None:
        raise missing_mirror_error(key, task_dir, kp.directory / rel)
    values = _field_values(src, field, side)
    pos = np.searchsorted(src.frame_index, frame_index)
    ok = (pos < src.frame_index.size) & (src.frame_index[np.minimum(pos, src.frame_index.size - 1)] == frame_index) \
        if src.frame_index.size else np.zeros(frame_index.shape, bool)
    if not ok.all():
        raise FormatError(f"no row for frame_index {int(frame_index[~ok][0])} (needed by {key!r})",
                          path=kp.directory / rel, hint=f"re-run `egopool keypoints extract {task_dir}`")
    return values[pos]
