"""Import the real ``lerobot`` package in the interop venv (test-only; egopool never imports it).

``scripts/install-extra interop`` installs lerobot 0.4.4 without its pins next to the CPU
torch 2.13.0 this machine keeps on disk, and torchvision 0.25.0 from PyPI, whose compiled
ops are built against CUDA torch and cannot load here. torchvision's own Python code then
registers fake kernels for two of those ops (``nms``, ``qnms``) without checking that they
exist, so ``import torchvision`` fails before lerobot gets to it. lerobot's dataset code only
needs ``torchvision.transforms`` and the PyAV ``VideoReader`` (``video_backend="pyav"``), none
of which use the compiled ops; declaring the two op schemas (no kernel: calling them still
fails) lets the import through. Nothing else of lerobot or torchvision is changed
(docs/decisions.md I3).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

_OPS = ("nms", "qnms")
_declared: list[Any] = []


def _compiled_ops_load(torch: Any) -> bool:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    for lib in Path(next(iter(spec.submodule_search_locations))).glob("_C*.so"):
        try:
            torch.ops.load_library(str(lib))
            return True
        except (OSError, RuntimeError):
            return False
    return False


def lerobot_dataset_class() -> Any:
    """``lerobot.datasets.lerobot_dataset.LeRobotDataset``, or a skip when lerobot is not installed."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("lerobot")
    if not _declared and not _compiled_ops_load(torch):
        lib = torch.library.Library("torchvision", "DEF")  # noqa: TOR901 - declaration only, no kernel
        for op in _OPS:
            lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _declared.append(lib)  # keep the Library alive: dropping it would undefine the ops
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset


def write_with_lerobot(root: Path, features: dict[str, dict[str, Any]], episodes: list[list[dict[str, Any]]], *,
                       fps: int, vcodec: str = "h264", repo_id: str = "local/own") -> Any:
    """A dataset written by lerobot's own writer (``add_frame`` + ``save_episode``), loaded back.

    ``features`` as in an ``info.json`` (lerobot's frame keys are left out here; a video feature
    may carry its ``info``, which lerobot then keeps); each episode a list of frames
    (``{feature: value, "task": str}``). lerobot 0.4.4's writer cannot write a shape-(1,) feature
    under numpy >= 2.4 (``datasets`` calls ``float()`` on each 1-element row, docs/decisions.md I3):
    after ``add_frame`` has checked them, such rows are handed to ``save_episode`` as 0-d arrays,
    the way lerobot's own ``timestamp`` and ``frame_index`` reach it (same parquet type, and
    ``compute_episode_stats`` gives the same (1,) blocks).
    """
    LeRobotDataset = lerobot_dataset_class()
    from lerobot.datasets.utils import DEFAULT_FEATURES

    feats = {k: {**v, "shape": tuple(v["shape"])} for k, v in features.items() if k not in DEFAULT_FEATURES}
    scalars = [k for k, v in feats.items() if v["shape"] == (1,) and v["dtype"] not in ("video", "image", "string")]
    ds = LeRobotDataset.create(repo_id, fps=fps, features=feats, root=root, vcodec=vcodec, video_backend="pyav",
                               use_videos=any(v["dtype"] == "video" for v in feats.values()))
    for frames in episodes:
        for frame in frames:
            ds.add_frame(dict(frame))
        for k in scalars:
            ds.episode_buffer[k] = [v.reshape(()) for v in ds.episode_buffer[k]]
        ds.save_episode()
    ds.finalize()
    return LeRobotDataset(repo_id, root=root, video_backend="pyav")
