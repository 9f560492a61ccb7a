"""``egopool audit-gaps`` and egopool.gaps (file_format.md §7.3, multi_device_storage.md §3.1, §5.4)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from egopool import TaskWriter, open_task, scalar_ns_column, slam_trajectory_columns, vector_column
from egopool.cli.app import main
from egopool.gaps import audit_episode_gaps

DT = 33_333_333
T0 = 9_000_000_000_000


@pytest.fixture()
def task(tmp_path):
    """Episode 1: 200 rows; the RGB clock skips 3 frames before row 60 and 1 before row 150 and is
    stored truncated to 32 bits; the force sensor stalls for 10 rows; the trajectory misses stamps.
    Episode 2: clean."""
    tw = TaskWriter(tmp_path, "gaps", fps=30.0)
    cols = [vector_column("observation.gripper_left_force", [3]), scalar_ns_column("observation.gripper_left_force_ns"),
            *slam_trajectory_columns()]
    ep = tw.begin_episode(columns=cols)
    frame_no = np.arange(200) + 3 * (np.arange(200) >= 60) + 1 * (np.arange(200) >= 150)
    host = T0 + frame_no.astype(np.int64) * DT
    for r in range(200):
        values = {}
        if not 100 <= r < 110:  # stalled: the row keeps the latest sample (same stamp) ...
            values["observation.gripper_left_force"] = [0, 0, float(r)]
            values["observation.gripper_left_force_ns"] = int(host[r] - 3_000_000)
        elif r < 105:
            values["observation.gripper_left_force"] = [0, 0, 99.0]
            values["observation.gripper_left_force_ns"] = int(host[99] - 3_000_000)  # ... or has none (0)
        stamp = 0 if r % 5 == 0 else int(host[r] + 1_000_000)
        values["observation.slam_trajectory"] = [[r / 30, 0, 0, 0, 0, 0, 0, 1]]
        values["observation.slam_trajectory_ns"] = [stamp]
        ep.add_frame(values, hardware_ns=int(np.int64(host[r]).astype(np.int32)))
    ep.finish()
    ep2 = tw.begin_episode()
    for r in range(30):
        ep2.add_frame({}, hardware_ns=T0 + r * DT)
    ep2.finish()
    return tmp_path / "gaps"


def test_audit_episode_gaps(task):
    rep = audit_episode_gaps(open_task(task).episode(1))
    by = {s.column: s for s in rep.series}
    assert list(by) == ["hardware_ns", "observation.gripper_left_force_ns", "observation.slam_trajectory_ns"]
    hw = by["hardware_ns"]
    assert hw.unwrapped and hw.stamps == 200
    assert hw.rows.tolist() == [60, 150] and hw.missing.tolist() == [3, 1]
    assert hw.delta_ns.tolist() == [4 * DT, 2 * DT]
    force = by["observation.gripper_left_force_ns"]
    # distinct stamps: rows 0..99 and 110..199 (100..104 repeat row 99's stamp, 105..109 are 0): 11 intervals
    assert force.rows.tolist() == [60, 110, 150] and force.missing.tolist() == [3, 10, 1]
    traj = by["observation.slam_trajectory_ns"]
    assert traj.stamps == 160  # every 5th point has no stamp (0): skipped, so the step over it is a hole
    after_unstamped = list(range(6, 200, 5))
    assert traj.rows.tolist() == after_unstamped
    # row 60 is unstamped and follows the 3 skipped frames: 4 missing before row 61
    expected_missing = [4 if r == 61 else 2 if r == 151 else 1 for r in after_unstamped]
    assert traj.missing.tolist() == expected_missing
    assert rep.gaps == 2 + 3 + len(after_unstamped)
    loose = audit_episode_gaps(open_task(task).episode(1), tolerance=2.5)
    assert {s.column: s.rows.tolist() for s in loose.series}["hardware_ns"] == [60]


def test_cli_json(task, capsys):
    assert main(["audit-gaps", str(task), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    eps = {e["episode_index"]: e for e in out["episodes"]}
    assert sorted(eps) == [1, 2]
    assert eps[2]["gaps"] == 0 and [s["column"] for s in eps[2]["series"]] == ["hardware_ns"]
    hw = eps[1]["series"][0]
    assert hw["column"] == "hardware_ns" and hw["unwrapped"] is True
    assert hw["list"] == [{"row": 60, "gap_ms": 133.333, "missing": 3}, {"row": 150, "gap_ms": 66.667, "missing": 1}]
    assert eps[1]["interval_ms"] == pytest.approx(33.333333)


def test_cli_table_and_options(task, capsys):
    assert main(["audit-gaps", str(task), "--episode", "2"]) == 0
    out = capsys.readouterr().out
    assert "hardware_ns" in out and "1 episode(s), 0 gap(s)" in out
    assert main(["audit-gaps", str(task), "-e", "1", "--fps", "15", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)["episodes"][0]
    # at 15 fps (66.7 ms) the 133 ms step is 2 intervals (a gap), the 67 ms one is not
    assert one["series"][0]["list"] == [{"row": 60, "gap_ms": 133.333, "missing": 1}]
    assert main(["audit-gaps", str(task / "nope")]) == 1
    assert "egopool: error:" in capsys.readouterr().err
    assert main(["audit-gaps", str(task), "-e", "7"]) == 1
    assert "no episode 7" in capsys.readouterr().err
