"""``egopool keypoints extract``: MediaPipe Hands on an episode's ego RGB stream -> the mirror (§10).

One unit of work per episode (:func:`extract_episode`), run in-process or as one Ray task
each (:mod:`egopool.jobs`). A unit decodes the stream, feeds every frame in order to a
fresh :class:`~egopool.keypoints.mediapipe_hands.MediaPipeHands` (video mode tracks the hand
between frames), and writes ``keypoints_output/<task>/episode_{N:06d}/`` (three files, each
temp + ``os.replace``; the renames happen under the task lock). Video frame ``i`` is data
row ``i`` (file_format.md §7.3: one frame per row, same ``frame_index``), so the mirror's
rows carry the data parquet's ``frame_index``. An episode whose video and data disagree on
the row count is reported and skipped, never written.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from .._atomic import task_lock
from .._safe_read import read_parquet
from ..codecs.video import read_rgb_frames
from ..errors import EgopoolError, EpisodeNotFoundError, FormatError, SchemaError
from ..storage import ObjectPath, as_path
from ..jobs.executor import Executor, LocalExecutor
from ..layout import EpisodeFiles, TaskLayout, find_episode_files, list_task_episodes
from ..meta.info import read_info
from .mirror import JOINTS, SIDES, HandPose2D, HandPose3D, default_mirror_root, episode_mirror_dir, \
    write_episode_keypoints

__all__ = ["EpisodeExtraction", "ExtractOptions", "KeypointsExtractReport", "choose_stream", "extract_episode",
           "extract_keypoints"]


@dataclass(frozen=True)
class ExtractOptions:
    """How to run the detector (see :class:`~egopool.keypoints.mediapipe_hands.MediaPipeHands`).

    Attributes
    ----------
    stream:
        image_key to read; None = the ego stream (:func:`choose_stream`).
    mirrored:
        The stream is a mirrored (selfie) view; False for ego cameras.
    model_complexity, min_detection_confidence, min_tracking_confidence:
        MediaPipe's settings.
    """

    stream: str | None = None
    mirrored: bool = False
    model_complexity: int = 1
    min_detection_confidence: float = 0.5
    min_tracking_confidence: float = 0.5


@dataclass(frozen=True)
class _ExtractInput:
    """What every unit of an extraction job shares (sent once to a Ray cluster)."""

    root: Path | ObjectPath
    info: dict[str, Any]
    mirror_root: Path
    options: ExtractOptions


@dataclass
class EpisodeExtraction:
    """Outcome of one episode.

    Attributes
    ----------
    index:
        Global N.
    stream:
        image_key read ("" when it could not be chosen).
    frames:
        Frames processed (= data rows).
    hand_frames, left_frames, right_frames:
        Frames with any hand / the left / the right hand found.
    seconds, cpu_seconds:
        Wall and CPU time of decode + detection in the worker.
    directory:
        The episode's mirror directory.
    error:
        Why nothing was written (None on success).
    """

    index: int
    stream: str
    frames: int = 0
    hand_frames: int = 0
    left_frames: int = 0
    right_frames: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    directory: Path | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the mirror was written."""
        return self.error is None

    @property
    def hand_rate(self) -> float:
        """Share of frames with at least one hand (0 for an empty episode)."""
        return self.hand_frames / self.frames if self.frames else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"episode_index": self.index, "stream": self.stream, "ok": self.ok, "frames": self.frames,
                "hand_frames": self.hand_frames, "left_frames": self.left_frames, "right_frames": self.right_frames,
                "hand_rate": round(self.hand_rate, 6), "seconds": round(self.seconds, 3),
                "cpu_seconds": round(self.cpu_seconds, 3),
                "directory": str(self.directory) if self.directory else None, "error": self.error}


@dataclass
class KeypointsExtractReport:
    """Result of :func:`extract_keypoints`: one :class:`EpisodeExtraction` per episode, ascending N."""

    task_dir: Path | ObjectPath
    mirror_root: Path
    executor: str
    episodes: list[EpisodeExtraction] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when every episode was written."""
        return all(e.ok for e in self.episodes)

    @property
    def frames(self) -> int:
        """Frames processed over all episodes."""
        return sum(e.frames for e in self.episodes)

    @property
    def hand_rate(self) -> float:
        """Frames with a hand / frames, over all episodes."""
        return sum(e.hand_frames for e in self.episodes) / self.frames if self.frames else 0.0

    @property
    def frames_per_cpu_second(self) -> float:
        """Frames per CPU-second of the workers (≈ frames/s per core)."""
        cpu = sum(e.cpu_seconds for e in self.episodes)
        return self.frames / cpu if cpu > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON report (``egopool keypoints extract --json``)."""
        return {"task": str(self.task_dir), "mirror_root": str(self.mirror_root), "executor": self.executor,
                "ok": self.ok, "episodes": [e.to_dict() for e in self.episodes], "frames": self.frames,
                "hand_rate": round(self.hand_rate, 6), "frames_per_cpu_second": round(self.frames_per_cpu_second, 2),
                "seconds": round(self.seconds, 3)}


def choose_stream(info: Mapping[str, Any], g: EpisodeFiles, requested: str | None = None) -> str:
    """The RGB stream of episode ``g`` to run the detector on.

    ``requested`` when given; else the ``source_slot`` of the ego trajectory
    (``features[...].owner.role == "ego"``, multi_device_storage.md §4.7) when this episode
    has that stream; else the episode's only RGB stream (a key of ``info.cameras``).

    Raises
    ------
    SchemaError
        ``requested`` is not a stream of the episode, or several RGB streams and no ego
        declaration (pass ``--stream``).
    """
    if requested:
        if requested not in g.videos:
            raise SchemaError(f"episode {g.index} has no stream {requested!r} (it has {sorted(g.videos)})",
                              hint="pick one with --stream KEY")
        return requested
    declared_cameras, declared_features = info.get("cameras"), info.get("features")
    cameras = declared_cameras if isinstance(declared_cameras, Mapping) else {}
    features = declared_features if isinstance(declared_features, Mapping) else {}
    for name, feat in sorted(features.items()):
        if name.endswith("slam_trajectory") and isinstance(feat, Mapping):
            owner = feat.get("owner")
            slot = feat.get("source_slot")
            if isinstance(owner, Mapping) and owner.get("role") == "ego" and slot in g.videos and slot in cameras:
                return str(slot)
    rgb = sorted(k for k in g.videos if k in cameras)
    if len(rgb) == 1:
        return rgb[0]
    raise SchemaError(f"episode {g.index}: cannot tell which RGB stream is the ego camera (RGB streams: {rgb})",
                      hint="pass --stream KEY")


def _empty(r: int) -> tuple[dict[str, np.ndarray], ...]:
    present = {s: np.zeros(r, bool) for s in SIDES}
    pixels = {s: np.zeros((r, JOINTS, 2), np.float32) for s in SIDES}
    z_rel = {s: np.zeros((r, JOINTS), np.float32) for s in SIDES}
    score = {s: np.zeros(r, np.float32) for s in SIDES}
    world = {s: np.zeros((r, JOINTS, 3), np.float32) for s in SIDES}
    return present, pixels, z_rel, score, world


def detect_frames(frames: Any, frame_index: np.ndarray, detector: Any, video: Path) -> tuple[HandPose2D, HandPose3D,
                                                                                             tuple[int, int]]:
    """Run ``detector.process`` on every frame, in order; row ``i`` gets ``frame_index[i]``.

    Returns
    -------
    (pose2d, pose3d, (width, height))

    Raises
    ------
    FormatError
        The stream has another number of frames than the data parquet has rows.
    """
    r = int(frame_index.shape[0])
    present, pixels, z_rel, score, world = _empty(r)
    size = (0, 0)
    i = 0
    for i, rgb in enumerate(frames, 1):
        if i > r:
            raise FormatError(f"the video has more frames than the data parquet has rows ({r})", path=video,
                              hint="`egopool validate TASK` shows the mismatch (§7.3: one frame per row)")
        size = (int(rgb.shape[1]), int(rgb.shape[0]))
        for side, det in detector.process(rgb).items():
            if det is not None:
                present[side][i - 1] = True
                pixels[side][i - 1] = det.pixels
                z_rel[side][i - 1] = det.z_rel
                score[side][i - 1] = det.score
                world[side][i - 1] = det.world
    if i != r:
        raise FormatError(f"the video has {i} frames but the data parquet has {r} rows", path=video,
                          hint="`egopool validate TASK` shows the mismatch (§7.3: one frame per row)")
    fi = np.asarray(frame_index, np.int64)
    return HandPose2D(fi, present, pixels, z_rel, score), HandPose3D(fi, present, world), size


def extract_episode(shared: _ExtractInput, g: EpisodeFiles) -> EpisodeExtraction:
    """One unit of an extraction job: detect hands in episode ``g`` and write its mirror.

    Never raises for a problem of this episode (no stream, frames ≠ rows, unreadable
    file): it is returned in ``error`` and nothing is written. Runs in-process or as a
    Ray task; the three files are renamed into place under the task lock.

    Raises
    ------
    EgopoolError
        mediapipe is missing on this worker (every episode would fail the same way).
    """
    from .mediapipe_hands import MediaPipeHands

    directory = episode_mirror_dir(shared.root, g.index, shared.mirror_root)
    out = EpisodeExtraction(g.index, "", directory=directory)
    opts = shared.options
    try:
        out.stream = choose_stream(shared.info, g, opts.stream)
        assert g.data is not None
        if isinstance(g.data, ObjectPath):  # ranged GETs of the one column (pyarrow.fs)
            frame_index = read_parquet(g.data, ["frame_index"], what="data parquet").column("frame_index").to_numpy()
        else:
            try:
                frame_index = pq.read_table(g.data, columns=["frame_index"]).column("frame_index").to_numpy()
            except Exception as exc:
                raise FormatError(f"cannot read frame_index: {exc}", path=g.data) from exc
        t0, c0 = time.perf_counter(), time.process_time()
        with MediaPipeHands(mirrored=opts.mirrored, model_complexity=opts.model_complexity,
                            min_detection_confidence=opts.min_detection_confidence,
                            min_tracking_confidence=opts.min_tracking_confidence) as det:
            video = g.videos[out.stream]
            pose2d, pose3d, (w, h) = detect_frames(read_rgb_frames(video), frame_index, det, video)
            params = dict(det.params)
        out.seconds, out.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
        meta = {"format": "egopool.keypoints/1", "task": shared.root.name, "episode_index": g.index,
                "stream": out.stream, "image_width": w, "image_height": h, **params}
        write_episode_keypoints(directory, pose2d, pose3d, meta,
                                publish_lock=None if isinstance(shared.root, ObjectPath) else task_lock(shared.root))
    except EgopoolError as exc:
        if "egopool[keypoints]" in (exc.hint or ""):
            raise
        out.error = exc.one_line()
        return out
    except OSError as exc:
        out.error = f"{exc.filename or out.directory}: {exc.strerror or exc}"
        return out
    out.frames = int(frame_index.shape[0])
    out.left_frames, out.right_frames = int(pose3d.present["left"].sum()), int(pose3d.present["right"].sum())
    out.hand_frames = int((pose3d.present["left"] | pose3d.present["right"]).sum())
    return out


def select_episodes(root: Path | ObjectPath, info: Mapping[str, Any],
                    indices: Sequence[int] | None) -> list[EpisodeFiles]:
    """Committed episodes (data + row), all or the given N in ascending order.

    Raises
    ------
    EpisodeNotFoundError
        A given N has no committed episode.
    """
    layout = TaskLayout.from_info(root, info)
    if indices is None or len(indices) == 0:
        return [g for g in list_task_episodes(root, layout) if g.data is not None and g.meta is not None]
    chosen = []
    for n in sorted(set(int(n) for n in indices)):  # N's own paths: no scan of the task (issue 12 F)
        g = find_episode_files(root, layout, n, info.get("video_extensions")) if n >= 1 else None
        if g is None or g.data is None or g.meta is None:
            raise EpisodeNotFoundError(root, n)
        chosen.append(g)
    return chosen


def extract_keypoints(task_dir: str | Path, indices: Sequence[int] | None = None, *,
                      options: ExtractOptions = ExtractOptions(), mirror_root: str | Path | None = None,
                      executor: Executor[Any, Any, Any] | None = None,
                      progress: Callable[[int, int], None] | None = None) -> KeypointsExtractReport:
    """Extract hand keypoints of a task's episodes into the mirror (file_format.md §10).

    Parameters
    ----------
    task_dir:
        The task directory.
    indices:
        Global N to process (default: every committed episode).
    options:
        Stream and detector settings (:class:`ExtractOptions`).
    mirror_root:
        The ``keypoints_output`` directory (default :func:`~egopool.keypoints.mirror.default_mirror_root`).
    executor:
        In-process (default) or :class:`~egopool.jobs.RayExecutor` (one Ray task per episode).
    progress:
        ``progress(done, total)`` after each episode.

    Returns
    -------
    KeypointsExtractReport
        ``ok`` is False when some episode could not be processed (each says why).

    Raises
    ------
    FormatError
        ``info.json`` unreadable.
    EpisodeNotFoundError
        A requested N does not exist.
    EgopoolError
        mediapipe is not installed (``pip install 'egopool[keypoints]'``), or the Ray job failed.
    """
    given = as_path(task_dir)
    # a Ray worker does not share our working directory (a bucket's URI is the same everywhere)
    root = given if isinstance(given, ObjectPath) else Path(os.path.abspath(given))
    info = read_info(root)
    groups = select_episodes(root, info, indices)
    mroot = Path(os.path.abspath(mirror_root if mirror_root is not None else default_mirror_root(root)))
    ex = executor or LocalExecutor()
    report = KeypointsExtractReport(given, mroot, ex.name)
    t0 = time.perf_counter()
    report.episodes = ex.map(extract_episode, _ExtractInput(root, info, mroot, options), groups, progress=progress)
    report.seconds = time.perf_counter() - t0
    return report
