"""The video streams of a recorded episode: real-time presets and the codec of ``auto`` depth streams.

A real-time episode encodes with faster presets (:data:`REALTIME_PRESETS`, docs/decisions.md R12);
a depth stream the rig declares without a codec (``Rig(depth_codec="auto")``) gets one per task
(R24): the codec the task already stores, else what the capacity check decided for a real-time
episode, else 12-bit HEVC.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .capacity import CapacityReport
from .write.episode_writer import StreamSpec

__all__ = ["REALTIME_PRESETS", "resolve_depth", "task_depth_codecs", "with_presets"]

#: Presets of real-time episodes, measured on the Appendix B rig at full resolution
#: (benchmarks/README.md, docs/decisions.md R12): x264 ``ultrafast`` costs 0.13 instead of 0.30
#: cores per 1280×800 stream; x265 12-bit depth ``superfast`` 1.15 instead of 1.69 cores, +4 % size,
#: non-edge p99 error 1.48 % instead of 1.21 % on the real 7-Scenes frames.
REALTIME_PRESETS: dict[str, str] = {"rgb": "ultrafast", "depth": "superfast"}


def with_presets(streams: Sequence[StreamSpec], presets: Mapping[str, str]) -> list[StreamSpec]:
    """``streams`` with ``presets`` (stream kind -> x264/x265 preset) where a stream has none of its own
    (keeping up beats the last few % of size, decisions R12); ``{}`` keeps them as they are."""
    if not presets:
        return list(streams)
    return [dataclasses.replace(st, preset=presets.get(st.kind)) if st.preset is None else st for st in streams]


def task_depth_codecs(info: Mapping[str, Any]) -> dict[str, str]:
    """Depth codec a task already stores per depth slot, from its ``info.json`` ``video_extensions``
    (mkv = FFV1, mp4 = 12-bit HEVC; RGB slots are those in ``cameras``; file_format.md §8)."""
    exts, cams = info.get("video_extensions"), info.get("cameras")
    if not isinstance(exts, Mapping):
        return {}
    cams = cams if isinstance(cams, Mapping) else {}
    codec = {"mkv": "ffv1", "mp4": "hevc12"}
    return {k: codec[v] for k, v in exts.items() if k not in cams and v in codec}


def resolve_depth(streams: Sequence[StreamSpec], task: Mapping[str, str], capacity: CapacityReport | None,
                  realtime: bool) -> list[StreamSpec]:
    """Give automatic depth streams (codec None) their codec for the whole task (decisions R24).

    ``task`` is :func:`task_depth_codecs` of the task: a task that has episodes keeps its codec (all
    episodes or none, §3, §8); else a real-time episode takes ``capacity.depth_codec``; else 12-bit HEVC.
    """
    auto = [st.image_key for st in streams if st.kind == "depth" and st.codec is None]
    if not auto:
        return list(streams)
    choice = "hevc12"
    if task:
        choice = next(iter(task.values()))
    elif realtime and capacity is not None and capacity.depth_codec:
        choice = capacity.depth_codec
    return [dataclasses.replace(st, codec=task.get(st.image_key, choice)) if st.image_key in auto else st
            for st in streams]
