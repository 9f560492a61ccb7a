"""``meta/`` of a LeRobot export and the mapping file, from the episodes' parts (:mod:`.lerobot_export`).

:func:`write_meta` is the driver's step after every episode is written (in-process, on Ray, or into a bucket,
:mod:`.lerobot_bucket`): ``meta/episodes``, ``tasks.parquet``, ``stats.json``, ``info.json`` (with the language
columns' ``tools``, :mod:`.lerobot_language`) and ``egopool_mapping.json`` with each depth stream's measured error.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import fsync_dir
from ..codecs.video_copy import packet_times
from . import lerobot_format as fmt
from ..codecs.depth_error import DepthErrorTally
from .lerobot_depth import LeRobotDepthMap
from .lerobot_plan import LeRobotPlan, StreamMap

__all__ = ["DEPTH_GOP", "MAPPING_FILE", "EpisodePart", "write_json", "write_meta"]

#: Key frame interval of an exported depth video: lerobot's own writer's (``VideoEncoderConfig.g``).
DEPTH_GOP = 2
MAPPING_FILE = "egopool_mapping.json"


@dataclass(frozen=True)
class EpisodePart:
    """What :func:`export_episode` wrote for one episode (merged by :func:`export_lerobot`).

    Attributes
    ----------
    index, episode_index:
        Pooled N and LeRobot 0-based episode index.
    length:
        Frames.
    from_index:
        Global index of its first frame.
    data_file:
        ``(chunk_index, file_index)`` of its data parquet.
    videos:
        LeRobot feature -> ``(chunk_index, file_index, from_timestamp, to_timestamp)``.
    copied:
        Video features copied without re-encoding.
    stats:
        Feature -> statistics block (:mod:`.lerobot_format`).
    depth_errors:
        Depth feature -> its transcoding error tally.
    tasks:
        The LeRobot task texts of its frames, in order (``meta/episodes`` ``tasks``; empty: the plan's task text).
    """

    index: int
    episode_index: int
    length: int
    from_index: int
    data_file: tuple[int, int]
    videos: dict[str, tuple[int, int, float, float]]
    copied: tuple[str, ...]
    stats: dict[str, dict[str, np.ndarray]] = field(repr=False)
    depth_errors: dict[str, DepthErrorTally] = field(default_factory=dict, repr=False)
    tasks: tuple[str, ...] = ()


def _episodes_table(plan: LeRobotPlan, parts: Sequence[EpisodePart]) -> pa.Table:
    cols: dict[str, list[Any]] = {"episode_index": [], "tasks": [], "length": [], "data/chunk_index": [],
                                  "data/file_index": [], "dataset_from_index": [], "dataset_to_index": []}
    for s in plan.streams:
        for k in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
            cols[f"videos/{s.name}/{k}"] = []
    stat_names = list(parts[0].stats)
    for name in stat_names:
        for key in parts[0].stats[name]:
            cols[f"stats/{name}/{key}"] = []
    cols.update({"meta/episodes/chunk_index": [], "meta/episodes/file_index": [],
                 "egopool/pooled_episode_index": [], "egopool/created_at": []})
    for p in parts:
        cols["episode_index"].append(p.episode_index)
        cols["tasks"].append(list(p.tasks) or [plan.task_text])
        cols["length"].append(p.length)
        cols["data/chunk_index"].append(p.data_file[0])
        cols["data/file_index"].append(p.data_file[1])
        cols["dataset_from_index"].append(p.from_index)
        cols["dataset_to_index"].append(p.from_index + p.length)
        for s in plan.streams:
            vc, vf, t0, t1 = p.videos[s.name]
            for k, v in zip(("chunk_index", "file_index", "from_timestamp", "to_timestamp"), (vc, vf, t0, t1),
                            strict=True):
                cols[f"videos/{s.name}/{k}"].append(v)
        for name in stat_names:
            for key, block in p.stats[name].items():
                arr = np.asarray(block)
                cols[f"stats/{name}/{key}"].append(arr.astype(np.int64 if key == "count" else np.float64).tolist())
        cols["meta/episodes/chunk_index"].append(0)
        cols["meta/episodes/file_index"].append(0)
        cols["egopool/pooled_episode_index"].append(p.index)
        cols["egopool/created_at"].append(plan.created_at.get(p.index))
    return pa.table(cols)


def _info(plan: LeRobotPlan, parts: Sequence[EpisodePart], copied_info: Mapping[str, dict[str, Any]]) -> dict:
    feats = plan.features
    for s in plan.streams:
        feats[s.name]["info"] = copied_info[s.name]
    total = sum(p.length for p in parts)
    info: dict[str, Any] = {
            "codebase_version": fmt.CODEBASE_VERSION, "robot_type": None, "total_episodes": len(parts),
            "total_frames": total, "total_tasks": len(plan.task_texts), "chunks_size": 1000,
            "data_files_size_in_mb": 100,
            "video_files_size_in_mb": 200, "fps": plan.fps, "splits": {"train": f"0:{len(parts)}"},
            "data_path": fmt.DATA_PATH, "video_path": fmt.VIDEO_PATH if plan.streams else None, "features": feats}
    tools = _language_tools(plan)
    return info | ({"tools": tools} if tools else {})


def _language_tools(plan: LeRobotPlan) -> list[Any]:
    """The ``tools`` of ``info.json``: those an exported language column's declaration carries (I22), in order,
    each once."""
    tools: list[Any] = []
    for c in plan.columns:
        if c.kind != "language":
            continue
        for pooled in c.pooled.values():
            info = (pooled.get("feature") or {}).get("info")
            for t in (info.get("tools") if isinstance(info, Mapping) else None) or ():
                if t not in tools:
                    tools.append(t)
    return tools


def _video_feature_info(root: Path, s: StreamMap, fps: int, target: str = "0.4",
                        gop: int | None = None) -> dict[str, Any]:
    """A video feature's ``info``: 0.4's keys (``video.is_depth_map``), or 0.6's (``is_depth_map`` last, and a
    depth video's ``depth_unit`` and quantisation), which lerobot 0.6.1's ``merge_datasets`` compares."""
    _, info = packet_times(root / fmt.VIDEO_PATH.format(video_key=s.name, chunk_index=0, file_index=0))
    stream = {"video.height": int(info["height"]), "video.width": int(info["width"]), "video.codec": info["codec"],
              "video.pix_fmt": info["pix_fmt"]}
    if target == "0.4":
        return {**stream, "video.is_depth_map": False, "video.fps": fps, "video.channels": 3, "has_audio": False}
    if not s.depth:
        return {**stream, "video.fps": fps, "video.channels": 3, "has_audio": False,
                **({"video.g": gop} if gop is not None else {}), "is_depth_map": False}
    return {"is_depth_map": True, "depth_unit": "mm", **stream, "video.fps": fps, "video.channels": 1,
            "has_audio": False, "video.g": gop or DEPTH_GOP, "video.extra_options": {"x265-params": "lossless=1"},
            **LeRobotDepthMap().to_info()}


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=4, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")


def write_meta(plan: LeRobotPlan, parts: Sequence[EpisodePart], root: Path) -> None:
    """``meta/`` from the merged episode parts, and the mapping file."""
    meta = root / "meta"
    (meta / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
    pq.write_table(_episodes_table(plan, parts), meta / "episodes" / "chunk-000" / "file-000.parquet")
    fmt.write_tasks(meta / "tasks.parquet", plan.task_texts)
    stats = {name: fmt.aggregate_stats([p.stats[name] for p in parts]) for name in parts[0].stats}
    write_json(meta / "stats.json", fmt.stats_to_json(stats))
    video_info = {s.name: _video_feature_info(root, s, plan.fps, plan.target, plan.gop) for s in plan.streams}
    write_json(meta / "info.json", _info(plan, parts, video_info))
    mapping = plan.mapping()
    for s in plan.streams:
        if s.depth:
            errs = [p.depth_errors[s.name] for p in parts]
            total = errs[0]
            for e in errs[1:]:
                total = total.merge(e)
            depth_map = LeRobotDepthMap()
            mapping["features"][s.name]["depth"] = {
                **LeRobotDepthMap().to_info(), **total.to_dict(),
                "bound": "in [depth_min, depth_max]: |error| <= half the code step + 0.5 mm "
                         f"({depth_map.step_mm(1000) / 2 + 0.5:.2f} mm at 1 m, "
                         f"{depth_map.step_mm(5000) / 2 + 0.5:.2f} mm at 5 m, "
                         f"{depth_map.step_mm(10000) / 2 + 0.5:.2f} mm at 10 m) of egopool's reader's value",
                "hole_value": "code 0, which LeRobot reads as depth_min (10 mm); egopool's import makes it 0 again",
                "outside": "valid depths below depth_min get code 1 (counted), above depth_max are clipped to it"}
    write_json(root / MAPPING_FILE, mapping)
    with contextlib.suppress(OSError):
        fsync_dir(meta)
