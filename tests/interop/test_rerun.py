"""``egopool export rerun`` / ``view``: the .rrd is read back with rerun's own dataframe API and passes
``rerun rrd verify``, with whichever supported rerun-sdk is installed (CI: the oldest and the newest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from egopool.arrowutil import list_column_to_numpy
from egopool.cli.app import main
from egopool.interop._releases import release_numbers
from egopool.interop.rerun import export_rerun, view_axes

from .rerun_read import open_rrd, rrd_verify

ROOT = Path(__file__).resolve().parents[2]
#: rerun.components.ViewCoordinates axis codes (Up=1, Down=2, Right=3, Left=4, Forward=5, Back=6).
_CODE = {"up": 1, "down": 2, "right": 3, "left": 4, "forward": 5, "backward": 6}


@pytest.mark.extra("interop")
def test_sim_recording_reads_back_with_rerun(sim_task, tmp_path):
    pytest.importorskip("rerun")
    out = tmp_path / "sim.rrd"
    result = export_rerun(sim_task.path, out)
    with open_rrd(out) as rec:
        _check_sim_recording(sim_task, rec)
    assert result.entities["episode_1/depth/stereo_depth"] == sim_task.episode(1).length


def _check_sim_recording(sim_task, rec):
    paths = rec.entity_paths()
    for ep in sim_task.episodes():
        root = f"/episode_{ep.index}"
        expect = {f"{root}/cameras/{k}" for k in ("stereo_left", "stereo_right", "gripper_rgb", "gripper_2_rgb")}
        expect |= {f"{root}/depth/stereo_depth", f"{root}/imu/gyro", f"{root}/imu/accel", f"{root}/hands/left",
                   f"{root}/hands/right", f"{root}/signals/gripper_state", f"{root}/signals/left_glove",
                   f"{root}/force_matrix/gripper_left_force_matrix"}
        expect |= {f"{root}/world/{c.removeprefix('observation.')}/pose" for c in ep.trajectories()}
        assert expect <= paths, sorted(expect - paths)
        n = ep.length
        table = ep.table
        # one video frame reference a row, pointing at the stored MP4's own frame times
        video = rec.read("frame_index", f"{root}/cameras/stereo_left")
        assert video.num_rows == n
        ts = video.column(f"{root}/cameras/stereo_left:VideoFrameReference:timestamp").to_pylist()
        assert [t[0] for t in ts] == [round(i * 1e9 / 30) for i in range(n)]
        # depth: every row, the stored millimetres
        depth = rec.read("frame_index", f"{root}/depth/stereo_depth")
        assert depth.num_rows == n
        frames = list(ep.depth("stereo_depth"))
        buf = depth.column(f"{root}/depth/stereo_depth:DepthImage:buffer").to_pylist()
        for k in (0, n // 2, n - 1):
            got = np.frombuffer(bytes(buf[k][0]), dtype="<u2").reshape(frames[k].shape)
            np.testing.assert_array_equal(got, frames[k])
        assert depth.column(f"{root}/depth/stereo_depth:DepthImage:meter").to_pylist()[0] == [1000.0]
        # IMU: one row per sample on the device clock
        imu = ep.imu_samples()
        gyro = rec.read("imu_ts_ns", f"{root}/imu/gyro")
        assert gyro.num_rows == len(imu) > n
        np.testing.assert_allclose(np.asarray(gyro.column(f"{root}/imu/gyro:Scalars:scalars").to_pylist()),
                                   imu.sorted().values[:, :3], rtol=1e-6)
        # a row signal
        gs = rec.read("frame_index", f"{root}/signals/gripper_state")
        np.testing.assert_allclose(
            np.asarray(gs.column(f"{root}/signals/gripper_state:Scalars:scalars").to_pylist()),
            list_column_to_numpy(table.column("observation.gripper_state")), rtol=1e-6)
        # trajectories: one transform per stamped point on the host clock, in their own frame
        for col in ep.trajectories():
            tr = ep.trajectory(col)
            entity = f"{root}/world/{col.removeprefix('observation.')}"
            pose = rec.read("host_ns", entity + "/pose")
            assert pose.num_rows == len(np.unique(tr.host_ns[tr.host_ns != 0]))
            vc = rec.read(None, entity)
            axes = vc.column(f"{entity}:ViewCoordinates:xyz").to_pylist()[0][0]
            assert axes == [_CODE[tr.frame_axes[k]] for k in ("+X", "+Y", "+Z")]


@pytest.mark.extra("interop")
def test_demo_view_without_display_writes_rrd_and_says_where(demo_task, tmp_path, monkeypatch, capsys):
    pytest.importorskip("rerun")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["view", str(demo_task.path), "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    out = tmp_path / f"{demo_task.path.name}_N2.rrd"
    assert doc["path"] == str(out.relative_to(tmp_path)) and out.exists() and doc["episodes"] == [2]
    ep = demo_task.episode(2)
    with open_rrd(out) as rec:
        depth = rec.read("frame_index", "/episode_2/depth/d435_depth")
        assert depth.num_rows == ep.length
        pinhole = depth.column("/episode_2/depth/d435_depth:Pinhole:resolution").to_pylist()[0][0]
        assert pinhole == [640.0, 480.0]
        hand = rec.read("frame_index", "/episode_2/hands/right")
        assert hand.num_rows == ep.length  # the demo's right hand has joints in every row
        assert "/episode_1/depth/d435_depth" not in rec.entity_paths()
    assert main(["view", str(demo_task.path), "2"]) == 0
    assert "no display: wrote" in capsys.readouterr().out


def test_view_coordinates_come_from_direction_words():
    assert view_axes({"+X": "down", "+Y": "left", "+Z": "forward"}) == "DLF"
    assert view_axes({"+X": "right", "+Y": "down", "+Z": "forward"}) == "RDF"


def test_export_rerun_bad_input_is_one_line(sim_task, tmp_path, capsys):
    assert main(["export", "rerun", str(sim_task.path), "5", "-o", str(tmp_path / "x.rrd")]) == 1
    err = capsys.readouterr().err
    assert "no episode 5" in err and err.count("\n") == 1
    assert main(["export", "rerun", str(sim_task.path), "-o", str(tmp_path / "x.rrd"), "--stride", "0"]) == 2
    assert not (tmp_path / "x.rrd").exists()


@pytest.mark.extra("interop")
def test_an_n_given_twice_is_logged_once(sim_task, tmp_path):
    """Found by qa12: `export rerun T 2 2` logged every entity of episode 2 twice."""
    pytest.importorskip("rerun")
    once = export_rerun(sim_task.path, tmp_path / "once.rrd", [2], stride=5)
    twice = export_rerun(sim_task.path, tmp_path / "twice.rrd", [2, 2], stride=5)
    assert twice.entities == once.entities and len(once.entities) > 10


@pytest.mark.extra("interop")
def test_the_export_passes_rerun_rrd_verify(sim_task, tmp_path):
    """`rerun rrd verify` of the installed rerun-sdk loads and interprets every chunk (issue 16 F)."""
    pytest.importorskip("rerun")
    out = tmp_path / "sim.rrd"
    export_rerun(sim_task.path, out, stride=5)
    done = rrd_verify(out)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "verified without error" in done.stderr + done.stdout



@pytest.mark.extra("interop")
def test_export_json_prints_only_json_and_nothing_of_rerun(sim_task, tmp_path):
    """rerun-sdk 0.41 renamed the application id `egopool/<task>` with a WARN line of its own on every export."""
    pytest.importorskip("rerun")
    out = tmp_path / "x.rrd"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "egopool", "export", "rerun", str(sim_task.path), "2", "-o", str(out),
                           "--stride", "5", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert json.loads(done.stdout)["episodes"] == [2] and out.is_file()


@pytest.mark.extra("interop")
def test_a_recording_the_current_viewer_must_migrate_says_so(sim_task, tmp_path):
    """rerun-sdk 0.26/0.27 files have no RRD footer: the viewer 0.41 opens them only after `rerun rrd migrate`."""
    pytest.importorskip("rerun")
    from importlib.metadata import version

    out = tmp_path / "x.rrd"
    result = export_rerun(sim_task.path, out, [1], stride=5)
    old = release_numbers(version("rerun-sdk"))[:2] < (0, 28)
    said = [n for n in result.notes if "rerun rrd migrate" in n]
    assert said == ([f"written with rerun-sdk {version('rerun-sdk')}: its own viewer opens it; Rerun viewers 0.41 "
                     f"and later only after `rerun rrd migrate {out}`"] if old else [])


@pytest.mark.extra("interop")
def test_review_events_show_in_the_rerun_recording(sim_task, tmp_path):
    """`export rerun --events-from`: each event is text at the frame its range starts and the frame it ends
    (docs/decisions.md P18); events of another task or of an episode not exported are not logged."""
    pytest.importorskip("rerun")
    events = tmp_path / "events.json"
    events.write_text(json.dumps({"events": [
        {"task": "sim_full", "episode_index": 1, "t0": 0.1, "t1": 0.3, "label": "slip", "note": "cup <b>",
         "token_id": "anna"},
        {"task": "sim_full", "episode_index": 2, "t0": 0.0, "t1": 0.1, "label": "reach"},
        {"task": "other", "episode_index": 1, "t0": 0.0, "t1": 0.1, "label": "elsewhere"}], "next_cursor": None}))
    out = tmp_path / "ev.rrd"
    assert main(["export", "rerun", str(sim_task.path), "1", "-o", str(out), "--events-from", str(events)]) == 0
    with open_rrd(out) as rec:
        assert "/episode_2/events" not in rec.entity_paths()
        table = rec.read("frame_index", "/episode_1/events")
        texts = [t[0] for t in table.column("/episode_1/events:TextLog:text").to_pylist()]
        got = sorted(zip(table.column("frame_index").to_pylist(), texts, strict=True))
    assert got == [(3, "slip: cup <b> [0.100-0.300 s, by anna]"), (9, "end of slip")]
