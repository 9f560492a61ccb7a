"""Automatic quality facts of one episode (docs/decisions.md Q4).

Facts (all JSON numbers / lists; row ranges are ``[start, stop)`` data rows):

``rows``, ``fps``, ``duration_s``
    Data rows, the task's row rate, ``rows / fps`` (s).
``frames``, ``frames_mismatch``
    Frames per stream (counted by demuxing, :func:`egopool.codecs.video.count_video_frames`)
    and the streams whose count is not ``rows`` (§8: one frame per row).
``gap_total``, ``gap_ranges``, ``gap_series_total``, ``gap_missing_frames``, ``max_gap_ms``
    ``egopool audit-gaps`` over every stamp series (:func:`egopool.gaps.audit_episode_gaps`); one stall
    seen by several series is one gap: each series' gap covers the rows of its length before the row
    where it ends, and overlapping covers merge (``gap_ranges``, ``[start, stop)`` rows; ``gap_total``
    their number; ``gap_series_total`` the series' own count, docs/decisions.md P7).
``frozen_frames``, ``frozen_streams``, ``frozen_ranges``, ``repeated_counts``
    Frames that repeat the frame before, per stream, measured on the decoded frames (a frozen camera;
    :attr:`egopool.curation.proxy.StreamPreview.held`): their sum, ``{key: frames}``, ``{key: [[start,
    stop), ...]]}``, and the writer's own ``<key>_repeated_count`` of ``drop_stats`` (P7).
``drop_total``, ``drop_stats``
    The episode row's ``drop_stats`` and its frame-drop sum (§6.2).
``idle_ranges``, ``idle_frames``, ``idle_fraction``, ``idle_min_frames``
    DROID-style idle detection: a row is still when no trajectory moved more than
    ``idle_motion_m`` since the previous row and no gripper opening changed more than
    ``idle_gripper_pct``; a run of at least ``idle_min_frames`` still rows is an idle range.
    None (and ``idle_fraction`` None) when the episode has neither trajectories nor a gripper.
``ego_stream``, ``blur_outliers``, ``blur_rows``, ``exposure_outliers``, ``exposure_rows``
    Sampled frames of the ego RGB stream (:func:`ego_stream`, chosen among the streams that move):
    badly exposed when the mean luma is below 16 or above 240 or more than half of the pixels are
    clipped; blurred when a well-exposed frame's variance of the Laplacian is below ``blur_ratio`` ×
    the median of the well-exposed frames (a dark frame is one exposure outlier, not also a blurred
    one, P7). None without an RGB stream.
``validation_ok``, ``validation_errors``, ``validation_warnings``
    The validator's verdict at import (None when the episode was not imported by the server).
``size_bytes``
    Bytes of the episode's files (videos, data parquet, meta row).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrowutil import list_offsets
from ..codecs.video import count_video_frames
from ..errors import EgopoolError
from ..gaps import SeriesGaps, audit_episode_gaps
from ..read.reader import Episode
from .proxy import FrameStats, StreamPreview

__all__ = ["QualityParams", "ego_stream", "episode_quality", "gap_ranges", "idle_ranges", "row_ranges"]


@dataclass(frozen=True)
class QualityParams:
    """Thresholds of the facts (module docstring).

    Attributes
    ----------
    idle_min_frames:
        Shortest idle range, rows (default 30: 1 s at 30 fps).
    idle_motion_m:
        Largest trajectory step between rows still counted as no motion, m.
    idle_gripper_pct:
        Largest change of a gripper's opening between rows still counted as no motion, %.
    blur_ratio:
        A sampled frame is blurred below this fraction of the episode's median sharpness.
    """

    idle_min_frames: int = 30
    idle_motion_m: float = 0.002
    idle_gripper_pct: float = 0.5
    blur_ratio: float = 0.35


def row_ranges(mask: np.ndarray, min_len: int = 1) -> list[list[int]]:
    """Runs of True in ``mask`` ``(R,)`` bool at least ``min_len`` long, as ``[start, stop)`` rows."""
    m = np.concatenate([[False], np.asarray(mask, bool), [False]])
    edges = np.flatnonzero(np.diff(m.astype(np.int8)))
    return [[int(a), int(b)] for a, b in zip(edges[::2], edges[1::2], strict=True) if b - a >= min_len]


def _held(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """``values`` ``(R, D)`` with rows not ``present`` holding the last present row (NaN before the first)."""
    idx = np.where(present, np.arange(len(present)), -1)
    np.maximum.accumulate(idx, out=idx)
    out = np.full_like(values, np.nan)
    ok = idx >= 0
    out[ok] = values[idx[ok]]
    return out


def _motion(ep: Episode, rows: int, params: QualityParams) -> np.ndarray | None:
    """``(R,)`` bool: the row moved (a trajectory or a gripper), None without motion signals."""
    moved = np.zeros(rows, bool)
    found = False
    for col in ep.trajectories():
        tr = ep.trajectory(col)
        if not len(tr.rows):
            continue
        last = np.full((rows, 3), np.nan)
        present = np.zeros(rows, bool)
        last[tr.rows] = tr.positions  # rows ascending: the last point of a row wins
        present[tr.rows] = True
        pos = _held(last, present)
        step = np.linalg.norm(np.diff(pos, axis=0), axis=1)
        moved[1:] |= np.nan_to_num(step, nan=0.0) > params.idle_motion_m
        found = True
    for col in (c for c in ep.column_names if c.startswith("observation.") and c.endswith("gripper_state")):
        data = ep.columns([col]).column(col)
        offs = list_offsets(data)
        flat = np.asarray(data.combine_chunks().flatten().to_numpy(zero_copy_only=False), np.float64)
        present = np.diff(offs) > 0
        first = np.full((rows, 1), np.nan)
        first[present, 0] = flat[offs[:-1][present]]
        opening = _held(first, present)[:, 0]
        moved[1:] |= np.nan_to_num(np.abs(np.diff(opening)), nan=0.0) > params.idle_gripper_pct
        found = True
    return moved if found else None


def idle_ranges(ep: Episode, params: QualityParams = QualityParams()) -> list[list[int]] | None:
    """Idle ranges ``[start, stop)`` of an episode (module docstring), None without motion signals.

    Row 0 counts as still when row 1 is (it has no previous row).
    """
    rows = ep.length
    moved = _motion(ep, rows, params)
    if moved is None:
        return None
    still = ~moved
    if rows > 1:
        still[0] = still[1]
    return row_ranges(still, max(1, params.idle_min_frames))


def ego_stream(ep: Episode, rgb_keys: list[str]) -> str | None:
    """The ego camera's RGB stream among ``rgb_keys``: the ``source_slot`` of a trajectory whose
    ``owner.role`` is ``ego`` (multi_device_storage.md §6.6), else a key with ``head`` in it, else
    the first key in order; None when there is no RGB stream."""
    if not rgb_keys:
        return None
    features = ep.task.info.get("features")
    if isinstance(features, Mapping):
        for feat in features.values():
            if isinstance(feat, Mapping) and isinstance(feat.get("owner"), Mapping) and \
                    feat["owner"].get("role") == "ego" and feat.get("source_slot") in rgb_keys:
                return str(feat["source_slot"])
    heads = [k for k in sorted(rgb_keys) if "head" in k]
    return heads[0] if heads else sorted(rgb_keys)[0]


def _image_facts(stats: FrameStats | None, params: QualityParams) -> dict[str, Any]:
    if stats is None or not stats.rows.size:
        return {"blur_outliers": None, "blur_rows": None, "exposure_outliers": None, "exposure_rows": None,
                "sharpness_median": None, "frames_sampled": 0}
    exposed = (stats.brightness < 16.0) | (stats.brightness > 240.0) | (stats.clipped > 0.5)
    median = float(np.median(stats.sharpness[~exposed])) if (~exposed).any() else 0.0
    blurred = (stats.sharpness < params.blur_ratio * median) & ~exposed
    return {"blur_outliers": int(blurred.sum()), "blur_rows": stats.rows[blurred].tolist(),
            "exposure_outliers": int(exposed.sum()), "exposure_rows": stats.rows[exposed].tolist(),
            "sharpness_median": round(median, 3), "frames_sampled": int(stats.rows.size)}


def gap_ranges(series: Sequence[SeriesGaps], fps: float, rows: int) -> list[list[int]]:
    """``[start, stop)`` row ranges of the gaps of every series, one per stall: a gap covers the rows from
    the stamp before it to the one that ends it (``[start_row, end_row + 1)``; without start rows, the
    rows its length spans at ``fps``); covers that overlap merge, so one stall seen by many series is one."""
    spans = []
    for s in series:
        for k, (r, d) in enumerate(zip(s.rows, s.delta_ns, strict=True)):
            a = int(s.start_rows[k]) if s.start_rows is not None else \
                int(r) - max(1, math.ceil(float(d) * fps / 1e9 - 1e-6))
            spans.append((max(0, min(a, int(r) - 1)), min(rows, int(r) + 1)))
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a < out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _frozen_facts(ep: Episode, streams: Sequence[StreamPreview] | None) -> dict[str, Any]:
    raw = ep.meta.get("drop_stats") or {}
    repeated = {k[: -len("_repeated_count")]: int(v) for k, v in raw.items()
                if isinstance(k, str) and k.endswith("_repeated_count") and isinstance(v, int)} \
        if isinstance(raw, Mapping) else {}
    if streams is None:
        return {"frozen_frames": None, "frozen_streams": None, "frozen_ranges": None, "repeated_counts": repeated}
    held = {s.key: s for s in streams if s.held}
    return {"frozen_frames": sum(s.held_frames for s in held.values()),
            "frozen_streams": {k: s.held_frames for k, s in sorted(held.items())},
            "frozen_ranges": {k: s.held for k, s in sorted(held.items())}, "repeated_counts": repeated}


def episode_quality(ep: Episode, *, ego: str | None = None, ego_stats: FrameStats | None = None,
                    validation: Mapping[str, Any] | None = None,
                    params: QualityParams = QualityParams(),
                    streams: Sequence[StreamPreview] | None = None) -> dict[str, Any]:
    """The quality facts of one episode (module docstring).

    Parameters
    ----------
    ep:
        The episode.
    ego, ego_stats:
        The ego RGB stream and its sampled frames' statistics
        (:attr:`egopool.curation.proxy.StreamPreview.stats`); None: no image facts.
    validation:
        ``{"ok", "errors", "warnings"}`` from the import, or None.
    params:
        Thresholds.
    streams:
        The previews built (their held frames are the frozen facts); None: frozen facts None.

    Returns
    -------
    dict
        The facts; a fact that could not be computed is None and its error is in ``"errors"``.

    Raises
    ------
    FormatError
        The data parquet cannot be read at all.
    """
    rows = ep.length
    fps = float(ep.task.info.get("fps") or 30.0)
    facts: dict[str, Any] = {"rows": rows, "fps": fps, "duration_s": round(rows / fps, 6)}
    errors: list[str] = []
    frames: dict[str, int | None] = {}
    for key, path in sorted(ep.streams.items()):
        try:
            frames[key] = count_video_frames(path) if path.is_file() else None
        except EgopoolError as exc:
            frames[key] = None
            errors.append(exc.one_line())
    facts["frames"] = frames
    facts["frames_mismatch"] = sorted(k for k, v in frames.items() if v != rows)
    try:
        gaps = audit_episode_gaps(ep)
        merged = gap_ranges(gaps.series, fps, rows)
        facts.update(gap_total=len(merged), gap_ranges=merged, gap_series_total=gaps.gaps,
                     gap_missing_frames=max((s.missing_total for s in gaps.series), default=0),
                     max_gap_ms=max((s.max_gap_ms for s in gaps.series), default=0.0))
    except EgopoolError as exc:
        facts.update(gap_total=None, gap_ranges=None, gap_series_total=None, gap_missing_frames=None,
                     max_gap_ms=None)
        errors.append(exc.one_line())
    try:
        raw = ep.meta.get("drop_stats") or {}
        facts.update(drop_total=ep.frame_drops(), drop_stats=dict(raw) if isinstance(raw, Mapping) else {})
    except EgopoolError as exc:
        facts.update(drop_total=None, drop_stats=None)
        errors.append(exc.one_line())
    try:
        idle = idle_ranges(ep, params)
    except EgopoolError as exc:
        idle = None
        errors.append(exc.one_line())
    idle_frames = sum(b - a for a, b in idle) if idle is not None else None
    facts.update(idle_ranges=idle, idle_frames=idle_frames, idle_min_frames=params.idle_min_frames,
                 idle_fraction=round(idle_frames / rows, 6) if idle_frames is not None and rows else None)
    facts.update(_frozen_facts(ep, streams))
    facts["ego_stream"] = ego
    facts.update(_image_facts(ego_stats, params))
    v = validation or {}
    facts.update(validation_ok=v.get("ok"), validation_errors=v.get("errors"), validation_warnings=v.get("warnings"))
    facts["size_bytes"] = sum(p.stat().st_size for p in ep.files.paths() if p.is_file())
    facts["errors"] = errors
    return facts
