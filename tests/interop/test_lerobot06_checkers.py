"""The field's LeRobot checkers and Lance tools on egopool's exports (issues 27, 31), in CI's ``.venv-lerobot06``.

Each export (the demo with its defaults; the simulated full rig and d435x2 with a state and an action, so
lerobot-lint's kinematic checks run too) is also written by lerobot 0.6.1's own writer with the same values
(:func:`lerobot_field.write_own_copy`). lerobot-doctor 0.2.0 (``check`` and the ACT ``gate``), lerobot-lint
0.1.1 and lerobot-quality-gates 0.1.7 run on both: every kind of finding on egopool's export must also be on
lerobot's own copy. lerobot-lancedb 0.3.1 converts both and its ``LanceDBDataset`` reads every item of the
export with egopool's values. docs/decisions.md I19-I21.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from egopool import Task
from egopool.interop import export_lerobot
from egopool.interop.lerobot_depth import LeRobotDepthMap

from .lerobot_field import (depth_bound, doctor_findings, doctor_gate_findings, lint_findings,
                            quality_gates_findings, write_own_copy)

pytestmark = [pytest.mark.lerobot06, pytest.mark.extra("lerobot06")]

#: task fixture -> (state, action) columns of its export
CASES = {
    "demo_task": ((), ()),
    "sim_task": (("observation.gripper_state",), ("observation.gripper_2_gripper_state",)),
    "d435x2_task": (("observation.left_hand_pose",), ("observation.right_hand_pose",)),
}
CHECKERS = {"lerobot-doctor check": doctor_findings, "lerobot-doctor gate act": doctor_gate_findings,
            "lerobot-lint": lint_findings, "lerobot-quality-gates": quality_gates_findings}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """which -> (task, egopool's export, lerobot's own copy, feature -> (stream, is depth)), built once."""
    pytest.importorskip("lerobot_doctor")
    lerobot = pytest.importorskip("lerobot")
    assert lerobot.__version__ == "0.6.1"
    built: dict[str, tuple[Task, Path, Path, dict[str, tuple[str, bool]]]] = {}
    return built


def _pair(request, pairs, which: str) -> tuple[Task, Path, Path, dict[str, tuple[str, bool]]]:
    if which not in pairs:
        task = request.getfixturevalue(which)
        root = request.getfixturevalue("tmp_path_factory").mktemp(which)
        state, action = CASES[which]
        result = export_lerobot(task.path, root / "egopool", state=state, action=action)
        streams = {s.name: (s.key, s.depth) for s in result.plan.streams}
        pairs[which] = (task, root / "egopool", write_own_copy(task, root / "egopool", root / "own", streams),
                        streams)
    return pairs[which]


@pytest.mark.parametrize("which", list(CASES))
def test_no_finding_of_the_fields_checkers_is_egopools_alone(request, pairs, which):
    task, ours, own, _ = _pair(request, pairs, which)
    found = {name: (check(ours), check(own)) for name, check in CHECKERS.items()}
    alone = {name: sorted(mine[k] for k in mine.keys() - theirs.keys()) for name, (mine, theirs) in found.items()}
    assert not any(alone.values()), f"findings on egopool's export that lerobot's own copy does not get: {alone}"
    doctor, lint, gates = found["lerobot-doctor check"][0], found["lerobot-lint"][0], found["lerobot-quality-gates"][0]
    # the checkers ran and saw the data (values, not a load failure): the demo's default export has the spec's
    # constant action and no state; the rigs' exports load in lerobot-lint (it needs a state and an action)
    assert "Dataset README/card is missing." in gates.values()
    if which == "demo_task":
        assert "action: zero variance (constant value 0.0000)" in doctor.values()
        assert "ACT (Action Chunking Transformer): no state features" in doctor.values()
    else:
        assert not any("Could not load episode" in m for m in lint.values()), lint
        assert any(m.startswith(f"Task '{task.path.name}' has only 2 episodes") for m in lint.values()), lint
        assert not any(m.startswith("ACT (Action Chunking Transformer)") for m in doctor.values())


@pytest.mark.parametrize("which", list(CASES))
def test_lancedb_converts_and_loads_every_export_with_egopools_values(request, pairs, which, tmp_path):
    """lerobot-lancedb's converter and ``LanceDBDataset``: RGB equal to egopool's reader, depth as LeRobot reads
    it (within the stated error of egopool's, holes at depth_min), every data column equal to the export's parquet
    (``wall_time`` too: Lance keeps float64, where LeRobotDataset's float32 is up to 64 s off, as the mapping says)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot_lancedb import LanceDBDataset
    from lerobot_lancedb.convert import convert

    task, ours, own, streams = _pair(request, pairs, which)
    for src in (ours, own):
        convert(tmp_path / src.name, root=src)
    lance = LanceDBDataset(root=tmp_path / ours.name)
    theirs = LanceDBDataset(root=tmp_path / own.name)
    lr = LeRobotDataset("local/x", root=ours, video_backend="torchcodec")
    assert len(lance) == len(lr) == len(theirs) == sum(ep.length for ep in task.episodes())
    assert sorted(lance.meta.depth_keys) == sorted(k for k, (_, d) in streams.items() if d)
    rows = sorted((r for p in sorted((ours / "data").rglob("*.parquet")) for r in pq.read_table(p).to_pylist()),
                  key=lambda r: int(r["index"]))
    features = json.loads((ours / "meta" / "info.json").read_text())["features"]
    columns = [k for k, f in features.items() if f["dtype"] not in ("video", "string")]
    hole_mm = LeRobotDepthMap().depth_min * 1000
    start = 0
    for ep in task.episodes():
        frames = {name: list(ep.depth(key)) if depth else list(ep.video(key)) for name, (key, depth) in streams.items()}
        for fi in range(ep.length):
            item, row = lance[start + fi], rows[start + fi]
            for k in columns:
                want = np.asarray(row[k], dtype=features[k]["dtype"]).reshape(features[k]["shape"])
                np.testing.assert_array_equal(item[k].numpy().reshape(want.shape), want, err_msg=k)
            for name, (_, depth) in streams.items():
                got, want = item[name].numpy(), frames[name][fi]
                if depth:
                    np.testing.assert_array_equal(got, lr[start + fi][name].numpy(), err_msg=name)
                    hole = want == 0
                    assert np.all(got[0][hole] == hole_mm)
                    assert np.all(np.abs(got[0][~hole].astype(np.float64) - want[~hole]) <= depth_bound(want[~hole]))
                else:
                    assert np.abs(got.transpose(1, 2, 0) * 255.0 - want).max() <= 1e-3, (name, fi)
            if "wall_time" in columns:
                assert item["wall_time"].dtype.is_floating_point and float(item["wall_time"]) == row["wall_time"]
                assert abs(float(lr[start + fi]["wall_time"]) - row["wall_time"]) <= 64.0
        start += ep.length
