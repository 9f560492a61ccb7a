"""Clocks (file_format.md §6.2, §7.3; multi_device_storage.md §3.1, §5.4): unwrap, pairing, IMU, drops, gaps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egopool.codecs.timebase import (WRAP_PERIOD_NS, expand_imu, find_gaps, frame_drop_total, is_frame_drop_key,
                                     lift_to_reference, looks_truncated32, pair_nearest, unwrap_ns)
from egopool.errors import CodecError


def _trunc32(ns: np.ndarray) -> np.ndarray:
    """What the ≤078 gripper segments stored: the host ns cut to a signed 32-bit int."""
    return ns.astype(np.int64).astype(np.int32).astype(np.int64)


def test_unwrap_restores_a_truncated_host_clock():
    host = 5_000_000_000_000 + np.arange(400, dtype=np.int64) * 33_333_333  # 13.3 s at 30 fps: 3 wraps
    stored = _trunc32(host)
    assert stored.min() >= -(2**31) and stored.max() < 2**31
    assert looks_truncated32(stored) and not looks_truncated32(host)
    assert int(np.sum(np.diff(stored) < 0)) == 3  # the sawtooth, one jump per 4.295 s
    un = unwrap_ns(stored)
    assert np.array_equal(np.diff(un), np.diff(host))  # every step exactly 33_333_333
    assert int(un[0]) == int(stored[0])
    assert np.array_equal(lift_to_reference(un, host), host)  # the lap count comes back from full stamps


def test_unwrap_keeps_zero_stamps_and_ignores_full_width_series():
    host = 7_000_000_000 + np.arange(200, dtype=np.int64) * 33_333_333
    stored = _trunc32(host)
    stored[[0, 50, 51, 199]] = 0
    un = unwrap_ns(stored)
    assert un[[0, 50, 51, 199]].tolist() == [0, 0, 0, 0]
    known = stored != 0
    assert np.array_equal(lift_to_reference(un, np.where(known, host, 0))[known], host[known])
    assert np.array_equal(unwrap_ns(host), host)  # nothing to undo on a real 64-bit clock


@settings(max_examples=30, deadline=None)
@given(start=st.integers(0, 2**40), steps=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=50))
def test_unwrap_inverts_truncation_for_any_forward_steps_below_the_period(start, steps):
    host = start + np.concatenate([[0], np.cumsum(steps)]).astype(np.int64)
    stored = _trunc32(host)
    stored[stored == 0] = 1  # 0 means unknown; keep every stamp known here
    host = np.where(_trunc32(host) == 0, host + 1, host)
    assert np.array_equal(unwrap_ns(stored) - stored[0], host - host[0])


def test_lift_needs_a_shared_row():
    with pytest.raises(CodecError, match="no row has both"):
        lift_to_reference(np.array([0, 5]), np.array([7, 0]))


def test_pair_nearest_zero_means_no_stamp():
    rows = np.array([1000, 0, 3000, 4000, 0, 6000], dtype=np.int64)
    pts = np.array([0, 990, 2100, 2000, 3400, 9000, 5000], dtype=np.int64)
    got = pair_nearest(pts, rows)
    # 0 never pairs; row 1 and 4 (stamp 0) are never chosen; a tie (2000: 1000 vs 3000) goes to the earlier
    assert got.tolist() == [-1, 0, 2, 0, 2, 5, 3]
    assert pair_nearest(pts, rows, max_dt_ns=500).tolist() == [-1, 0, -1, -1, 2, -1, -1]
    assert pair_nearest(pts, np.zeros(4, np.int64)).tolist() == [-1] * 7


def test_pair_nearest_matches_brute_force_on_unsorted_rows():
    rng = np.random.default_rng(3)
    rows = rng.permutation(np.arange(1, 301, dtype=np.int64) * 33_333_333)
    pts = rng.integers(0, 301 * 33_333_333, 500)
    got = pair_nearest(pts, rows)
    brute = np.argmin(np.abs(pts[:, None] - rows[None, :]), axis=1)
    dist_got = np.abs(rows[got] - pts)
    assert np.array_equal(dist_got, np.abs(rows[brute] - pts))


def test_expand_imu_rows_and_lockstep():
    counts = np.array([2, 0, 3])
    ts = np.array([10, 11, 20, 21, 22])
    vals = np.arange(30, dtype=np.float32).reshape(5, 6)
    s = expand_imu(counts, counts, ts, vals)
    assert s.rows.tolist() == [0, 0, 2, 2, 2]
    assert s.ts_ns.tolist() == [10, 11, 20, 21, 22]
    assert s.values[3].tolist() == list(range(18, 24))
    unsorted = expand_imu([2, 1], [2, 1], [5, 3, 4], np.zeros((3, 6)))
    assert unsorted.sorted().ts_ns.tolist() == [3, 4, 5] and unsorted.sorted().rows.tolist() == [0, 1, 0]
    with pytest.raises(CodecError, match="row 1: 1 imu_ts_ns stamps for 2"):
        expand_imu([1, 2], [1, 1], [1, 2, 3], np.zeros((3, 6)))


@pytest.mark.parametrize("key,is_drop", [
    ("gripper_rgb", True), ("imu_overflow", True), ("gripper_rgb_hole_ms", False),
    ("gripper_rgb_repeated_count", False), ("writer_lag_ms", False), ("ms", True), ("counted", True),
])
def test_is_frame_drop_key(key, is_drop):
    assert is_frame_drop_key(key) is is_drop


def test_frame_drop_total_skips_durations_and_event_counts():
    stats = {"gripper_rgb": 3, "head_left_rgb": 2, "gripper_rgb_hole_ms": 480.5,
             "head_left_rgb_repeated_count": 7, "note": "x", "flag": True}
    assert frame_drop_total(stats) == 5


def test_find_gaps():
    iv = 33_333_333
    ns = np.array([1, 2, 3, 4, 6, 7, 7, 0, 11], dtype=np.int64) * iv  # a 2-interval and a 4-interval step
    ns[7] = 0
    g = find_gaps(ns, iv, tolerance=0.5)
    assert g.stamps == 7  # zeros and the repeated 7 are not stamps
    assert g.index.tolist() == [4, 8]
    assert g.delta_ns.tolist() == [2 * iv, 4 * iv]
    assert g.missing.tolist() == [1, 3]
    assert find_gaps(ns, iv, tolerance=2.5).index.tolist() == [8]  # 4 intervals > 3.5
    assert len(find_gaps(ns, iv, tolerance=3.0)) == 0  # 4 intervals is not > 4
    with pytest.raises(CodecError):
        find_gaps(ns, 0)
    assert WRAP_PERIOD_NS == 4_294_967_296
