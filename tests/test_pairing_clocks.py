"""Trajectory pairing never returns "all unpaired" silently (issue 12 part F; multi_device_storage.md
§3.1, §5.3–§5.5, docs/decisions.md C9), on episodes recorded from the simulated rigs."""

from __future__ import annotations

import numpy as np
import pytest

from egopool import TaskWriter, open_task
from egopool.codecs.timebase import own_row_offset
from egopool.devices import Device, Rig, SimulatedRig
from egopool.devices.simulated import build_rig
from egopool.recorder import Recorder


def _record(tmp_path, rig, seconds=1.0, **sim):
    done = SimulatedRig(rig, **sim).record(Recorder(TaskWriter(tmp_path, "t"), rig), seconds)
    return open_task(tmp_path / "t").episode(done.index)


def test_full_rig_pairs_every_point_by_its_row(tmp_path):
    """Appendix B rig: the master slot is the ego S80C, stamped by its SDK clock (5 s off the host clock in
    the simulator); the three trajectories' _ns are host time. Nearest stamps gave -1 for every point."""
    ep = _record(tmp_path, build_rig("full", scale=16))
    cols = ep.trajectories()
    assert cols == ["observation.ego_slam_trajectory", "observation.gripper_2_slam_trajectory",
                    "observation.slam_trajectory"]
    for col in cols:
        tr = ep.trajectory(col)
        pairing = ep.pair_trajectory(col)
        assert pairing.paired_by == "row" and pairing.unpaired == 0 and len(pairing) == len(tr.rows) > 0
        assert np.array_equal(pairing.rows, tr.rows)
        assert pairing.offset_ns == pytest.approx(-5e9, abs=0.05e9)  # the S80 clock's epoch, as simulated
        assert "not on the trajectory's host clock" in pairing.reason and "S80 or D435" in pairing.reason


def test_host_clock_master_pairs_by_stamps(tmp_path):
    """A gripper alone: its RGB (the master slot) is stamped by the host clock, like the trajectory."""
    rig = Rig("main")
    rig.add(Device("gripper", "gripper:CC:BA:97:25:B4:44", "UMI 夹爪001", 64, 48))
    ep = _record(tmp_path, rig)
    tr = ep.trajectory("observation.slam_trajectory")
    pairing = ep.pair_trajectory("observation.slam_trajectory")
    assert pairing.paired_by == "hardware_ns" and pairing.unpaired == 0
    assert abs(pairing.offset_ns) < 100e6
    # each point pairs with its own row or a neighbour (it arrived during that tick's window)
    assert np.abs(pairing.rows - tr.rows).max() <= 1


def test_no_trajectory_stamps_pairs_by_row_and_says_so(tmp_path):
    rig = Rig("main")
    rig.add(Device("gripper", "gripper:CC:BA:97:25:B4:44", "UMI 夹爪001", 64, 48))
    ep = _record(tmp_path, rig, no_trajectory_stamps=True)
    assert "observation.slam_trajectory_ns" not in ep.column_names
    pairing = ep.pair_trajectory("observation.slam_trajectory")
    assert pairing.paired_by == "row" and pairing.unpaired == 0 and pairing.offset_ns is None
    assert "no _ns column" in pairing.reason and "§5.5" in pairing.reason


def test_own_row_offset():
    rows_ns = np.array([100, 200, 0, 400], np.int64)
    assert own_row_offset([105, 0, 310, 402, 207], [0, 1, 2, 3, 1], rows_ns) == 5.0  # of 5, 2, 7
    assert own_row_offset([0, 5], [0, 2], rows_ns) is None
    assert own_row_offset([], [], rows_ns) is None
