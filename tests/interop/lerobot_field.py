"""The field's LeRobot tools, run on an egopool export and on lerobot 0.6.1's own copy of its values (test-only).

Used by tests/interop/test_lerobot06_checkers.py in CI's ``.venv-lerobot06`` (Python 3.12), where
``scripts/install-extra lerobot06`` installs lerobot 0.6.1 and the four checkers: lerobot-doctor 0.2.0,
lerobot-lint 0.1.1, lerobot-quality-gates 0.1.7 and lerobot-lancedb 0.3.1 (docs/decisions.md I19-I21).

A finding's *kind* is what a finding says with its numbers and paths taken out: the same defect of the same
feature in both copies is one kind even where a count or a file name differs (lerobot's writer re-encodes the
videos, so sizes, bitrates and key frame counts differ by construction).
"""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from egopool import Task

def depth_bound(mm: np.ndarray) -> np.ndarray:
    """The stated error (mm) of a valid in-range depth ``mm`` read back from an export's depth video: half
    LeRobot's log code step at that depth + 0.5 mm rounding (docs/decisions.md I14)."""
    step = (mm.astype(np.float64) + 3500.0) * (np.exp(np.log(13500.0 / 3510.0) / 4095) - 1.0)
    return step / 2 + 0.5 + 1e-3


#: lerobot's own per-frame columns: its writer fills them (``add_frame`` refuses them)
FRAME_KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def write_own_copy(task: Task, export: Path, root: Path, streams: dict[str, tuple[str, bool]]) -> Path:
    """The values of ``export`` (an ``export lerobot`` of ``task``) written by lerobot 0.6.1's own writer.

    ``LeRobotDataset.create`` with the export's features (each depth video marked ``is_depth_map``, lerobot's
    default depth encoder; RGB as H.264, lerobot's writer's GOP 2), then per exported frame ``add_frame`` with
    the data columns read from the export's parquet and each stream's frame from egopool's reader (RGB uint8
    ``[H, W, 3]``, depth uint16 mm ``[H, W, 1]``, holes 0: what a recorder hands lerobot), and ``save_episode``
    per episode. ``streams``: feature name -> (egopool stream key, is depth). Returns ``root``.
    """
    from lerobot.configs.video import RGBEncoderConfig
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    info = json.loads((export / "meta" / "info.json").read_text())
    feats: dict[str, dict[str, Any]] = {}
    for k, v in info["features"].items():
        if k in FRAME_KEYS:
            continue
        f: dict[str, Any] = {"dtype": v["dtype"], "shape": tuple(v["shape"]), "names": v["names"]}
        if v["dtype"] == "video" and streams[k][1]:
            f["info"] = {"is_depth_map": True}
        feats[k] = f
    tasks = pq.read_table(export / "meta" / "tasks.parquet").to_pylist()
    task_names = {int(r["task_index"]): str(r.get("task", r.get("__index_level_0__"))) for r in tasks}
    ds = LeRobotDataset.create("local/own", fps=int(info["fps"]), features=feats, root=root,
                               robot_type=info.get("robot_type"), rgb_encoder=RGBEncoderConfig(vcodec="h264"))
    data = [pq.read_table(p) for p in sorted((export / "data").rglob("*.parquet"))]
    rows = sorted((r for t in data for r in t.to_pylist()), key=lambda r: int(r["index"]))
    for e, ep in enumerate(task.episodes()):
        mine = [r for r in rows if int(r["episode_index"]) == e]
        frames = {name: list(ep.depth(key)) if depth else list(ep.video(key)) for name, (key, depth) in streams.items()}
        for i, row in enumerate(mine):
            frame: dict[str, Any] = {"task": task_names[int(row["task_index"])]}
            for k, f in feats.items():
                if f["dtype"] == "video":
                    img = frames[k][i]
                    frame[k] = img[..., None] if img.ndim == 2 else img
                elif f["dtype"] == "string":
                    frame[k] = str(row[k])
                else:
                    frame[k] = np.asarray(row[k], dtype=f["dtype"]).reshape(f["shape"])
            ds.add_frame(frame)
        ds.save_episode()
    ds.finalize()
    return root


_NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?%?")
_PATH = re.compile(r"(/[\w.@+-]+)+")


def kind(*parts: object) -> str:
    """A finding's kind: its parts joined, with paths and numbers replaced (``<path>``, ``#``)."""
    text = " | ".join(str(p) for p in parts)
    return _NUMBER.sub("#", _PATH.sub("<path>", text))


def doctor_findings(root: Path) -> dict[str, str]:
    """lerobot-doctor 0.2's ``check`` (every check), its WARN and FAIL messages: kind -> one full message.

    Each check runs alone, as ``run_checks`` would run it, and a check that raises is a finding of its own
    (``run_checks`` would stop the whole report there): lerobot-doctor's ``anomalies`` check raises on any
    2-D feature (``float()`` of a row of a ``[21, 3]`` pose), the same on lerobot's own copy.
    """
    from lerobot_doctor.dataset_loader import load_dataset
    from lerobot_doctor.runner import Severity, _get_all_checks

    dataset = load_dataset(str(root))
    assert dataset.info is not None, f"lerobot-doctor cannot load {root}: {dataset.info_error}"
    out = {}
    for name, check in _get_all_checks().items():
        try:
            result = check(dataset)
        except Exception as exc:  # noqa: BLE001 - a checker's crash is what is compared
            out[kind(name, "CRASH", type(exc).__name__, exc)] = f"{name} raised {type(exc).__name__}: {exc}"
            continue
        for msg in result.messages:
            if msg.severity != Severity.PASS:
                out[kind(name, msg.severity.value, msg.message)] = msg.message
    return out


def doctor_gate_findings(root: Path, policy: str = "act") -> dict[str, str]:
    """lerobot-doctor 0.2's pre-training ``gate`` for ``policy``: its blockers and warnings."""
    from lerobot_doctor.gate import gate_check

    result = gate_check(root, policy=policy)
    return {kind("gate", policy, "BLOCK", b): b for b in result.blockers} | {
        kind("gate", policy, "WARN", w): w for w in result.warnings}


def lint_findings(root: Path) -> dict[str, str]:
    """lerobot-lint 0.1.1's ``lelint check`` (default profile, videos checked, units inferred): id + message."""
    from lerobot_lint.config import load_profile
    from lerobot_lint.engine import check_dataset

    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        found = check_dataset(str(root), load_profile("default"), download_videos=True)
    return {kind(f.check, f.severity, f.joint or "", f.message): f.message for f in found}


def quality_gates_findings(root: Path) -> dict[str, str]:
    """lerobot-quality-gates 0.1.7's ``check``: gate, severity and message of each finding."""
    from lerobot_quality_gates.report import run_quality_gates

    return {kind(f.gate, f.severity, f.message): f.message for f in run_quality_gates(root).findings}
