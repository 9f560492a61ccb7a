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
    assert done.result.length == 300
    assert done.drop_stats.get("ticks_skipped", 0) == 0
    task = open_task(tmp_path / "cam")
    ep = task.episode(done.index)
    t = ep.table
    assert t.num_rows == 300
    video = writer.task_dir / "videos" / "chunk-000" / "head_left_rgb" / "episode-000.mp4"
    from egopool.codecs.video import count_video_frames
    assert count_video_frames(video) == 300
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
    assert repeats == done.drop_stats.get("head_left_rgb_repeated_count", 0) <= 15
    assert np.all(np.diff(hw) >= 0) and np.all(np.diff(raw) >= 0)
    fresh = np.unique(raw[raw > 0])
    assert abs(np.median(np.diff(np.unique(hw))) - 1e9 / 30) < 5e6  # arrivals one frame period apart
    assert set(np.diff(fresh).tolist()) <= {33_333_333, 33_333_334}  # pts of consecutive frames: none lost
    assert fresh[0] % 33_333_333 <= fresh[0] // 33_333_333  # pts = k / 30 s
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
    assert live_before.state == "running" and 25 <= live_before.fps_in <= 35
    assert (first.index, second.index) == (1, 2)
    raw1 = np.asarray(open_task(tmp_path / "cam2").episode(1).table.column("raw_hw_ns"))
    raw2 = np.asarray(open_task(tmp_path / "cam2").episode(2).table.column("raw_hw_ns"))
    gap_s = (raw2[0] - raw1[-1]) / 1e9
    assert 0.9 < gap_s < 1.6  # the second episode starts at the device's present, not at stale frames
