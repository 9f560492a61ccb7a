"""Bad input to the interop commands (found by qa9): one egopool line naming the file and the fix,
nothing half-written; and tasks without RGB (or with depth only) export everywhere."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from egopool import StreamSpec, TaskWriter, open_task, vector_column
from egopool.cli.app import main
from egopool.interop import export_lerobot

from .lerobot_env import lerobot_dataset_class

DEPTH = "videos/chunk-000/stereo_depth/episode-001.mp4"


def one_line(capsys, rc: int) -> str:
    out, err = capsys.readouterr()
    assert rc == 1, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("egopool: error: "), err
    return lines[0].removeprefix("egopool: error: ")


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture(scope="module")
def plain_tasks(tmp_path_factory):
    """Two 2-episode tasks of 5 rows at 10 fps: no stream at all, and one 32x24 depth stream."""
    root = tmp_path_factory.mktemp("plain")
    for name, streams in (("nostream", []), ("depthonly", [StreamSpec("d", "depth", 32, 24, codec="ffv1")])):
        tw = TaskWriter(root, name, fps=10.0)
        for e in range(2):
            ep = tw.begin_episode([vector_column("observation.gripper_state", [3])], streams)
            for i in range(5):
                images = {"d": np.full((24, 32), 500 + 10 * i + e, np.uint16)} if streams else {}
                ep.add_frame({"observation.gripper_state": [i, e, 1]}, hardware_ns=i + 1, images=images)
            ep.finish()
    return open_task(root / "nostream"), open_task(root / "depthonly")


@pytest.fixture
def sim_copy(sim_task, tmp_path):
    dst = tmp_path / "sim_full"
    shutil.copytree(sim_task.path, dst)
    return dst


# -- tasks without RGB ------------------------------------------------------------------------------------
@pytest.mark.extra("interop")
def test_tasks_without_rgb_export_load_and_plot(plain_tasks, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from PIL import Image

    LeRobotDataset = lerobot_dataset_class()
    for task in plain_tasks:
        out = tmp_path / task.name
        result = export_lerobot(task.path, out, lerobot="0.4")
        assert result.plan.streams == [] and json.loads((out / "meta" / "info.json").read_text())["video_path"] is None
        ds = LeRobotDataset("local/x", root=out, video_backend="pyav")
        assert len(ds) == 10 and ds.num_episodes == 2
        for k in range(10):
            e, i = divmod(k, 5)
            np.testing.assert_array_equal(ds[k]["observation.gripper_state"].numpy(), [i, e, 1])
            if task.name == "depthonly":
                np.testing.assert_array_equal(ds[k]["observation.depth.d"].numpy(),
                                              np.full((24, 32), 500 + 10 * i + e, np.uint16))
        assert main(["plot", str(task.path), "2", "-o", str(tmp_path / f"{task.name}.png")]) == 0
        with Image.open(tmp_path / f"{task.name}.png") as im:
            assert im.size == (1600, 1200)
        assert main(["export", "tum", str(task.path), "1", "--out", str(tmp_path / "tum")]) == 1
        # (the last line: torchvision, imported by lerobot above, warns on stderr too)
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"egopool: error: {task.path}/data/chunk-000/episode-000.parquet: episode 1 has no "
            "observation.*slam_trajectory column (`egopool show TASK N` lists its columns)")


# -- a damaged episode among good ones ----------------------------------------------------------------------
def test_missing_stream_file_of_one_episode_stops_the_lerobot_export(sim_copy, tmp_path, capsys):
    (sim_copy / DEPTH).unlink()
    out = tmp_path / "lr"
    msg = one_line(capsys, main(["export", "lerobot", str(sim_copy), str(out)]))
    assert msg == (f"{sim_copy / DEPTH}: episode 2's video_codec describes stream 'stereo_depth' but its video file "
                   "is missing (restore it, or leave episode 2 out; `egopool validate TASK` lists the damage)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sim_full"]  # no OUT, no dot-temp
    # the good episode still exports, with its depth
    assert main(["export", "lerobot", str(sim_copy), str(out), "-e", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "observation.images.stereo_depth" in doc["mapping"]["features"] and doc["episodes"] == 1


@pytest.mark.extra("interop")
def test_missing_stream_file_stops_rerun_and_plot(sim_copy, tmp_path, capsys):
    pytest.importorskip("rerun")
    pytest.importorskip("matplotlib")
    (sim_copy / DEPTH).unlink()
    want = (f"{sim_copy / DEPTH}: episode 2's video_codec describes stream 'stereo_depth' but its video file "
            "is missing (restore it, or leave episode 2 out; `egopool validate TASK` lists the damage)")
    assert one_line(capsys, main(["export", "rerun", str(sim_copy), "-o", str(tmp_path / "x.rrd")])) == want
    assert one_line(capsys, main(["plot", str(sim_copy), "1", "2", "-o", str(tmp_path / "p.png")])) == want
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sim_full"]


@pytest.mark.extra("interop")
def test_plot_of_a_damaged_episode_among_good_ones_writes_no_sheet(sim_copy, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    data = sim_copy / "data" / "chunk-000" / "episode-001.parquet"
    data.write_bytes(data.read_bytes()[:5000])
    msg = one_line(capsys, main(["plot", str(sim_copy), "1", "2", "-o", str(tmp_path / "p.png")]))
    assert msg == (f"{data}: data parquet does not end in the parquet magic PAR1 (truncated or not parquet) "
                   "(restore it from a backup)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sim_full"]  # not even episode 1's sheet


# -- OUT ----------------------------------------------------------------------------------------------------
def test_overwrite_replaces_only_an_earlier_export(sim_task, tmp_path, capsys):
    task = str(sim_task.path)
    afile = tmp_path / "afile"
    afile.write_text("keep")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    for out in (afile, afile / "sub"):
        assert one_line(capsys, main(["export", "lerobot", task, str(out), "--overwrite"])) == (
            f"{afile}: cannot write a LeRobot dataset: this is a file, where a directory is needed "
            "(choose a directory or a path that does not exist yet)")
    assert one_line(capsys, main(["export", "lerobot", task, str(mine), "--overwrite"])) == (
        f"{mine}: the output exists and is not a LeRobot dataset (no meta/info.json): --overwrite would delete it "
        "(choose a new directory; --overwrite replaces only an earlier export)")
    assert afile.read_text() == "keep" and (mine / "notes.txt").read_text() == "keep"
    # an earlier export is replaced, atomically
    lr = tmp_path / "lr"
    assert main(["export", "lerobot", task, str(lr), "-e", "1", "--json"]) == 0
    assert main(["export", "lerobot", task, str(lr), "--json"]) == 1
    assert "the output exists (choose a new directory or pass --overwrite)" in capsys.readouterr().err
    assert main(["export", "lerobot", task, str(lr), "--overwrite", "--json"]) == 0
    capsys.readouterr()
    assert json.loads((lr / "meta" / "info.json").read_text())["total_episodes"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "lr", "mine"]


def test_output_in_the_task_is_refused_and_the_task_kept(sim_copy, tmp_path, capsys):
    before = tree(sim_copy)
    cases = [
        (["export", "lerobot", str(sim_copy), str(sim_copy), "--overwrite"],
         f"{sim_copy}: the output is the task being read (write a LeRobot dataset outside the task directory)"),
        (["export", "lerobot", str(sim_copy), str(sim_copy / "lr")],
         f"{sim_copy / 'lr'}: the output is inside the task being read (write a LeRobot dataset outside the task "
         "directory)"),
        (["export", "lerobot", str(sim_copy), str(tmp_path), "--overwrite"],
         f"{tmp_path}: the output holds the task being read (write a LeRobot dataset outside the task directory)"),
        (["export", "tum", str(sim_copy), "1", "--out", str(sim_copy / "meta")],
         f"{sim_copy / 'meta'}: the output is inside the task being read (write TUM files outside the task "
         "directory)"),
    ]
    for argv, want in cases:
        assert one_line(capsys, main(argv)) == want
    assert tree(sim_copy) == before


def test_tum_output_under_a_file(sim_task, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("keep")
    for out in (afile, afile / "sub"):
        assert one_line(capsys, main(["export", "tum", str(sim_task.path), "1", "--out", str(out)])) == (
            f"{afile}: cannot write TUM files: this is a file, where a directory is needed "
            "(choose a directory or a path that does not exist yet)")
    assert afile.read_text() == "keep"


@pytest.mark.extra("interop")
def test_rerun_and_plot_outputs_that_cannot_be_files(sim_task, tmp_path, capsys):
    pytest.importorskip("rerun")
    pytest.importorskip("matplotlib")
    task = str(sim_task.path)
    adir = tmp_path / "adir"
    adir.mkdir()
    afile = tmp_path / "afile"
    afile.write_text("keep")
    assert one_line(capsys, main(["export", "rerun", task, "1", "-o", str(adir)])) == (
        f"{adir}: cannot write the Rerun recording: this is a directory, where a file is needed "
        f"(name a file, e.g. {adir / 'sim_full.rrd'})")
    assert one_line(capsys, main(["plot", task, "1", "-o", str(adir)])) == (
        f"{adir}: cannot write the plot: this is a directory, where a file is needed "
        f"(name a file, e.g. {adir / 'episode.png'})")
    for argv in (["export", "rerun", task, "1", "-o", str(afile / "x.rrd")], ["view", task, "1", "--no-spawn", "-o",
                                                                               str(afile / "x.rrd")]):
        assert one_line(capsys, main(argv)) == (
            f"{afile}: cannot write the Rerun recording: this is a file, where a directory is needed "
            "(choose a directory or a path that does not exist yet)")
    assert one_line(capsys, main(["plot", task, "1", "-o", str(afile / "x.png")])) == (
        f"{afile}: cannot write the plot: this is a file, where a directory is needed "
        "(choose a directory or a path that does not exist yet)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"] and not list(adir.iterdir())


# -- --state / --action -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("col", "why"), [
    ("observation.nope", "no exported episode has this column (--state) (`egopool show TASK N` lists an "
                         "episode's columns)"),
    ("status.gripper_pose", "holds text, not numbers: it cannot be part of observation.state (leave it out of "
                            "--state (it is exported as its own string feature))"),
    ("hardware_ns", "is int64; observation.state is float32, which cannot hold it exactly (leave it out of --state "
                    "(it is exported as its own feature))"),
    ("frame_index", "is LeRobot's own frame_index feature, not a signal for observation.state (leave it out of "
                    "--state)"),
    ("observation.imu", "cannot be part of observation.state: not a fixed-length numeric column (leave it out of "
                        "--state; `egopool export lerobot --dry-run` says what becomes of it)"),
])
def test_state_naming_a_missing_or_non_numeric_column(sim_task, tmp_path, capsys, col, why):
    out = tmp_path / "lr"
    msg = one_line(capsys, main(["export", "lerobot", str(sim_task.path), str(out), "--state", col]))
    assert msg == f"{sim_task.path}: column {col!r}: {why}"
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_state_column_in_some_episodes_only_or_named_twice(sim_copy, tmp_path, capsys):
    import pyarrow.parquet as pq

    data = sim_copy / "data" / "chunk-000" / "episode-001.parquet"
    pq.write_table(pq.read_table(data).drop_columns(["observation.gripper_state"]), data)
    assert one_line(capsys, main(["export", "lerobot", str(sim_copy), str(tmp_path / "lr"), "--dry-run",
                                  "--action", "observation.gripper_state"])) == (
        f"{sim_copy}: column 'observation.gripper_state': only episodes [1] have it, so it cannot be part of "
        "action (export only those episodes (--episodes N) or leave it out of --action)")
    assert one_line(capsys, main(["export", "lerobot", str(sim_copy), str(tmp_path / "lr"), "--dry-run", "-e", "1",
                                  "--state", "observation.gripper_state", "--state",
                                  "observation.gripper_state"])) == (
        f"{sim_copy}: column 'observation.gripper_state': is named 2 times in --state (name each column once)")


# -- egopool import lerobot ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lerobot_export(sim_task, tmp_path_factory):
    """The sim task (2 episodes of 21 rows at 30 fps) exported: file-000 / file-001 per episode."""
    out = tmp_path_factory.mktemp("lrx") / "lr"
    export_lerobot(sim_task.path, out, lerobot="0.4")
    return out


def _damage_episode_window(root: Path) -> str:
    import pyarrow.parquet as pq

    p = root / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    t = pq.read_table(p)
    col = "videos/observation.images.stereo_left/to_timestamp"
    i = t.schema.get_field_index(col)
    pq.write_table(t.set_column(i, col, [[t.column(col)[0].as_py(), 0.5]]), p)
    return ("episode 1's video 'observation.images.stereo_left' holds 15 frames in [0, 0.5) s for 21 rows "
            "(truncated or damaged)")


FIX = "(restore it, or import the other episodes (--episode E))"
TYPE_FIX = "(restore the data file, or correct the feature in meta/info.json)"


def _episode1_column(name: str, make):
    """Replace column ``name`` of episode 1's data file by ``make(old column)``."""
    def damage(root: Path) -> None:
        import pyarrow.parquet as pq

        p = root / "data/chunk-000/file-001.parquet"
        t = pq.read_table(p)
        pq.write_table(t.set_column(t.schema.get_field_index(name), name, make(t.column(name))), p)
    return damage


def _as_strings(col):
    import pyarrow as pa

    return pa.array([str(v) for v in col.to_pylist()], pa.string())


def _as_int64(col):
    import pyarrow as pa

    return pa.array([int(v * 1000) for v in col.to_pylist()], pa.int64())


def _row3_short(col):
    import pyarrow as pa

    rows = col.to_pylist()
    rows[3] = rows[3][:2]
    return pa.array(rows, pa.list_(pa.float32()))


def _row5_repeats(col):
    import pyarrow as pa

    rows = col.to_pylist()
    rows[5] = rows[4]
    return pa.array(rows, pa.float32())
CASES = {
    "data file missing": (lambda r: (r / "data/chunk-000/file-001.parquet").unlink(),
                          "data/chunk-000/file-001.parquet", f"episode 1's data file is missing {FIX}"),
    "data file truncated": (lambda r: (r / "data/chunk-000/file-001.parquet").write_bytes(
        (r / "data/chunk-000/file-001.parquet").read_bytes()[:3000]), "data/chunk-000/file-001.parquet",
        "LeRobot data parquet of episode 1 does not end in the parquet magic PAR1 (truncated or not parquet) "
        "(restore it from a backup)"),
    "video missing": (lambda r: (r / "videos/observation.images.stereo_left/chunk-000/file-001.mp4").unlink(),
                      "videos/observation.images.stereo_left/chunk-000/file-001.mp4",
                      f"episode 1's video 'observation.images.stereo_left' is missing {FIX}"),
    "video window short": (_damage_episode_window, "videos/observation.images.stereo_left/chunk-000/file-001.mp4",
                           None),
    "mapping malformed": (lambda r: (r / "egopool_mapping.json").write_text(
        json.dumps({"features": {"pooled_timestamp": {"how": "column", "from": ["timestamp"], "pooled": {}}}})),
        "egopool_mapping.json", "the egopool mapping's entry for feature 'pooled_timestamp' is not {\"from\": "
        "[pooled columns], \"how\": ..., \"pooled\": {column: {...}}} (it is not the file `egopool export lerobot` "
        "wrote: delete it to import with generic names)"),
    "no episodes": (lambda r: shutil.rmtree(r / "meta" / "episodes"), "",
                    "no meta/episodes/chunk-*/file-*.parquet (a LeRobot v3.0 dataset lists its episodes there)"),
    "no data at all": (lambda r: shutil.rmtree(r / "data"), "data/chunk-000/file-000.parquet",
                       f"episode 0's data file is missing {FIX}"),
    # found by QA: a column of another type than info.json says was an error without the file (or imported)
    "state as strings": (_episode1_column("observation.gripper_state", _as_strings), "data/chunk-000/file-001.parquet",
                         f"column 'observation.gripper_state' holds string, not the float32 info.json declares "
                         f"{TYPE_FIX}"),
    "timestamp int64": (_episode1_column("pooled_timestamp", _as_int64), "data/chunk-000/file-001.parquet",
                        f"column 'pooled_timestamp' holds int64, not the float32 info.json declares {TYPE_FIX}"),
    "a short row": (_episode1_column("observation.gripper_state", _row3_short), "data/chunk-000/file-001.parquet",
                    f"episode 1 row 3: column 'observation.gripper_state' holds 2 values, not 3 {FIX}"),
    "timestamp repeats": (_episode1_column("pooled_timestamp", _row5_repeats), "data/chunk-000/file-001.parquet",
                          "episode 1 row 5: timestamp 0.13333334028720856 is not finite, >= 0 and strictly increasing "
                          f"in float32 (previous 0.13333334028720856) {FIX}"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_lerobot_dataset_imports_nothing(lerobot_export, tmp_path, capsys, case):
    """Episode 0 is good, episode 1 damaged: nothing is imported (every episode is checked first)."""
    src = tmp_path / "lr"
    shutil.copytree(lerobot_export, src)
    damage, rel, why = CASES[case]
    said = damage(src)
    why = said if why is None else why
    rec = tmp_path / "rec"
    msg = one_line(capsys, main(["import", "lerobot", str(src), "--task", "back", "--out", str(rec)]))
    where = src / rel if rel else src
    assert msg == f"{where}: {why}" + (f" {FIX}" if case == "video window short" else "")
    assert not rec.exists()


# -- egopool import aria ------------------------------------------------------------------------------------
DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.mark.extra("interop")
def test_truncated_or_foreign_vrs_is_refused(tmp_path, capsys):
    pytest.importorskip("projectaria_tools")
    raw = (DATA / "aria_aea_recording" / "recording.vrs").read_bytes()
    half, head = tmp_path / "half.vrs", tmp_path / "head.vrs"
    half.write_bytes(raw[: len(raw) // 2])
    head.write_bytes(raw[:1000])
    rec = tmp_path / "rec"
    fix = "(it is truncated or damaged: copy the whole .vrs again)"
    assert one_line(capsys, main(["import", "aria", str(half), "--task", "a", "--out", str(rec)])) == (
        f"{half}: projectaria-tools cannot read it as a whole Aria recording: 324 records are beyond the end of the "
        f"file. Dropping them. {fix}")
    assert one_line(capsys, main(["import", "aria", str(head), "--task", "a", "--out", str(rec)])) == (
        f"{head}: projectaria-tools cannot read it as a whole Aria recording: Index incomplete. Rebuilding index of "
        f"'{head}'... {fix}")
    assert not rec.exists()


@pytest.mark.extra("interop")
def test_mps_folder_with_a_truncated_or_foreign_csv_is_refused(tmp_path, capsys):
    pytest.importorskip("projectaria_tools")
    mps = tmp_path / "mps"
    shutil.copytree(DATA / "aria_mps_sample", mps)
    traj = mps / "trajectory" / "closed_loop_trajectory.csv"
    lines = traj.read_text().splitlines(keepends=True)
    traj.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # cut inside the last row
    rec = tmp_path / "rec"
    hint = "(the file is truncated or not an MPS output; pass the MPS folder as MPS wrote it)"
    assert one_line(capsys, main(["import", "aria", "--mps", str(mps), "--task", "m", "--out", str(rec)])) == (
        f"{traj}: projectaria-tools reads 1999 of its 2000 rows from the closed-loop trajectory: Failed to parse "
        f"closed loop trajectory file: Too few columns in line 2001 in file \"{traj}\". {hint}")
    shutil.copyfile(DATA / "aria_mps_sample" / "trajectory" / "closed_loop_trajectory.csv", traj)
    gaze = mps / "eye_gaze" / "generalized_eye_gaze.csv"
    gaze.write_text("x,y\n1,2\n")
    assert one_line(capsys, main(["import", "aria", "--mps", str(mps), "--task", "m", "--out", str(rec)])) == (
        f"{gaze}: projectaria-tools reads 0 of its 1 rows from the eye gaze: Failed to parse eye gaze file: Extra "
        "column "
        f"\"x\" in header of file \"{gaze}\". {hint}")
    assert one_line(capsys, main(["import", "aria", "--mps", str(mps / "trajectory"), "--task", "m", "--out",
                                  str(rec)])) == (
        f"{mps / 'trajectory'}: no trajectory/closed_loop_trajectory.csv (pass the MPS output folder (trajectory/, "
        "hand_tracking/, eye_gaze/))")
    assert not rec.exists()


# -- TUM of a column that is not a trajectory; a place no file can be created --------------------------------
def test_tum_of_a_column_that_is_not_a_trajectory(sim_task, tmp_path, capsys):
    data = sim_task.path / "data" / "chunk-000" / "episode-000.parquet"
    has = "['observation.ego_slam_trajectory', 'observation.gripper_2_slam_trajectory', 'observation.slam_trajectory']"
    for col in ("observation.gripper_state", "observation.ego_slam_trajectory_ns"):
        assert one_line(capsys, main(["export", "tum", str(sim_task.path), "1", col, "--out", str(tmp_path)])) == (
            f"{data}: column {col!r}: is not a trajectory column (observation.*slam_trajectory, list<float64>); "
            f"episode 1 has {has}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.extra("interop")
@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc (a directory nobody can write in)")
def test_rerun_into_a_directory_nobody_can_write(sim_task, capsys):
    pytest.importorskip("rerun")
    msg = one_line(capsys, main(["export", "rerun", str(sim_task.path), "1", "-o", "/proc/egopool_qa9.rrd"]))
    # rerun-sdk's own words (0.26: "Failed to create file /proc/.egopool_qa9.rrd...", 0.33: "Failed to create
    # file: No such file or directory (os error 2), path: /proc/.egopool_qa9.rrd...")
    assert msg.startswith("/proc/egopool_qa9.rrd: cannot write the Rerun recording: Failed to create file")
    assert "/proc/.egopool_qa9.rrd." in msg and msg.endswith("(choose a location you can write to)")


def test_import_into_a_task_at_another_fps_is_refused(lerobot_export, plain_tasks, tmp_path, capsys):
    """Appending 30 fps episodes to a 10 fps task rewrote the task's fps under its earlier episodes."""
    root = tmp_path / "rec"
    shutil.copytree(plain_tasks[0].path, root / "ten")
    before = tree(root)
    assert one_line(capsys, main(["import", "lerobot", str(lerobot_export), "--task", "ten", "--out", str(root)])) == (
        f"{root / 'ten'}: the task records at 10 fps, not 30 (a task has one fps, file_format.md §3) "
        "(import into a new task (--task NEW_NAME))")
    kept = open_task(root / "ten")
    assert kept.info["fps"] == 10.0 and [e.index for e in kept.episodes()] == [1, 2]
    assert set(tree(root)) - set(before) <= {"pipeline.db", "ten/meta/episodes/.lock"}


@pytest.mark.extra("interop")
def test_view_spawn_without_a_display_is_one_line(sim_task, tmp_path, monkeypatch, capsys):
    pytest.importorskip("rerun")
    if sys.platform in ("darwin", "win32"):
        pytest.skip("a desktop session always has a display")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.chdir(tmp_path)
    assert one_line(capsys, main(["view", str(sim_task.path), "1", "--spawn"])) == (
        "--spawn: no display here (DISPLAY and WAYLAND_DISPLAY are unset), the Rerun viewer cannot open "
        "(leave out --spawn: `egopool view TASK N` then writes an .rrd to open where a display exists)")
    assert list(tmp_path.iterdir()) == []
