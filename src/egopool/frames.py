"""SLAM coordinate-frame registry (file_format.md §3.1, multi_device_storage.md §6.6).

A frame id names where each axis points in the real world, with direction words
(``right/left``, ``up/down``, ``forward/backward``). Readers align frames by these
words, never by axis letters (DESIGN §9). A trajectory column without ``frame`` is
the old frame ``right_forward_up`` (§3.1 rule 1).
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import SchemaError

__all__ = ["DEFAULT_FRAME", "FRAMES", "LEGACY_FRAME", "frame_axes", "frame_id_of", "register_frame", "resolve_axes"]

#: frame id -> ``{"+X": word, "+Y": word, "+Z": word}``.
FRAMES: dict[str, dict[str, str]] = {
    "down_left_forward": {"+X": "down", "+Y": "left", "+Z": "forward"},
    "right_forward_up": {"+X": "right", "+Y": "forward", "+Z": "up"},
    "ego_cam_optical": {"+X": "right", "+Y": "down", "+Z": "forward"},
    # TUM RGB-D freiburg1 motion-capture world (used by `egopool demo`): +Z is up; the
    # horizontal words are as seen from the first camera pose of fr1/xyz, whose right axis
    # is +Y (cos 0.995) and whose view direction projects onto -X (measured from the
    # groundtruth file; docs/decisions.md).
    "tum_fr1_world": {"+X": "backward", "+Y": "right", "+Z": "up"},
    # Common conventions other tools export, so trajectories can be converted to/from them:
    "forward_left_up": {"+X": "forward", "+Y": "left", "+Z": "up"},          # ROS REP-103 body
    "right_up_backward": {"+X": "right", "+Y": "up", "+Z": "backward"},      # OpenGL / ARKit camera
    "forward_right_down": {"+X": "forward", "+Y": "right", "+Z": "down"},    # aerospace FRD body
}
#: Default frame for gripper SLAM since v1.3.13.
DEFAULT_FRAME = "down_left_forward"
#: What a missing ``frame`` key means (recorded by v1.3.12 and earlier).
LEGACY_FRAME = "right_forward_up"

_WORDS = {"right", "left", "up", "down", "forward", "backward"}
_OPPOSITE = {"right": "left", "left": "right", "up": "down", "down": "up",
             "forward": "backward", "backward": "forward"}


def _check_axes(axes: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(axes, Mapping) or set(axes) != {"+X", "+Y", "+Z"}:
        got = sorted(map(str, axes)) if isinstance(axes, Mapping) else repr(axes)
        raise SchemaError(f"frame_axes must have exactly +X, +Y, +Z, got {got}")
    words = [axes[k] for k in ("+X", "+Y", "+Z")]
    if any(not isinstance(w, str) or w not in _WORDS for w in words):  # a list is no direction word
        raise SchemaError(f"frame_axes words must be among {sorted(_WORDS)}, got {words}")
    if len({w if w in ("right", "up", "forward") else _OPPOSITE[w] for w in words}) != 3:
        raise SchemaError(f"frame_axes {words} do not span three distinct directions")
    return {k: axes[k] for k in ("+X", "+Y", "+Z")}


def register_frame(frame_id: str, axes: Mapping[str, str]) -> None:
    """Add a frame id to the registry (the registry is extensible, §6.6)."""
    checked = _check_axes(axes)
    if frame_id in FRAMES and FRAMES[frame_id] != checked:
        raise SchemaError(f"frame {frame_id!r} is already registered with axes {FRAMES[frame_id]}")
    FRAMES[frame_id] = checked


def frame_axes(frame_id: str) -> dict[str, str]:
    """``frame_axes`` of a registered frame id. Raises SchemaError for an unknown id."""
    try:
        return dict(FRAMES[frame_id])
    except KeyError:
        raise SchemaError(f"unknown SLAM frame {frame_id!r}", hint=f"known frames: {sorted(FRAMES)}") from None


def resolve_axes(frame: str | Mapping[str, str]) -> dict[str, str]:
    """``frame_axes`` of a frame id, or a checked copy of an explicit ``frame_axes`` mapping."""
    if isinstance(frame, str):
        return frame_axes(frame)
    return _check_axes(frame)


def frame_id_of(axes: Mapping[str, str]) -> str | None:
    """The first registered frame id with exactly these ``frame_axes``, or None."""
    checked = _check_axes(axes)
    for fid, known in FRAMES.items():
        if known == checked:
            return fid
    return None
