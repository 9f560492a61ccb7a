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
    # every 5th point has no stamp (0) but is there: the step over it spans two points, not a hole
    assert traj.stamps == 160 and traj.kind == "points"
    # rows 60 and 150 are unstamped and follow the skipped frames: 59 -> 61 is 5 frame times over
    # 2 points (3 missing), 149 -> 151 is 3 over 2 (1 missing)
    assert traj.rows.tolist() == [61, 151] and traj.missing.tolist() == [3, 1]
    assert traj.delta_ns.tolist() == [5 * DT, 3 * DT]
    assert rep.gaps == 2 + 3 + 2
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


def _one_episode(root, hw, extra=None, fps=30.0):
    """Rows stamped ``hw``; ``extra(r) -> values`` adds signal columns per row."""
    cols = [vector_column("observation.gripper_left_force", [3]), scalar_ns_column("observation.gripper_left_force_ns"),
            *slam_trajectory_columns()]
    ep = TaskWriter(root, "g", fps=fps).begin_episode(columns=cols)
    for r, h in enumerate(hw):
        ep.add_frame(extra(r) if extra else {}, hardware_ns=int(h))
    ep.finish()
    return root / "g"


def test_an_unknown_row_stamp_is_not_a_missing_frame(tmp_path):
    """hardware_ns = 0 means the frame is there but its stamp is unknown: rows 9 -> 11 span two
    intervals over two rows, no frame is missing. The 3 frames skipped before row 50 are."""
    frame_no = np.arange(100) + 3 * (np.arange(100) >= 50)
    hw = T0 + frame_no * DT
    hw[10] = 0
    rep = audit_episode_gaps(open_task(_one_episode(tmp_path, hw)).episode(1))
    s = {x.column: x for x in rep.series}["hardware_ns"]
    assert s.rows.tolist() == [50] and s.missing.tolist() == [3] and s.delta_ns.tolist() == [4 * DT]


def test_unstamped_trajectory_points_are_not_missing_points(tmp_path):
    """A point whose _ns is 0 exists (lockstep with the points); only skipped points are missing."""
    def extra(r):
        if r in (30, 31):  # two points lost
            return {}
        stamp = 0 if r % 4 == 0 else int(T0 + r * DT + 2_000_000)
        return {"observation.slam_trajectory": [[r / 30, 0, 0, 0, 0, 0, 0, 1]],
                "observation.slam_trajectory_ns": [stamp]}
    task = _one_episode(tmp_path, T0 + np.arange(60) * DT, extra)
    s = {x.column: x for x in audit_episode_gaps(open_task(task).episode(1)).series}["observation.slam_trajectory_ns"]
    # the point after the lost ones is row 33 (row 32 is unstamped): 29 -> 33 over positions 29, 32(0), 33
    assert s.rows.tolist() == [33] and s.missing.tolist() == [2] and s.delta_ns.tolist() == [4 * DT]


def test_a_signal_slower_than_the_rows_is_measured_at_its_own_rate(tmp_path):
    """A 15 Hz sensor in 30 fps rows steps 66.7 ms every time: that is its nominal interval, not a gap
    per step. One lost sample (133 ms) is a gap of 1."""
    def extra(r):
        if r % 2 or r == 40:
            return {}
        ns = int(T0 + r * DT - 1_000_000)
        return {"observation.gripper_left_force": [0, 0, 1.0], "observation.gripper_left_force_ns": ns,
                "observation.slam_trajectory": [[r / 30, 0, 0, 0, 0, 0, 0, 1]],
                "observation.slam_trajectory_ns": [ns]}
    task = _one_episode(tmp_path, T0 + np.arange(90) * DT, extra)
    rep = audit_episode_gaps(open_task(task).episode(1))
    for name in ("observation.gripper_left_force_ns", "observation.slam_trajectory_ns"):
        s = {x.column: x for x in rep.series}[name]
        assert s.interval_ns == 2 * DT
        assert s.rows.tolist() == [42] and s.missing.tolist() == [1] and s.delta_ns.tolist() == [4 * DT]
    assert {x.column: x for x in rep.series}["hardware_ns"].interval_ns == pytest.approx(1e9 / 30)


def test_cli_reports_each_series_interval(task, capsys):
    assert main(["audit-gaps", str(task), "-e", "1", "--json"]) == 0
    series = json.loads(capsys.readouterr().out)["episodes"][0]["series"]
    assert all(s["interval_ms"] == pytest.approx(33.333, abs=1e-3) for s in series)


def test_cli_episode_without_data_is_reported_not_skipped(task, capsys):
    (task / "data" / "chunk-000" / "episode-001.parquet").unlink()
    assert main(["audit-gaps", str(task), "-e", "2"]) == 1
    err = capsys.readouterr().err
    assert "episode-001.parquet" in err and "no data parquet" in err and err.count("\n") == 1
    assert main(["audit-gaps", str(task), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [e["episode_index"] for e in out["episodes"]] == [1]
    assert out["skipped"] == [{"episode_index": 2, "reason": "no data parquet"}]
    assert main(["audit-gaps", str(task)]) == 0
    assert "episode 2 skipped: no data parquet" in capsys.readouterr().out


@pytest.mark.parametrize("fps", ["0", "-1", "nan", "inf"])
def test_cli_bad_fps_names_the_option(task, capsys, fps):
    assert main(["audit-gaps", str(task), "--fps", fps]) == 1
    err = capsys.readouterr().err
    assert "--fps" in err and "info.json" not in err and err.count("\n") == 1
