"""MediaPipe Hands as the keypoint backend (the ``keypoints`` extra: ``pip install 'egopool[keypoints]'``).

mediapipe 0.10.21 is the last wheel that ships the palm-detection and hand-landmark models
inside the package (the legacy ``mediapipe.solutions.hands`` API); newer wheels need a
downloaded ``.task`` model file, which cannot be fetched at run time. It needs numpy < 2,
so it is an optional extra with its own venv in CI; nothing else in egopool imports it.

Conventions (also in :mod:`egopool.keypoints.mirror`):

* **Left/right.** MediaPipe labels handedness as if the image were mirrored (a selfie /
  front camera). An ego or scene camera is not mirrored, so by default the label is
  swapped: MediaPipe's ``"Left"`` is the person's **right** hand. Checked on the real
  dex-retargeting video (a raised right hand): MediaPipe says ``"Left"`` on 621 of 621
  frames. Pass ``mirrored=True`` for a mirrored view. When both detections claim one
  side, the more confident keeps it and the other takes the free side.
* **2-D** keypoints are in pixels of the frame given (u = x·width, v = y·height), plus
  MediaPipe's relative depth ``z`` (not metric).
* **3-D** keypoints are MediaPipe's world landmarks: metres, origin at the hand's
  approximate geometric centre, axes parallel to the camera's (x right, y down, z away).
* **Missing hands** are zeros with ``present = False`` (multi_device_storage.md §5.5).
* Video mode (``static_image_mode=False``) tracks the hand from frame to frame, so frames
  must be fed in order and one :class:`MediaPipeHands` serves one episode.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._native_output import native_output
from ..errors import EgopoolError, install_hint
from .mirror import JOINTS, SIDES

#: What MediaPipe and TensorFlow Lite print from C++ while a graph starts and runs its first frame
#: (``W0000 ... inference_feedback_manager``, ``Created TensorFlow Lite XNNPACK delegate``) is
#: logged here at INFO instead of reaching the terminal; ``keypoints extract --verbose`` shows it.
log = logging.getLogger("egopool.keypoints.mediapipe")

__all__ = ["FrameHands", "HandDetection", "MediaPipeHands", "mediapipe_version"]

_INSTALL_HINT = install_hint("keypoints", venv=".venv-keypoints") + " (mediapipe 0.10.21 ships its models; it needs numpy < 2: a venv of its own)"


def _import_mediapipe() -> Any:
    try:
        import mediapipe as mp
    except ImportError as exc:
        raise EgopoolError(f"keypoint extraction needs MediaPipe ({exc})", hint=_INSTALL_HINT) from exc
    if getattr(getattr(mp, "solutions", None), "hands", None) is None:
        # a newer mediapipe without the legacy solutions and their bundled models
        raise EgopoolError("this mediapipe has no bundled hand models (mediapipe.solutions.hands)",
                           hint=_INSTALL_HINT)
    return mp


def mediapipe_version() -> str:
    """The installed mediapipe's version (raises EgopoolError when it is missing)."""
    return str(getattr(_import_mediapipe(), "__version__", "unknown"))


@dataclass(frozen=True)
class HandDetection:
    """One detected hand in one frame.

    Attributes
    ----------
    pixels:
        ``(21, 2)`` float32 (u, v) pixels.
    z_rel:
        ``(21,)`` float32 MediaPipe relative depth (wrist ≈ 0; not metric).
    world:
        ``(21, 3)`` float32 metres, hand-centred.
    score:
        Handedness confidence in [0, 1].
    label:
        MediaPipe's raw handedness label (``"Left"``/``"Right"``, mirrored-image convention).
    """

    pixels: np.ndarray
    z_rel: np.ndarray
    world: np.ndarray
    score: float
    label: str


#: side (``left``/``right``, the person's hands) -> detection or None.
FrameHands = dict[str, "HandDetection | None"]


class MediaPipeHands:
    """MediaPipe Hands (legacy solution API, models bundled in mediapipe 0.10.21).

    Parameters
    ----------
    mirrored:
        True when the frames are a mirrored (selfie) view; False (default) for an ego or
        scene camera, whose MediaPipe labels are swapped (see the module docstring).
    model_complexity:
        0 (lite) or 1 (full, default).
    min_detection_confidence, min_tracking_confidence:
        MediaPipe's thresholds (default 0.5 each).
    static_image_mode:
        Detect on every frame independently instead of tracking (slower).

    Raises
    ------
    EgopoolError
        mediapipe is not installed, or has no bundled hand models.
    """

    def __init__(self, *, mirrored: bool = False, model_complexity: int = 1, min_detection_confidence: float = 0.5,
                 min_tracking_confidence: float = 0.5, static_image_mode: bool = False) -> None:
        mp = _import_mediapipe()
        self.mirrored = bool(mirrored)
        self.params = {"backend": "mediapipe_hands", "mediapipe_version": str(getattr(mp, "__version__", "unknown")),
                       "model_complexity": int(model_complexity),
                       "min_detection_confidence": float(min_detection_confidence),
                       "min_tracking_confidence": float(min_tracking_confidence),
                       "static_image_mode": bool(static_image_mode), "mirrored": self.mirrored}
        # MediaPipe's graph threads load the models and log while the graph starts and runs its
        # first frame, after Hands() has returned: caught from here to the end of the first process()
        self._chatter: contextlib.ExitStack | None = contextlib.ExitStack()
        self._chatter.enter_context(native_output(log))
        try:
            self._hands = mp.solutions.hands.Hands(static_image_mode=static_image_mode, max_num_hands=2,
                                                   model_complexity=model_complexity,
                                                   min_detection_confidence=min_detection_confidence,
                                                   min_tracking_confidence=min_tracking_confidence)
        except BaseException:
            self._end_chatter()
            raise

    def __enter__(self) -> MediaPipeHands:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _end_chatter(self) -> None:
        if self._chatter is not None:
            chatter, self._chatter = self._chatter, None
            chatter.close()

    def close(self) -> None:
        """Free the MediaPipe graph."""
        self._end_chatter()
        if self._hands is not None:
            self._hands.close()
            self._hands = None

    def _side(self, label: str) -> str:
        side = "left" if label.lower() == "left" else "right"
        if not self.mirrored:
            side = "right" if side == "left" else "left"
        return side

    def process(self, rgb: np.ndarray) -> FrameHands:
        """Hands in one RGB frame.

        Parameters
        ----------
        rgb:
            ``(H, W, 3)`` uint8 RGB.

        Returns
        -------
        dict
            ``{"left": HandDetection | None, "right": HandDetection | None}`` (the person's hands).
        """
        if self._hands is None:
            raise EgopoolError("MediaPipeHands is closed")
        h, w = rgb.shape[:2]
        try:
            res = self._hands.process(np.ascontiguousarray(rgb))
        finally:
            self._end_chatter()
        found: list[HandDetection] = []
        for lm, wlm, hd in zip(res.multi_hand_landmarks or [], res.multi_hand_world_landmarks or [],
                               res.multi_handedness or [], strict=True):  # one entry per hand in each
            norm = np.array([(p.x, p.y, p.z) for p in lm.landmark], dtype=np.float64)
            world = np.array([(p.x, p.y, p.z) for p in wlm.landmark], dtype=np.float32)
            if norm.shape != (JOINTS, 3) or world.shape != (JOINTS, 3):
                continue
            cls = hd.classification[0]
            pixels = (norm[:, :2] * np.array([w, h], dtype=np.float64)).astype(np.float32)
            found.append(HandDetection(pixels, norm[:, 2].astype(np.float32), world, float(cls.score), str(cls.label)))
        out: FrameHands = {s: None for s in SIDES}
        for det in sorted(found, key=lambda d: -d.score):
            side = self._side(det.label)
            if out[side] is None:
                out[side] = det
            else:
                other = "left" if side == "right" else "right"
                if out[other] is None:
                    out[other] = det
        return out
