"""One bad sample never costs a recording (issue 12 A; multi_device_storage.md §5.5; decisions.md #22).

A value the format cannot hold is stored as "no sample" and counted per column in
``drop_stats`` (``<signal>_rejected_count``); a row the writer refuses as a whole is left
out (``rows_rejected``); an episode never outlives what float32 ``timestamp`` can time.
"""

from __future__ import annotations

import errno
import json
import math

import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from egopool import EgopoolError, SchemaError, StreamSpec, TaskWriter, ValueChangedWarning, open_task
from egopool.write import episode_writer as ew
from egopool.codecs.depth import DepthEncoder
from egopool.devices import Device, Rig, SimulatedRig
from egopool.devices.simulated import build_rig
from egopool.ops.stats_ops import check_stats
from egopool.recorder import Frame, Recorder
from egopool.validate import validate_task
from egopool.write.checks import check_episode_seconds, max_episode_rows, max_episode_seconds
from recorder_support import scripted

FPS = 30.0
GLOVE = "observation.left_glove"


def _errors(report):
    return [f for f in report.findings if f.severity == "error"]


def test_sixty_seconds_of_lite_gloves_survive_a_tenth_of_a_second_of_nan(tmp_path):
    """The issue's example: glove frames with one NaN cell for 0.1 s at t = 50 s."""
    rig = build_rig("lite_gloves", scale=16)
    rec = Recorder(TaskWriter(tmp_path, "t", registry=False), rig)
    sim = SimulatedRig(rig, seed=3)
    push = rec.push_sample
    window = {"bad": False}
    nan_windows: set[int] = set()

    def feed(t0, t1, r):
        epoch = sim.sources[0].epoch
        window["bad"] = 50.0 <= (t0 + t1) / 2e9 - epoch / 1e9 < 50.1  # the rows of [50 s, 50.1 s)
        window["t1"] = t1
        type(sim).feed(sim, t0, t1, r)

    def bad_push(column, value, ns=0):
        if column == GLOVE and window["bad"]:
            value = np.array(value, np.float32)
            value[7, 3] = np.nan
            nan_windows.add(window["t1"])
        push(column, value, ns)

    sim.feed = feed
    rec.push_sample = bad_push
    with pytest.warns(ValueChangedWarning, match=r"3 sample\(s\) of left_glove could not be stored.*holds nan"):
        done = sim.record(rec, 60.0)
    assert len(nan_windows) == 3  # 0.1 s of 1/30 s rows, each with a glove sample
    assert done.result.length == 1800  # every row kept, the 1,500 before t = 50 s and the 297 after
    assert done.drop_stats["left_glove_rejected_count"] == 3
    assert "ticks_skipped" in done.drop_stats and "rows_rejected" not in done.drop_stats
    ep = open_task(tmp_path / "t").episode(done.index)
    glove = np.asarray(ep.table.column(GLOVE).to_pylist(), np.float32)
    zero_rows = np.flatnonzero(~glove.any(axis=1))
    assert zero_rows.tolist() == [1500, 1501, 1502]  # §5.5 "no sample": zeros
    assert np.isfinite(glove).all()
    assert ep.meta["drop_stats"]["left_glove_rejected_count"] == 3
    report = validate_task(tmp_path / "t")
    assert _errors(report) == []
    assert any(f.severity == "warning" and "left_glove_rejected_count" in f.message for f in report.findings)
    assert check_stats(tmp_path / "t").ok


UVC = Device("uvc", "uvc:usb-cam0", "head", 32, 32)
GRIPPER = Device("gripper", "gripper:CC:BA:97:25:B4:44", "UMI 夹爪001", 32, 32)
S80 = Device("s80m", "s80m:000000000001@1-3.4.1", "S80M_head", 32, 32)
GLOVE_DEV = Device("usb_glove", "usbglove:364133593535", "USB 手套_left", side="left")


def _rig(*devices):
    rig = Rig("main")
    for d in devices:
        rig.add(d)
    return rig


def _img(v, size=32):
    return np.full((size, size, 3), v, np.uint8)


def _record(tmp_path, rig, script, rows):
    rec = Recorder(TaskWriter(tmp_path, "t", registry=False), rig)
    with pytest.warns(ValueChangedWarning):
        done = rec.record_virtual(rows / FPS, scripted(script), host0_ns=10**12)
    return done, open_task(tmp_path / "t").episode(done.index)


FORCE = "observation.gripper_left_force"
BAD_VALUES = {
    "nan": np.array([1, np.nan, 3], np.float32),
    "inf": np.array([np.inf, 2, 3], np.float32),
    "wrong-length": np.zeros(4, np.float32),
    "wrong-dtype": np.array(["a", "b", "c"]),
    "not-a-number": {"fx": 1},
    "out-of-float32-range": np.array([1e40, 2, 3]),
    "ragged": [[1, 2], [3]],
}


@pytest.mark.parametrize("bad", list(BAD_VALUES), ids=list(BAD_VALUES))
def test_every_kind_of_bad_value_becomes_no_sample_and_is_counted(tmp_path, bad):
    """Force (not a stats column) and the glove (a stats column) refuse every bad value, NaN/inf included;
    both keep their row and count per column."""
    rig = _rig(GRIPPER, GLOVE_DEV)
    glove_bad = BAD_VALUES[bad] if bad not in ("nan", "inf") else np.where(np.arange(256) == 5, np.nan, 1.0)
    script = {0: lambda r: [r.push_frame("gripper_rgb", Frame(_img(1), 5, 5)),
                            r.push_sample(FORCE, np.ones(3, np.float32), 10),
                            r.push_sample(GLOVE, np.ones(256, np.float32))],
              1: lambda r: [r.push_sample(FORCE, BAD_VALUES[bad], 20), r.push_sample(GLOVE, glove_bad)],
              2: lambda r: [r.push_sample(FORCE, np.full(3, 2, np.float32), 30),
                            r.push_sample(GLOVE, np.full(256, 2, np.float32))]}
    done, ep = _record(tmp_path, rig, script, rows=3)
    assert done.result.length == 3
    assert done.drop_stats["left_glove_rejected_count"] == 1
    # every float column refuses NaN/inf in the recorder, not only stats columns (issue 15 G)
    assert done.drop_stats["gripper_left_force_rejected_count"] == 1
    g = ep.table.column(GLOVE).to_pylist()
    assert [row[0] for row in g] == [1.0, 0.0, 2.0]
    f = ep.table.column(FORCE).to_pylist()
    assert f[1] == [0, 0, 0] and ep.table.column(FORCE + "_ns").to_pylist() == [10, 0, 30]
    assert _errors(validate_task(tmp_path / "t")) == []


def test_non_finite_imu_samples_are_left_out_one_by_one_with_their_stamps(tmp_path):
    rig = Rig("main")
    rig.add(S80, role="ego")
    good = np.arange(12, dtype=np.float32).reshape(2, 6)
    bad = good.copy()
    bad[1, 2] = np.inf
    frames = [lambda r, k=k: [r.push_frame(s, Frame(_img(k), 100 + k, 100 + k))
                              for s in ("stereo_left", "stereo_right")] for k in range(3)]
    script = {0: frames[0],
              1: lambda r: [frames[1](r), r.push_points("observation.imu", np.vstack([good, bad]), [1, 2, 3, 4])],
              2: lambda r: [frames[2](r), r.push_points("observation.imu", [[1, 2, 3]], [5]),  # not 6 values
                            r.push_points("observation.imu", good, [6])]}  # one stamp for two samples
    done, ep = _record(tmp_path, rig, script, rows=3)
    assert done.drop_stats["imu_rejected_count"] == 1 + 1 + 2
    t = ep.table
    assert [len(x) for x in t.column("observation.imu").to_pylist()] == [0, 3, 0]
    assert t.column("imu_ts_ns").to_pylist() == [[], [1, 2, 3], []]
    assert _errors(validate_task(tmp_path / "t")) == []


def test_bad_frames_and_stamps_repeat_the_previous_frame_and_are_counted(tmp_path):
    rig = _rig(UVC)
    slot = "head_left_rgb"
    script = {0: lambda r: r.push_frame(slot, Frame(_img(10), 100, 100)),
              1: lambda r: r.push_frame(slot, Frame(_img(60, size=16), 200, 200)),  # wrong size
              2: lambda r: r.push_frame(slot, Frame(np.full((32, 32, 3), 1.5), 300, 300)),  # float image
              3: lambda r: r.push_frame(slot, Frame(_img(110), float("nan"), "x")),  # stamps -> 0
              4: lambda r: r.push_frame(slot, "not a frame")}
    done, ep = _record(tmp_path, rig, script, rows=5)
    assert done.drop_stats["head_left_rgb_rejected_count"] == 4
    assert ep.table.column("hardware_ns").to_pylist() == [100, 100, 100, 0, 0]
    means = [round(float(f.mean())) for f in ep.video(slot)]
    assert means == pytest.approx([10, 10, 10, 110, 110], abs=3)
    assert _errors(validate_task(tmp_path / "t")) == []


def test_a_stream_whose_encoder_fails_is_left_out_and_the_episode_published(tmp_path, monkeypatch):
    rig = _rig(UVC, Device("d435", "d435:213622075531", None, 32, 32))
    real = DepthEncoder.encode
    calls = {"n": 0}

    def failing(self, depth):
        calls["n"] += 1
        if calls["n"] == 4:
            raise EgopoolError("simulated encoder failure")
        return real(self, depth)

    monkeypatch.setattr(DepthEncoder, "encode", failing)
    depth = np.full((32, 32), 1000, np.uint16)
    script = {k: (lambda r, k=k: [r.push_frame("head_left_rgb", Frame(_img(k), 100 + k, 100 + k)),
                                  r.push_frame("d435_rgb", Frame(_img(k), 0, 0, counter=k, ts_src=1)),
                                  r.push_frame("d435_depth", Frame(depth, 0, 0, counter=k, ts_src=1))])
              for k in range(6)}
    done, ep = _record(tmp_path, rig, script, rows=6)
    assert done.result.length == 6
    assert done.drop_stats["d435_depth_encode_failed_count"] == 1
    # its later frames are not "bad samples" (found by h11b: each was counted as rejected, "no declared stream")
    assert not any(k.startswith("d435_depth") and k.endswith("_rejected_count") for k in done.drop_stats), done.drop_stats
    assert sorted(ep.streams) == ["d435_rgb", "head_left_rgb"]
    assert not list((tmp_path / "t" / "videos").rglob("*d435_depth*"))
    assert _errors(validate_task(tmp_path / "t")) == []


def test_a_data_parquet_that_cannot_be_written_keeps_its_rows_aside(tmp_path, monkeypatch):
    """Where publishing is impossible, the rows written so far are kept and the reason logged."""
    monkeypatch.setattr(ew, "_ROW_GROUP_ROWS", 4)
    real = pq.ParquetWriter.write_table  # one call per row group (episode_writer._flush)
    calls = {"n": 0}

    def disk_full(self, table, *a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, table, *a, **k)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", disk_full)
    rig = _rig(UVC)
    tw = TaskWriter(tmp_path, "t", registry=False)
    rec = Recorder(tw, rig)
    feed = lambda t0, t1, r: r.push_frame("head_left_rgb", Frame(_img(1), t1, t1))  # noqa: E731
    with pytest.warns(ValueChangedWarning, match="kept in"), pytest.raises(EgopoolError) as err:
        rec.record_virtual(20 / FPS, feed, host0_ns=10**12)
    assert "No space left" in str(err.value) and "kept in" in err.value.one_line()
    kept = list((tmp_path / "t" / ".egopool_backup").glob("unfinished-1-*"))
    assert len(kept) == 1
    note = json.loads((kept[0] / "reason.json").read_text())
    assert note["episode_index"] == 1 and "No space left" in note["reason"] and note["rows"] >= 8
    data = pq.read_table(next(kept[0].rglob("episode-000.parquet")))
    assert data.num_rows == 8  # the two row groups written before the failure
    assert next(kept[0].rglob("episode-000.mp4")).stat().st_size > 0
    assert tw.next_episode_index() == 1  # N is free again (§7.5)
    assert _errors(validate_task(tmp_path / "t")) == []


# -- float32 timestamp: refuse what it cannot time (file_format.md §7.1) ------------------------------------------

@pytest.mark.parametrize("fps,seconds", [(1000, 16384), (500, 32768), (30, 524288), (1024, 16384)])
def test_max_episode_seconds_is_where_float32_stops_telling_rows_apart(fps, seconds):
    assert max_episode_seconds(fps) == pytest.approx(seconds)
    n = max_episode_rows(fps)
    i = np.arange(n - 100_000, n + 3, dtype=np.float64)
    ts = (i * (1.0 / fps)).astype(np.float32)  # the recorder's tick * period
    steps = np.diff(ts)
    assert (steps[: 100_000 - 1] > 0).all()  # every row below the limit is distinct
    assert (steps <= 0).any()  # and just past it two rows collide


def test_an_episode_float32_cannot_time_is_refused_before_recording(tmp_path):
    tw = TaskWriter(tmp_path, "t", fps=1000.0, registry=False)
    rec = Recorder(tw, _rig(UVC))
    with pytest.raises(SchemaError, match=r"seconds = 20000 at 1000 fps .* first 16384 s \(4.55 h"):
        rec.record_virtual(20000, lambda *a: None)
    assert not (tmp_path / "t" / "data").exists() and tw.next_episode_index() == 1
    assert check_episode_seconds(16384, 1000) == 16_384_000
    with pytest.raises(SchemaError, match="9.10 h"):
        check_episode_seconds(9.2 * 3600, 500)
    with pytest.raises(SchemaError, match="finite"):
        check_episode_seconds(math.inf, 30)


def test_a_realtime_recording_stops_at_the_timestamp_limit_and_keeps_its_rows(tmp_path):
    rig = _rig(UVC)
    rec = Recorder(TaskWriter(tmp_path, "t", registry=False), rig)
    rec.max_rows = 6  # as if 4.55 h at 1000 fps had passed
    sim = SimulatedRig(rig)
    with pytest.warns(ValueChangedWarning, match="recording stopped at 0 s: float32 timestamps"):
        done = sim.record(rec, 0.6, realtime=True)
    assert done.result.length == 6
    assert any("float32" in n for n in done.notes)


def test_simulate_refuses_what_float32_cannot_time_and_offers_ffv1_depth(tmp_path, capsys):
    from egopool.cli.app import main
    from egopool.read.reader import open_task as _open

    rc = main(["simulate", "--rig", "uvc3", "--fps", "1000", "--seconds", "20000", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1 and "float32 timestamps" in err and "16384 s" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "sim_uvc3").exists()  # refused before anything was written
    rc = main(["simulate", "--rig", "d435x2", "--scale", "16", "--seconds", "0.2", "--depth-codec", "ffv1",
               "--out", str(tmp_path), "--json"])
    assert rc == 0
    task = _open(tmp_path / "sim_d435x2")
    assert task.info["video_extensions"]["d435_depth"] == "mkv"
    assert _errors(validate_task(tmp_path / "sim_d435x2")) == []


def test_a_tick_that_fails_is_a_left_out_row_and_recording_goes_on(tmp_path, monkeypatch):
    from egopool.row_buffers import RowBuffers

    real = RowBuffers.build_row

    def flaky(self, tick, due):
        if tick == 2:
            raise RuntimeError("a source left something unusable")
        return real(self, tick, due)

    monkeypatch.setattr(RowBuffers, "build_row", flaky)
    rig = _rig(UVC)
    rec = Recorder(TaskWriter(tmp_path, "t", registry=False), rig)
    feed = lambda t0, t1, r: r.push_frame("head_left_rgb", Frame(_img(1), t1, t1))  # noqa: E731
    with pytest.warns(ValueChangedWarning, match=r"1 row\(s\) could not be written .*tick 2: RuntimeError"):
        done = rec.record_virtual(5 / FPS, feed, host0_ns=10**12)
    assert done.result.length == 4 and done.drop_stats["rows_rejected"] == 1
    ts = open_task(tmp_path / "t").episode(done.index).table.column("timestamp").to_pylist()
    assert ts == pytest.approx([0, 1 / FPS, 3 / FPS, 4 / FPS])  # the tick's time stays free (§7.3)
    assert _errors(validate_task(tmp_path / "t")) == []


# -- an array in another axis order is refused, not scrambled by a flat reshape (found by qa12) ------------------

def test_transposed_force_matrix_imu_and_trajectory_are_rejected_not_scrambled(tmp_path):
    rig = Rig("main")
    rig.add(GRIPPER)
    rig.add(S80, role="ego")
    fm = np.zeros((250, 250, 3), np.float32)
    fm[0, 0, 2] = 5.0  # one fz cell; (3, 250, 250) would have put it at [166, 166, 2]
    imu = np.arange(24, dtype=np.float32).reshape(4, 6)
    traj = np.tile(np.array([0.1, 1, 2, 3, 0, 0, 0, 1.0]), (4, 1))
    slots = ("gripper_rgb", "stereo_left", "stereo_right")
    frames = lambda r, k: [r.push_frame(s, Frame(_img(k), 100 + k, 100 + k)) for s in slots]  # noqa: E731
    script = {0: lambda r: frames(r, 0),
              1: lambda r: [frames(r, 1), r.push_sample(FORCE + "_matrix", fm.transpose(2, 0, 1).copy(), 10),
                            r.push_points("observation.imu", imu.T.copy(), [1, 2, 3, 4]),
                            r.push_points("observation.imu", np.arange(42, dtype=np.float32).reshape(6, 7)),
                            r.push_points("observation.slam_trajectory", traj.T.copy())],
              2: lambda r: [frames(r, 2), r.push_sample(FORCE + "_matrix", fm, 20),
                            r.push_points("observation.imu", imu, [5, 6, 7, 8]),
                            r.push_points("observation.slam_trajectory", traj, [9, 10, 11, 12])]}
    done, ep = _record(tmp_path, rig, script, rows=3)
    assert done.result.length == 3
    assert done.drop_stats["gripper_left_force_matrix_rejected_count"] == 1
    assert done.drop_stats["imu_rejected_count"] == 4 + 7
    assert done.drop_stats["slam_trajectory_rejected_count"] == 4
    m = ep.force_matrices(FORCE + "_matrix")
    assert not m[1].any() and m[2][0, 0, 2] == 5.0 and np.count_nonzero(m[2]) == 1
    assert ep.table.column("observation.imu").to_pylist()[1:] == [[], imu.tolist()]
    assert [len(p) for p in ep.table.column("observation.slam_trajectory").to_pylist()] == [0, 0, 32]


def test_the_writer_api_refuses_an_element_in_another_axis_order(tmp_path):
    from egopool import StreamSpec, imu_columns
    from egopool.schema import force_matrix_column, vector_column

    glove = vector_column("observation.left_glove", [16, 8])
    fm = force_matrix_column("observation.gripper_left_force_matrix", scale=10)
    ep = TaskWriter(tmp_path, "t", registry=False).begin_episode([*imu_columns(), glove, fm],
                                                                 [StreamSpec("cam", "rgb", width=16, height=16)])
    img = {"cam": np.zeros((16, 16, 3), np.uint8)}
    for value, what in [({"observation.imu": np.zeros((6, 4), np.float32), "imu_ts_ns": [1, 2, 3, 4]}, "Kx6"),
                        ({"observation.left_glove": np.zeros((8, 16), np.float32)}, "16x8"),
                        ({fm.name: np.zeros((750, 250), np.float32)}, "250x250x3")]:
        with pytest.raises(SchemaError, match=rf"expects items of shape \({what}\), got an array of shape"):
            ep.add_frame(value, hardware_ns=1, images=img)
    for ok in [{"observation.left_glove": np.ones((16, 8), np.float32)}, {"observation.left_glove": np.ones(128)},
               {"observation.left_glove": np.ones((1, 16, 8))}, {fm.name: np.ones((250, 750))},
               {fm.name: np.ones(187500)}, {"observation.imu": np.ones((1, 2, 6)), "imu_ts_ns": [[1], [2]]}]:
        ep.add_frame(ok, hardware_ns=1, images=img)
    result = ep.finish()
    assert result.length == 6


def test_record_and_start_episode_refuse_what_float32_cannot_time_before_recording(tmp_path, capsys):
    """Found by qa12: `egopool record --fps 1000 --seconds 20000` started recording (it would have stopped at
    4.55 h); Recorder.start_episode(max_ticks) did not check either."""
    from egopool.cli.app import main

    rc = main(["record", str(tmp_path / "rec" / "t"), "--device", "sim:glove", "--fps", "1000", "--seconds", "20000"])
    err = capsys.readouterr().err
    assert rc == 1 and err.strip().splitlines() == [
        "egopool: error: --seconds = 20000 at 1000 fps is 20000000 rows, but float32 timestamps (file_format.md "
        "§7.1) tell rows apart only for the first 16384 s (4.55 h, 16384000 rows) of an episode (record at most "
        "16384 s per episode, or lower the fps)"]
    assert not (tmp_path / "rec").exists()
    tw = TaskWriter(tmp_path, "t", fps=500.0, registry=False)
    rec = Recorder(tw, _rig(UVC))
    with pytest.raises(SchemaError, match=r"max_ticks / fps = 33000 at 500 fps"):
        rec.start_episode(max_ticks=500 * 33000)
    assert not rec._active and not (tmp_path / "t" / "data").exists() and tw.next_episode_index() == 1


def test_a_huge_array_for_a_fixed_length_column_is_refused_before_it_is_copied():
    """Found by qa12: 5e7 values pushed as a glove frame were converted (a 200 MB float32 copy) before the
    length check refused them."""
    import tracemalloc

    from egopool.schema import vector_column

    glove = vector_column("observation.left_glove", [16, 16])
    big = np.zeros(50_000_000)
    tracemalloc.start()
    try:
        with pytest.raises(SchemaError, match="expects 256 values per row, got 50000000"):
            glove.normalise(big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_frames_of_a_dropped_stream_are_not_counted_as_bad_samples(tmp_path, monkeypatch):
    """Found by h11b: after a stream's encoder failed, each later frame handed for it was counted as a
    rejected sample ("no declared stream"), a misleading reason; only the drop is recorded."""
    real = DepthEncoder.encode
    calls = {"n": 0}

    def failing(self, depth):
        calls["n"] += 1
        if calls["n"] == 2:
            raise EgopoolError("simulated encoder failure")
        return real(self, depth)

    monkeypatch.setattr(DepthEncoder, "encode", failing)
    ep = TaskWriter(tmp_path, "t", fps=30.0).begin_episode(streams=[StreamSpec("cam_depth", "depth", 32, 32)])
    for i in range(6):
        ep.add_frame({}, hardware_ns=i + 1, images={"cam_depth": np.full((32, 32), 1000, np.uint16)}, reject_bad=True)
        time.sleep(0.2)  # the encoder thread meets frame 2 before row 3 is handed over: rows 3-6 follow the drop
    ep.finish()
    assert ep.drop_stats.get("cam_depth_encode_failed_count") == 1
    assert not [k for k in ep.drop_stats if k.endswith("_rejected_count")], dict(ep.drop_stats)



# -- NaN / inf in every float column, not only the stats columns (issue 15 G) ------------------------------------------

RIGHT_GLOVE = Device("usb_glove", "usbglove:364933593535", "USB 手套_right", side="right")


def test_nan_and_inf_in_glove_imu_and_hand_pose_columns_are_refused_and_counted(tmp_path):
    """The example: NaN / inf pushed into right_glove_imu_quat, right_glove_imu_valid and right_hand_pose were stored
    unchanged, with no drop_stats count and no validator finding; a gripper trajectory point holding NaN too."""
    rig = _rig(GRIPPER, RIGHT_GLOVE)
    quat, valid, pose = ("observation.right_glove_imu_quat", "observation.right_glove_imu_valid",
                         "observation.right_hand_pose")
    traj = "observation.slam_trajectory"
    good = {quat: np.tile(np.float32([0, 0, 0, 1]), (16, 1)), valid: np.ones(16, np.float32),
            pose: np.full((21, 3), 0.5, np.float32)}

    def row(k, bad=None, value=None):
        def push(r):
            r.push_frame("gripper_rgb", Frame(_img(k), 100 + k, 100 + k))
            for col, v in good.items():
                r.push_sample(col, value if col == bad else v)
            pts = np.array([[0.1 * k, 1, 2, 3, 0, 0, 0, 1], [0.1 * k + 0.05, 1, 2, 3, 0, 0, 0, 1]])
            if k == 4:
                pts[1, 2] = np.nan  # one of the two points of row 4
            r.push_points(traj, pts, [1000 + 2 * k, 1001 + 2 * k])
        return push

    nan_quat = good[quat].copy()
    nan_quat[3, 1] = np.nan
    inf_valid = good[valid].copy()
    inf_valid[5] = -np.inf
    nan_pose = good[pose].copy()
    nan_pose[0] = np.nan
    script = {0: row(0), 1: row(1, quat, nan_quat), 2: row(2, valid, inf_valid), 3: row(3, pose, nan_pose),
              4: row(4), 5: row(5)}
    done, ep = _record(tmp_path, rig, script, rows=6)
    assert done.result.length == 6
    counts = {k: v for k, v in done.drop_stats.items() if k.endswith("_rejected_count")}
    assert counts == {"right_glove_imu_quat_rejected_count": 1, "right_glove_imu_valid_rejected_count": 1,
                      "right_hand_pose_rejected_count": 1, "slam_trajectory_rejected_count": 1}
    t = ep.table
    assert t.column(quat).to_pylist()[1] == [0.0] * 64  # §5.5 "no sample"
    assert t.column(valid).to_pylist()[2] == [0.0] * 16
    assert t.column(pose).to_pylist()[3] == [0.0] * 63
    assert [len(p) // 8 for p in t.column(traj).to_pylist()] == [2, 2, 2, 2, 1, 2]
    assert t.column(traj + "_ns").to_pylist()[4] == [1008]  # the NaN point left out with its stamp
    for col in (quat, valid, pose, traj):
        assert np.isfinite(np.concatenate([np.asarray(v, np.float64) for v in t.column(col).to_pylist()])).all()
    report = validate_task(tmp_path / "t")
    assert _errors(report) == []
    warned = sorted(f.message.split(":")[0] for f in report.findings if "rejected_count" in f.message)
    assert warned == ["drop_stats right_glove_imu_quat_rejected_count = 1",
                      "drop_stats right_glove_imu_valid_rejected_count = 1",
                      "drop_stats right_hand_pose_rejected_count = 1", "drop_stats slam_trajectory_rejected_count = 1"]


# -- a source that dies mid-episode (issue 15 G) ----------------------------------------------------------------------

def test_a_source_that_raises_at_15_s_of_20_s_is_disconnected_from_that_tick_and_its_rows_counted(tmp_path,
                                                                                                   monkeypatch):
    """The example: status.right_glove read "connected" on all 600 rows and its 150 zero rows carried no count."""
    from egopool.devices import simulated

    rig = _rig(UVC, RIGHT_GLOVE)
    real = simulated._Glove.emit_signals

    def dies_at_15_s(self, t0, t1, rec):
        if t1 - self.epoch > 15 * 10**9:
            raise RuntimeError("USB glove unplugged")
        real(self, t0, t1, rec)

    monkeypatch.setattr(simulated._Glove, "emit_signals", dies_at_15_s)
    rec = Recorder(TaskWriter(tmp_path, "t", registry=False), rig)
    with pytest.warns(ValueChangedWarning, match=r"150 row\(s\) were recorded while right_glove was disconnected "
                                                 r"\(status.right_glove\).*first: from tick 450: usbglove:364933593535: "
                                                 r"RuntimeError: USB glove unplugged"):
        done = SimulatedRig(rig).record(rec, 20.0)
    assert done.result.length == 600
    assert done.drop_stats["right_glove_disconnected_count"] == 150
    t = open_task(tmp_path / "t").episode(done.index).table
    status = t.column("status.right_glove").to_pylist()
    assert status == ["connected"] * 450 + ["disconnected"] * 150
    glove = np.asarray(t.column("observation.right_glove").to_pylist())
    assert glove[:450].any(axis=1).all() and not glove[450:].any()  # §5.5: no sample after it died
    report = validate_task(tmp_path / "t")
    assert _errors(report) == []
    assert any(f.message.startswith("drop_stats right_glove_disconnected_count = 150") for f in report.findings)


def test_a_real_time_source_whose_thread_raises_reads_disconnected_from_then_on(tmp_path):
    """Source._guarded_run: the capture thread's exception marks the device's status columns (real time)."""
    from egopool.sources import RecordingSession
    from egopool.sources.base import Source

    class DyingGlove(Source):
        def _run(self, stop):
            col = self.reg.signals["pressure"]
            while not stop.is_set():
                rec = self._rec
                if rec is not None:
                    if rec.live_stats()["rows"] >= 10:
                        raise RuntimeError("USB glove unplugged")
                    rec.push_sample(col, np.ones(256, np.float32))
                stop.wait(0.005)

        def _close(self):
            pass

    session = RecordingSession(TaskWriter(tmp_path, "t", registry=False), [DyingGlove(RIGHT_GLOVE)])
    session.open()
    try:
        with pytest.warns(ValueChangedWarning, match="usbglove:364933593535: RuntimeError: USB glove unplugged"):
            first = session.record_seconds(40 / FPS)
        with pytest.warns(ValueChangedWarning, match="disconnected"):
            second = session.record_seconds(5 / FPS)  # still dead: disconnected from its first row
    finally:
        session.close()
    task = open_task(tmp_path / "t")
    status = task.episode(first.index).table.column("status.right_glove").to_pylist()
    cut = status.index("disconnected")
    assert cut >= 10 and status == ["connected"] * cut + ["disconnected"] * (len(status) - cut)
    assert first.drop_stats["right_glove_disconnected_count"] == len(status) - cut
    status2 = task.episode(second.index).table.column("status.right_glove").to_pylist()
    assert set(status2) == {"disconnected"} and second.drop_stats["right_glove_disconnected_count"] == len(status2)
    assert session.sources[0].error == "RuntimeError: USB glove unplugged"
