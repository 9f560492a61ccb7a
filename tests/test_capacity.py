"""Capacity before the first tick and ``--depth-codec auto`` (issue 20; docs/decisions.md R23, R24).

Costs are injected (a fixed probe) wherever the test is about a decision; the one test that measures for
real makes every row cost more CPU than a tick allows on any machine, and asserts on the report's content
and its order against the first skipped tick, never on a duration.
"""

import json
import time

import pytest

from egopool import EgopoolError, TaskWriter, open_task
from egopool.capacity import CapacityReport, MeasuredProbe, StreamCost, assess
from egopool.devices import Device, Rig, SimulatedRig
from egopool.recorder import Recorder
from egopool.write.episode_writer import EpisodeWriter, StreamSpec

D435 = Device("d435", "d435:213622075531", None, 32, 32)


class FixedProbe:
    """CPU ms per frame by ``codec`` (or ``codec:preset``), per row for the write path; keeps what it was asked."""

    def __init__(self, ms: dict[str, float], write_ms: float = 1.0) -> None:
        self.ms, self._write = ms, write_ms
        self.asked: list[tuple[str, str, str | None]] = []

    def stream_ms(self, spec, fps):
        codec = spec.codec_ext()[0]
        self.asked.append((spec.image_key, codec, spec.preset))
        return self.ms.get(f"{codec}:{spec.preset}", self.ms[codec])

    def write_ms(self, columns, fps):
        return self._write


def _rig(*devices, depth_codec="auto"):
    rig = Rig(depth_codec=depth_codec)
    for d in devices:
        rig.add(d)
    return rig


def _depth_file(task_dir, index):
    ep = open_task(task_dir).episode(index)
    vc = ep.meta["video_codec"]
    vc = json.loads(vc) if isinstance(vc, str) else vc
    return ep.streams["d435_depth"], vc["d435_depth"]


def test_auto_depth_is_ffv1_for_the_whole_task_when_hevc_cannot_be_held(tmp_path):
    rig = _rig(D435)
    slow_hevc = FixedProbe({"hevc12": 60.0, "ffv1": 5.0, "h264": 2.0})  # 1.8 cores of depth alone
    rec = Recorder(TaskWriter(tmp_path, "t"), rig, capacity_probe=slow_hevc, cores=2)
    done = SimulatedRig(rig).record(rec, 0.3, realtime=True)
    report = rec.capacity
    assert report is not None and report.depth_codec == "ffv1" and report.depth_reason == "measured"
    assert report.holds  # with FFV1: 0.15 + 0.06 + 0.03 + 0.15 cores of 1.7
    assert report.hevc_needed_cores == pytest.approx(60 * 30 / 1000 + 2 * 30 / 1000 + 30 / 1000 + 0.15)
    assert "egopool compress TASK" in report.summary() and "FFV1" in report.summary()
    assert ("d435_depth", "hevc12", "superfast") in slow_hevc.asked and ("d435_depth", "ffv1", None) in slow_hevc.asked
    path, codec = _depth_file(tmp_path / "t", done.index)
    assert path.suffix == ".mkv" and codec["encoder"] == "ffv1" and codec["lossless"] is True
    assert open_task(tmp_path / "t").info["video_extensions"]["d435_depth"] == "mkv"

    # the task keeps FFV1 even where a new measurement says HEVC would hold (all episodes or none, §3, §8)
    fast_hevc = FixedProbe({"hevc12": 3.0, "ffv1": 5.0, "h264": 2.0})
    rec2 = Recorder(TaskWriter(tmp_path, "t"), rig, capacity_probe=fast_hevc, cores=2)
    done2 = SimulatedRig(rig).record(rec2, 0.3, realtime=True)
    assert rec2.capacity.depth_codec == "ffv1" and rec2.capacity.depth_reason == "task"
    assert ("d435_depth", "hevc12", "superfast") not in fast_hevc.asked
    assert _depth_file(tmp_path / "t", done2.index)[0].suffix == ".mkv"
    # and so does a virtual-clock episode of that task
    done3 = SimulatedRig(rig).record(Recorder(TaskWriter(tmp_path, "t"), rig, capacity_probe=fast_hevc), 0.2)
    assert _depth_file(tmp_path / "t", done3.index)[0].suffix == ".mkv"


def test_auto_depth_is_hevc12_when_the_measurement_says_it_holds(tmp_path):
    rig = _rig(D435)
    probe = FixedProbe({"hevc12": 20.0, "ffv1": 5.0, "h264": 2.0})  # 0.6 + 0.06 + 0.03 + 0.15 of 1.7
    rec = Recorder(TaskWriter(tmp_path, "t"), rig, capacity_probe=probe, cores=2)
    done = SimulatedRig(rig).record(rec, 0.3, realtime=True)
    assert rec.capacity.holds and rec.capacity.depth_codec == "hevc12" and rec.capacity.advice == ()
    path, codec = _depth_file(tmp_path / "t", done.index)
    assert path.suffix == ".mp4" and codec["encoder"] == "libx265" and codec["preset"] == "superfast"
    # a slower measurement on one core: HEVC no longer holds, but the task already stores it
    slower = FixedProbe({"hevc12": 25.0, "ffv1": 5.0, "h264": 2.0})  # 0.75 + 0.06 + 0.03 + 0.15 > 0.85
    rec1 = Recorder(TaskWriter(tmp_path, "t"), rig, capacity_probe=slower, cores=1)
    rec1.check_capacity()
    assert rec1.capacity.depth_codec == "hevc12" and rec1.capacity.depth_reason == "task"
    assert not rec1.capacity.holds and rec1.capacity.advice  # said, but FFV1 is not offered: the task is HEVC
    assert not any("ffv1" in a for a in rec1.capacity.advice)


def test_auto_depth_on_the_virtual_clock_is_hevc12_without_measuring(tmp_path):
    rig = _rig(D435)
    probe = FixedProbe({"hevc12": 60.0, "ffv1": 5.0, "h264": 2.0})
    rec = Recorder(TaskWriter(tmp_path, "t"), rig, capacity_probe=probe, cores=2)
    done = SimulatedRig(rig).record(rec, 0.2)
    assert rec.capacity is None and probe.asked == []
    assert _depth_file(tmp_path / "t", done.index)[0].suffix == ".mp4"


def test_an_explicit_depth_codec_is_kept_whatever_the_measurement(tmp_path):
    rig = _rig(D435, depth_codec="hevc12")
    probe = FixedProbe({"hevc12": 60.0, "ffv1": 5.0, "h264": 2.0})
    rec = Recorder(TaskWriter(tmp_path, "t"), rig, capacity_probe=probe, cores=2)
    done = SimulatedRig(rig).record(rec, 0.3, realtime=True)
    report = rec.capacity
    assert report.depth_codec is None and not report.holds  # said plainly, not changed
    assert any("ffv1" in a and "egopool compress TASK" in a for a in report.advice)
    assert _depth_file(tmp_path / "t", done.index)[0].suffix == ".mp4"


def test_report_advice_and_json():
    probe = FixedProbe({"hevc12": 50.0, "ffv1": 10.0, "h264": 8.0, "h264:ultrafast": 3.0}, write_ms=12.0)

    streams = [StreamSpec("cam", "rgb", 1280, 800, preset="veryfast"),
               StreamSpec("dep", "depth", 1280, 800, codec="hevc12", preset="superfast")]
    r = assess(streams, [], 30.0, probe=probe, cores=2)
    # 0.24 (x264) + 1.5 (x265) + 0.36 (write) + 0.15 = 2.25 > 1.7
    assert r.needed_cores == pytest.approx(2.25) and not r.holds and r.depth_codec is None
    assert {(a.image_key, a.codec, a.preset) for a in r.alternatives} == {("cam", "h264", "ultrafast"),
                                                                          ("dep", "ffv1", None)}
    advice = " | ".join(r.advice)
    assert "dep ffv1 instead of hevc12 superfast" in advice and "cam h264 ultrafast instead of h264 veryfast" in advice
    assert "with all of the above: 0.90 cores (holds)" in advice  # 2.25 - 1.2 - 0.15
    # at fps f the work is (2.25 - 0.15) * f / 30 cores: it fits 1.7 - 0.15 up to 22.1 fps
    assert r.max_fps == pytest.approx(22.1) and "--fps 22.1" in advice
    d = json.loads(json.dumps(r.to_dict()))
    assert d["holds"] is False and d["needed_cores"] == pytest.approx(2.25) and d["advice"] == list(r.advice)
    # the write thread alone can exceed a tick, whatever the cores
    r2 = CapacityReport(30.0, 64, 0.85, (StreamCost("cam", "rgb", "h264", None, 8, 8, 1.0, 0.03),), 30.0)
    assert not r2.holds and any("write thread needs 30.0 ms of the 33.3 ms" in a for a in r2.advice)


def test_the_capacity_warning_comes_before_the_first_skipped_tick(tmp_path, monkeypatch):
    """Measured for real: every row costs the write thread 80 ms of CPU (a busy loop in add_frame), more
    than the 33 ms a 30 fps tick allows on any machine, so ticks are lost; the report must say so first."""
    rig = _rig(Device("uvc", "uvc:usb-cam0", "head", 32, 32))
    orig = EpisodeWriter.add_frame

    def expensive(self, *a, **kw):
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.08:  # CPU, not sleep: the measurement counts it
            pass
        return orig(self, *a, **kw)
    monkeypatch.setattr(EpisodeWriter, "add_frame", expensive)
    seen: list[tuple[bool, int]] = []  # (report there?, ticks skipped) each time the sources looked
    rec = Recorder(TaskWriter(tmp_path, "t"), rig, write_queue_rows=2, capacity_probe=MeasuredProbe(frames=3, rows=3))

    def status():
        live = rec.live_stats()
        seen.append((live["capacity"] is not None, live["ticks_skipped"]))
    done = SimulatedRig(rig).record(rec, 1.0, realtime=True, on_tick=status)
    report = rec.capacity
    assert not report.holds and "CANNOT be held" in report.summary()
    assert report.write_ms_per_row >= 80 and report.write_ms_per_row > report.tick_ms
    assert any("write thread needs" in a and "a tick allows" in a for a in report.advice)
    assert any("--fps" in a for a in report.advice)  # a lower rate the write thread keeps up with
    skipped = done.drop_stats["ticks_skipped"]
    assert skipped > 0
    live = rec.live_stats()  # the last episode's counters stay readable
    assert live["ticks_skipped"] == skipped and live["first_skip"]["monotonic"] > report.measured_at
    assert live["last_skip"]["tick"] >= live["first_skip"]["tick"] and live["capacity"]["holds"] is False
    assert seen and all(known for known, _ in seen)  # every status the sources saw already had the report
    assert any(n > 0 for _, n in seen)


def test_record_says_capacity_in_json_and_compresses_ffv1_depth_after(tmp_path, capsys):
    """`egopool record --json` carries the verdict made before the first episode; --compress-after then brings
    the task's FFV1 depth to 12-bit HEVC (egopool compress, at low priority) once the devices are closed."""
    from egopool.cli.app import main
    from egopool.validate import validate_task

    task = tmp_path / "rec" / "t"
    rc = main(["record", str(task), "--device", "sim:d435?size=96x64", "--depth-codec", "ffv1", "--seconds", "0.5",
               "--compress-after", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    cap = out["capacity"]
    assert isinstance(cap["holds"], bool) and cap["summary"].startswith("capacity: the rig needs")
    assert [s["image_key"] for s in cap["streams"]] == ["d435_rgb", "d435_depth"]
    assert cap["streams"][1]["codec"] == "ffv1" and cap["depth_codec"] is None  # explicit: not decided by it
    assert out["compress"]["committed"] is True and out["compress"]["keys"] == ["d435_depth"]
    info = json.loads((task / "meta" / "info.json").read_text())
    assert info["video_extensions"]["d435_depth"] == "mp4"
    assert list((task / "videos" / "chunk-000" / "d435_depth").iterdir()) == [
        task / "videos" / "chunk-000" / "d435_depth" / "episode-000.mp4"]
    assert not validate_task(task).errors


def test_simulate_realtime_measures_first_and_records_depth_as_decided(tmp_path, capsys):
    from egopool.cli.app import main

    rc = main(["simulate", "--rig", "d435x2", "--seconds", "0.3", "--scale", "16", "--realtime",
               "--out", str(tmp_path), "--task", "t", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    cap = out["capacity"]
    assert cap["depth_codec"] in ("hevc12", "ffv1") and cap["depth_reason"] == "measured"
    assert cap["depth_codec"] == ("hevc12" if cap["hevc_needed_cores"] is None else "ffv1")
    exts = open_task(tmp_path / "t").info["video_extensions"]
    want = "mp4" if cap["depth_codec"] == "hevc12" else "mkv"
    assert exts["d435_depth"] == want and exts["d435_depth_2"] == want
    # --fast measures nothing: virtual-clock episodes keep the task's codec
    rc = main(["simulate", "--rig", "d435x2", "--seconds", "0.2", "--scale", "16", "--out", str(tmp_path),
               "--task", "t", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["capacity"] is None
    assert all(f.endswith("." + want) for f in out["episodes"][0]["files"] if "depth" in f)


def test_the_report_is_kept_while_the_rig_stays_the_same_and_not_measured_mid_episode(tmp_path):
    rig = _rig(D435)
    probe = FixedProbe({"hevc12": 20.0, "ffv1": 5.0, "h264": 2.0})
    rec = Recorder(TaskWriter(tmp_path, "t"), rig, capacity_probe=probe, cores=2)
    first = rec.check_capacity()
    asked = len(probe.asked)
    assert asked == 3  # d435_rgb h264, d435_depth hevc12, its FFV1 alternative
    rec.start_episode(max_ticks=3)
    with pytest.raises(EgopoolError, match="while an episode is being recorded"):
        rec.check_capacity()
    rec.abort_episode()
    SimulatedRig(rig).record(rec, 0.2, realtime=True)
    assert rec.capacity is first and len(probe.asked) == asked  # the same rig: measured once
    again = rec.check_capacity(refresh=True)  # measured again; the task now stores HEVC: no FFV1 alternative
    assert again is not first and again.depth_reason == "task" and len(probe.asked) == asked + 2


@pytest.mark.parametrize("cmd", [["simulate", "--out", "{root}"], ["record", "{root}/t", "--device", "sim:glove"]])
def test_an_unknown_depth_codec_is_one_line_naming_auto_and_nothing_is_written(tmp_path, capsys, cmd):
    from egopool.cli.app import main

    root = tmp_path / "rec"
    rc = main([a.format(root=root) for a in cmd] + ["--depth-codec", "h265"])
    err = capsys.readouterr().err
    assert rc == 1 and len(err.splitlines()) == 1 and "unknown depth codec 'h265'" in err and "use auto" in err
    assert not root.exists()


def test_an_ffv1_depth_stream_is_reported_without_an_x265_preset(tmp_path):
    """FFV1 has no speed preset: a task kept in FFV1 (or --depth-codec ffv1) is not shown as `ffv1 superfast`."""
    rig = _rig(D435, depth_codec="ffv1")
    probe = FixedProbe({"hevc12": 60.0, "ffv1": 5.0, "h264": 2.0})
    rec = Recorder(TaskWriter(tmp_path, "t"), rig, capacity_probe=probe, cores=2)
    report = rec.check_capacity()
    depth = next(s for s in report.streams if s.kind == "depth")
    assert (depth.codec, depth.preset) == ("ffv1", None)
    assert [line for line in report.lines() if "d435_depth" in line][0].split()[:2] == ["d435_depth", "ffv1"]
    assert not any("ffv1 superfast" in line for line in report.lines())
    assert report.to_dict()["streams"][1]["preset"] is None
