"""Reader edge cases found in QA: null stamps, short truncated clocks, foreign clocks, malformed
per-episode declarations (file_format.md §3, §3.1, §7.2.1, §7.3; multi_device_storage.md §3.1, §5.4, §7.3)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool import (
    SchemaError,
    StreamSpec,
    TaskWriter,
    open_task,
    slam_trajectory_columns,
)
from egopool._atomic import atomic_write_json
from egopool.meta.episodes import read_episode_row, write_episode_row

DT = 33_333_333
TRAJ = "observation.slam_trajectory"


def _trunc32(ns):
    return ((np.asarray(ns, dtype=np.int64) + 2**31) % 2**32) - 2**31


def _record(root, hw, point_ns, frame="down_left_forward"):
    """One row per ``hw`` stamp, one trajectory point per row stamped ``point_ns[r]``."""
    ep = TaskWriter(root, "t", fps=30.0).begin_episode(list(slam_trajectory_columns(frame=frame)))
    for r, (h, p) in enumerate(zip(hw, point_ns)):
        ep.add_frame({TRAJ: [[r / 30, r * 0.01, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]], TRAJ + "_ns": [int(p)]},
                     hardware_ns=int(h))
    ep.finish()
    return open_task(root / "t").episode(1)


def test_truncated_hardware_ns_that_did_not_wrap_still_pairs(tmp_path):
    """A 2 s gripper episode (≤078) can sit inside one 2^32 ns lap: its truncated stamps never step
    back, but they are still not host time; points must pair with their own rows, not all with the last."""
    host = 7_000_000_000_000 - (7_000_000_000_000 % 2**32) + 100_000_000 + np.arange(60, dtype=np.int64) * DT
    hw = _trunc32(host)
    assert np.all(np.diff(hw) > 0) and hw.max() < 2**31
    ep = _record(tmp_path, hw, host + 2_000_000)
    pairing = ep.pair_trajectory(TRAJ)
    assert pairing.rows.tolist() == list(range(60)) and pairing.paired_by == "hardware_ns"


def test_points_stamped_outside_the_episode_stay_unpaired(tmp_path):
    """On one clock, points stamped before the first stamped row (by more than a frame interval) have no
    frame to pair with: -1, while nearest-neighbour would pin them all on row 0. A point just past the
    last row still pairs."""
    hw = 9_000_000_000_000 + np.arange(30, dtype=np.int64) * DT
    pns = hw + 2_000_000
    pns[:3] = hw[0] - 200_000_000  # 200 ms before the first row
    pns[-1] = hw[-1] + DT // 2
    ep = _record(tmp_path, hw, pns)
    pairing = ep.pair_trajectory(TRAJ)
    assert pairing.paired_by == "hardware_ns"
    assert pairing.rows.tolist() == [-1] * 3 + list(range(3, 30)) and pairing.unpaired == 3


def test_a_device_clock_master_pairs_by_the_attached_row(tmp_path):
    """hardware_ns on an S80 SDK clock 5 s off the host clock (multi_device_storage.md §3.1): every point is
    5 s from its own row. Over 10 s half the points would fall inside the rows' span and nearest-neighbour
    would pair them 150 rows wrong; the others would be unpaired. Each point keeps its own row instead."""
    host = 9_000_000_000_000 + np.arange(300, dtype=np.int64) * DT
    ep = _record(tmp_path, host + 5_000_000_000, host + 2_000_000)
    pairing = ep.pair_trajectory(TRAJ)
    assert pairing.paired_by == "row" and pairing.rows.tolist() == list(range(300))
    assert pairing.offset_ns == pytest.approx(-4_998_000_000)
    assert "-4.998 s from their own rows" in pairing.reason and "§3.1" in pairing.reason


def test_null_stamps_are_unknown_not_garbage(tmp_path):
    """A null hardware_ns (a file written by another tool) is "unknown" like 0, never INT64_MIN."""
    host = 7_000_000_000_000 + np.arange(40, dtype=np.int64) * DT
    ep = _record(tmp_path, _trunc32(host), host + 1_000_000)
    t = pq.read_table(ep.files.data)
    hw = t.column("hardware_ns").to_pylist()
    hw[5] = hw[6] = None
    t = t.set_column(t.column_names.index("hardware_ns"), "hardware_ns", pa.array(hw, pa.int64()))
    pq.write_table(t, ep.files.data)
    ep = open_task(tmp_path / "t").episode(1)
    got = ep.hardware_ns()
    assert got[5] == 0 and got[6] == 0
    assert np.array_equal(np.diff(got[7:]), np.full(32, DT))
    rows = ep.pair_trajectory(TRAJ).rows
    assert rows[:5].tolist() == [0, 1, 2, 3, 4] and rows[10:].tolist() == list(range(10, 40))


def _set_slam_spec(ep, entry):
    row = read_episode_row(ep.files.meta, ep.index)
    row["slam_specs"] = {TRAJ: entry}
    write_episode_row(ep.files.meta, row)
    return open_task(ep.task.path).episode(ep.index)


def test_episode_frame_without_axes_takes_the_registry_axes_not_the_task_level_ones(tmp_path):
    """info.json (latest wins) says down_left_forward; this episode's own row says right_forward_up
    without frame_axes. Mixing the episode's frame id with the task's axes would convert wrongly."""
    hw = 9_000_000_000_000 + np.arange(3, dtype=np.int64) * DT
    ep = _record(tmp_path, hw, hw)
    assert ep.task.info["features"][TRAJ]["frame"] == "down_left_forward"
    ep = _set_slam_spec(ep, {"frame": "right_forward_up"})
    tr = ep.trajectory(TRAJ)
    assert tr.frame == "right_forward_up"
    assert tr.frame_axes == {"+X": "right", "+Y": "forward", "+Z": "up"}
    # old +X right -> new −Y (§3.1): x = 0.01·r lands on −y
    dlf = tr.to_frame("down_left_forward")
    assert np.array_equal(dlf.positions[:, 1], -tr.positions[:, 0])


@pytest.mark.parametrize("entry", ["down_left_forward", ["frame"], {"frame": "down_left_forward", "frame_axes": "x"}])
def test_malformed_slam_specs_entry_is_a_schema_error_naming_the_row(tmp_path, entry):
    hw = 9_000_000_000_000 + np.arange(3, dtype=np.int64) * DT
    ep = _set_slam_spec(_record(tmp_path, hw, hw), entry)
    with pytest.raises(SchemaError) as ei:
        ep.trajectory(TRAJ)
    msg = str(ei.value)
    assert str(ep.files.meta) in msg and TRAJ in msg and "slam_specs" in msg


def test_video_extensions_that_is_not_an_object_does_not_crash_the_reader(tmp_path):
    ep = TaskWriter(tmp_path, "d", fps=30.0).begin_episode([], [StreamSpec("cam_depth", "depth", 32, 24, codec="ffv1")])
    frame = np.arange(32 * 24, dtype=np.uint16).reshape(24, 32)
    for i in range(2):
        ep.add_frame({}, hardware_ns=10**9 + i * DT, images={"cam_depth": frame})
    ep.finish()
    info_path = tmp_path / "d" / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["video_extensions"] = "mkv"
    atomic_write_json(info_path, info)
    got = list(open_task(tmp_path / "d").episode(1).depth("cam_depth"))
    assert len(got) == 2 and np.array_equal(got[1], frame)


def test_show_lists_a_malformed_slam_specs_entry_as_a_problem(tmp_path, capsys):
    """`egopool show` used to die with a ValueError traceback on such a row."""
    from egopool.cli.app import main

    hw = 9_000_000_000_000 + np.arange(3, dtype=np.int64) * DT
    ep = _set_slam_spec(_record(tmp_path, hw, hw), "down_left_forward")
    assert main(["show", str(ep.task.path), "1", "--json"]) == 1  # listed, and a problem fails it (issue 28)
    out = capsys.readouterr().out
    assert "slam_specs entry is str 'down_left_forward', not an object" in out
