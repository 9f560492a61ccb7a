"""``egopool export lerobot``: the real lerobot package loads the export and every frame matches the reader."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool import StreamSpec, TaskWriter, open_task, vector_column
from egopool.arrowutil import list_column_to_numpy
from egopool.cli.app import main
from egopool.errors import EgopoolError, SchemaError
from egopool.interop import export_lerobot

from .lerobot_env import lerobot_dataset_class

STATE = {"demo_task": ["observation.right_hand_pose"],
         "sim_task": ["observation.gripper_state", "observation.gripper_left_force"]}


def _column(table, name, length):
    col = table.column(name)
    if str(col.type).startswith(("list", "fixed_size_list")):
        return list_column_to_numpy(col).reshape(length, -1)
    return col.to_numpy(zero_copy_only=False)


def _check_against_reader(task, out, result):
    LeRobotDataset = lerobot_dataset_class()
    ds = LeRobotDataset("local/test", root=out, video_backend="pyav")
    episodes = task.episodes()
    plan = result.plan
    assert ds.meta.info["codebase_version"] == "v3.0" and ds.fps == plan.fps == int(task.info["fps"])
    assert ds.num_episodes == len(episodes) and len(ds) == sum(e.length for e in episodes)
    raw = ds.hf_dataset.data  # lerobot's own loaded table (its torch transform turns float64 into float32)
    start = 0
    for e, ep in enumerate(episodes):
        table = ep.table
        n = ep.length
        videos = {s.name: list(ep.video(s.key)) for s in plan.streams}
        depths = {c.name: list(ep.depth(c.sources[0].removeprefix("videos/")))
                  for c in plan.columns if c.kind == "depth"}
        assert all(len(v) == n for v in (*videos.values(), *depths.values()))
        items = [ds[start + fi] for fi in range(n)]  # every frame through lerobot (videos decoded per item)
        for fi, item in enumerate(items):
            assert (int(item["episode_index"]), int(item["frame_index"]), int(item["index"])) == (e, fi, start + fi)
            assert float(item["timestamp"]) == pytest.approx(fi / plan.fps, abs=1e-6)
            assert item["task"] == plan.task_text
            for name, frames in videos.items():
                got = item[name].numpy().transpose(1, 2, 0) * 255.0
                assert np.abs(got - frames[fi]).max() <= 1.0 + 1e-3, (name, fi)
            for name, frames in depths.items():
                np.testing.assert_array_equal(item[name].numpy(), frames[fi])
        for col in plan.columns:
            if col.kind == "depth":
                continue
            got_raw = raw.column(col.name).slice(start, n)
            if col.kind == "concat":
                want = np.concatenate([_column(table, s, n).astype(np.float32) for s in col.sources], axis=1)
            else:
                want = _column(table, col.sources[0], n)
            if col.feature["dtype"] == "string":
                assert got_raw.to_pylist() == list(want)
                assert [it[col.name] for it in items] == list(want)
                continue
            got = np.asarray(got_raw.to_pylist()).reshape(want.shape)
            np.testing.assert_array_equal(got, want, err_msg=col.name)
            if col.feature["dtype"] != "float64":  # exact through lerobot's torch items too
                item_vals = np.stack([it[col.name].numpy() for it in items]).reshape(want.shape)
                np.testing.assert_array_equal(item_vals, want, err_msg=col.name)
        start += n
    return ds


@pytest.mark.extra("interop")
@pytest.mark.parametrize("which", ["demo_task", "sim_task"])
def test_lerobot_loads_the_export_and_every_frame_matches(request, which, tmp_path):
    task = request.getfixturevalue(which)
    out = tmp_path / "lerobot"
    result = export_lerobot(task.path, out, state=STATE[which], lerobot="0.4")
    assert {p.index: set(p.copied) for p in result.parts} == {
        ep.index: {s.name for s in result.plan.streams} for ep in task.episodes()}  # H.264 at i/fps: copied
    ds = _check_against_reader(task, out, result)
    assert ds.meta.features["observation.state"]["names"][0].startswith(STATE[which][0])
    mapping = json.loads((out / "egopool_mapping.json").read_text())
    dropped = {d["source"] for d in mapping["dropped"]}
    assert "observation.imu" in dropped and "observation.ego_slam_trajectory" in dropped
    assert [e["pooled_episode_index"] for e in mapping["episodes"]] == [1, 2]
    stats = json.loads((out / "meta" / "stats.json").read_text())
    total = sum(e.length for e in task.episodes())
    assert stats["observation.state"]["count"] == [total]
    state = np.concatenate([np.asarray(ds.hf_dataset.data.column("observation.state").to_pylist())])
    np.testing.assert_allclose(stats["observation.state"]["mean"], state.mean(axis=0), rtol=1e-6, atol=1e-6)
    assert np.asarray(stats[result.plan.streams[0].name]["mean"]).shape == (3, 1, 1)
    rows = pq.read_table(out / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    assert rows.column("dataset_to_index").to_pylist()[-1] == total


@pytest.mark.extra("interop")
def test_stream_lerobot_cannot_take_as_is_is_reencoded(tmp_path):
    """An odd-sized RGB stream is yuv444p (4:2:0 needs even sizes): re-encoded, then within codec tolerance."""
    tw = TaskWriter(tmp_path, "odd", fps=15.0)
    ep = tw.begin_episode([vector_column("observation.gripper_state", [3])], [StreamSpec("cam_rgb", "rgb", 33, 25)])
    rng = np.random.default_rng(3)
    base = rng.integers(0, 255, (25, 33, 3), dtype=np.uint8)
    for i in range(12):
        ep.add_frame({"observation.gripper_state": [i, 0, 1]}, hardware_ns=i + 1,
                     images={"cam_rgb": np.roll(base, i, axis=1)})
    ep.finish()
    task = open_task(tmp_path / "odd")
    out = tmp_path / "lr"
    result = export_lerobot(task.path, out, lerobot="0.4")
    assert result.parts[0].copied == ()
    LeRobotDataset = lerobot_dataset_class()
    ds = LeRobotDataset("local/odd", root=out, video_backend="pyav")
    frames = list(task.episode(1).video("cam_rgb"))
    diffs = [np.abs(ds[i]["observation.images.cam_rgb"].numpy().transpose(1, 2, 0) * 255 - frames[i]).mean()
             for i in range(12)]
    assert len(ds) == 12 and max(diffs) < 12.0  # a lossy second encode of random pixels


def test_dry_run_writes_nothing_and_cli_prints_the_mapping(sim_task, tmp_path, capsys):
    out = tmp_path / "x"
    assert main(["export", "lerobot", str(sim_task.path), str(out), "--dry-run", "--json", "--lerobot", "0.4"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not out.exists() and doc["dry_run"] and doc["frames"] == 42
    assert "observation.depth.stereo_depth" in doc["mapping"]["features"]
    assert {"from": "timestamp", "to": "pooled_timestamp"}.items() <= doc["mapping"]["renamed"][0].items()
    assert main(["export", "lerobot", str(sim_task.path), str(out), "--no-depth", "-e", "2", "--dry-run", "--lerobot", "0.4"]) == 0
    text = capsys.readouterr().out
    assert "dropped videos/stereo_depth: depth stream; --no-depth" in text and "N=2 -> 0" in text


def test_refusals_are_one_line_and_leave_nothing(sim_task, tmp_path, capsys):
    out = tmp_path / "x"
    with pytest.raises(SchemaError, match="float32, which cannot hold it exactly"):
        export_lerobot(sim_task.path, out, state=["observation.gripper_left_force_ns"], lerobot="0.4")
    with pytest.raises(SchemaError, match="not a fixed-length numeric column"):
        export_lerobot(sim_task.path, out, action=["observation.imu"], lerobot="0.4")
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["export", "lerobot", str(sim_task.path), str(out)]) == 1
    assert "--overwrite" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [out] and [p.name for p in out.iterdir()] == ["notes.txt"]
    assert main(["export", "lerobot", str(sim_task.path), str(out), "-e", "9"]) == 1
    assert "no episode 9" in capsys.readouterr().err


@pytest.mark.parametrize("uri", ["s3:/bucket/out", "S3://bucket/out", "s3//bucket/out"])
def test_a_misspelt_s3_out_is_refused_before_anything_runs(sim_task, tmp_path, monkeypatch, capsys, uri):
    """Review of issue 27: `s3:/bucket/out` ran the whole export, then a pyarrow traceback and `./s3:/bucket` left;
    `s3//bucket/out` wrote locally."""
    monkeypatch.chdir(tmp_path)
    assert main(["export", "lerobot", str(sim_task.path), uri]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an S3 URI" in err and "write s3://bucket/out" in err, err
    assert list(tmp_path.iterdir()) == []


def test_fractional_fps_is_refused(tmp_path):
    tw = TaskWriter(tmp_path, "ntsc", fps=29.97)
    ep = tw.begin_episode([vector_column("observation.gripper_state", [3])])
    ep.add_frame({"observation.gripper_state": [0, 0, 0]})
    ep.finish()
    with pytest.raises(EgopoolError, match="integer fps"):
        export_lerobot(tmp_path / "ntsc", tmp_path / "out", lerobot="0.4")


def test_an_fps_that_rounds_to_zero_is_refused(tmp_path):
    """Found by qa12: info.json fps 1e-300 passed the integer check and made a 0-fps LeRobot dataset."""
    tw = TaskWriter(tmp_path, "slow", fps=30.0)
    ep = tw.begin_episode([vector_column("observation.gripper_state", [3])])
    ep.add_frame({"observation.gripper_state": [0, 0, 0]})
    ep.finish()
    info = tmp_path / "slow" / "meta" / "info.json"
    info.write_text(info.read_text().replace('"fps": 30.0', '"fps": 1e-300').replace('"fps": 30', '"fps": 1e-300'))
    assert '"fps": 1e-300' in info.read_text()
    with pytest.raises(EgopoolError, match="LeRobot v3 needs an integer fps; the task records at 1e-300 fps"):
        export_lerobot(tmp_path / "slow", tmp_path / "out", dry_run=True, lerobot="0.4")


def test_preset_picks_the_rig_kinds_state_and_a_constant_action_is_warned_about(sim_task, tmp_path, capsys):
    assert main(["export", "lerobot", str(sim_task.path), str(tmp_path / "x"), "--preset", "gripper", "--dry-run",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mapping"]["features"]["observation.state"]["from"] == [
        "observation.gripper_state", "observation.gripper_2_gripper_state"]
    assert main(["export", "lerobot", str(sim_task.path), str(tmp_path / "x"), "--preset", "wheel"]) == 1
    assert "unknown --preset 'wheel'" in capsys.readouterr().err
    result = export_lerobot(sim_task.path, tmp_path / "lr", state=["observation.gripper_state"])
    assert len(result.warnings) == 1 and result.warnings[0].startswith(
        "action is constant in every exported frame (the pooled placeholder [0.0])")
    moving = export_lerobot(sim_task.path, tmp_path / "lr2", action=["observation.gripper_state"])
    assert moving.warnings == ()
    info = json.loads((tmp_path / "lr" / "meta" / "info.json").read_text())
    depth = info["features"]["observation.images.stereo_depth"]
    assert depth["shape"][-1] == 1 and depth["info"]["is_depth_map"] is True and depth["info"]["video.use_log"] is True
    assert "video.is_depth_map" not in json.dumps(info)  # 0.6's key placement only (issue 31)
    data = pq.ParquetFile(tmp_path / "lr" / "data" / "chunk-000" / "file-000.parquet")
    assert data.metadata.num_row_groups == 1
    typ = data.schema_arrow.field("observation.left_hand_pose").type  # datasets' ArrayND once `datasets` is imported
    typ = getattr(typ, "storage_type", typ)  # plain nested lists (not fixed-size), as lerobot's writer stores them
    assert pa.types.is_list(typ) and pa.types.is_list(typ.value_type) and typ.value_type.value_type == pa.float32()
    mapping = json.loads((tmp_path / "lr" / "egopool_mapping.json").read_text())
    assert "float32" in mapping["features"]["wall_time"]["note"]


def test_a_killed_exports_staging_is_swept_by_the_next_export_of_that_out(sim_task, tmp_path):
    """Issue 27 review: a SIGKILLed export left `.OUT.<hex>.tmp` forever. Only egopool's names for this OUT whose
    owner is dead (this host) or that are older than the bound are removed; nothing else."""
    import os
    import subprocess
    import sys

    from egopool.interop.lerobot_staging import STALE_AFTER_S, _host_tag

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead, tag = int(gone.stdout), _host_tag()
    names = {f".x.0123abcd.{tag}-{dead}.tmp": False, f".x.0123abce.{tag}-{os.getppid()}.tmp": True,
             ".x.89abcdef.tmp": True, ".x.89abcdee.tmp": False, f".x.old.0123abcd.{tag}-{dead}.tmp": True,
             f".xy.0123abcd.{tag}-{dead}.tmp": True, f".x.0123abcd.{tag}-{dead}.tmp.keep": True, "x.tmp": True}
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text("1")
    aged = tmp_path / ".x.89abcdee.tmp"
    os.utime(aged, (aged.stat().st_atime, aged.stat().st_mtime - STALE_AFTER_S - 60))
    (tmp_path / f".x.0123abcf.{tag}-{dead}.tmp").write_text("a file, not a staging directory")
    export_lerobot(sim_task.path, tmp_path / "x", lerobot="0.4", depth=False)
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {n for n, keep in names.items() if keep} | {"x", f".x.0123abcf.{tag}-{dead}.tmp"}


def test_an_empty_out_directory_is_accepted_without_overwrite(sim_task, tmp_path):
    """Issue 27 review: an existing empty OUT was refused without --overwrite."""
    out = tmp_path / "made"
    out.mkdir()
    result = export_lerobot(sim_task.path, out, lerobot="0.4", depth=False)
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["total_episodes"] == len(result.parts) == len(open_task(sim_task.path).episodes())
    assert [p.name for p in tmp_path.iterdir()] == ["made"]


def test_a_depth_map_of_an_unknown_encoding_is_named_without_a_stray_space(tmp_path):
    from egopool.errors import FormatError
    from egopool.interop.lerobot_depth import depth_map_of_feature

    with pytest.raises(FormatError) as exc:
        depth_map_of_feature("observation.images.d", {"dtype": "image", "info": {"is_depth_map": True}},
                             tmp_path / "info.json")
    assert exc.value.message.startswith("feature 'observation.images.d' is a depth map stored as image: an encoding")
