"""signals.json and quality facts of a long episode without video (no server): at most 2000 points per
series, each the stored value at its row; idle ranges of an injected still stretch; sizes of proxies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from egopool.curation.proxy import proxy_size
from egopool.curation.quality import QualityParams, episode_quality, row_ranges
from egopool.curation.signals import episode_signals
from egopool.read.reader import open_task
from egopool.schema import vector_column
from egopool.write.task_writer import TaskWriter

ROWS = 2500


def _task(root: Path) -> Path:
    tw = TaskWriter(root, "long", fps=30.0)
    ep = tw.begin_episode(columns=[vector_column("observation.gripper_state", [3]),
                                   vector_column("observation.right_glove", [4])])
    for i in range(ROWS):
        opening = 50.0 if 1000 <= i < 1100 else (i % 97) * 1.0
        ep.add_frame({"observation.gripper_state": np.array([opening, 0.0, 7.0 * i], np.float32),
                      "observation.right_glove": np.array([i, 2 * i, 3, i % 5], np.float32)})
    ep.finish()
    return root / "long"


def test_long_episode_signals_and_idle(tmp_path: Path) -> None:
    ep = open_task(_task(tmp_path)).episode(1)
    doc = episode_signals(ep)
    rows = np.asarray(doc["rows"])
    assert len(rows) == len(doc["t"]) == 2000 and rows[0] == 0 and rows[-1] == ROWS - 1
    assert np.all(np.diff(rows) > 0)
    table = pq.read_table(ep.files.data)
    grip = np.stack(table.column("observation.gripper_state").to_numpy(zero_copy_only=False))
    glove = np.stack(table.column("observation.right_glove").to_numpy(zero_copy_only=False)).astype(np.float64)
    series = {s["name"]: s for s in doc["series"]}
    assert all(len(s["values"]) == 2000 for s in doc["series"])
    np.testing.assert_allclose(series["observation.gripper_state.open_pct"]["values"], grip[rows, 0])
    np.testing.assert_allclose(series["observation.gripper_state.fz"]["values"], grip[rows, 2])
    np.testing.assert_allclose(series["observation.right_glove.mean"]["values"], glove[rows].mean(axis=1))
    np.testing.assert_allclose(series["observation.right_glove.max"]["values"], glove[rows].max(axis=1))
    np.testing.assert_allclose(doc["t"], table.column("timestamp").to_numpy()[rows], atol=1e-6)
    q = episode_quality(ep, params=QualityParams(idle_min_frames=50))
    # rows 1001..1099 hold 50 %; the 97-periodic ramp moves 1 % a row elsewhere: only that run is idle
    still = np.concatenate([[False], np.abs(np.diff(grip[:, 0].astype(np.float64))) <= 0.5])
    still[0] = still[1]
    assert q["idle_ranges"] == row_ranges(still, 50) == [[1001, 1100]]
    assert q["duration_s"] == pytest.approx(ROWS / 30.0) and q["frames"] == {} and q["blur_outliers"] is None


def test_proxy_sizes() -> None:
    assert proxy_size(1280, 800) == (480, 300)
    assert proxy_size(640, 480) == (480, 360)
    assert proxy_size(81, 61) == (80, 60)
    assert proxy_size(1920, 1081) == (480, 270)
