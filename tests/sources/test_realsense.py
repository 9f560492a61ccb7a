"""RealSense D435/D405 sources (issue 11) through pyrealsense2: a recording the test makes itself with
the SDK's ``software_device`` + ``recorder`` (ROS2 .db3, what SDK >= 2.58 records), and the same
recording made by SDK 2.57.7 as a ROS1 .bag (what RealSense Viewer recorded; tests/data/realsense_bag),
played back as fast as possible and as if live, round-tripped through a task: frame counts, depth in
uint16 mm exactly (lossless depth), stamps of the D435 chain and intrinsics in ``calibration``."""

from __future__ import annotations

import time

import numpy as np
import pytest

from pathlib import Path

from egopool import TaskWriter, open_task
from egopool.errors import ConflictError, DeviceError
from egopool.sources import RecordingSession, parse_device_specs
from egopool.validate import validate_task

pytestmark = pytest.mark.extra("devices")
ROS1_BAG = Path(__file__).resolve().parents[1] / "data" / "realsense_bag" / "d405_sw_v2.57.7.bag"

W, H, N = 64, 48, 20
SCALE = 0.0001  # a D405 counts depth in 0.1 mm


def _raw_depth(k: int) -> np.ndarray:
    y, x = np.mgrid[0:H, 0:W]
    d = (3000 + 37 * x + 101 * y + 13 * k).astype(np.uint16)
    d[:4, :6] = 0  # no depth
    return d


def _color(k: int) -> np.ndarray:
    y, x = np.mgrid[0:H, 0:W]
    return np.stack([(x * 4 + k) % 256, (y * 5) % 256, np.full_like(x, 80 + k)], -1).astype(np.uint8)


def _record(path, n: int = N, serial: str = "130322270123", color_after_ms: float = 0.0,
            lost_depth: frozenset[int] = frozenset(), lost_color: frozenset[int] = frozenset()) -> None:
    """A D405 recording of ``n`` colour + depth frames at 30 fps, paced like a camera; capture k's frames
    are numbered k + 1, its colour frame is stamped ``color_after_ms`` after its depth frame, and the
    depth (colour) frames of the captures in ``lost_depth`` (``lost_color``) are never delivered."""
    rs = pytest.importorskip("pyrealsense2")
    dev = rs.software_device()
    depth_s, color_s = dev.add_sensor("Stereo Module"), dev.add_sensor("RGB Camera")

    def stream(kind, uid, bpp, fmt, fx, coeffs):
        intr = rs.intrinsics()
        intr.width, intr.height, intr.fx, intr.fy, intr.ppx, intr.ppy = W, H, fx, fx + 1, W / 2, H / 2
        intr.model, intr.coeffs = rs.distortion.brown_conrady, coeffs
        vs = rs.video_stream()
        vs.type, vs.index, vs.uid, vs.width, vs.height, vs.fps, vs.bpp, vs.fmt = kind, 0, uid, W, H, 30, bpp, fmt
        vs.intrinsics = intr
        return vs

    dp = depth_s.add_video_stream(stream(rs.stream.depth, 0, 2, rs.format.z16, 50.0, [0.0] * 5))
    cp = color_s.add_video_stream(stream(rs.stream.color, 1, 3, rs.format.rgb8, 60.0, [0.1, -0.05, 0.001, 0.002, 0.01]))
    depth_s.add_read_only_option(rs.option.depth_units, SCALE)
    extr = rs.extrinsics()
    extr.rotation, extr.translation = [1, 0, 0, 0, 1, 0, 0, 0, 1], [0.015, 0.0, 0.0]
    dp.register_extrinsics_to(cp, extr)
    dev.register_info(rs.camera_info.serial_number, serial)
    dev.register_info(rs.camera_info.name, "Intel RealSense D405")
    recorder = rs.recorder(str(path), dev)
    depth_s.open(dp)
    color_s.open(cp)
    q = rs.frame_queue(1000)
    depth_s.start(q)
    color_s.start(q)
    for k in range(n):
        for sensor, prof, arr, bpp in ((depth_s, dp, _raw_depth(k), 2), (color_s, cp, _color(k), 3)):
            if k in (lost_depth if sensor is depth_s else lost_color):
                continue
            f = rs.software_video_frame()
            f.pixels, f.stride, f.bpp = arr.tobytes(), W * bpp, bpp
            f.timestamp = 5000.0 + k * 1000.0 / 30 + (color_after_ms if sensor is color_s else 0.0)
            f.domain, f.frame_number = rs.timestamp_domain.hardware_clock, k + 1
            f.profile = prof.as_video_stream_profile()
            sensor.on_video_frame(f)
        time.sleep(1 / 30)
    depth_s.stop(), color_s.stop(), depth_s.close(), color_s.close()
    del recorder


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("rs") / "d405.db3"
    _record(path)
    return path


@pytest.mark.parametrize("fmt", ["db3", "bag"])
def test_recording_as_fast_as_possible_round_trips(tmp_path, recording, fmt):
    path = recording if fmt == "db3" else ROS1_BAG
    writer = TaskWriter(tmp_path, "rs", fps=30.0)
    session = RecordingSession(writer, parse_device_specs([f"realsense-bag:{path}?realtime=0&depth=ffv1"]))
    rig = session.open()
    try:
        assert session.replayable
        assert rig.devices[0].slots == ("d435_rgb", "d435_depth")  # unnamed D405: the d435 base (§4.3)
        done = session.record_fast()  # until the recording played to its end
    finally:
        session.close()
    assert done.result.length == N and done.drop_stats == {"ticks_skipped": 0}  # no repeats, no drops
    ep = open_task(tmp_path / "rs").episode(done.index)
    t = ep.table
    depth = list(ep.depth("d435_depth"))
    assert len(depth) == N and len(list(ep.video("d435_rgb"))) == N
    for k, d in enumerate(depth):  # uint16 mm = raw z16 × 0.1 mm, exact through FFV1
        assert d.dtype == np.uint16
        np.testing.assert_array_equal(d, np.rint(_raw_depth(k) * 0.1).astype(np.uint16))
    rgb = list(ep.video("d435_rgb"))
    assert np.abs(rgb[7].astype(int) - _color(7)).mean() < 6  # H.264, lossy
    period = round(1e9 / 30)
    raw = np.asarray(t.column("raw_hw_ns"), np.int64)
    np.testing.assert_allclose(raw, [round((5000.0 + k * 1000.0 / 30) * 1e6) for k in range(N)], atol=2)
    hw = np.asarray(t.column("hardware_ns"), np.int64)
    assert np.all(hw == raw[0] + np.arange(N) * period)  # v1.3.11: anchor + seq × T
    np.testing.assert_array_equal(t.column("depth_ns"), raw)
    assert set(np.asarray(t.column("rgb_dup")).tolist()) == {0} == set(np.asarray(t.column("depth_gap")).tolist())
    assert set(np.asarray(t.column("ts_src")).tolist()) == {1}  # per-frame device clock
    info = open_task(tmp_path / "rs").info
    assert info["devices"] == [{"key": "d435:130322270123", "kind": "d435", "name": "D405",
                                "slots": ["d435_rgb", "d435_depth"]}]
    assert info["video_extensions"] == {"d435_rgb": "mp4", "d435_depth": "mkv"} and "d435_depth" not in info["cameras"]
    cal = info["calibration"]["head_stereo"]
    assert cal["left_camera"]["intrinsic"] == [60.0, 61.0, 32.0, 24.0]
    assert cal["left_camera"]["distortion"] == pytest.approx([0.1, -0.05, 0.001, 0.002, 0.01])
    assert cal["right_camera"]["intrinsic"] == [50.0, 51.0, 32.0, 24.0]
    assert cal["resolution"] == [W, H] and cal["depth_scale"] == 0.001
    assert cal["device_depth_scale"] == pytest.approx(SCALE) and cal["model"] == "Intel RealSense D405"
    assert cal["depth_to_color"]["translation"] == pytest.approx([0.015, 0, 0])
    assert validate_task(tmp_path / "rs").ok


def test_recording_as_if_live(tmp_path, recording):
    writer = TaskWriter(tmp_path, "live", fps=30.0)
    session = RecordingSession(writer, parse_device_specs([f"realsense-bag:{recording}?depth=ffv1&name=D405_head"]))
    rig = session.open()
    try:
        assert not session.replayable and rig.devices[0].slots == ("D405_head_rgb", "D405_head_depth")
        done = session.record_seconds(1.0)
    finally:
        session.close()
    t = open_task(tmp_path / "live").episode(done.index).table
    # every one of the 30 ticks is a row or a counted skip (a loaded machine skips some)
    rows = done.result.length
    assert done.ticks == 30 and rows + done.drop_stats.get("ticks_skipped", 0) == 30 and t.num_rows == rows >= 2
    raw = np.asarray(t.column("raw_hw_ns"), np.int64)
    assert np.all(np.diff(raw) >= 0)  # played in order, at its own pace
    # it advances at its own pace: on an idle machine about N distinct frames; on a loaded one
    # librealsense's playback thread lags and ticks repeat the newest frame (counted, not a failure)
    assert len(set(raw.tolist())) >= 2 and raw[-1] > raw[0]
    depth = list(open_task(tmp_path / "live").episode(done.index).depth("D405_head_depth"))
    k_last = int(round((raw[-1] / 1e6 - 5000.0) * 30 / 1000))
    np.testing.assert_array_equal(depth[-1], np.rint(_raw_depth(k_last) * 0.1).astype(np.uint16))


def test_missing_recording_and_conflicts_before_opening(tmp_path):
    pytest.importorskip("pyrealsense2")
    writer = TaskWriter(tmp_path, "x", fps=30.0)
    with pytest.raises(DeviceError, match="nope.db3"):
        RecordingSession(writer, parse_device_specs([f"realsense-bag:{tmp_path / 'nope.db3'}"])).open()
    # §5.1: D435/D405 + S80M is refused before anything opens (the missing file is never looked at)
    session = RecordingSession(writer, parse_device_specs([f"realsense-bag:{tmp_path / 'nope.db3'}", "sim:s80c"]))
    with pytest.raises(ConflictError, match="video0/video2"):
        session.open()


def test_record_command_plays_a_recording_as_fast_as_possible(tmp_path, recording, capsys):
    import json

    from egopool.cli.app import main

    rc = main(["record", str(tmp_path / "rec" / "rs"), "--device", f"realsense-bag:{recording}?realtime=0&depth=ffv1",
               "--device", "sim:glove", "--fast", "--json"])
    assert rc == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    (ep,) = out["episodes"]
    assert ep["length"] == N and ep["repeated"] == {} and ep["ticks_skipped"] == 0
    rc = main(["record", str(tmp_path / "rec" / "rs"), "--device", f"realsense-bag:{recording}", "--fast"])
    assert rc == 1 and "--fast needs a recording played with realtime=0" in capsys.readouterr().err


def test_recordings_with_the_same_file_name_in_two_folders(tmp_path, recording):
    """front/d405.db3 and wrist/d405.db3: keyed apart until open (d435:d405, d435:d405-2), then by their
    cameras' serials; two recordings of one camera, or one file given twice, are refused by name."""
    import shutil

    (tmp_path / "front").mkdir()
    (tmp_path / "wrist").mkdir()
    front, wrist = tmp_path / "front" / "d405.db3", tmp_path / "wrist" / "d405.db3"
    shutil.copy(recording, front)
    _record(wrist, n=10, serial="130322270999")
    sources = parse_device_specs([f"realsense-bag:{front}?realtime=0&depth=ffv1",
                                  f"realsense-bag:{wrist}?realtime=0&depth=ffv1"])
    assert [s.device.key for s in sources] == ["d435:d405", "d435:d405-2"]
    session = RecordingSession(TaskWriter(tmp_path, "two", fps=30.0), sources)
    rig = session.open()
    try:
        assert [(d.key, d.slots) for d in rig.devices] == [
            ("d435:130322270123", ("d435_rgb", "d435_depth")), ("d435:130322270999", ("d435_rgb_2", "d435_depth_2"))]
        done = session.record_fast(0.5)
    finally:
        session.close()
    assert done.result.length == 15 and validate_task(tmp_path / "two").ok
    # two recordings of the same camera (one serial): refused once open, naming both, nothing written
    other = tmp_path / "wrist" / "again.db3"
    shutil.copy(recording, other)
    session = RecordingSession(lambda: TaskWriter(tmp_path, "same", fps=30.0),
                               parse_device_specs([f"realsense-bag:{front}", f"realsense-bag:{other}"]))
    with pytest.raises(ConflictError, match="are the same device d435:130322270123") as err:
        session.open()
    assert str(front) in str(err.value) and str(other) in str(err.value) and "two recordings of one camera" in \
        str(err.value)
    assert not (tmp_path / "same").exists() and all(s.status().state == "closed" for s in session.sources)
    with pytest.raises(DeviceError, match="is already given as"):
        parse_device_specs([f"realsense-bag:{front}", f"realsense-bag:{tmp_path}/wrist/../front/d405.db3"])



def test_fast_episodes_go_on_through_a_recording_and_close_before_its_end(tmp_path, recording):
    """--fast with several episodes: each goes on from the recording's next frame at its own start
    (no frame lost or repeated between episodes), the last one ends with the recording, and then there
    is none (None, nothing written). Closed before its end, the SDK callback waiting for room in the
    full frame queue gives up, or the SDK's sensor stop (which waits for it) would hang forever."""
    import threading

    session = RecordingSession(TaskWriter(tmp_path, "eps", fps=30.0),
                               parse_device_specs([f"realsense-bag:{recording}?realtime=0&depth=ffv1"]))
    session.open()
    try:
        first, second, third = (session.record_fast(0.5) for _ in range(3))
    finally:
        session.close()
    assert (first.result.length, second.result.length, third) == (15, N - 15, None)
    t = open_task(tmp_path / "eps")
    raw = np.concatenate([np.asarray(t.episode(n).table.column("raw_hw_ns"), np.int64) for n in (1, 2)])
    np.testing.assert_allclose(raw, [round((5000.0 + k * 1000.0 / 30) * 1e6) for k in range(N)], atol=2)

    path = tmp_path / "long.db3"
    _record(path, n=120)  # 240 frames: more than the source's queue of 64 are left after two episodes
    session = RecordingSession(TaskWriter(tmp_path, "short", fps=30.0),
                               parse_device_specs([f"realsense-bag:{path}?realtime=0&depth=ffv1"]))
    session.open()
    try:
        done = [session.record_fast(1.0) for _ in range(2)]
    finally:
        closer = threading.Thread(target=session.close, daemon=True)
        closer.start()
        closer.join(20)
    assert not closer.is_alive(), "close() hangs on the SDK callback waiting for room in the queue"
    assert [d.result.length for d in done] == [30, 30] and validate_task(tmp_path / "short").ok


@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_a_truncated_recording_is_one_line_and_leaves_nothing(tmp_path, capsys, keep):
    from egopool.cli.app import main

    pytest.importorskip("pyrealsense2")
    data = ROS1_BAG.read_bytes()
    cut = tmp_path / "cut.bag"
    cut.write_bytes(data[: int(len(data) * keep)])
    rc = main(["record", str(tmp_path / "rec" / "t"), "--device", f"realsense-bag:{cut}", "--device", "sim:glove",
               "--seconds", "1"])
    err = capsys.readouterr().err
    assert rc == 1 and len(err.splitlines()) == 1 and str(cut) in err and "A copy cut short" in err
    assert not (tmp_path / "rec").exists()


def _record_fast(root, task: str, path):
    """One episode of recording ``path`` as fast as it reads (FFV1 depth) into ``root/task``."""
    session = RecordingSession(TaskWriter(root, task, fps=30.0),
                               parse_device_specs([f"realsense-bag:{path}?realtime=0&depth=ffv1"]))
    session.open()
    try:
        return session.record_fast()
    finally:
        session.close()


def test_colour_stamped_after_its_depth_with_lost_depth_frames_pairs_by_capture(tmp_path):
    """Issue 15 E (librealsense #10850 family): colour frames stamped 20 ms after their depth (more than
    half a period), depth frames of captures 8-10 lost. The half-period rule paired every colour frame
    with the next capture's depth and put the repeats on rows 7-9 and 19, silently. The frames of one
    capture share their frame number: row k holds capture k's colour and depth, the three rows without
    their depth repeat the last one (depth_dup), and what could not be paired is counted."""
    path = tmp_path / "offset.db3"
    lost = frozenset({8, 9, 10})
    _record(path, color_after_ms=20.0, lost_depth=lost)
    done = _record_fast(tmp_path, "off", path)
    ep = open_task(tmp_path / "off").episode(done.index)
    t = ep.table
    assert done.result.length == N
    raw = np.asarray(t.column("raw_hw_ns"), np.int64)
    np.testing.assert_allclose(raw, [round((5020.0 + k * 1000.0 / 30) * 1e6) for k in range(N)], atol=2)
    dup = np.asarray(t.column("depth_dup")).tolist()
    assert [k for k, d in enumerate(dup) if d] == [8, 9, 10]
    # depth_ns: each row's own capture, 20 ms before its colour; the rows without depth repeat capture 7's
    expect = [round((5000.0 + (7 if k in lost else k) * 1000.0 / 30) * 1e6) for k in range(N)]
    np.testing.assert_allclose(np.asarray(t.column("depth_ns"), np.int64), expect, atol=2)
    depth = list(ep.depth("d435_depth"))
    for k, d in enumerate(depth):
        np.testing.assert_array_equal(d, np.rint(_raw_depth(7 if k in lost else k) * 0.1).astype(np.uint16))
    assert done.drop_stats["d435_rgb_unpaired_count"] == 3 and "d435_depth_unpaired" not in done.drop_stats
    assert done.drop_stats["d435_depth_repeated_count"] == 3
    assert validate_task(tmp_path / "off").ok


def test_a_depth_frame_whose_colour_frame_was_lost_is_left_out_and_counted(tmp_path):
    path = tmp_path / "nocolour.db3"
    _record(path, color_after_ms=20.0, lost_color=frozenset({5, 12}))
    done = _record_fast(tmp_path, "nc", path)
    t = open_task(tmp_path / "nc").episode(done.index).table
    # rows stay on the recording's clock: the two captures without colour are rows repeating the one before,
    # both streams (the depth frame of such a capture cannot stand beside another capture's colour)
    shown = [k - 1 if k in (5, 12) else k for k in range(N)]
    assert done.result.length == N and done.drop_stats["d435_depth_unpaired"] == 2
    assert "d435_rgb_unpaired_count" not in done.drop_stats
    assert [k for k, d in enumerate(np.asarray(t.column("rgb_dup")).tolist()) if d] == [5, 12]
    assert [k for k, d in enumerate(np.asarray(t.column("depth_dup")).tolist()) if d] == [5, 12]
    np.testing.assert_allclose(np.asarray(t.column("depth_ns"), np.int64),
                               [round((5000.0 + k * 1000.0 / 30) * 1e6) for k in shown], atol=2)
    np.testing.assert_allclose(np.asarray(t.column("raw_hw_ns"), np.int64) - np.asarray(t.column("depth_ns"), np.int64),
                               20e6, atol=2)
