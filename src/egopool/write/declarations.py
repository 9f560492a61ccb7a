"""What an episode declares about itself: its ``info.json`` declarations (merged by
:mod:`egopool.write.task_meta`, file_format.md §3, multi_device_storage.md §6.4) and the column
specs its ``meta/episodes`` row carries (§6.2)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..schema import ColumnSpec
from .streams import EpisodeStream

__all__ = ["EpisodeDeclarations", "row_specs", "trajectory_specs"]


@dataclass(frozen=True)
class EpisodeDeclarations:
    """What :meth:`TaskWriter.begin_episode` declared for ``info.json`` and the episode row (§6.2, §6.3)."""

    devices: list[dict[str, Any]]
    device_names: dict[str, str]
    calibration: dict[str, Any]
    sensors: list[str]
    sensor_dim: int | None
    info_extra: dict[str, Any]

    def info(self, specs: Mapping[str, ColumnSpec], present: set[str], streams: Mapping[str, EpisodeStream], *,
             app_version: str, fps: float, index: int) -> dict[str, Any]:
        """The ``info.json`` declarations of episode ``index`` (N): its ``present`` columns' features, its
        cameras and video extensions, devices, sensors, SLAM frames, and ``info_extra``."""
        features = {n: dict(s.feature) for n, s in specs.items() if s.feature is not None and n in present}
        cameras = {}
        for key, st in streams.items():
            if st.spec.kind == "rgb":
                cam: dict[str, Any] = {"height": st.spec.height, "width": st.spec.width}
                if st.spec.fps and st.spec.fps != fps:
                    cam["fps"] = float(st.spec.fps)
                cameras[key] = cam
        decl: dict[str, Any] = {
            "app_version": app_version, "fps": fps, "video": bool(streams),
            "features": features, "cameras": cameras,
            "video_extensions": {k: st.final.suffix.lstrip(".") for k, st in streams.items()},
            "devices": self.devices, "device_names": self.device_names,
            "sensors": self.sensors, "total_episodes": index,
        }
        if self.calibration:
            decl["calibration"] = self.calibration
        if self.sensor_dim is not None:
            decl["sensor_dim"] = int(self.sensor_dim)
        trajs = trajectory_specs(specs, present)
        frames = {n: s.feature["frame"] for n, s in trajs.items() if s.feature and "frame" in s.feature}
        if frames:
            decl["slam_frames"] = frames
        gripper = [n for n, s in trajs.items()
                   if (s.feature or {}).get("owner", {}).get("role", "ego" if ".ego_" in n else "gripper") == "gripper"]
        if gripper:
            rig1 = "observation.slam_trajectory" if "observation.slam_trajectory" in gripper else gripper[0]
            decl["gripper_slam_frame"] = (trajs[rig1].feature or {}).get("frame", "right_forward_up")
        decl.update(self.info_extra)
        return decl


def trajectory_specs(specs: Mapping[str, ColumnSpec], present: set[str]) -> dict[str, ColumnSpec]:
    """The SLAM trajectory columns among the ``present`` ones."""
    return {n: s for n, s in specs.items() if s.kind == "slam_trajectory" and n in present}


def row_specs(specs: Mapping[str, ColumnSpec], present: set[str]) -> dict[str, Any]:
    """The ``force_matrix_specs`` and ``slam_specs`` of the episode row (§6.2) for its ``present`` columns."""
    slam_specs = {}
    for n, s in trajectory_specs(specs, present).items():
        feat = dict(s.feature or {})
        slam_specs[n] = {k: feat[k] for k in ("frame", "frame_axes", "time", "owner", "source_slot") if k in feat}
    fm_specs = {n: {k: v for k, v in (s.feature or {}).items()}
                for n, s in specs.items() if s.kind == "force_matrix" and n in present}
    return {"force_matrix_specs": fm_specs, "slam_specs": slam_specs}
