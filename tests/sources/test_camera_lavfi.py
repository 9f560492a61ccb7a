"""A camera through FFmpeg input devices (issue 11): lavfi ``testsrc2`` 1280x720 at 30 fps goes the
same way as /dev/video0 (PyAV demux -> decoded frame -> recorder), only the input format differs."""

from __future__ import annotations

import time

import numpy as np
import pytest

from egopool import TaskWriter, open_task
from egopool.codecs.video import video_info
from egopool.errors import DeviceError
from egopool.sources import CameraSource, RecordingSession, parse_device_specs
from egopool.validate import validate_task
from recorder_support import camera_fifo

LAVFI = "uvc:lavfi:testsrc2=size=1280x720:rate=30"


def test_lavfi_camera_ten_seconds_is_300_rows_and_frames(tmp_path):
    writer = TaskWriter(tmp_path, "cam", fps=30.0)
    session = RecordingSession(writer, parse_device_specs([LAVFI + "?name=head cam"]))
    rig = session.open()
    try:
        assert rig.devices[0].rgb_slots == ("head_left_rgb",)  # §4.2: UVC index 0
        cam = session.sources[0]
        assert isinstance(cam, CameraSource)
        assert cam.mode["width"] == 1280 and cam.mode["height"] == 720 and cam.mode["fps"] == 30.0
        done = session.record_seconds(10.0)
    finally:
        session.close()
    # every one of the 300 ticks is a row or a counted skip (on a quiet machine: 300 rows, 0 skipped)
    rows, skipped = done.result.length, done.drop_stats.get("ticks_skipped", 0)
    assert done.ticks == 300 and rows + skipped == 300 and rows >= 2
    task = open_task(tmp_path / "cam")
    ep = task.episode(done.index)
    t = ep.table
    assert t.num_rows == rows
    video = writer.task_dir / "videos" / "chunk-000" / "head_left_rgb" / "episode-000.mp4"
    from egopool.codecs.video import count_video_frames
    assert count_video_frames(video) == rows
    info = video_info(video)
    assert (info["width"], info["height"]) == (1280, 720)
    assert task.info["cameras"]["head_left_rgb"] == {"height": 720, "width": 1280}
    assert task.info["devices"][0]["key"] == "uvc:testsrc2=size=1280x720:rate=30"
    assert task.info["device_names"] == {"head_left_rgb": "head cam"}
    # §3 / §7.1: a host-clock chain: hardware_ns = host monotonic at arrival, raw_hw_ns = the device pts
    hw = np.asarray(t.column("hardware_ns"), np.int64)
    raw = np.asarray(t.column("raw_hw_ns"), np.int64)
    # a row whose frame came late repeats the previous one (§5.3), stamps included: count them
    repeats = int((np.diff(hw) == 0).sum())
    assert repeats == done.drop_stats.get("head_left_rgb_repeated_count", 0) < rows
    assert np.all(np.diff(hw) >= 0) and np.all(np.diff(raw) >= 0)
    fresh = np.unique(raw[raw > 0])
    assert 0 < len(fresh) <= rows - repeats  # a repeated row holds its predecessor's stamps
    # pts = k / 30 s: consecutive stored frames are whole frame periods apart (1 where no frame was passed
    # over; a tick that came late takes the newest frame, so on a loaded machine some are 2 or more)
    periods = np.diff(fresh) / (1e9 / 30)
    assert np.all(periods >= 0.999) and np.allclose(periods, np.round(periods), atol=1e-6)
    assert fresh[0] % 33_333_333 <= fresh[0] // 33_333_333
    assert np.all(t.column("status.head_left_rgb").to_numpy(zero_copy_only=False) == "connected")
    report = validate_task(tmp_path / "cam")
    assert report.ok, report


def test_camera_open_failure_names_the_device():
    cam = CameraSource("nosuchsource_xyz=size=64x48", input_format="lavfi")
    with pytest.raises(DeviceError, match="nosuchsource_xyz"):
        cam.open()
    missing = CameraSource("/dev/video97")
    with pytest.raises(DeviceError, match="/dev/video97") as err:
        missing.open()
    assert "egopool devices" in str(err.value)


def test_camera_delivers_at_its_own_rate_between_episodes(tmp_path):
    """The capture thread keeps draining the device between episodes, so the next episode starts on
    fresh frames (no queue of stale ones), and fps in is the device's rate."""
    writer = TaskWriter(tmp_path, "cam2", fps=30.0)
    session = RecordingSession(writer, parse_device_specs(["uvc:lavfi:testsrc2=size=320x240:rate=30"]))
    session.open()
    try:
        first = session.record_seconds(1.0)
        time.sleep(1.0)  # between episodes: nothing is pushed, the device keeps running
        live_before = session.sources[0].status()
        second = session.record_seconds(1.0)
    finally:
        session.close()
    assert live_before.state == "running" and 0 < live_before.fps_in <= 35  # never above the device's 30 fps
    assert (first.index, second.index) == (1, 2)
    raw1 = np.asarray(open_task(tmp_path / "cam2").episode(1).table.column("raw_hw_ns"))
    raw2 = np.asarray(open_task(tmp_path / "cam2").episode(2).table.column("raw_hw_ns"))
    gap_s = (raw2[0] - raw1[-1]) / 1e9
    assert gap_s > 0.9  # the second episode starts at the device's present, not at stale frames


def test_a_camera_that_stops_mid_episode_neither_hangs_nor_crashes_the_recorder(tmp_path, mpegts_stream):
    """Frames stop but the device stays open (the read blocks): the episode finishes with the last
    frame repeated (§5.3), close() gives up on the blocked read after its timeout without freeing the
    device under it, and the capture thread releases it when the read returns."""
    import os
    import threading

    fifo = tmp_path / "cam.fifo"
    os.mkfifo(fifo)
    release = threading.Event()
    # a camera that delivers 1 s of frames, then stalls with the FIFO still open until `release`
    feeder = camera_fifo(fifo, [mpegts_stream(tmp_path / "cam.ts", 30)], release=release)
    writer = TaskWriter(tmp_path, "stall", fps=30.0)
    session = RecordingSession(writer, parse_device_specs([f"uvc:file:{fifo}", "sim:glove"]))
    session.open()
    cam = session.sources[0]
    cam.close_timeout = 0.5
    capture = None
    try:
        done = session.record_seconds(2.0)  # 1 s of frames, then 1 s of none
        capture = cam._thread
    finally:
        session.close()
        # close() returned after its close_timeout while the capture thread was still inside the blocked read
        capture_left_blocked = capture is not None and capture.is_alive()
        blocked_device = cam._container
        release.set()  # the blocked read returns (end of file) after close() gave up on it
        feeder.join(10)
    rows = done.result.length
    assert done.ticks == 60 and rows + done.drop_stats.get("ticks_skipped", 0) == 60
    assert done.drop_stats["head_left_rgb_repeated_count"] >= 25 - done.drop_stats.get("ticks_skipped", 0)  # the frames that never came
    video = writer.task_dir / "videos" / "chunk-000" / "head_left_rgb" / "episode-000.mp4"
    last_ts = float(open_task(tmp_path / "stall").episode(done.index).table.column("timestamp")[-1].as_py())
    import av

    with av.open(str(video)) as c:
        s = c.streams.video[0]
        assert s.frames == rows and abs(float(s.duration * s.time_base) - (last_ts + 1 / 30)) < 0.1
    assert capture_left_blocked  # close gave up on the read (close_timeout), it did not wait for the device
    assert blocked_device is not None  # not freed while the capture thread is inside a read of it
    capture.join(10)
    assert not capture.is_alive() and cam._container is None  # released by the capture thread itself
    assert validate_task(tmp_path / "stall").ok


def test_a_camera_that_stalls_resumes_at_its_own_rate_not_in_a_burst(tmp_path, mpegts_stream):
    """A paced input (a FIFO) stalls for 2 s, then sends 2 s more of frames at once: they arrive at
    30 fps from the moment it resumes, as a camera's would, so an episode started 0.5 s later
    records fresh frames; in a burst they would all be gone before it began (no frame: unprimed)."""
    import os
    import threading

    fifo = tmp_path / "cam.fifo"
    os.mkfifo(fifo)
    data = mpegts_stream(tmp_path / "cam.ts", 90)
    third = len(data) // 3 // 188 * 188  # whole TS packets
    more, release = threading.Event(), threading.Event()

    feeder = camera_fifo(fifo, [data[:third], data[third:]], [more], release)
    writer = TaskWriter(tmp_path, "resume", fps=30.0)
    session = RecordingSession(writer, parse_device_specs([f"uvc:file:{fifo}"]))
    session.open()
    try:
        first = session.record_seconds(1.0)
        time.sleep(2.0)  # the stall
        more.set()
        time.sleep(0.5)
        second = session.record_seconds(1.0)
    finally:
        release.set()
        session.close()
        feeder.join(10)
    assert (first.index, second.index) == (1, 2)
    rows = second.result.length
    assert second.ticks == 30 and rows + second.drop_stats.get("ticks_skipped", 0) == 30
    # fresh frames, not the last one repeated: the second episode's stamps advance past the first's
    raw1 = np.asarray(open_task(tmp_path / "resume").episode(1).table.column("raw_hw_ns"), np.int64)
    raw2 = np.asarray(open_task(tmp_path / "resume").episode(2).table.column("raw_hw_ns"), np.int64)
    assert raw2[0] > raw1[-1] and len(np.unique(raw2)) >= 2
    assert validate_task(tmp_path / "resume").ok


def test_a_camera_that_opens_but_never_delivers_is_given_up(tmp_path):
    """The device opens but sends nothing (FFmpeg retries its interrupted read, so neither av.open's
    timeout nor Ctrl-C would end it): open() gives up after open_timeout with a DeviceError naming the
    camera, and the open left behind ends (closing what it opened) once the device answers."""
    import os
    import threading

    fifo = tmp_path / "silent.fifo"
    os.mkfifo(fifo)
    release = threading.Event()

    feeder = camera_fifo(fifo, [b""], release=release)  # waits for the reader, then sends nothing until released
    (cam,) = parse_device_specs([f"uvc:file:{fifo}"])
    cam.open_timeout = 1.0
    try:
        with pytest.raises(DeviceError, match="delivered nothing within 1 s") as err:
            cam.open()
        assert str(fifo) in str(err.value)  # the message names the 1 s timeout that ended it, not a hang
    finally:
        release.set()
        feeder.join(10)
    deadline = time.monotonic() + 10
    while any(t.name == "src-uvc-open" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "src-uvc-open" for t in threading.enumerate())
    assert cam.status().state == "closed"
