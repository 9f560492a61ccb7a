"""``egopool simulate`` (issue 3: --rig full / d435x2 / uvc3 ...)."""

import json

from egopool import open_task
from egopool.cli.app import main


def test_simulate_json_records_n_episodes(tmp_path, capsys):
    rc = main(["simulate", "--rig", "d435x2", "--episodes", "2", "--seconds", "0.2", "--scale", "16",
               "--out", str(tmp_path), "--task", "双D435", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == str(tmp_path / "双D435") and out["rig"] == "d435x2"
    assert out["devices"] == ["d435:213622075531", "d435:213622075532"]
    assert [e["episode_index"] for e in out["episodes"]] == [1, 2]
    assert [e["length"] for e in out["episodes"]] == [6, 6]
    assert all(len(e["files"]) == 6 for e in out["episodes"])  # 4 videos + data + meta row
    task = open_task(tmp_path / "双D435")
    assert [ep.index for ep in task.episodes()] == [1, 2]


def test_simulate_default_task_name_and_human_output(tmp_path, capsys):
    assert main(["simulate", "--rig", "uvc3", "--seconds", "0.1", "--scale", "16", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sim_uvc3" in out and "episode 1: 3 rows" in out
    assert sorted(open_task(tmp_path / "sim_uvc3").info["cameras"]) == ["head_left_rgb", "head_right_rgb",
                                                                       "head_right_rgb_2"]


def test_simulate_unknown_rig_is_one_line_error(tmp_path, capsys):
    assert main(["simulate", "--rig", "kinect", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("egopool: error: unknown rig 'kinect'") and "full" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "sim_kinect").exists()


def test_simulate_non_finite_seconds_is_one_line_error(tmp_path, capsys):
    for bad in ("inf", "nan"):
        assert main(["simulate", "--rig", "uvc3", "--seconds", bad, "--scale", "16", "--out", str(tmp_path)]) != 0
        err = capsys.readouterr().err
        assert "Traceback" not in err and "--seconds" in err
    assert not (tmp_path / "sim_uvc3" / "data").exists()


def test_simulate_empty_task_name_is_refused_like_the_importers(tmp_path, capsys):
    assert main(["simulate", "--rig", "uvc3", "--seconds", "0.1", "--scale", "16", "--out", str(tmp_path),
                 "--task", ""]) == 1
    err = capsys.readouterr().err
    assert err.startswith("egopool: error: invalid task name ''") and len(err.splitlines()) == 1
    assert not (tmp_path / "sim_uvc3").exists()


def test_simulate_absurd_fps_is_refused_before_recording(tmp_path, capsys):
    # fps sizes the bounded queues (rows = fps / 2): --fps 1e9 grew them until the OOM killer came.
    # 5000 fps x 0.01 s is harmless if the bound ever goes (the test then fails, it does not swap).
    assert main(["simulate", "--rig", "uvc3", "--seconds", "0.01", "--scale", "16", "--out", str(tmp_path),
                 "--fps", "5000"]) != 0
    assert "--fps" in capsys.readouterr().err
    assert not (tmp_path / "sim_uvc3").exists()


def test_simulate_piped_output_has_no_progress_residue(tmp_path, capsys):
    # not a terminal: no progress bar, so no blank line ahead of the summary (as demo / import / ops)
    assert main(["simulate", "--rig", "uvc3", "--seconds", "0.1", "--scale", "16", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].startswith(str(tmp_path / "sim_uvc3") + ": 1 episode(s)")
    assert captured.err == ""
