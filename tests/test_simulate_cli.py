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
