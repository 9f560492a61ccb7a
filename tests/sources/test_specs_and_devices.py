"""``--device`` specs, conflicts refused before anything opens (§5.1), ``egopool devices``."""

from __future__ import annotations

import json

import pytest

from egopool import TaskWriter
from egopool.cli.app import main
from egopool.errors import ConflictError, DeviceError
from egopool.sources import CameraSource, RecordingSession, SimSource, parse_device_spec, parse_device_specs
from egopool.sources.discovery import parse_mode_lines


def test_specs_build_the_right_sources():
    cam = parse_device_spec("uvc:/dev/video2?size=1280x720&fps=30&pix=mjpeg&name=head&role=ego")
    assert isinstance(cam, CameraSource) and cam.input_format == "v4l2" and not cam.pace
    assert cam.req == (1280, 720, 30.0, "mjpeg") and cam.role == "ego" and cam.device.name == "head"
    assert cam.device.key == "uvc:/dev/video2"
    lavfi = parse_device_spec("uvc:lavfi:testsrc2=size=64x48:rate=30")
    assert lavfi.input_format == "lavfi" and lavfi.target == "testsrc2=size=64x48:rate=30" and lavfi.pace
    gloves = parse_device_specs(["sim:glove", "sim:glove", "sim:s80c"])
    assert [s.device.key for s in gloves] == ["usbglove:sim-1", "usbglove:sim-2", "s80m:sim-1"]
    assert all(isinstance(s, SimSource) for s in gloves) and gloves[2].role == "ego"


@pytest.mark.parametrize("spec, message", [
    ("webcam:/dev/video0", "unknown device kind 'webcam'"),
    ("uvc:/dev/video0?size=big", "size must look like 1280x720"),
    ("uvc:/dev/video0?fps=-3", "fps must be > 0"),
    ("uvc:/dev/video0?zoom=2", "unknown option(s) ['zoom']"),
    ("uvc:/dev/video0?role=left", "role must be 'ego' or 'none'"),
    ("sim:robot", "unknown simulated device 'robot'"),
    ("realsense-bag:", "no recording named"),
    ("realsense:1234?depth=png", "depth must be 'ffv1' or 'hevc12'"),
    ("sim:d435?name=x%00y", "name 'x\\x00y' has control characters"),
    ("sim:d435?name=%20head", "name ' head' has control characters or spaces at its ends"),
])
def test_bad_specs_name_the_spec(spec, message):
    with pytest.raises(DeviceError) as err:
        parse_device_spec(spec)
    assert message in str(err.value) and repr(spec) in str(err.value)


def test_conflicts_are_refused_before_any_device_opens(tmp_path, capsys):
    # the camera does not exist: had it been opened first, the error would be a DeviceError
    writer = TaskWriter(tmp_path, "t", fps=30.0)
    session = RecordingSession(writer, parse_device_specs(["uvc:/dev/video97", "sim:s80c", "sim:gripper",
                                                           "sim:gripper", "sim:s80m"]))
    with pytest.raises(ConflictError, match="only one S80M/S80C"):
        session.open()
    rc = main(["record", str(tmp_path / "t2"), "--device", "uvc:/dev/video97", "--device", "sim:glove",
               "--device", "sim:glove", "--device", "sim:glove", "--seconds", "1"])
    err = capsys.readouterr().err
    assert rc == 1 and "third glove" in err and "/dev/video97" not in err and len(err.splitlines()) == 1
    assert not (tmp_path / "t2").exists()


@pytest.mark.parametrize("specs, named, fix", [
    (["sim:glove", "uvc:/dev/video0?size=big"], "'uvc:/dev/video0?size=big'", "like 1280x720"),
    (["sim:glove", "uvc:/dev/video0?fps=30&fps=60"], "'uvc:/dev/video0?fps=30&fps=60'", "give each option once"),
    (["sim:glove", "sim:glove-left", "sim:robot"], "'sim:robot'", "use one of"),
    (["uvc:lavfi:testsrc2=size=64x48", "uvc:lavfi:testsrc2=size=64x48"], "is given twice", "drop the repeated"),
    (["sim:glove", "uvc:/dev/video97"], "/dev/video97", "egopool devices"),  # parses, cannot be opened
    (["sim:glove", "sim:gripper?size=100000x100000"], "'sim:gripper?size=100000x100000'", "at most 8192x8192"),
    (["uvc:lavfi:testsrc2?fps=1e9"], "'uvc:lavfi:testsrc2?fps=1e9'", "at most 1000"),
])
def test_a_bad_device_leaves_nothing_on_disk(tmp_path, capsys, specs, named, fix):
    """Every spec is parsed, the rig checked and every device opened before the task is created:
    a bad --device is one line naming it and the fix, and no (empty) task folder is left behind."""
    args = [a for spec in specs for a in ("--device", spec)]
    rc = main(["record", str(tmp_path / "rec" / "t"), *args, "--seconds", "1"])
    err = capsys.readouterr().err
    assert rc == 1 and named in err and fix in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "rec").exists()


def test_s80m_can_be_a_non_ego_device(tmp_path, capsys):
    """sim:s80m / sim:s80c are the ego camera unless role=none: then the S80M keeps its global stereo
    slots (§4.4) and writes no ego trajectory (§4.7); beside a gripper it is refused (§5.1)."""
    (s80m,) = parse_device_specs(["sim:s80m?role=none"])
    assert s80m.role is None and s80m.device.kind == "s80m"
    rc = main(["record", str(tmp_path / "rec" / "s80"), "--device", "sim:s80m?role=none&size=160x100",
               "--device", "sim:glove", "--seconds", "1", "--json"])
    assert rc == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["episodes"][0]["length"] == 30
    info = json.loads((tmp_path / "rec" / "s80" / "meta" / "info.json").read_text())
    assert info["devices"][0] == {"key": "s80m:sim-1", "kind": "s80m", "name": "S80M",
                                  "slots": ["stereo_left", "stereo_right", "stereo_depth"]}
    assert sorted(info["cameras"]) == ["stereo_left", "stereo_right"] and "observation.imu" in info["features"]
    assert not any("ego" in k for k in info["features"])
    rc = main(["record", str(tmp_path / "rec" / "s80g"), "--device", "sim:s80m?role=none", "--device", "sim:gripper",
               "--seconds", "1"])
    err = capsys.readouterr().err
    assert rc == 1 and "standalone S80M (§5.1)" in err and "as the ego camera" in err
    assert not (tmp_path / "rec" / "s80g").exists()


def test_record_command_lavfi_json(tmp_path, capsys):
    rc = main(["record", str(tmp_path / "rec" / "cam"), "--device", "uvc:lavfi:testsrc2=size=160x120:rate=30",
               "--device", "sim:glove-right", "--seconds", "1", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert [e["status"] for e in out["episodes"]] == ["finished"]
    assert out["episodes"][0]["length"] == 30 and out["episodes"][0]["seconds"] == 1.0
    assert out["devices"] == ["uvc:lavfi:testsrc2=size=160x120:rate=30", "sim:glove-right"]


def test_devices_command_lists_what_it_sees(capsys):
    assert main(["devices", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert set(found) == {"platform", "input_format", "cameras", "realsense", "notes"}
    assert found["input_format"] in ("v4l2", "avfoundation", "dshow")
    for cam in found["cameras"]:
        assert cam["spec"].startswith("uvc:") and isinstance(cam["modes"], list)
    assert main(["devices"]) == 0
    assert "cameras (" in capsys.readouterr().out


def test_ffmpeg_mode_listings_are_parsed():
    # the lines FFmpeg's v4l2 and dshow demuxers print for list_formats / list_options
    v4l2 = parse_mode_lines("v4l2", [
        "[video4linux2,v4l2 @ 0x55] Raw       :     yuyv422 :           YUYV 4:2:2 : 640x480 1280x720",
        "[video4linux2,v4l2 @ 0x55] Compressed:       mjpeg :          Motion-JPEG : 640x480 1920x1080",
        "some other line"])
    assert [(m["pix_fmt"], m["compressed"], m["sizes"]) for m in v4l2] == [
        ("yuyv422", False, ["640x480", "1280x720"]), ("mjpeg", True, ["640x480", "1920x1080"])]
    dshow = parse_mode_lines("dshow", ["[dshow @ 0x1]   vcodec=mjpeg  min s=1280x720 fps=5 max s=1280x720 fps=30"])
    assert dshow == [{"pix_fmt": "mjpeg", "compressed": True, "sizes": ["1280x720"], "fps": [5.0, 30.0]}]


def test_a_camera_silent_at_the_next_episode_stops_the_recording_with_the_summary(tmp_path, capsys):
    """Episode 2 cannot start (the 0.05 fps camera sends its next frame only after the 5 s prime
    timeout): it is discarded with the reason, nothing is written for it, and without a terminal the
    command stops with the summary (JSON) and a one-line error naming the silent stream, exit 1."""
    rc = main(["record", str(tmp_path / "rec" / "t"), "--device", "uvc:lavfi:testsrc2=size=64x48:rate=0.05",
               "--device", "sim:glove", "--seconds", "1", "--episodes", "2", "--json"])
    out, err = capsys.readouterr()
    episodes = json.loads(out)["episodes"]
    assert rc == 1 and [e["status"] for e in episodes] == ["finished", "discarded"]
    assert episodes[0]["episode_index"] == 1 and episodes[1]["episode_index"] is None
    assert "no frame from ['head_left_rgb'] within 5.0 s" in episodes[1]["reason"]
    assert err.startswith("egopool: error: recording stopped, no frame from ['head_left_rgb']") and \
        len(err.splitlines()) == 1
    from egopool import open_task

    assert [ep.index for ep in open_task(tmp_path / "rec" / "t").episodes()] == [1]
