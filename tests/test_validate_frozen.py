"""validate warns about a frozen stream (the writer's ``<key>_repeated_count`` over half the rows) with its
rows (docs/decisions.md P23); a stream that repeats a few frames is not frozen."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from egopool import StreamSpec, TaskWriter, vector_column
from egopool.validate import validate_task

SENSOR = "observation.right_glove"


def _frozen(report: dict) -> list[tuple[str, str]]:
    return sorted((f["severity"], f["message"]) for f in report["findings"] if "is frozen" in f["message"])


def test_frozen_stream_is_a_warning_with_its_rows(tmp_path: Path) -> None:
    tw = TaskWriter(tmp_path, "cams", fps=30.0)
    ep = tw.begin_episode(columns=[vector_column(SENSOR, [4])], sensors=["right_glove"], sensor_dim=4,
                          streams=[StreamSpec("held", "rgb", 32, 24), StreamSpec("live", "rgb", 32, 24),
                                   StreamSpec("stutter", "rgb", 32, 24)], created_at=1_700_000_000.0)
    for i in range(6):
        frame = np.full((24, 32, 3), 20 * i, np.uint8)
        images = {"live": frame, "held": frame if i in (0, 5) else None,  # rows 1-4 held: 4 of 6
                  "stutter": frame if i not in (2, 3) else None}         # 2 of 6: a stutter, not frozen
        ep.add_frame({SENSOR: np.zeros(4, np.float32) + i}, images=images)
    ep.finish()
    ep = tw.begin_episode(columns=[vector_column(SENSOR, [4])], sensors=["right_glove"], sensor_dim=4,
                          streams=[StreamSpec("held", "rgb", 32, 24), StreamSpec("live", "rgb", 32, 24),
                                   StreamSpec("stutter", "rgb", 32, 24)], created_at=1_700_000_001.0)
    for i in range(5):
        frame = np.full((24, 32, 3), 20 * i, np.uint8)
        ep.add_frame({SENSOR: np.zeros(4, np.float32) + i},
                     images={"live": frame, "stutter": frame, "held": frame if i == 0 else None})
    ep.finish()
    report = validate_task(tmp_path / "cams")
    assert report.ok
    assert _frozen(report.to_dict()) == [
        ("warning", "drop_stats held_repeated_count = 4: stream held is frozen: 4 of its 6 rows repeat the previous "
                    "frame (which ones: the server's quality facts, frozen_ranges); it shows no motion and should "
                    "not be taken for a working camera"),
        ("warning", "drop_stats held_repeated_count = 4: stream held is frozen: rows 1-4 repeat row 0's frame; it "
                    "shows no motion and should not be taken for a working camera")]


def test_a_frozen_stream_stays_said_after_a_lerobot_round_trip(tmp_path: Path) -> None:
    """Review finding: export lerobot then import lerobot dropped drop_stats, and validate then said "ok" of
    the same frozen video. The export's mapping carries each episode's counters; the import gives them back."""
    from egopool.cli.app import main

    tw = TaskWriter(tmp_path, "cams", fps=30.0)
    ep = tw.begin_episode(columns=[vector_column(SENSOR, [4])], sensors=["right_glove"], sensor_dim=4,
                          streams=[StreamSpec("held", "rgb", 32, 24), StreamSpec("live", "rgb", 32, 24)],
                          created_at=1_700_000_000.0)
    for i in range(6):
        frame = np.full((24, 32, 3), 20 * i, np.uint8)
        ep.add_frame({SENSOR: np.zeros(4, np.float32) + i},
                     images={"live": frame, "held": frame if i == 0 else None})  # rows 1-5 held
    ep.finish()
    assert main(["export", "lerobot", str(tmp_path / "cams"), str(tmp_path / "lr")]) == 0
    assert main(["import", "lerobot", str(tmp_path / "lr"), "--task", "back", "--out", str(tmp_path / "rec")]) == 0
    back = tmp_path / "rec" / "back"
    from egopool import open_task

    assert open_task(back).episode(1).meta["drop_stats"].get("held_repeated_count") == 5
    report = validate_task(back)
    assert report.ok
    assert [m for _, m in _frozen(report.to_dict())] == [
        "drop_stats held_repeated_count = 5: stream held is frozen: rows 1-5 repeat row 0's frame; it shows no "
        "motion and should not be taken for a working camera"]
