"""The frame-row recorder (multi_device_storage.md §5.3, §5.5; file_format.md §7.1, §7.3)."""

import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from egopool import CodecError, EgopoolError, SchemaError, TaskWriter, ValueChangedWarning, open_task
from egopool.codecs.video import count_video_frames
from egopool.devices import Device, Rig, SimulatedRig
from egopool.recorder import Frame, Recorder
from egopool.write.task_writer import EpisodeWriter
from recorder_support import scripted

FPS = 30.0
P = int(round(1e9 / FPS))
UVC = Device("uvc", "uvc:usb-cam0", "head", 32, 32)
GRIPPER = Device("gripper", "gripper:CC:BA:97:25:B4:44", "UMI 夹爪001", 32, 32)
D435 = Device("d435", "d435:213622075531", None, 32, 32)


def _rig(*devices, program="main"):
    rig = Rig(program)
    for d in devices:
        rig.add(d)
    return rig


def _img(v, size=32):
    return np.full((size, size, 3), v, np.uint8)


def _record(tmp_path, rig, script, rows, **kw):
    rec = Recorder(TaskWriter(tmp_path, "t", fps=FPS), rig, **kw)
    done = rec.record_virtual(rows / FPS, scripted(script), host0_ns=10**12)
    ep = open_task(tmp_path / "t").episode(done.index)
    return done, ep


def test_each_tick_takes_the_oldest_frame_and_repeats_on_gaps(tmp_path):
    rig = _rig(UVC)
    script = {
        0: lambda r: r.push_frame("head_left_rgb", Frame(_img(10), 100, 100)),
        1: lambda r: [r.push_frame("head_left_rgb", Frame(_img(60), 201, 201)),
                      r.push_frame("head_left_rgb", Frame(_img(110), 202, 202))],
        4: lambda r: r.push_frame("head_left_rgb", Frame(_img(200), 400, 400)),
    }
    done, ep = _record(tmp_path, rig, script, rows=5)
    t = ep.table
    assert t.column("hardware_ns").to_pylist() == [100, 201, 202, 202, 400]
    assert t.column("raw_hw_ns").to_pylist() == [100, 201, 202, 202, 400]
    assert done.drop_stats["head_left_rgb_repeated_count"] == 1
    assert done.drop_stats["ticks_skipped"] == 0
    frames = list(ep.video("head_left_rgb"))
    assert len(frames) == 5 == count_video_frames(ep.streams["head_left_rgb"])
    assert [round(float(f.mean())) for f in frames] == pytest.approx([10, 60, 110, 110, 200], abs=3)


def test_latest_sample_wins_and_no_sample_is_zero_with_ns_zero(tmp_path):
    rig = _rig(GRIPPER)
    f = "observation.gripper_left_force"
    script = {
        0: lambda r: [r.push_frame("gripper_rgb", Frame(_img(1), 5, 5)),
                      r.push_sample(f, np.array([1, 2, 3], np.float32), ns=10),
                      r.push_sample(f, np.array([4, 5, 6], np.float32), ns=20),
                      r.push_sample("observation.gripper_state", np.array([50, 0, 7], np.float32))],
        2: lambda r: r.push_sample(f, np.array([7, 8, 9], np.float32), ns=30),
    }
    done, ep = _record(tmp_path, rig, script, rows=3)
    t = ep.table
    assert t.column(f).to_pylist() == [[4, 5, 6], [0, 0, 0], [7, 8, 9]]
    assert t.column(f + "_ns").to_pylist() == [20, 0, 30]
    assert t.column("observation.gripper_state").to_pylist() == [[50, 0, 7], [0, 0, 0], [0, 0, 0]]
    # columns the episode never filled are not created (§4.6 column-level sparsity)
    assert "observation.gripper_right_force" not in t.column_names
    assert "observation.gripper_left_force_matrix" not in t.column_names
    assert "observation.gripper_right_force" not in open_task(tmp_path / "t").info["features"]
    assert t.column("status.gripper_pose").to_pylist() == ["connected"] * 3


def test_trajectory_points_accumulate_per_row_window_with_lockstep_ns(tmp_path):
    rig = _rig(GRIPPER)
    col = "observation.slam_trajectory"

    def pts(*ts):
        return np.array([[t, 0.1 * t, 0, 0, 0, 0, 0, 1] for t in ts])
    script = {
        0: lambda r: [r.push_frame("gripper_rgb", Frame(_img(1))), r.push_points(col, pts(0.01), [11]),
                      r.push_points(col, pts(0.02), [12])],
        2: lambda r: r.push_points(col, pts(0.05), [0]),  # a point without host stamp
        3: lambda r: r.push_points(col, pts(0.07, 0.08, 0.09), [71, 81, 91]),
    }
    done, ep = _record(tmp_path, rig, script, rows=4)
    t = ep.table
    lens = [len(v) for v in t.column(col).to_pylist()]
    assert lens == [16, 0, 8, 24]  # [] when no new point (§5.5)
    assert t.column(col + "_ns").to_pylist() == [[11, 12], [], [0], [71, 81, 91]]
    traj = ep.trajectory(col)
    assert traj.rows.tolist() == [0, 0, 2, 3, 3, 3]
    assert traj.points[:, 0].tolist() == pytest.approx([0.01, 0.02, 0.05, 0.07, 0.08, 0.09])
    assert traj.frame == "down_left_forward"


def test_no_host_stamp_in_the_whole_episode_means_no_ns_column(tmp_path):
    rig = _rig(GRIPPER)
    col = "observation.slam_trajectory"
    script = {0: lambda r: [r.push_frame("gripper_rgb", Frame(_img(1))),
                            r.push_points(col, np.zeros((2, 8)) + [0, 0, 0, 0, 0, 0, 0, 1])]}
    done, ep = _record(tmp_path, rig, script, rows=2)
    assert col in ep.column_names and col + "_ns" not in ep.column_names  # §8.1.3


def test_depth_follows_master_and_repeats_last_frame_on_gaps(tmp_path):
    rig = _rig(D435)
    depth0 = np.full((32, 32), 1000, np.uint16)
    depth2 = np.full((32, 32), 2500, np.uint16)

    def both(rgb, depth, counter):
        return lambda r: [r.push_frame("d435_rgb", Frame(_img(rgb), counter * P, counter * P + 7, counter, 1)),
                          r.push_frame("d435_depth", Frame(depth, counter * P, counter * P + 9, counter, 1))]
    script = {0: both(20, depth0, 1), 1: lambda r: r.push_frame("d435_rgb", Frame(_img(90), 2 * P, 2 * P + 7, 2, 1)),
              2: both(160, depth2, 4)}
    done, ep = _record(tmp_path, rig, script, rows=3)
    depth = list(ep.depth("d435_depth"))
    assert len(depth) == 3 == len(list(ep.video("d435_rgb")))
    assert [int(np.median(d)) for d in depth] == pytest.approx([1000, 1000, 2500], rel=0.01)
    assert done.drop_stats["d435_depth_repeated_count"] == 1
    t = ep.table
    assert t.column("depth_dup").to_pylist() == [0, 1, 0]
    assert t.column("rgb_dup").to_pylist() == [0, 0, 0]
    assert t.column("rgb_gap").to_pylist() == [0, 0, 1]  # counter 2 -> 4: one frame skipped
    assert t.column("depth_gap").to_pylist() == [0, 0, 2]  # depth counter 1 -> 4
    assert t.column("depth_ns").to_pylist() == [P + 9, P + 9, 4 * P + 9]
    assert t.column("ts_src").to_pylist() == [1, 1, 1] and t.column("host_ns").to_pylist() == [0, 0, 0]


def test_d435_chain_normalised_hardware_ns_and_raw(tmp_path):
    rig = _rig(D435)
    sim = SimulatedRig(rig, drop_every=7)
    rec = Recorder(TaskWriter(tmp_path, "t"), rig)
    done = sim.record(rec, 1.0)
    t = open_task(tmp_path / "t").episode(done.index).table
    hw = np.array(t.column("hardware_ns").to_pylist())
    raw = np.array(t.column("raw_hw_ns").to_pylist())
    gaps = t.column("rgb_gap").to_pylist()
    steps = np.diff(hw) // P
    assert set(steps.tolist()) <= {0, 1, 2}
    assert steps.tolist() == [g + 1 if not dup else 0 for g, dup in zip(gaps[1:], t.column("rgb_dup").to_pylist()[1:])]
    assert np.all(np.diff(hw) % P == 0)  # anchor + seq × T exactly
    assert not np.array_equal(hw, raw) and np.all(np.abs(raw - hw) < 1_000_000)  # raw keeps the jitter
    assert sum(gaps) >= 3  # the device dropped frames 7, 14, 21, 28


def test_timestamp_and_wall_time(tmp_path):
    rig = _rig(UVC)
    sim = SimulatedRig(rig)
    before = time.time()
    done = sim.record(Recorder(TaskWriter(tmp_path, "t"), rig), 0.5)
    ep = open_task(tmp_path / "t").episode(done.index)
    t = ep.table
    ts = np.array(t.column("timestamp").to_pylist(), dtype=np.float64)
    assert t.column("frame_index").to_pylist() == list(range(15))
    assert ts == pytest.approx(np.arange(15) / FPS, abs=1e-6)
    created = ep.meta["created_at"]
    assert before - 1 <= created <= time.time()
    wall = np.array(t.column("wall_time").to_pylist())
    assert wall - ts.astype(np.float32) == pytest.approx(np.full(15, created), abs=1e-6)


def test_imu_samples_hang_on_rows_with_one_stamp_each(tmp_path):
    rig = _rig(Device("s80c", "s80m:1@1-1", "S80C_head", 32, 32))
    done = SimulatedRig(rig).record(Recorder(TaskWriter(tmp_path, "t"), rig), 1.0)
    ep = open_task(tmp_path / "t").episode(done.index)
    ts, samples = ep.imu()
    assert samples.shape[1] == 6 and ts.shape[0] == samples.shape[0]
    assert 395 <= ts.shape[0] <= 414  # 400 Hz for 30 rows
    assert np.all(np.diff(ts) == 2_500_000)
    per_row = [len(v) for v in ep.table.column("imu_ts_ns").to_pylist()]
    assert sum(per_row) == ts.shape[0] and max(per_row) <= 14
    assert samples[:, 4].mean() == pytest.approx(-9.81, abs=0.05)  # gravity on accel y
    assert "stereo_depth" in ep.streams and len(ep.streams) == 3


def test_status_follows_set_status(tmp_path):
    rig = _rig(UVC, Device("usb_glove", "usbglove:1", side="left"))
    script = {0: lambda r: r.push_frame("head_left_rgb", Frame(_img(3))),
              2: lambda r: r.set_status("left_glove", "disconnected"),
              3: lambda r: r.set_status("left_glove", "connected")}
    done, ep = _record(tmp_path, rig, script, rows=4)
    assert ep.table.column("status.left_glove").to_pylist() == ["connected", "connected", "disconnected", "connected"]
    assert ep.table.column("status.head_left_rgb").to_pylist() == ["connected"] * 4
    assert "observation.left_glove" not in ep.column_names  # no pressure frame arrived


def test_full_video_queue_drops_oldest_and_counts(tmp_path):
    rig = _rig(UVC)

    def flood(r):
        for i in range(50):
            r.push_frame("head_left_rgb", Frame(_img(i), i + 1, i + 1))
    done, ep = _record(tmp_path, rig, {1: flood, 0: lambda r: r.push_frame("head_left_rgb", Frame(_img(0), 1, 1))},
                       rows=3, queue_seconds=0.5)  # capacity 15 frames
    assert done.drop_stats["head_left_rgb_dropped"] == 35  # 50 pushed after row 0, 15 kept
    assert ep.table.column("hardware_ns").to_pylist() == [1, 36, 37]


def test_realtime_ticks_the_writer_cannot_keep_up_with_are_skipped_and_counted(tmp_path, monkeypatch):
    rig = _rig(UVC)
    orig = EpisodeWriter.add_frame

    def slow(self, *a, **kw):
        time.sleep(0.08)  # a writer at ~12 rows/s behind a 30 fps tick
        return orig(self, *a, **kw)
    monkeypatch.setattr(EpisodeWriter, "add_frame", slow)
    done = SimulatedRig(rig).record(Recorder(TaskWriter(tmp_path, "t"), rig, write_queue_rows=2), 1.0,
                                    realtime=True)
    ds = done.drop_stats
    t = open_task(tmp_path / "t").episode(done.index).table
    rows = t.num_rows
    assert ds["ticks_skipped"] > 5 and rows + ds["ticks_skipped"] == done.ticks
    assert t.column("frame_index").to_pylist() == list(range(rows))  # no holes in frame_index
    ticks = np.round(np.array(t.column("timestamp").to_pylist(), np.float64) * FPS).astype(int)
    assert ticks[0] == 0 and np.all(np.diff(ticks) >= 1) and np.any(np.diff(ticks) > 1)
    assert ds["write_lag_max_ms"] > 80 and "tick_late_max_ms" in ds
    frame_drop_keys = [k for k in ds if not k.endswith(("_ms", "_count"))]
    assert "ticks_skipped" in frame_drop_keys and all(isinstance(ds[k], int) for k in frame_drop_keys)
    assert count_video_frames(open_task(tmp_path / "t").episode(done.index).streams["head_left_rgb"]) == rows


def test_a_stream_that_never_delivers_fails_and_frees_n(tmp_path):
    rig = _rig(UVC, D435)
    tw = TaskWriter(tmp_path, "t")
    rec = Recorder(tw, rig, prime_timeout=0.2)
    with pytest.raises(CodecError, match="d435_depth"):
        rec.record_virtual(0.5, scripted({i: (lambda r: [r.push_frame("head_left_rgb", Frame(_img(1))),
                                                          r.push_frame("d435_rgb", Frame(_img(1)))])
                                           for i in range(20)}))
    assert tw.next_episode_index() == 1


def test_a_bad_sample_is_stored_as_no_sample_and_counted(tmp_path):
    rig = _rig(GRIPPER)
    tw = TaskWriter(tmp_path, "t")
    rec = Recorder(tw, rig)
    f = "observation.gripper_left_force"
    script = {0: lambda r: [r.push_frame("gripper_rgb", Frame(_img(1))), r.push_sample(f, np.ones(3, np.float32), 7)],
              1: lambda r: r.push_sample(f, np.zeros(4, np.float32), ns=9),
              2: lambda r: r.push_sample(f, np.full(3, 2, np.float32), ns=11)}
    with pytest.warns(ValueChangedWarning, match=r"1 sample\(s\) of gripper_left_force .*expects 3 values"):
        done = rec.record_virtual(4 / FPS, scripted(script))
    assert done.index == 1 and done.result.length == 4
    assert done.drop_stats["gripper_left_force_rejected_count"] == 1
    t = open_task(tmp_path / "t").episode(1).table
    assert t.column(f).to_pylist() == [[1, 1, 1], [0, 0, 0], [2, 2, 2], [0, 0, 0]]
    assert t.column(f + "_ns").to_pylist() == [7, 0, 11, 0]  # §5.5: a rejected sample has no time either


def test_unknown_targets_are_refused(tmp_path):
    rec = Recorder(TaskWriter(tmp_path, "t"), _rig(UVC))
    with pytest.raises(SchemaError, match="stream"):
        rec.push_frame("d435_rgb", Frame(_img(1)))
    with pytest.raises(SchemaError):
        rec.push_sample("observation.left_glove", np.zeros(256))
    with pytest.raises(SchemaError):
        rec.push_points("observation.slam_trajectory", np.zeros((1, 8)))
    with pytest.raises(SchemaError, match="status"):
        rec.set_status("d435_rgb", "connected")


def test_recorder_refuses_a_rig_that_renames_task_columns(tmp_path):
    g2 = Device("gripper", "gripper:68:EE:8F:C6:0D:BC", "UMI 夹爪002", 32, 32)
    a = _rig(GRIPPER, g2)
    SimulatedRig(a).record(Recorder(TaskWriter(tmp_path, "t"), a), 0.2)
    b = _rig(g2, GRIPPER)  # opened in the other order: rig numbers and column prefixes swap
    with pytest.raises(SchemaError, match="cannot change"):
        SimulatedRig(b).record(Recorder(TaskWriter(tmp_path, "t"), b), 0.2)
    assert TaskWriter(tmp_path, "t").next_episode_index() == 2
    assert pq.read_schema(tmp_path / "t" / "data" / "chunk-000" / "episode-000.parquet").names.count(
        "observation.slam_trajectory") == 1


def test_a_device_opened_between_episodes_joins_the_next_one(tmp_path):
    rig = _rig(UVC)
    tw = TaskWriter(tmp_path, "t")
    rec = Recorder(tw, rig)
    sim = SimulatedRig(rig)
    first = sim.record(rec, 0.1)
    rig.add(Device("usb_glove", "usbglove:1", "USB 手套_left", side="left"))
    second = SimulatedRig(rig).record(rec, 0.1)
    task = open_task(tmp_path / "t")
    assert "observation.left_glove" not in task.episode(first.index).column_names
    assert "observation.left_glove_imu_quat" in task.episode(second.index).column_names
    assert task.info["sensors"] == ["left_glove"]
    assert [d["key"] for d in task.info["devices"]] == ["uvc:usb-cam0", "usbglove:1"]


def test_record_virtual_refuses_non_finite_seconds_before_starting(tmp_path):
    rec = Recorder(TaskWriter(tmp_path, "t"), _rig(UVC))
    for bad in (float("inf"), float("nan"), 0.0, -1.0):
        with pytest.raises(SchemaError, match="seconds"):
            rec.record_virtual(bad, scripted({0: lambda r: r.push_frame("head_left_rgb", Frame(_img(1)))}))
    # nothing was left running: the next episode records normally as N=1
    done = rec.record_virtual(0.1, scripted({0: lambda r: r.push_frame("head_left_rgb", Frame(_img(1)))}))
    assert done.index == 1 and done.result.length == 3


def test_stop_episode_without_a_running_episode_is_refused(tmp_path):
    rec = Recorder(TaskWriter(tmp_path, "t"), _rig(UVC))
    with pytest.raises(EgopoolError, match="no episode is being recorded"):
        rec.stop_episode()
    rec.record_virtual(0.1, scripted({0: lambda r: r.push_frame("head_left_rgb", Frame(_img(1)))}))
    with pytest.raises(EgopoolError, match="no episode is being recorded"):
        rec.stop_episode()  # used to hand back the previous episode's result a second time


def test_push_sample_refuses_columns_that_are_not_latest_wins(tmp_path):
    rec = Recorder(TaskWriter(tmp_path, "t"), _rig(UVC, GRIPPER, D435))
    for col in ("observation.slam_trajectory", "observation.slam_trajectory_ns",
                "observation.gripper_left_force_ns", "observation.gripper_left_force_matrix_ns",
                "status.gripper_pose", "status.head_left_rgb", "raw_hw_ns", "rgb_dup", "depth_ns"):
        with pytest.raises(SchemaError, match="latest-wins"):
            rec.push_sample(col, 5, ns=1)
    rec.push_sample("observation.gripper_left_force", np.zeros(3, np.float32), ns=1)  # still fine
    rec.push_sample("observation.left_hand_pose", np.zeros((21, 3), np.float32))


def test_interrupted_realtime_simulation_aborts_its_episode(tmp_path, monkeypatch):
    # Ctrl-C lands in the caller's thread while the tick / write threads run: the episode must be
    # discarded and the recorder left ready, not ticking on with N reserved by a live process.
    import types

    from egopool.devices import simulated

    def interrupted(_s):
        time.sleep(0.4)  # rows are being written to temps by now
        raise KeyboardInterrupt
    monkeypatch.setattr(simulated, "time", types.SimpleNamespace(monotonic_ns=time.monotonic_ns, sleep=interrupted))
    rig = _rig(UVC)
    tw = TaskWriter(tmp_path, "t")
    rec = Recorder(tw, rig)
    with pytest.raises(KeyboardInterrupt):
        SimulatedRig(rig).record(rec, 5.0, realtime=True)
    assert tw.next_episode_index() == 1
    assert not [p for p in (tmp_path / "t").rglob("*") if p.is_file() and "episode-000" in p.name]
    assert not list((tmp_path / "t" / "meta").glob(".reserved-*"))
    monkeypatch.undo()
    done = SimulatedRig(rig).record(rec, 0.1)  # the recorder is free for the next episode
    assert done.index == 1
